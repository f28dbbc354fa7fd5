#pragma once
// glibc 2.36's expf (__expf_fma, /work/shared/docs/glibc-expf.md) as the NPU computes it,
// written one C operation per NPU op: float operations where the NPU commits a float
// rounding, exact integer arithmetic where the NPU sums small integers (exact in any
// order: every such sum is checked against its bound here). src/npu/expf.cpp builds the
// same decomposition from the primitives; docs/npu-expf.md explains it.
//
// Output contract (the NPU's value window cannot hold expf's whole range): a float
// mantissa `mant` and an integer exponent `exponent` with expf(x) == mant * 2^exponent
// exactly (mant in [0, 4): 0 or >= 2^-23), plus `overflow` (1 when expf(x) == +inf;
// then mant = exponent = 0). exponent = floor(k / 32) for glibc's k on its main path,
// 0 outside it (x > 0x1.62e42ep+6 or x < -0x1.9fe368p+6, where mant = 0).
#include <array>
#include <cstdint>
#include <vector>

namespace qpu::npu {

struct ExpfParts {
  float mant = 0.0f;
  int exponent = 0;
  bool overflow = false;
};

// The NPU decomposition in C. `bound_violations` (optional) counts sums that would not be
// exact on the NPU (an integer form outside its bound, a float that should be exact but
// is not); the exhaustive check requires 0. use_exceptions = false gives the bare
// decomposition (without the exception list), for the test that every entry is needed.
ExpfParts expf_model(float x, int64_t* bound_violations = nullptr, bool use_exceptions = true);

// What libm's expf gives, in the same form (glibc's k from its own fma step).
ExpfParts expf_reference_parts(float x);

// mant * 2^exponent as a float (+inf when overflow).
float expf_from_parts(const ExpfParts& p);

namespace expf_detail {

inline constexpr int kDigitBits = 9;  // every fixed-point number is base-512 digits
inline constexpr int64_t kRadix = 512;
// Digit position c has weight 2^(-9c).
inline constexpr int kXDigits = 7;     // x at c = 0..6 (down to 2^-54; x's ulp >= 2^-49 when it matters)
inline constexpr int kPCols = 13;      // InvLn2N * x, c = 0..12, exact
inline constexpr int kRDigits = 7;     // r = P - k at c = 1..7 (truncated below 2^-63)
inline constexpr int kCols = 11;       // r^2, w, y, y*T kept to c <= 10 (2^-90)

// glibc's constants (exact doubles) and the table 2^(j/32).
double inv_ln2n();
double poly_c(int i);  // C[0], C[1], C[2]
double table(int j);   // T[j] + (j << 47) as a double: 2^(j/32) rounded
// Exact base-512 digits of a positive double c: c == sum d[i] 2^(-9 i), i = 0..cmax
// (throws if cmax is too small to hold c exactly).
std::vector<int64_t> const_digits(double c, int cmax);

// The special-case thresholds of glibc's slow path.
inline constexpr float kOverflowAbove = 0x1.62e42ep+6f;    // x > this: +inf
inline constexpr float kUnderflowBelow = -0x1.9fe368p+6f;  // x < this: +0

// Inputs where the decomposition's final float differs from libm (its double roundings are
// not emulated: see docs/npu-expf.md); the NPU answers them from this list. Found by the
// exhaustive check over every float.
struct Exception {
  float x;
  float mant;  // libm's expf(x) / 2^exponent
};
const std::vector<Exception>& exceptions();

}  // namespace expf_detail
}  // namespace qpu::npu
