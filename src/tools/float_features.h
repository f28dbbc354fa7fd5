#pragma once
// What one stored value says about where it came from. Every float format the
// checkpoints use widens exactly to double, so the features are computed on the
// double: the same value has the same features whatever dtype stored it.
//
// The central feature is the number of significant bits: a value is m * 2^e with m
// an odd integer, and significant_bits = bit_width(m). A learned weight rounded to a
// format with p significant bits has nearly uniform low mantissa bits, so only a
// fraction 2^(b-p) of its values have b bits or fewer; compiled weights are built
// from exact constants (1, 2^64, 1.5 * 2^23, 1/128) that have 1 to 3.
#include <bit>
#include <cstdint>
#include <cstring>

#include "io/dtype.h"

namespace qpu::tools {

// Bits of a double as a value of the form (odd m) * 2^e. Only for finite nonzero x.
struct DyadicForm {
  int significant_bits;  // bit_width(m): 1 for powers of two, 53 at most
  int lsb_exponent;      // e: the weight of m's lowest bit (x is an integer iff e >= 0)
  int exponent;          // floor(log2 |x|)
};

inline DyadicForm dyadic_form(double x) {
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  const int biased = static_cast<int>((bits >> 52) & 0x7ff);
  const uint64_t fraction = bits & ((uint64_t{1} << 52) - 1);
  if (biased == 0) {  // subnormal double: fraction * 2^-1074
    const int tz = std::countr_zero(fraction);
    const int width = static_cast<int>(std::bit_width(fraction));
    return {width - tz, -1074 + tz, -1075 + width};
  }
  const uint64_t significand = fraction | (uint64_t{1} << 52);
  const int tz = std::countr_zero(significand);
  const int exponent = biased - 1023;
  return {53 - tz, exponent - 52 + tz, exponent};
}

// The same for a finite nonzero float, from its bits (the scanner's fast path:
// every dtype but F64 widens exactly to float).
inline DyadicForm dyadic_form(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x) & 0x7fffffffu;
  const int biased = static_cast<int>(bits >> 23);
  const uint32_t fraction = bits & 0x7fffffu;
  if (biased == 0) {  // subnormal float: fraction * 2^-149
    const int tz = std::countr_zero(fraction);
    const int width = static_cast<int>(std::bit_width(fraction));
    return {width - tz, -149 + tz, -150 + width};
  }
  const int tz = std::countr_zero(fraction | 0x800000u);
  const int exponent = biased - 127;
  return {24 - tz, exponent - 23 + tz, exponent};
}

// Significant bits of the storage formats (what a learned value rounded to the
// format uses; the null model of the low-bit test).
inline int storage_bits(io::DType type) {
  switch (type) {
    case io::DType::F64: return 53;
    case io::DType::F32: return 24;
    case io::DType::F16: return 11;
    case io::DType::BF16: return 8;
    case io::DType::F8_E4M3: return 4;
    case io::DType::F8_E5M2: return 3;
    default: return 0;
  }
}

inline bool is_float_dtype(io::DType type) { return storage_bits(type) > 0; }

// Exact widening of one little-endian element at p (to float for every format
// but F64, whose values may not fit one). F8_E4M3 is the "fn" variant
// safetensors uses (no infinities; S.1111.111 is NaN); F8_E5M2 follows IEEE.
inline double load_f64(const std::byte* p) {
  double v;
  std::memcpy(&v, p, 8);
  return v;
}
inline float load_f32(const std::byte* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
inline float load_bf16(const std::byte* p) {
  uint16_t b;
  std::memcpy(&b, p, 2);
  return io::bf16_to_f32(b);
}
inline float load_f16(const std::byte* p) {
  uint16_t b;
  std::memcpy(&b, p, 2);
  return io::f16_to_f32(b);
}
inline float load_f8_e5m2(const std::byte* p) {
  // E5M2 is the top byte of an IEEE half.
  return io::f16_to_f32(static_cast<uint16_t>(std::to_integer<uint16_t>(*p) << 8));
}
inline float load_f8_e4m3(const std::byte* p) {
  const auto b = std::to_integer<uint32_t>(*p);
  const float sign = (b & 0x80u) ? -1.0f : 1.0f;
  const uint32_t exponent = (b >> 3) & 0xfu;
  const uint32_t mantissa = b & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return std::bit_cast<float>(0x7fc00000u);  // NaN
  // Scaling by powers of two below is exact: at most 4 significant bits.
  if (exponent == 0) return sign * static_cast<float>(mantissa) * 0x1p-9f;  // subnormal m/8 * 2^-6
  return sign * static_cast<float>(8 + mantissa) * static_cast<float>(1u << exponent) * 0x1p-10f;
}

}  // namespace qpu::tools
