#pragma once
// glibc 2.36's expf (__expf_fma, the libm of this machine) as an exact NPU primitive,
// bit for bit for every float input in the value window (docs/npu-expf.md). The
// decomposition is the one of expf_model.cpp, op for op: base-512 fixed-point digits
// (exact integer sums in any order), carry ripples of floor_div_pow2, and a final
// rounding to the float grid (normal or subnormal) done on two exact float pieces.
#include "npu/primitives.h"

namespace qpu::npu {

// expf(x) == mant * 2^exponent exactly (mant a float in [0, 4), 0 or >= 2^-23; exponent an
// integer = floor(k / 32) for glibc's k, 0 outside the main path); overflow = 1 (and
// mant = exponent = 0) where libm returns +inf. Results below 2^-78 or above 2^36 cannot
// sit in the residual as they are (docs/npu.md: value window), hence the split form; a
// caller scales mant by 2^(exponent + S) over the exponent range it needs.
// Window: x = +-0 or |x| in [2^-78, 2^36] (a nonzero |x| < 2^-78 reads inexactly but
// stays tiny: all digits 0, result 1, as libm's).
struct ExpfResult {
  ValueId mant, exponent, overflow;
};
ExpfResult expf_parts(Program& p, ValueId x);

}  // namespace qpu::npu
