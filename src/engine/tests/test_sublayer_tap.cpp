// Model::forward's SublayerTap: the residual stream after every sublayer, in order
// 0 .. 2 L - 1. Checked against an independent path, the `hidden` output of the same
// checkpoint cut after layer l (its residual after layer l's MLP must be tap 2 l + 1),
// on tiny random checkpoints with both layer types, several tokens in sequence (caches
// and recurrent state in play), with idle sublayers skipped and computed, at 1 and 3
// threads; and the tap must not change a single bit of the logits.
#include <gtest/gtest.h>
#include <omp.h>

#include <string>
#include <vector>

#include "common/float_bits.h"
#include "engine/model.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using io::LayerType;

// The checkpoint's first `layers` layers (embedding, final norm and head unchanged).
io::Qwen35Weights cut_after(io::Qwen35Weights w, int64_t layers) {
  w.layers.resize(static_cast<size_t>(layers));
  w.config.num_hidden_layers = layers;
  w.config.layer_types.resize(static_cast<size_t>(layers));
  return w;
}

void expect_bits(std::span<const float> got, std::span<const float> want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(float_bits(got[i]), float_bits(want[i])) << what << " [" << i << "]";
}

void check_tap(const io::Qwen35Weights& w, const ModelOptions& options, const std::vector<int64_t>& tokens,
               const std::string& what) {
  const io::Qwen35Config& c = w.config;
  const int64_t layers = c.num_hidden_layers;
  const Model full(w, options);
  std::vector<Model> cut;
  for (int64_t l = 1; l <= layers; ++l) cut.emplace_back(cut_after(w, l), options);
  for (const int threads : {1, 3}) {
    omp_set_num_threads(threads);
    State s_tap = full.new_state(), s_plain = full.new_state();
    std::vector<State> s_cut;
    for (const Model& m : cut) s_cut.push_back(m.new_state());
    std::vector<float> logits(static_cast<size_t>(c.vocab_size)), plain(logits.size());
    std::vector<float> hidden(static_cast<size_t>(c.hidden_size));
    for (size_t step = 0; step < tokens.size(); ++step) {
      const std::string at = what + " threads " + std::to_string(threads) + " step " + std::to_string(step);
      std::vector<int64_t> order;
      std::vector<std::vector<float>> seen;
      const SublayerTap tap = [&](int64_t sublayer, std::span<const float> residual) {
        order.push_back(sublayer);
        seen.emplace_back(residual.begin(), residual.end());
      };
      full.forward(tokens[step], s_tap, logits, {}, tap);
      full.forward(tokens[step], s_plain, plain);
      expect_bits(logits, plain, at + " logits with and without the tap");
      ASSERT_EQ(order.size(), static_cast<size_t>(2 * layers)) << at;
      for (int64_t s = 0; s < 2 * layers; ++s) ASSERT_EQ(order[static_cast<size_t>(s)], s) << at;
      for (int64_t l = 0; l < layers; ++l) {
        cut[static_cast<size_t>(l)].forward(tokens[step], s_cut[static_cast<size_t>(l)], logits, hidden);
        expect_bits(seen[static_cast<size_t>(2 * l + 1)], hidden, at + " after layer " + std::to_string(l));
      }
      if (::testing::Test::HasFatalFailure()) break;
    }
  }
  omp_set_num_threads(1);
}

std::vector<int64_t> tokens_for(uint64_t seed, int64_t vocab) {
  testing::TinyRandom rng(seed * 7 + 3);
  std::vector<int64_t> t;
  for (int i = 0; i < 9; ++i) t.push_back(static_cast<int64_t>(rng.unit() * static_cast<double>(vocab)));
  return t;
}

TEST(SublayerTap, EverySublayerInOrderMatchesTheCutModelsHidden) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    testing::TinySpec spec;
    spec.seed = seed;
    spec.zero_fraction = seed % 2 == 0 ? 0.95 : 0.0;  // sparse storage and its paths too
    const io::Qwen35Weights w = testing::make_tiny_weights(spec);
    check_tap(w, ModelOptions{}, tokens_for(seed, spec.vocab), "seed " + std::to_string(seed));
    if (HasFatalFailure()) return;
  }
}

TEST(SublayerTap, SkippedSublayersAreReportedWithTheResidualTheyLeave) {
  // Mostly-zero weights and embeddings: many sublayers are idle and skipped; with
  // Compute they run. Both must report the residual of the cut models.
  for (uint64_t seed = 11; seed <= 14; ++seed) {
    testing::TinySpec spec;
    spec.seed = seed;
    spec.zero_fraction = 0.99;
    io::Qwen35Weights w = testing::make_tiny_weights(spec);
    for (size_t i = 0; i < w.embed_tokens.size(); ++i)
      if (i % 5 != 0) w.embed_tokens[i] = (i % 3 == 0) ? -0.0f : 0.0f;
    for (const IdleSublayers mode : {IdleSublayers::Skip, IdleSublayers::Compute}) {
      ModelOptions o;
      o.idle_sublayers = mode;
      check_tap(w, o, tokens_for(seed, spec.vocab),
                "seed " + std::to_string(seed) + (mode == IdleSublayers::Skip ? " skip" : " compute"));
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace qpu::engine
