#pragma once
// safetensors element types and the exact conversions between the float ones.
// Only F32, BF16 and F16 can be loaded as weights (every value of those widens to
// fp32 exactly); the others are recognised so that listings can describe any file.
#include <cstdint>
#include <optional>
#include <string_view>

namespace qpu::io {

enum class DType { F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U64, U32, U16, U8, BOOL };

const char* dtype_name(DType type);                           // "F32", "BF16", ...
std::optional<DType> parse_dtype(std::string_view name);      // the safetensors spelling
uint64_t dtype_size(DType type);                              // bytes per element
bool is_float_weight_dtype(DType type);                       // F32, BF16 or F16

// Widening is exact for every bit pattern. NaN payloads and signs are kept
// (a half NaN's 10-bit payload becomes the top 10 of the float's 23 bits).
inline float bf16_to_f32(uint16_t bits);
float f16_to_f32(uint16_t bits);

// Narrowing succeeds only when the float is exactly representable (NaNs: when the
// payload survives the round trip); otherwise std::nullopt. Never rounds.
std::optional<uint16_t> f32_to_bf16_exact(float value);
std::optional<uint16_t> f32_to_f16_exact(float value);

}  // namespace qpu::io

#include <bit>

inline float qpu::io::bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}
