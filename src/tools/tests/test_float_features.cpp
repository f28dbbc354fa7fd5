// The per-value features, checked against values whose binary form is known by
// construction (m * 2^e with m odd).
#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "tools/float_features.h"

namespace qpu::tools {
namespace {

TEST(DyadicForm, KnownValues) {
  struct Case {
    double x;
    int bits, lsb, exponent;
  };
  const Case cases[] = {
      {1.0, 1, 0, 0},
      {-1.0, 1, 0, 0},
      {1.5, 2, -1, 0},          // 3 * 2^-1
      {3.0, 2, 0, 1},
      {0x1p64, 1, 64, 64},
      {0x1p-64, 1, -64, -64},
      {0x1p112, 1, 112, 112},
      {12582912.0, 2, 22, 23},  // 1.5 * 2^23 = 3 * 2^22
      {4097.0, 13, 0, 12},
      {-200.0, 5, 3, 7},        // 25 * 2^3
      {0.75, 2, -2, -1},
      {static_cast<double>(0.1f), 24, -27, -4},  // 0x1.99999ap-4: odd 24-bit significand
      {0x1p-149, 1, -149, -149},                 // smallest float subnormal (a normal double)
      {0x1p-1074, 1, -1074, -1074},              // smallest double subnormal
      {3 * 0x1p-1074, 2, -1074, -1073},
  };
  for (const Case& c : cases) {
    const DyadicForm f = dyadic_form(c.x);
    EXPECT_EQ(f.significant_bits, c.bits) << c.x;
    EXPECT_EQ(f.lsb_exponent, c.lsb) << c.x;
    EXPECT_EQ(f.exponent, c.exponent) << c.x;
  }
}

// For random odd m and exponent e, m * 2^e must come back exactly.
TEST(DyadicForm, RandomOddTimesPowerOfTwo) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 100000; ++i) {
    const int width = 1 + static_cast<int>(rng() % 53);
    uint64_t m = (rng() & ((uint64_t{1} << width) - 1)) | (uint64_t{1} << (width - 1)) | 1;
    if (width == 1) m = 1;
    const int e = static_cast<int>(rng() % 1800) - 1000;
    const double x = std::ldexp(static_cast<double>(m), e);
    if (x == 0 || !std::isfinite(x)) continue;
    const DyadicForm f = dyadic_form(x);
    if (std::fpclassify(x) == FP_SUBNORMAL) continue;  // low bits may have been cut; covered above
    ASSERT_EQ(f.significant_bits, width) << m << " " << e;
    ASSERT_EQ(f.lsb_exponent, e) << m << " " << e;
    ASSERT_EQ(f.exponent, e + width - 1);
  }
}

// The float fast path agrees with the double definition on every kind of float.
TEST(DyadicForm, FloatPathEqualsDoublePath) {
  std::mt19937_64 rng(12);
  auto check = [](uint32_t bits) {
    const float x = std::bit_cast<float>(bits);
    if (x == 0 || !std::isfinite(x)) return;
    const DyadicForm a = dyadic_form(x), b = dyadic_form(static_cast<double>(x));
    ASSERT_EQ(a.significant_bits, b.significant_bits) << bits;
    ASSERT_EQ(a.lsb_exponent, b.lsb_exponent) << bits;
    ASSERT_EQ(a.exponent, b.exponent) << bits;
  };
  for (uint32_t b = 0; b < (1u << 16); ++b) {
    check(b);                 // subnormals with few bits
    check(b << 16);           // every bf16 pattern
    check(0x007f0000u | b);   // subnormals with many bits
  }
  for (int i = 0; i < 1000000; ++i) check(static_cast<uint32_t>(rng()));
}

TEST(Loaders, EveryBf16AndF16PatternMatchesIo) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    std::byte raw[2];
    std::memcpy(raw, &bits, 2);
    const float bf = load_bf16(raw), h = load_f16(raw);
    const float bf_ref = io::bf16_to_f32(bits), h_ref = io::f16_to_f32(bits);
    if (std::isnan(bf_ref)) {
      EXPECT_TRUE(std::isnan(bf));
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(bf), std::bit_cast<uint32_t>(bf_ref));
    }
    if (std::isnan(h_ref)) {
      EXPECT_TRUE(std::isnan(h));
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(h), std::bit_cast<uint32_t>(h_ref));
    }
  }
}

// FP8 values from their definitions (OCP FP8: E4M3 "fn" bias 7, E5M2 bias 15).
TEST(Loaders, Fp8) {
  auto e4m3 = [](uint8_t b) {
    std::byte raw{b};
    return static_cast<double>(load_f8_e4m3(&raw));
  };
  auto e5m2 = [](uint8_t b) {
    std::byte raw{b};
    return static_cast<double>(load_f8_e5m2(&raw));
  };
  EXPECT_EQ(e4m3(0x00), 0.0);
  EXPECT_EQ(e4m3(0x38), 1.0);      // e=7, m=0
  EXPECT_EQ(e4m3(0x7e), 448.0);    // max
  EXPECT_EQ(e4m3(0xfe), -448.0);
  EXPECT_EQ(e4m3(0x01), 0x1p-9);   // smallest subnormal
  EXPECT_EQ(e4m3(0x3c), 1.5);
  EXPECT_TRUE(std::isnan(e4m3(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3(0xff)));
  EXPECT_EQ(e5m2(0x3c), 1.0);
  EXPECT_EQ(e5m2(0x7b), 57344.0);  // max
  EXPECT_EQ(e5m2(0x01), 0x1p-16);
  EXPECT_TRUE(std::isinf(e5m2(0x7c)));
  // Every E4M3 value has at most 4 significant bits.
  for (int b = 0; b < 256; ++b) {
    const double x = e4m3(static_cast<uint8_t>(b));
    if (x == 0 || std::isnan(x)) continue;
    EXPECT_LE(dyadic_form(x).significant_bits, 4) << b;
  }
}

}  // namespace
}  // namespace qpu::tools
