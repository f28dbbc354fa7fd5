// The documented sampler: greedy ties, reproducible seeds, nucleus cut-off and the
// sampled frequencies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/dot.h"
#include "engine/elementwise.h"
#include "engine/sampler.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

TEST(Sampler, ArgmaxTakesTheFirstMaximum) {
  const std::vector<float> l{1.0f, 3.0f, -2.0f, 3.0f};
  EXPECT_EQ(argmax(l), 1);
  Sampler greedy({0.0, 1.0, 123});
  EXPECT_EQ(greedy.sample(l), 1);
}

// The greedy kernel against the scan it replaces, `if (x[i] > x[best]) best = i` (and a
// count of x[i] > above), on every supported instruction set: lengths around the 16-float
// block, values drawn from a small set so that ties are common (the first one wins), -0
// and +0 side by side, infinities, and NaNs anywhere, x[0] included (a NaN x[0] wins).
TEST(Sampler, ArgmaxKernelIsTheScanOnEveryInstructionSet) {
  testing::TinyRandom rng(2026);
  const float pool[] = {0.0f, -0.0f, 1.0f, -1.0f, 0x1p20f, 0x1p20f + 0x1p3f, 0x1p20f + 0x1p10f, 3.5f, -7.0f,
                        1e-40f, testing::kInf, -testing::kInf, testing::kNaN};
  const int64_t lengths[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 257, 4096, 70001};
  int64_t cases = 0, nan_first = 0, ties = 0;
  for (dot::Isa isa : {dot::Isa::Generic, dot::Isa::Avx2, dot::Isa::Avx512}) {
    if (!dot::isa_supported(isa)) continue;
    const elementwise::Kernels& k = elementwise::kernels_for(isa);
    for (const int64_t n : lengths) {
      for (int trial = 0; trial < 40; ++trial) {
        // How many distinct pool entries this vector draws from: 1 makes every entry a tie.
        const auto kinds = static_cast<size_t>(1 + rng.unit() * 13.0);
        const double nan_rate = trial % 4 == 0 ? 0.0 : trial % 4 == 1 ? 0.5 : 0.02;
        std::vector<float> x(static_cast<size_t>(n));
        for (float& v : x) {
          v = rng.unit() < nan_rate ? testing::kNaN
                                    : (trial % 5 == 4 ? rng.uniform(100.0) : pool[static_cast<size_t>(rng.unit() * static_cast<double>(kinds))]);
        }
        if (trial == 7) x[0] = testing::kNaN;
        int64_t want = 0, want_above = 0;
        for (int64_t i = 1; i < n; ++i)
          if (x[i] > x[static_cast<size_t>(want)]) want = i;
        for (const float v : x) want_above += v > 0x1p20f;
        int64_t above = -1;
        const std::string what = std::string(dot::isa_name(isa)) + " n " + std::to_string(n) + " trial " +
                                 std::to_string(trial);
        ASSERT_EQ(k.argmax(x.data(), n, 0x1p20f, &above), want) << what;
        ASSERT_EQ(above, want_above) << what;
        ASSERT_EQ(k.argmax(x.data(), n, 0.0f, nullptr), want) << what;
        ++cases;
        nan_first += std::isnan(x[0]);
        ties += std::count(x.begin(), x.end(), x[static_cast<size_t>(want)]) > 1;
      }
    }
  }
  EXPECT_GE(cases, 480);
  EXPECT_GT(nan_first, 12);  // the NaN-first case was met, on every set
  EXPECT_GT(ties, 200);      // and many ties for the maximum
  EXPECT_EQ(argmax(std::vector<float>{-0.0f, 0.0f}), 0);
  EXPECT_EQ(argmax(std::vector<float>{testing::kNaN, 5.0f}), 0);
  EXPECT_EQ(argmax(std::vector<float>{1.0f, testing::kNaN, 5.0f, testing::kNaN}), 2);
}

TEST(Sampler, SameSeedSameTokens) {
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(std::sin(static_cast<double>(i)));
  Sampler a({1.0, 0.9, 42}), b({1.0, 0.9, 42}), c({1.0, 0.9, 43});
  int differ = 0;
  for (int i = 0; i < 200; ++i) {
    const int64_t ta = a.sample(l);
    ASSERT_EQ(ta, b.sample(l));
    differ += ta != c.sample(l);
  }
  EXPECT_GT(differ, 50);
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  // weights 1 : 3 (logit difference ln 3), temperature 1.
  const std::vector<float> l{0.0f, static_cast<float>(std::log(3.0))};
  Sampler s({1.0, 1.0, 7});
  int ones = 0;
  const int n = 40000;
  for (int i = 0; i < n; ++i) ones += s.sample(l) == 1;
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.01);
  // temperature 2 flattens to sqrt(3) : 1 -> 0.634
  Sampler t({2.0, 1.0, 7});
  ones = 0;
  for (int i = 0; i < n; ++i) ones += t.sample(l) == 1;
  EXPECT_NEAR(static_cast<double>(ones) / n, std::sqrt(3.0) / (1.0 + std::sqrt(3.0)), 0.01);
}

TEST(Sampler, TopPKeepsTheNucleus) {
  // weights 0.5, 0.3, 0.2 (after softmax): top_p 0.5 keeps only the first, 0.7 two.
  const std::vector<float> l{static_cast<float>(std::log(0.5)), static_cast<float>(std::log(0.3)),
                             static_cast<float>(std::log(0.2))};
  Sampler only({1.0, 0.5, 1});
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(only.sample(l), 0);
  Sampler two({1.0, 0.7, 1});
  int seen[3] = {0, 0, 0};
  for (int i = 0; i < 20000; ++i) ++seen[two.sample(l)];
  EXPECT_EQ(seen[2], 0);
  EXPECT_NEAR(seen[0] / 20000.0, 0.625, 0.015);
}

TEST(Sampler, UniformIsInTheUnitInterval) {
  Sampler s({1.0, 1.0, 0});
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const double u = s.next_uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
}

TEST(Sampler, RejectsBadOptions) {
  EXPECT_THROW(Sampler({-1.0, 1.0, 0}), Error);
  EXPECT_THROW(Sampler({1.0, 0.0, 0}), Error);
  EXPECT_THROW(Sampler({1.0, 1.5, 0}), Error);
  EXPECT_THROW(Sampler({NAN, 1.0, 0}), Error);
}

}  // namespace
}  // namespace qpu::engine
