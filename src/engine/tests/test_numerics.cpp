// The scalar functions against torch 2.15's own float32 results (bit patterns
// printed by torch, see the comments), and the exact windows the NPU relies on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "common/float_bits.h"
#include "engine/numerics.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using numerics::sigmoid;
using numerics::silu;
using numerics::softplus;

int64_t ulp_distance(float a, float b) {
  auto key = [](float v) {
    const auto bits = static_cast<int64_t>(float_bits(v));
    return bits & 0x80000000 ? 0x80000000 - bits : bits;  // monotone integer line
  };
  return std::llabs(key(a) - key(b));
}

struct Case {
  float x;
  uint32_t torch_bits;
  bool exact_window;  // must match bit for bit (no exp/log rounding involved)
};

// torch.nn.functional.silu(torch.tensor([...])) on CPU, torch 2.15.
TEST(Numerics, SiluMatchesTorch) {
  const std::vector<Case> cases{
      {-100.0f, 0x80000000u, true}, {-88.0f, 0x83354ddcu, false}, {-20.0f, 0xb3310d40u, false},
      {-1.5f, 0xbe8c1a51u, false},  {0.0f, 0x00000000u, true},    {1e-3f, 0x3a032336u, false},
      {2.5f, 0x4013dcd9u, false},   {17.0f, 0x41880000u, true},   {18.0f, 0x41900000u, true},
      {30.0f, 0x41f00000u, true},   {-0.0f, 0x80000000u, true}};
  for (const Case& c : cases) {
    const float got = silu(c.x);
    if (c.exact_window) EXPECT_EQ(float_bits(got), c.torch_bits) << c.x;
    else EXPECT_LE(ulp_distance(got, float_from_bits(c.torch_bits)), 1) << c.x;
  }
}

// torch.sigmoid(torch.tensor([...])).
TEST(Numerics, SigmoidMatchesTorch) {
  const std::vector<Case> cases{
      {-100.0f, 0x00000000u, true}, {-88.0f, 0x0041edc4u, false}, {-20.0f, 0x310da433u, false},
      {-1.5f, 0x3e3acdc2u, false},  {0.0f, 0x3f000000u, true},    {1e-3f, 0x3f001062u, false},
      {2.5f, 0x3f6c948fu, false},   {17.0f, 0x3f800000u, true},   {18.0f, 0x3f800000u, true},
      {30.0f, 0x3f800000u, true}};
  for (const Case& c : cases) {
    const float got = sigmoid(c.x);
    if (c.exact_window) EXPECT_EQ(float_bits(got), c.torch_bits) << c.x;
    else EXPECT_LE(ulp_distance(got, float_from_bits(c.torch_bits)), 1) << c.x;
  }
}

// torch.nn.functional.softplus(torch.tensor([...])) (beta 1, threshold 20).
TEST(Numerics, SoftplusMatchesTorch) {
  const std::vector<Case> cases{
      {-200.0f, 0x00000000u, true}, {-20.0f, 0x310da433u, false}, {-1.0f, 0x3ea063d6u, false},
      {0.0f, 0x3f317218u, false},   {1.0f, 0x3fa818f5u, false},   {19.5f, 0x419c0000u, false},
      {20.0f, 0x41a00000u, false},  {20.5f, 0x41a40000u, true},   {50.0f, 0x42480000u, true}};
  for (const Case& c : cases) {
    const float got = softplus(c.x);
    if (c.exact_window) EXPECT_EQ(float_bits(got), c.torch_bits) << c.x;
    else EXPECT_LE(ulp_distance(got, float_from_bits(c.torch_bits)), 1) << c.x;
  }
}

TEST(Numerics, ExactWindowsHoldEverywhere) {
  // silu(x) = x and sigmoid(x) = 1 for every float in [18, 1e6]; both are exactly
  // (-)0 from -89 down; softplus(x) = x above 20.
  for (float x = 18.0f; x < 1e6f; x = std::nextafter(x, 1e7f) * 1.0001f) {
    ASSERT_EQ(silu(x), x) << x;
    ASSERT_EQ(sigmoid(x), 1.0f) << x;
  }
  for (float x = -89.0f; x > -1e30f; x *= 1.37f) {
    ASSERT_EQ(float_bits(silu(x)), 0x80000000u) << x;
    ASSERT_EQ(float_bits(sigmoid(x)), 0u) << x;
  }
  for (float x = std::nextafter(20.0f, 21.0f); x < 1e30f; x *= 1.21f) ASSERT_EQ(softplus(x), x);
  EXPECT_EQ(float_bits(softplus(-104.0f)), 0u);
}

// silu returns its exact windows without the exp: the bits of the plain formula for every
// float of the binades around the window edges (exhaustive: [8, 32), [-128, -64) and
// their neighbours), the specials, and 4M random bit patterns.
TEST(Numerics, SiluShortcutsGiveTheFormulaBits) {
  const auto expect_formula = [](float x) {
    const float got = silu(x), want = x == 0.0f ? x : numerics::silu_formula(x);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << describe_float(x);
    } else {
      ASSERT_EQ(float_bits(got), float_bits(want)) << describe_float(x);
    }
  };
  int64_t checked = 0;
  // Binades [2^3, 2^5) of both signs (the +18 edge) and [2^6, 2^8) negated (the -89
  // edge; expf(-x) starts to overflow at x = -88.72...).
  for (const auto& [lo, hi, sign] : std::vector<std::tuple<float, float, float>>{{8.0f, 32.0f, 1.0f},
                                                                                   {8.0f, 32.0f, -1.0f},
                                                                                   {64.0f, 256.0f, -1.0f}}) {
    for (uint32_t b = float_bits(lo); b < float_bits(hi); ++b, ++checked) expect_formula(sign * float_from_bits(b));
  }
  for (float x : {0.0f, -0.0f, HUGE_VALF, -HUGE_VALF, std::nanf(""), 18.0f, std::nextafter(18.0f, 0.0f), -89.0f,
                  std::nextafter(-89.0f, 0.0f), std::nextafter(-89.0f, -100.0f), 3.4e38f, -3.4e38f, 1e-45f, -1e-45f}) {
    expect_formula(x);
  }
  testing::TinyRandom rng(7);
  for (int i = 0; i < (1 << 22); ++i, ++checked) {
    const auto bits = static_cast<uint32_t>(rng.unit() * 4294967296.0);
    expect_formula(float_from_bits(bits));
  }
  EXPECT_GT(checked, 4 * (1 << 23));
}

TEST(Numerics, RmsNormWithExactScale) {
  // Toolkit P1: mean(x^2) = 2^20 exactly, eps vanishes in the rounding, rsqrt = 2^-10:
  // the norm is an exact power-of-two scaling, times (1 + w).
  std::vector<float> x(64, 1024.0f), scale(64), out(64);
  for (int i = 0; i < 64; ++i) {
    x[i] = i % 2 ? -1024.0f : 1024.0f;
    scale[i] = 1.0f + 0.125f * static_cast<float>(i);
  }
  numerics::rms_norm(x.data(), 64, scale.data(), 1e-6f, out.data());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out[i], (i % 2 ? -1.0f : 1.0f) * scale[i]) << i;
}

TEST(Numerics, RmsNormMatchesDoubleReference) {
  testing::TinyRandom rng(2);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 1 + trial * 7;
    std::vector<float> x(n), scale(n), out(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = rng.uniform(10.0);
      scale[i] = 1.0f + rng.uniform(0.5);
    }
    numerics::rms_norm(x.data(), n, scale.data(), 1e-6f, out.data());
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * static_cast<double>(v);
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + 1e-6);
    for (int64_t i = 0; i < n; ++i) {
      const double expect = static_cast<double>(x[i]) * r * static_cast<double>(scale[i]);
      ASSERT_NEAR(out[i], expect, 4e-7 * std::fabs(expect) + 1e-30) << n << " " << i;
    }
  }
}

TEST(Numerics, L2NormOfOneHotIsExactlyOne) {
  // Toolkit P8: silu(128) = 128 one-hot -> sum 16384 (+1e-6 vanishes) -> exactly 1.
  std::vector<float> k(128, 0.0f);
  k[17] = silu(128.0f);
  numerics::l2norm(k.data(), 128);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(k[i], i == 17 ? 1.0f : 0.0f);
}

}  // namespace
}  // namespace qpu::engine
