// Exact float conversions, checked exhaustively over all 2^16 half/bfloat16 bit
// patterns against independent references (the compiler's own _Float16, and the
// value formula evaluated in double).
#include <bit>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "common/float_bits.h"
#include "io/dtype.h"

namespace qpu::io {
namespace {

// Value of a binary16 pattern from its definition, in double (exact).
double half_value(uint16_t bits) {
  const int sign = (bits & 0x8000) ? -1 : 1;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) return mantissa ? std::nan("") : sign * HUGE_VAL;
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

TEST(DType, NamesAndSizes) {
  EXPECT_EQ(parse_dtype("BF16"), DType::BF16);
  EXPECT_EQ(parse_dtype("F8_E5M2"), DType::F8_E5M2);
  EXPECT_FALSE(parse_dtype("bf16").has_value());
  EXPECT_FALSE(parse_dtype("F12").has_value());
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::BOOL), 1u);
  EXPECT_STREQ(dtype_name(DType::U16), "U16");
  for (const char* name : {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I64", "I32", "I16", "I8", "U64", "U32",
                           "U16", "U8", "BOOL"}) {
    ASSERT_TRUE(parse_dtype(name).has_value()) << name;
    EXPECT_STREQ(dtype_name(*parse_dtype(name)), name);
  }
  EXPECT_TRUE(is_float_weight_dtype(DType::F16));
  EXPECT_FALSE(is_float_weight_dtype(DType::F64));
}

TEST(DType, HalfWideningMatchesDefinitionForAllPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float widened = f16_to_f32(bits);
    const double value = half_value(bits);
    if (std::isnan(value)) {
      // NaN: sign and the 10-bit payload move to the top of the float's mantissa.
      EXPECT_EQ(float_bits(widened), ((b & 0x8000u) << 16) | 0x7f800000u | ((b & 0x3ffu) << 13)) << b;
    } else {
      EXPECT_EQ(static_cast<double>(widened), value) << b;
      EXPECT_EQ(std::signbit(widened), (b & 0x8000u) != 0) << b;
    }
#ifdef __FLT16_MAX__
    if (!std::isnan(value)) {
      EXPECT_EQ(float_bits(widened), float_bits(static_cast<float>(std::bit_cast<_Float16>(bits)))) << b;
    }
#endif
  }
}

TEST(DType, NarrowingRoundTripsEveryPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    EXPECT_EQ(f32_to_f16_exact(f16_to_f32(bits)), bits) << b;
    EXPECT_EQ(float_bits(bf16_to_f32(bits)), b << 16) << b;
    EXPECT_EQ(f32_to_bf16_exact(bf16_to_f32(bits)), bits) << b;
  }
}

TEST(DType, NarrowingRefusesToRound) {
  EXPECT_FALSE(f32_to_f16_exact(1.0f + 0x1p-11f).has_value());  // between two halves
  EXPECT_FALSE(f32_to_f16_exact(65520.0f).has_value());         // would round to inf
  EXPECT_FALSE(f32_to_f16_exact(0x1p-25f).has_value());         // below the smallest subnormal
  EXPECT_FALSE(f32_to_f16_exact(3 * 0x1p-25f).has_value());
  EXPECT_FALSE(f32_to_f16_exact(0x1p16f).has_value());
  EXPECT_FALSE(f32_to_f16_exact(float_from_bits(0x7f800001u)).has_value());  // payload lost
  EXPECT_EQ(f32_to_f16_exact(0x1p-24f), uint16_t{0x0001});
  EXPECT_EQ(f32_to_f16_exact(-0x1p-14f), uint16_t{0x8400});
  EXPECT_EQ(f32_to_f16_exact(65504.0f), uint16_t{0x7bff});
  EXPECT_EQ(f32_to_f16_exact(-0.0f), uint16_t{0x8000});
  EXPECT_EQ(f32_to_f16_exact(INFINITY), uint16_t{0x7c00});
  EXPECT_FALSE(f32_to_bf16_exact(1.0f + 0x1p-8f).has_value());
  EXPECT_FALSE(f32_to_bf16_exact(float_from_bits(0x7fc00001u)).has_value());
  EXPECT_EQ(f32_to_bf16_exact(-2.0f), uint16_t{0xc000});
}

TEST(DType, RandomFloatsNarrowExactlyWhenRepresentable) {
  std::mt19937 rng(12345);
  int f16_exact = 0, bf16_exact = 0;
  for (int i = 0; i < 200000; ++i) {
    // Mix of arbitrary patterns and patterns with few mantissa bits (often representable).
    auto bits = static_cast<uint32_t>(rng());
    if (i % 2) bits &= 0xffffe000u;  // clears what a half cannot hold below the normal range
    if (i % 4 == 1) bits = (bits & 0x80000000u) | (static_cast<uint32_t>(rng() % 60 + 97) << 23) | (bits & 0x007fe000u);  // 2^-30..2^29
    const float x = float_from_bits(bits);
    const auto h = f32_to_f16_exact(x);
    if (h) {
      ++f16_exact;
      EXPECT_EQ(float_bits(f16_to_f32(*h)), bits);
    }
#ifdef __FLT16_MAX__
    if (!std::isnan(x)) {
      const bool representable = float_bits(static_cast<float>(static_cast<_Float16>(x))) == bits;
      EXPECT_EQ(h.has_value(), representable) << describe_float(x);
    }
#endif
    const auto b = f32_to_bf16_exact(x);
    EXPECT_EQ(b.has_value(), (bits & 0xffffu) == 0);
    if (b) ++bf16_exact;
  }
  EXPECT_GT(f16_exact, 10000);
  EXPECT_GT(bf16_exact, 10000);
}

}  // namespace
}  // namespace qpu::io
