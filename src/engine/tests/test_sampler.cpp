// The documented sampler: greedy ties, reproducible seeds, nucleus cut-off and the
// sampled frequencies.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "engine/sampler.h"

namespace qpu::engine {
namespace {

TEST(Sampler, ArgmaxTakesTheFirstMaximum) {
  const std::vector<float> l{1.0f, 3.0f, -2.0f, 3.0f};
  EXPECT_EQ(argmax(l), 1);
  Sampler greedy({0.0, 1.0, 123});
  EXPECT_EQ(greedy.sample(l), 1);
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
