// The uplink on the real engine: random floats split into three 8-bit parts, each part
// emitted as the host's argmax token, and the tokens' embedding rows carrying the parts
// back into the residual, where they add up to the float again — bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/emit.h"
#include "engine/model.h"
#include "npu/uplink.h"

namespace qpu::npu {
namespace {

using compiler::Program;
using compiler::ValueId;

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
  const ValueVocab vocab{0, -70, 20};
  Program p;
  const ValueId x = p.value("x"), inbox = p.value("inbox");
  const auto sel = p.values("sel", 3);
  const auto parts = split_parts(p, x);
  const ValueId c = p.value("part");
  {
    std::vector<compiler::Neuron> n;
    for (int i = 0; i < 3; ++i)
      n.push_back(compiler::Neuron{{{{sel[static_cast<size_t>(i)], 128.0f}}}, {{{parts[static_cast<size_t>(i)], 1.0f / 128.0f}}},
                                   {{c, 1.0f}}});
    p.mlp("select.part", std::move(n));
  }
  const EmitFeatures f = emit_features(p, c, vocab);
  std::mt19937_64 rng(seed);
  std::vector<float> xs;
  for (float e : {0.0f, -0.0f, 0x1p-47f, -0x1p-47f, 0x1.fffffep19f, -0x1.fffffep19f, 1.0f, 0x1.000002p0f, 0x1.ff8p0f,
                  0x1.ff7ffep0f, 0x1.008p-5f, 3.0f})
    xs.push_back(e);
  while (static_cast<int64_t>(xs.size()) < cases) xs.push_back(random_in_window(rng));

  RoundTrip r;
  const int64_t rows = 4096;
  for (size_t begin = 0; begin < xs.size(); begin += rows / 4) {
    const size_t n = std::min(xs.size() - begin, static_cast<size_t>(rows / 4));
    compiler::Interface io;
    io.inputs = {x, sel[0], sel[1], sel[2], inbox};
    io.vocab_size = vocab.size() + static_cast<int64_t>(3 * n);
    io.input_rows.assign(static_cast<size_t>(io.vocab_size) * 5, 0.0f);
    for (int64_t t = 0; t < vocab.size(); ++t) io.input_rows[static_cast<size_t>(t * 5 + 4)] = vocab.value(t);
    for (size_t k = 0; k < n; ++k)
      for (size_t i = 0; i < 3; ++i) {
        float* row = &io.input_rows[static_cast<size_t>(vocab.size() + static_cast<int64_t>(3 * k + i)) * 5];
        row[0] = xs[begin + k];
        row[1 + i] = 1.0f;
      }
    compiler::Compiled comp = compiler::compile(p, io);
    install_value_head(comp.weights, comp.allocation, f, vocab);
    engine::Model model(comp.weights);
    std::vector<float> logits(static_cast<size_t>(io.vocab_size)), hidden(static_cast<size_t>(comp.weights.config.hidden_size));
    for (size_t k = 0; k < n; ++k) {
      const float xv = xs[begin + k];
      const auto expect = split_parts_reference(xv);
      float back = 0.0f;
      for (size_t i = 0; i < 3; ++i) {
        engine::State state = model.new_state();
        model.forward(vocab.size() + static_cast<int64_t>(3 * k + i), state, logits, hidden);
        const auto best = std::max_element(logits.begin(), logits.end());
        const float runner_up = [&] {
          float m = -INFINITY;
          for (auto it = logits.begin(); it != logits.end(); ++it)
            if (it != best) m = std::max(m, *it);
          return m;
        }();
        const int64_t token = best - logits.begin();
        const float best_logit = *best;
        // The token's embedding row carries the part into the inbox at the next forward.
        engine::State next = model.new_state();
        model.forward(token, next, logits, hidden);
        const float arrived = hidden[static_cast<size_t>(comp.allocation.dim(inbox))];
        back += arrived;
        const bool ok = token < vocab.size() && float_bits(vocab.value(token)) == float_bits(expect[i]) &&
                        float_bits(arrived) == float_bits(expect[i]) && runner_up < best_logit;
        if (!ok && r.mismatches++ == 0)
          r.first = "x " + describe_float(xv) + " part " + std::to_string(i) + ": expected " + describe_float(expect[i]) +
                    ", token " + std::to_string(token) + " (max " + describe_float(best_logit) + ", runner-up " +
                    describe_float(runner_up) + ") arrived " + describe_float(arrived);
      }
      if (float_bits(back) != float_bits(0.0f + xv) && r.mismatches++ == 0) r.first = "x " + describe_float(xv) + " came back as " + describe_float(back);
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
