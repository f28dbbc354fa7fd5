// npu::emit_model (npu/engine_host.h): a Program compiled straight into an engine model,
// one dense layer at a time, is the model built from emit's dense checkpoint with the
// same globals adjustment: the same logits, hidden and State bits at 1 and 2 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/emit.h"
#include "engine/model.h"
#include "npu/engine_host.h"
#include "streaming_program.h"

namespace qpu::engine {
namespace {

using testing::streaming_program;
using testing::StreamingProgramSize;

TEST(EmitModel, SameBitsAsTheDenseCheckpointWithTheAdjustedGlobals) {
  const int saved = omp_get_max_threads();
  for (uint64_t seed : {1, 2, 3}) {
    StreamingProgramSize size;
    size.layers = 4 + static_cast<int>(seed);
    size.value_dim = seed == 2 ? 32 : 16;
    const auto sp = streaming_program(size, seed);
    const compiler::Schedule schedule = compiler::schedule(sp.program, sp.limits);
    const compiler::Allocation alloc = compiler::allocate(sp.program, schedule);
    ASSERT_GE(alloc.num_layers, size.layers);
    // The adjustment: logit 5 reads x[2] (as a machine installs its LM head rows).
    const int64_t dim = alloc.dim(sp.x[2]);
    std::vector<size_t> layers_seen;
    const auto adjust = [&](io::Qwen35Weights& g) {
      layers_seen.push_back(g.layers.size());
      g.lm_head[static_cast<size_t>(5 * g.config.hidden_size + dim)] = 1.0f;
    };
    io::Qwen35Weights dense_weights = compiler::emit(sp.program, schedule, alloc, sp.io, sp.options);
    adjust(dense_weights);
    const Model dense(std::move(dense_weights));
    const Model streamed = npu::emit_model(sp.program, schedule, alloc, sp.io, sp.options, {}, adjust);
    EXPECT_EQ(layers_seen, (std::vector<size_t>{static_cast<size_t>(alloc.num_layers), 0}));
    EXPECT_EQ(dense.storage_stats().bytes, streamed.storage_stats().bytes);
    const auto vocab = static_cast<size_t>(sp.io.vocab_size);
    const auto hidden = static_cast<size_t>(alloc.hidden_size);
    int64_t nonzero = 0;
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      State sd = dense.new_state(), ss = streamed.new_state();
      for (int64_t t = 0; t < sp.io.vocab_size; ++t) {
        std::vector<float> ld(vocab), ls(vocab), hd(hidden), hs(hidden);
        dense.forward(t, sd, ld, hd);
        streamed.forward(t, ss, ls, hs);
        for (size_t i = 0; i < vocab; ++i) ASSERT_EQ(float_bits(ld[i]), float_bits(ls[i])) << "logit " << i;
        for (size_t i = 0; i < hidden; ++i) ASSERT_EQ(float_bits(hd[i]), float_bits(hs[i])) << "hidden " << i;
        EXPECT_EQ(float_bits(ls[5]), float_bits(hs[static_cast<size_t>(dim)]));  // the adjusted row
        nonzero += ls[5] != 0.0f ? 1 : 0;
      }
      for (size_t l = 0; l < sd.recurrent_state.size(); ++l) {
        ASSERT_EQ(sd.recurrent_state[l].size(), ss.recurrent_state[l].size());
        for (size_t i = 0; i < sd.recurrent_state[l].size(); ++i)
          ASSERT_EQ(float_bits(sd.recurrent_state[l][i]), float_bits(ss.recurrent_state[l][i])) << "layer " << l;
        ASSERT_EQ(sd.conv_state[l].size(), ss.conv_state[l].size());
        for (size_t i = 0; i < sd.conv_state[l].size(); ++i)
          ASSERT_EQ(float_bits(sd.conv_state[l][i]), float_bits(ss.conv_state[l][i])) << "layer " << l;
      }
    }
    EXPECT_GT(nonzero, 10);  // the program computes something
  }
  omp_set_num_threads(saved);
}

TEST(EmitModel, AnInvalidProgramFailsBeforeTheAdjustment) {
  auto sp = streaming_program(StreamingProgramSize{}, 1);
  const compiler::Schedule schedule = compiler::schedule(sp.program, sp.limits);
  const compiler::Allocation alloc = compiler::allocate(sp.program, schedule);
  sp.options.norm_exponent = 80;
  bool adjusted = false;
  EXPECT_THROW(npu::emit_model(sp.program, schedule, alloc, sp.io, sp.options, {},
                               [&](io::Qwen35Weights&) { adjusted = true; }),
               Error);
  EXPECT_FALSE(adjusted);
}

}  // namespace
}  // namespace qpu::engine
