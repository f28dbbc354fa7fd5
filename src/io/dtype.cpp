#include "io/dtype.h"

#include <array>
#include <bit>
#include <utility>

namespace qpu::io {

namespace {

struct DTypeInfo {
  DType type;
  const char* name;
  uint64_t size;
};

constexpr std::array<DTypeInfo, 15> kDTypes{{
    {DType::F64, "F64", 8},         {DType::F32, "F32", 4},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},       {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::I64, "I64", 8},         {DType::I32, "I32", 4},         {DType::I16, "I16", 2},
    {DType::I8, "I8", 1},           {DType::U64, "U64", 8},         {DType::U32, "U32", 4},
    {DType::U16, "U16", 2},         {DType::U8, "U8", 1},           {DType::BOOL, "BOOL", 1},
}};

// The table is in enum order, so the enum value is the index.
const DTypeInfo& info(DType type) { return kDTypes[static_cast<size_t>(type)]; }

}  // namespace

const char* dtype_name(DType type) { return info(type).name; }
uint64_t dtype_size(DType type) { return info(type).size; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& entry : kDTypes) {
    if (name == entry.name) return entry.type;
  }
  return std::nullopt;
}

bool is_float_weight_dtype(DType type) {
  return type == DType::F32 || type == DType::BF16 || type == DType::F16;
}

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13);  // inf, or NaN with its payload
  } else if (exponent != 0) {
    out = sign | ((exponent + 112u) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else if (mantissa == 0) {
    out = sign;  // +-0
  } else {
    // Subnormal half m * 2^-24: normalise so the leading 1 sits at bit 10.
    int32_t e = -14;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    out = sign | (static_cast<uint32_t>(e + 127) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(out);
}

std::optional<uint16_t> f32_to_bf16_exact(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0xffffu) != 0) return std::nullopt;
  return static_cast<uint16_t>(bits >> 16);
}

std::optional<uint16_t> f32_to_f16_exact(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t exponent = (bits >> 23) & 0xffu;
  const uint32_t mantissa = bits & 0x7fffffu;
  std::optional<uint16_t> candidate;
  if (exponent == 0xff) {
    candidate = static_cast<uint16_t>(sign | 0x7c00u | (mantissa >> 13));
  } else if (exponent == 0 && mantissa == 0) {
    candidate = sign;
  } else {
    const int32_t e = static_cast<int32_t>(exponent) - 127;
    if (e > 15 || e < -24) return std::nullopt;
    if (e >= -14) {
      candidate = static_cast<uint16_t>(sign | static_cast<uint32_t>(e + 15) << 10 | (mantissa >> 13));
    } else {
      // Subnormal half k * 2^-24: the float is (0x800000 | m) * 2^(e-23), so k is that
      // integer shifted right by (e-23) - (-24) = -1-e bits (dropped bits fail the check below).
      const uint32_t full = 0x800000u | mantissa;
      candidate = static_cast<uint16_t>(sign | (full >> (-1 - e)));
    }
  }
  // Exact means the way back gives the same bits (this also rejects rounding and lost NaN payloads).
  if (std::bit_cast<uint32_t>(f16_to_f32(*candidate)) != bits) return std::nullopt;
  return candidate;
}

}  // namespace qpu::io
