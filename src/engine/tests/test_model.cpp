// The whole decoder on random in-memory checkpoints: agreement with an independent
// double-precision implementation, identical bits at every thread count and storage
// format, and clear errors on bad input.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "common/float_bits.h"
#include "engine/gated_delta_net.h"
#include "engine/model.h"
#include "reference_forward.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using testing::LayerType;
using testing::make_tiny_weights;
using testing::TinySpec;

struct Trace {
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<float>> hidden;
};

const std::vector<int64_t> kTokens{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4};

Trace run(const Model& model, const std::vector<int64_t>& tokens) {
  Trace r;
  State state = model.new_state();
  for (int64_t t : tokens) {
    std::vector<float> logits(model.config().vocab_size), hidden(model.config().hidden_size);
    model.forward(t, state, logits, hidden);
    r.logits.push_back(std::move(logits));
    r.hidden.push_back(std::move(hidden));
  }
  EXPECT_EQ(state.position, static_cast<int64_t>(tokens.size()));
  return r;
}

void expect_same_bits(const Trace& a, const Trace& b, const char* what) {
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t s = 0; s < a.logits.size(); ++s) {
    for (size_t i = 0; i < a.logits[s].size(); ++i) {
      ASSERT_EQ(float_bits(a.logits[s][i]), float_bits(b.logits[s][i])) << what << " step " << s << " logit " << i;
    }
    for (size_t i = 0; i < a.hidden[s].size(); ++i) {
      ASSERT_EQ(float_bits(a.hidden[s][i]), float_bits(b.hidden[s][i])) << what << " step " << s << " hidden " << i;
    }
  }
}

// max |a - b| / max |b| over one logits vector.
double relative_error(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

std::vector<TinySpec> specs() {
  std::vector<TinySpec> all;
  TinySpec mixed;  // [lin, lin, full, lin, full], GVA 2, GQA 2, untied
  all.push_back(mixed);
  TinySpec tied;
  tied.seed = 2;
  tied.tied = true;
  tied.layers = {LayerType::FullAttention, LayerType::LinearAttention};
  tied.heads = 4;
  tied.kv_heads = 1;
  tied.k_heads = 2;
  tied.v_heads = 2;
  tied.head_dim = 64;  // rotary 16
  tied.rope_theta = 1e7;
  all.push_back(tied);
  TinySpec wide;  // dims that are not multiples of 64 (tails in every dot product)
  wide.seed = 3;
  wide.hidden = 70;
  wide.intermediate = 130;
  wide.vocab = 300;
  wide.k_dim = 24;
  wide.v_dim = 20;
  wide.bf16 = true;
  all.push_back(wide);
  return all;
}

TEST(Model, AgreesWithADoublePrecisionReference) {
  for (const TinySpec& spec : specs()) {
    const io::Qwen35Weights weights = make_tiny_weights(spec);
    testing::ReferenceModel reference(weights);
    const Model model(weights);
    State state = model.new_state();
    double worst = 0;
    for (int64_t t : kTokens) {
      std::vector<float> logits(spec.vocab);
      model.forward(t, state, logits);
      const std::vector<double> expect = reference.step(t);
      worst = std::max(worst, relative_error(logits, expect));
    }
    EXPECT_LT(worst, 1e-5) << "seed " << spec.seed;
    EXPECT_GT(worst, 0.0);  // fp32 vs double: some rounding must show
  }
}

TEST(Model, SameBitsAtEveryThreadCount) {
  const int saved = omp_get_max_threads();
  for (const TinySpec& spec : specs()) {
    const Model model(make_tiny_weights(spec));
    omp_set_num_threads(1);
    const Trace one = run(model, kTokens);
    for (int threads : {2, 3}) {
      omp_set_num_threads(threads);
      expect_same_bits(one, run(model, kTokens), "threads");
    }
    expect_same_bits(one, run(model, kTokens), "rerun");
  }
  omp_set_num_threads(saved);
}

TEST(Model, ThreadCountDoesNotMatterAtRealisticWidths) {
  // Wide enough that every matvec, attention and GDN loop takes its parallel path.
  TinySpec spec;
  spec.hidden = 256;
  spec.intermediate = 512;
  spec.vocab = 2000;
  spec.heads = 8;
  spec.kv_heads = 2;
  spec.head_dim = 64;
  spec.k_heads = 4;
  spec.v_heads = 8;
  spec.k_dim = 128;
  spec.v_dim = 128;  // 8 x 128 x 128: the GDN recurrence reaches its parallel threshold
  const Model model(make_tiny_weights(spec));
  const int64_t parallel_before = GatedDeltaNet::parallel_steps();
  const int saved = omp_get_max_threads();
  std::vector<int64_t> tokens;
  for (int i = 0; i < 12; ++i) tokens.push_back((i * 131) % 2000);
  omp_set_num_threads(1);
  const Trace one = run(model, tokens);
  for (int threads : {2, 3}) {
    omp_set_num_threads(threads);
    expect_same_bits(one, run(model, tokens), "threads");
  }
  omp_set_num_threads(saved);
  EXPECT_GT(GatedDeltaNet::parallel_steps(), parallel_before);  // the GDN loop did run in a region
}

TEST(Model, DenseSparseAndBf16StorageGiveTheSameBits) {
  for (double zeros : {0.0, 0.95}) {
    TinySpec spec;
    spec.zero_fraction = zeros;
    spec.bf16 = true;
    const io::Qwen35Weights weights = make_tiny_weights(spec);
    ModelOptions dense, sparse, f32;
    dense.storage = WeightStorage::Dense;
    sparse.storage = WeightStorage::Sparse;
    f32.storage = WeightStorage::Dense;
    f32.allow_bf16 = false;
    const Model a(weights, dense), b(weights, sparse), c(weights, f32), automatic(weights);
    EXPECT_EQ(a.storage_stats().sparse_matrices, 0);
    EXPECT_GT(a.storage_stats().dense_bf16_matrices, 0);
    EXPECT_EQ(b.storage_stats().dense_bf16_matrices + b.storage_stats().dense_f32_matrices, 0);
    EXPECT_EQ(c.storage_stats().dense_bf16_matrices, 0);
    if (zeros > 0.9) {
      EXPECT_GT(automatic.storage_stats().sparse_matrices, 0);
    }
    const Trace ra = run(a, kTokens);
    expect_same_bits(ra, run(b, kTokens), "sparse");
    expect_same_bits(ra, run(c, kTokens), "f32");
    expect_same_bits(ra, run(automatic, kTokens), "auto");
  }
}

TEST(Model, StatesAreIndependent) {
  const Model model(make_tiny_weights(TinySpec{}));
  State a = model.new_state(), b = model.new_state();
  std::vector<float> la(97), lb(97);
  model.forward(5, a, la);
  model.forward(7, b, lb);  // interleaving another sequence changes nothing
  model.forward(6, a, la);
  State c = model.new_state();
  std::vector<float> lc(97);
  model.forward(5, c, lc);
  model.forward(6, c, lc);
  for (size_t i = 0; i < la.size(); ++i) ASSERT_EQ(float_bits(la[i]), float_bits(lc[i]));
}

TEST(Model, RejectsBadInput) {
  const Model model(make_tiny_weights(TinySpec{}));
  State state = model.new_state();
  std::vector<float> logits(97), small(5), hidden(3);
  EXPECT_THROW(model.forward(97, state, logits), Error);
  EXPECT_THROW(model.forward(-1, state, logits), Error);
  EXPECT_THROW(model.forward(1, state, small), Error);
  EXPECT_THROW(model.forward(1, state, logits, hidden), Error);
  State empty;
  EXPECT_THROW(model.forward(1, empty, logits), Error);

  io::Qwen35Weights broken = make_tiny_weights(TinySpec{});
  broken.layers[2].full.k_proj.pop_back();
  try {
    Model m(std::move(broken));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.2.self_attn.k_proj"), std::string::npos) << e.what();
  }
  io::Qwen35Weights mistyped = make_tiny_weights(TinySpec{});
  mistyped.config.layer_types[0] = LayerType::FullAttention;
  EXPECT_THROW(Model{std::move(mistyped)}, Error);
}

}  // namespace
}  // namespace qpu::engine
