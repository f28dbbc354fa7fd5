// run.c's sampler: the xorshift64* coin, argmax, CDF and top-p sampling.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/float_bits.h"
#include "reference/run_c_ops.h"
#include "reference/sampler.h"

namespace qpu::reference {
namespace {

TEST(RefRng, KnownValues) {
  uint64_t s = 42;
  EXPECT_EQ(random_u32(s), 0x56ce4ab7u);
  s = 42;
  EXPECT_EQ(float_bits(random_f32(s)), float_bits(0.339085221f));
  EXPECT_EQ(float_bits(random_f32(s)), float_bits(0.782255828f));
  s = 7;
  EXPECT_EQ(float_bits(random_f32(s)), float_bits(0.820246637f));
}

TEST(RefRng, CoinIsTopTwentyFourBitsOverTwoToTheTwentyFour) {
  for (uint64_t seed : {1ull, 42ull, 133742ull, 0xffffffffffffffffull}) {
    uint64_t a = seed, b = seed;
    for (int i = 0; i < 1000; i++) {
      const uint32_t u = random_u32(a);
      const float coin = random_f32(b);
      EXPECT_EQ(coin, std::ldexp(static_cast<float>(u >> 8), -24));
      EXPECT_LT(coin, 1.0f);
    }
  }
}

TEST(RefSampler, ArgmaxTakesFirstMaximum) {
  EXPECT_EQ(sample_argmax(std::vector<float>{1, 3, 2, 3}), 1);
  EXPECT_EQ(sample_argmax(std::vector<float>{-1, -1}), 0);
  EXPECT_EQ(sample_argmax(std::vector<float>{-2, -0.0f, 0.0f}), 1);  // +0 is not > -0
}

TEST(RefSampler, GreedyDrawsNoCoinAndDoesNotTouchLogits) {
  Sampler s(4, 0.0f, 0.9f, 42);
  std::vector<float> logits{0.5f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(s.sample(logits), 1);
  EXPECT_EQ(s.rng_state(), 42u);
  EXPECT_EQ(logits, (std::vector<float>{0.5f, 2.0f, 2.0f, -1.0f}));
}

TEST(RefSampler, SampleMultScansTheCdf) {
  const std::vector<float> p{0.25f, 0.0f, 0.5f, 0.25f};
  EXPECT_EQ(sample_mult(p, 0.0f), 0);
  EXPECT_EQ(sample_mult(p, 0.24999999f), 0);
  EXPECT_EQ(sample_mult(p, 0.25f), 2);  // coin < cdf is strict; the zero entry is skipped
  EXPECT_EQ(sample_mult(p, 0.74999994f), 2);
  EXPECT_EQ(sample_mult(p, 0.75f), 3);
  EXPECT_EQ(sample_mult(std::vector<float>{0.25f, 0.25f}, 0.9f), 1);  // rounding fallback: n-1
}

std::vector<float> random_logits(std::mt19937& gen, int n) {
  std::vector<float> v(n);
  for (float& f : v) f = static_cast<float>(static_cast<int>(gen() % 2001) - 1000) / 100.0f;
  return v;
}

TEST(RefSampler, ToppOutsideOpenIntervalIsPlainCdfSampling) {
  std::mt19937 gen(2024);
  for (float topp : {0.0f, -0.0f, 1.0f, 1.5f, -0.25f}) {
    for (int trial = 0; trial < 200; trial++) {
      const int n = 2 + static_cast<int>(gen() % 60);
      const uint64_t seed = gen();
      const float temperature = 0.25f + static_cast<float>(gen() % 8) * 0.25f;
      std::vector<float> logits = random_logits(gen, n);

      std::vector<float> probs = logits;
      for (float& l : probs) l /= temperature;
      softmax(probs);
      uint64_t state = seed;
      const float coin = random_f32(state);

      Sampler sampler(n, temperature, topp, seed);
      EXPECT_EQ(sampler.sample(logits), sample_mult(probs, coin));
      EXPECT_EQ(sampler.rng_state(), state);  // exactly one coin per sampled token
      for (int i = 0; i < n; i++) ASSERT_EQ(float_bits(logits[i]), float_bits(probs[i]));  // in place
    }
  }
}

TEST(RefSampler, ToppTiesKeepAscendingIndexOrder) {
  std::vector<ProbIndex> scratch;
  const std::vector<float> p{0.1f, 0.3f, 0.3f, 0.3f};
  // cutoff (1 - 0.5)/3 drops index 0; the sorted nucleus is 1, 2 (0.3 + 0.3 > 0.5);
  // index 3 ties with them but comes later, so it is never in the nucleus.
  EXPECT_EQ(sample_topp(p, 0.5f, 0.0f, scratch), 1);
  EXPECT_EQ(sample_topp(p, 0.5f, 0.49f, scratch), 1);
  EXPECT_EQ(sample_topp(p, 0.5f, 0.51f, scratch), 2);
  EXPECT_EQ(sample_topp(p, 0.5f, 0.99999994f, scratch), 2);
}

TEST(RefSampler, ToppCutoffAndStrictThreshold) {
  std::vector<ProbIndex> scratch;
  // n = 3, topp 0.5: cutoff (1 - 0.5) / 2 = 0.25 exactly; p >= cutoff is kept.
  // Sorted: 1 (0.5), 0 (0.25), 2 (0.25). The running sum 0.5 is not > 0.5, 0.75 is:
  // the nucleus is {1, 0} and r = coin * 0.75.
  const std::vector<float> p{0.25f, 0.5f, 0.25f};
  EXPECT_EQ(sample_topp(p, 0.5f, 0.6f, scratch), 1);   // r = 0.45 < 0.5
  EXPECT_EQ(sample_topp(p, 0.5f, 0.7f, scratch), 0);   // r = 0.525 >= 0.5
  EXPECT_EQ(sample_topp(p, 0.5f, 0.999f, scratch), 0);
  // Just under the cutoff, index 0 is dropped: the nucleus becomes {1, 2}.
  const std::vector<float> q{0.24999999f, 0.5f, 0.25000003f};
  EXPECT_EQ(sample_topp(q, 0.5f, 0.7f, scratch), 2);
  // When the running sum never exceeds topp, every kept token is in the nucleus.
  // Here the sum is 0.9 < 0.95 and r = coin * 0.9.
  const std::vector<float> u{0.2f, 0.2f, 0.2f, 0.2f, 0.1f};
  EXPECT_EQ(sample_topp(u, 0.95f, 0.95f, scratch), 4);
  EXPECT_EQ(sample_topp(u, 0.95f, 0.5f, scratch), 2);
  // topp = 0.9 as run.c parses it (0x1.ccccccp-1); the cutoff 0.1/(n-1) removes the tail.
  const std::vector<float> t{0.5f, 0.3f, 0.15f, 0.02f, 0.03f};  // cutoff 0.025: index 3 dropped
  EXPECT_EQ(sample_topp(t, 0.9f, 0.0f, scratch), 0);
  EXPECT_EQ(sample_topp(t, 0.9f, 0.99f, scratch), 2);  // nucleus 0, 1, 2 (0.95 > 0.9); 4 is outside
}

TEST(RefSampler, ToppNoTokenAboveCutoffIsAnError) {
  std::vector<ProbIndex> scratch;
  // cutoff (1 - 0.1) / 1 = 0.9 and neither 0.5 reaches it: run.c would index probindex[-1].
  EXPECT_THROW(sample_topp(std::vector<float>{0.5f, 0.5f}, 0.1f, 0.3f, scratch), Error);
}

// An independent statement of top-p: rank the kept tokens by (probability desc,
// index asc) with an explicit tie-break instead of a stable sort.
int topp_by_rank(const std::vector<float>& p, float topp, float coin) {
  const float cutoff = (1.0f - topp) / static_cast<float>(p.size() - 1);
  std::vector<int> kept;
  for (int i = 0; i < static_cast<int>(p.size()); i++) {
    if (p[i] >= cutoff) kept.push_back(i);
  }
  std::sort(kept.begin(), kept.end(), [&](int a, int b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
  float cum = 0.0f;
  size_t last = kept.size() - 1;
  for (size_t i = 0; i < kept.size(); i++) {
    cum += p[kept[i]];
    if (cum > topp) {
      last = i;
      break;
    }
  }
  const float r = coin * cum;
  float cdf = 0.0f;
  for (size_t i = 0; i <= last; i++) {
    cdf += p[kept[i]];
    if (r < cdf) return kept[i];
  }
  return kept[last];
}

// A random topp in {0.01, ..., 0.99} and run.c's coin from a random xorshift state.
std::pair<float, float> draw_topp_and_coin(std::mt19937& gen) {
  const float topp = static_cast<float>(1 + gen() % 99) / 100.0f;
  uint64_t state = gen();
  return {topp, random_f32(state)};
}

// Does any probability reach run.c's cutoff (1 - topp) / (n - 1)? (Else run.c reads out
// of bounds and the reference throws.)
bool reaches_cutoff(const std::vector<float>& p, float topp) {
  const float cutoff = (1.0f - topp) / static_cast<float>(p.size() - 1);
  return std::any_of(p.begin(), p.end(), [&](float f) { return f >= cutoff; });
}

TEST(RefSampler, ToppMatchesRankDefinitionWithManyTies) {
  std::mt19937 gen(77);
  std::vector<ProbIndex> scratch;
  for (int trial = 0; trial < 3000; trial++) {
    const int n = 2 + static_cast<int>(gen() % 40);
    // Logits from a handful of values: many exactly equal probabilities.
    std::vector<float> p(n);
    for (float& f : p) f = static_cast<float>(gen() % 4);
    softmax(p);
    const auto [topp, coin] = draw_topp_and_coin(gen);
    const bool any_kept = reaches_cutoff(p, topp);
    if (!any_kept) continue;
    ASSERT_EQ(sample_topp(p, topp, coin, scratch), topp_by_rank(p, topp, coin)) << "trial " << trial;
  }
}

// The trace's intermediates against independent statements of each (explicit tie-break
// ranks, a recount of the cumulative sums), and its pick = sample_topp's.
void expect_trace_consistent(const std::vector<float>& p, float topp, float coin, const std::string& what) {
  std::vector<ProbIndex> scratch;
  const TopPTrace t = sample_topp_trace(p, topp, coin);
  const float cutoff = (1.0f - topp) / static_cast<float>(p.size() - 1);
  ASSERT_EQ(float_bits(t.cutoff), float_bits(cutoff)) << what;
  std::vector<int> kept;
  for (int i = 0; i < static_cast<int>(p.size()); i++)
    if (p[i] >= cutoff) kept.push_back(i);
  ASSERT_EQ(t.kept.size(), kept.size()) << what;
  const int n0 = static_cast<int>(kept.size());
  for (int i = 0; i < n0; i++) {
    ASSERT_EQ(t.kept[i].index, kept[i]) << what;
    ASSERT_EQ(float_bits(t.kept[i].prob), float_bits(p[kept[i]])) << what;
    // rank = #{j: p_j > p_i} + #{j < i: p_j = p_i} over the kept entries
    int rank = 0;
    for (int j = 0; j < n0; j++)
      rank += (p[kept[j]] > p[kept[i]]) || (j < i && p[kept[j]] == p[kept[i]]);
    ASSERT_EQ(t.rank[i], rank) << what << " kept " << i;
    ASSERT_EQ(t.sorted[rank].index, kept[i]) << what;
  }
  float cum = 0.0f;
  for (int k = 0; k < n0; k++) {
    cum += t.sorted[k].prob;
    ASSERT_EQ(float_bits(t.cumulative[k]), float_bits(cum)) << what;
  }
  ASSERT_EQ(float_bits(t.cumulative_prob), float_bits(t.cumulative[t.last_idx])) << what;
  ASSERT_EQ(float_bits(t.r), float_bits(coin * t.cumulative_prob)) << what;
  ASSERT_EQ(t.pick, t.sorted[t.pick_rank].index) << what;
  ASSERT_EQ(t.pick, topp_by_rank(p, topp, coin)) << what;
  ASSERT_EQ(sample_topp(p, topp, coin, scratch), t.pick) << what;
}

TEST(RefSampler, ToppTraceTiesAndOneKept) {
  // Ties: 1, 2, 3 equal, stably ordered 1, 2, 3; index 0 below the cutoff.
  const std::vector<float> p{0.1f, 0.3f, 0.3f, 0.3f};
  const TopPTrace t = sample_topp_trace(p, 0.5f, 0.51f);
  ASSERT_EQ(t.kept.size(), 3u);
  EXPECT_EQ(t.rank, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(t.last_idx, 1);
  EXPECT_EQ(t.pick_rank, 1);
  EXPECT_EQ(t.pick, 2);
  // A tie behind a larger entry: ranks 1 (index 0), 0 (index 1), 2 (index 2).
  const TopPTrace u = sample_topp_trace(std::vector<float>{0.25f, 0.5f, 0.25f}, 0.5f, 0.7f);
  EXPECT_EQ(u.rank, (std::vector<int>{1, 0, 2}));
  EXPECT_EQ(u.last_idx, 1);
  EXPECT_EQ(u.pick, 0);
  // One kept entry: it is the nucleus whatever the coin.
  const TopPTrace one = sample_topp_trace(std::vector<float>{0.02f, 0.96f, 0.02f}, 0.9f, 0.99999994f);
  ASSERT_EQ(one.kept.size(), 1u);
  EXPECT_EQ(one.last_idx, 0);
  EXPECT_EQ(one.pick, 1);
  for (float coin : {0.0f, 0.49f, 0.51f, 0.99999994f}) expect_trace_consistent(p, 0.5f, coin, "ties");
}

TEST(RefSampler, ToppTraceMatchesIndependentStatements) {
  std::mt19937 gen(78);
  for (int trial = 0; trial < 2000; trial++) {
    const int n = 2 + static_cast<int>(gen() % 600);
    std::vector<float> p(n);
    const int levels = 1 + static_cast<int>(gen() % 8);  // few levels: many ties
    for (float& f : p) f = static_cast<float>(gen() % levels) * (trial % 2 ? 1.0f : 0.37f);
    softmax(p);
    const auto [topp, coin] = draw_topp_and_coin(gen);
    const bool any_kept = reaches_cutoff(p, topp);
    if (!any_kept) {
      EXPECT_THROW(sample_topp_trace(p, topp, coin), Error);
      continue;
    }
    expect_trace_consistent(p, topp, coin, "trial " + std::to_string(trial));
  }
}

TEST(RefSampler, TemperatureDividesLogits) {
  // temperature 0.5: logits are divided (not multiplied by 2.0f, which could differ
  // in general; here exact), then softmax; topp 1 so plain CDF sampling.
  Sampler s(3, 0.5f, 1.0f, 7);
  std::vector<float> logits{1.0f, 1.5f, -3.0f};
  uint64_t state = 7;
  const float coin = random_f32(state);  // 0.820246637
  std::vector<float> probs{2.0f, 3.0f, -6.0f};
  softmax(probs);
  EXPECT_EQ(s.sample(logits), sample_mult(probs, coin));
  EXPECT_EQ(sample_mult(probs, coin), 1);  // p0 = 0.269 <= coin 0.82 < p0 + p1 = 0.99996
}

}  // namespace
}  // namespace qpu::reference
