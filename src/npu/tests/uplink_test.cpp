// The uplink on the real engine: random floats split into three 8-bit parts, each part
// emitted as the host's argmax token, and the tokens' embedding rows carrying the parts
// back into the residual, where they add up to the float again — bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/error.h"
#include "common/float_bits.h"
#include "engine/model.h"
#include "npu/uplink.h"

namespace qpu::npu {
namespace {


float random_in_window(std::mt19937_64& rng) {
  switch (rng() % 8) {
    case 0: return 0.0f;
    case 1: {  // few significant bits: parts that are 0
      const float v = std::ldexp(static_cast<float>(rng() % 256), -40 + static_cast<int>(rng() % 50));
      return (std::fabs(v) >= 0x1p-47f || v == 0.0f) ? ((rng() & 1) ? -v : v) : 0.0f;
    }
    default: {
      const int e = -47 + static_cast<int>(rng() % 67);  // [2^-47, 2^20)
      const float v = std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f, e);
      return (rng() & 1) ? -v : v;
    }
  }
}

TEST(ValueVocab, TokensAndValuesAreInverse) {
  const ValueVocab vocab{100, -70, 20};
  for (int64_t t = vocab.first; t < vocab.first + vocab.size(); ++t) EXPECT_EQ(vocab.token(vocab.value(t)), t);
  EXPECT_EQ(vocab.size(), 1 + 2 * 91 * 128);
  EXPECT_EQ(vocab.value(vocab.first), 0.0f);
  EXPECT_THROW(vocab.token(0x1.01p0f), Error);      // 9 significant bits
  EXPECT_THROW(vocab.token(0x1p21f), Error);        // binade above the window
  EXPECT_THROW(vocab.value(vocab.first - 1), Error);
}

TEST(SplitParts, CModelIsExactAndNarrow) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 1000000; ++i) {
    const float x = random_in_window(rng);
    const auto p = split_parts_reference(x);
    ASSERT_EQ(float_bits(p[0] + p[1] + p[2]), float_bits(0.0f + x)) << describe_float(x);
    ASSERT_EQ(float_bits((p[0] + p[1]) + p[2]), float_bits(0.0f + x));
    for (float part : p) {
      int e = 0;
      const float m = std::ldexp(std::frexp(std::fabs(part), &e), 8);
      ASSERT_EQ(m, std::floor(m)) << describe_float(x) << " part " << describe_float(part);
      ASSERT_TRUE(part == 0.0f || (e - 1 >= -70 && e - 1 <= 20)) << describe_float(x);
    }
  }
}

// Emits part `sel` of x for every test row; the vocabulary is the value tokens, then the
// test rows. Returns the number of cases that went wrong (and the first one).
struct RoundTrip {
  int64_t cases = 0, mismatches = 0;
  std::string first;
};

RoundTrip run_round_trip(int64_t cases, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> xs;
  for (float e : {0.0f, -0.0f, 0x1p-47f, -0x1p-47f, 0x1.fffffep19f, -0x1.fffffep19f, 1.0f, 0x1.000002p0f, 0x1.ff8p0f,
                  0x1.ff7ffep0f, 0x1.008p-5f, 3.0f, -0x1.ffdf7cp+19f})
    xs.push_back(e);
  while (static_cast<int64_t>(xs.size()) < cases) xs.push_back(random_in_window(rng));

  RoundTrip r;
  const size_t batch = 1024;
  for (size_t begin = 0; begin < xs.size(); begin += batch) {
    const std::vector<float> chunk(xs.begin() + static_cast<std::ptrdiff_t>(begin),
                                   xs.begin() + static_cast<std::ptrdiff_t>(std::min(xs.size(), begin + batch)));
    const UplinkCheckpoint u = build_uplink_checkpoint(chunk);
    engine::Model model(u.compiled.weights);
    std::vector<float> logits(static_cast<size_t>(u.compiled.weights.config.vocab_size)),
        hidden(static_cast<size_t>(u.compiled.weights.config.hidden_size));
    for (size_t k = 0; k < chunk.size(); ++k) {
      const float xv = chunk[k];
      const auto expect = split_parts_reference(xv);
      float back = 0.0f;
      for (size_t i = 0; i < 3; ++i) {
        engine::State state = model.new_state();
        model.forward(u.first_row + static_cast<int64_t>(3 * k + i), state, logits, hidden);
        const auto best = std::max_element(logits.begin(), logits.end());
        const float best_logit = *best;
        float runner_up = -INFINITY;
        for (auto it = logits.begin(); it != logits.end(); ++it)
          if (it != best) runner_up = std::max(runner_up, *it);
        const int64_t token = best - logits.begin();
        // The token's embedding row carries the part into the inbox at the next forward.
        engine::State next = model.new_state();
        model.forward(token, next, logits, hidden);
        const float arrived = hidden[static_cast<size_t>(u.compiled.allocation.dim(u.inbox))];
        back += arrived;
        const bool ok = token < u.vocab.size() && float_bits(u.vocab.value(token)) == float_bits(expect[i]) &&
                        float_bits(arrived) == float_bits(expect[i]) && runner_up < best_logit;
        if (!ok && r.mismatches++ == 0)
          r.first = "x " + describe_float(xv) + " part " + std::to_string(i) + ": expected " + describe_float(expect[i]) +
                    ", token " + std::to_string(token) + " (max " + describe_float(best_logit) + ", runner-up " +
                    describe_float(runner_up) + ") arrived " + describe_float(arrived);
      }
      if (float_bits(back) != float_bits(0.0f + xv) && r.mismatches++ == 0)
        r.first = "x " + describe_float(xv) + " came back as " + describe_float(back);
      ++r.cases;
    }
  }
  return r;
}

TEST(Uplink, EveryPartIsEmittedAndArrivesExactly) {
  const RoundTrip r = run_round_trip(QPU_NPU_CASES / 20, 5);
  EXPECT_EQ(r.cases, QPU_NPU_CASES / 20);
  EXPECT_EQ(r.mismatches, 0) << r.first;
}

}  // namespace
}  // namespace qpu::npu
