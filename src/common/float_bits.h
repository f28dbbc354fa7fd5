#pragma once
// Bit-level views of floats: bit-exact comparisons are done on these, never on
// float equality (which treats -0 == +0 and NaN != NaN).
#include <bit>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace qpu {

inline uint32_t float_bits(float x) { return std::bit_cast<uint32_t>(x); }
inline float float_from_bits(uint32_t b) { return std::bit_cast<float>(b); }
// +0 and nothing else (-0 is a value: a stored -0 weight, a listed -0 entry).
inline bool is_plus_zero(float x) { return float_bits(x) == 0; }

// "0x1.99999ap-1 (0x3f4ccccd)": exact value and bit pattern, for error messages.
inline std::string describe_float(float x) {
  return fmt::format("{:a} (0x{:08x})", static_cast<double>(x), float_bits(x));
}

}  // namespace qpu
