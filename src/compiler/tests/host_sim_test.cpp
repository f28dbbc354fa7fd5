// HostSim really varies the summation order: on random weights (dense, and with half the
// weights 0, which its sums leave out: HostSim::dot) two seeds give different bits in most
// logits, and the same seed gives the same bits. Bad inputs are errors.
#include "compiler/host_sim.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/error.h"
#include "engine/tests/tiny_model.h"

namespace qpu::compiler {
namespace {

using engine::testing::make_tiny_weights;
using engine::testing::TinySpec;

TinySpec linear_only(uint64_t seed, double zero_fraction) {
  TinySpec s;
  s.layers = {io::LayerType::LinearAttention, io::LayerType::LinearAttention};
  s.seed = seed;
  s.zero_fraction = zero_fraction;
  return s;
}

// Logits of 3 decode steps, concatenated.
std::vector<float> run(const io::Qwen35Weights& w, uint64_t seed) {
  HostSim sim(w, seed);
  std::vector<float> all, logits(static_cast<size_t>(w.config.vocab_size));
  for (int64_t t : {5, 17, 42}) {
    sim.forward(t, logits, {});
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

int64_t differing_bits(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

TEST(HostSim, TwoSeedsSumInOtherOrdersOneSeedInTheSame) {
  for (double zeros : {0.0, 0.5}) {
    const io::Qwen35Weights w = make_tiny_weights(linear_only(3, zeros));
    const std::vector<float> a = run(w, 11), again = run(w, 11), b = run(w, 12);
    EXPECT_EQ(differing_bits(a, again), 0) << "zeros " << zeros;
    // 3 x 97 logits, each a 64-term sum after 2 layers of such sums: most differ in the
    // last bits between two random orders.
    EXPECT_GT(differing_bits(a, b), static_cast<int64_t>(a.size() / 4)) << "zeros " << zeros;
  }
}

TEST(HostSim, RejectsAttentionLayersAndTokensOutsideTheVocabulary) {
  TinySpec s = linear_only(4, 0.0);
  s.layers.push_back(io::LayerType::FullAttention);
  EXPECT_THROW(HostSim(make_tiny_weights(s), 1), Error);
  const io::Qwen35Weights w = make_tiny_weights(linear_only(4, 0.0));
  HostSim sim(w, 1);
  std::vector<float> logits(static_cast<size_t>(w.config.vocab_size));
  EXPECT_THROW(sim.forward(w.config.vocab_size, logits, {}), Error);
  EXPECT_THROW(sim.forward(-1, logits, {}), Error);
}

}  // namespace
}  // namespace qpu::compiler
