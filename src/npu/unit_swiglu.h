#pragma once
// The nested model's SwiGLU activation as one exact NPU unit (one lane per call), and
// the helper that makes a unit idle-safe. run.c, per lane i of the FFN:
//
//   float val = hb[i];
//   val *= (1.0f / (1.0f + expf(-val)));   // t = expf(-val); d = 1 + t; r = 1 / d; val *= r
//   val *= hb2[i];
//
// The unit commits exactly these roundings (docs/npu-units.md, "SwiGLU unit"):
// expf through expf_parts (t = mant * 2^e), d = fl(1 + t) and the division 1/d are
// done on the exactly rescaled d' = d * 2^-s, s = max(e, 0), which lies in [0.5, 4)
// for every input (so the correctly rounded division has a 3-binade window), and
// r * val = fl(r' * (val * 2^-s)) with both power-of-two scalings exact.
//
// Window (exact, bit for bit with run.c as delivered through a residual add):
//   hb = +-0, or hb in [-43, -2^-55] or [2^-55, 2^36], or hb in [-2^36, -0x1.62e42ep+6)
//   (there expf(-hb) = +inf in C and the result is C's -0, delivered as +0);
//   hb2 any value with fl(silu * hb2) = 0 or normal (and in the value window
//   [2^-78, 2^36] if a later op reads it). stories260K's traces: |hb|, |hb2| in
//   [2^-25, 6.55] (docs/trace-ranges.md, kinds hb and hb2).
// Outside it: hb in (-0x1.62e42ep+6, -43) makes silu smaller than the gate window of
// the last multiply (2^-57) or e > 62 (the unit then returns +0); |hb| < 2^-55 makes
// the last product inexact (silu is below its gate window).
#include <vector>

#include "compiler/ir.h"

namespace qpu::npu {

struct SwigluResult {
  compiler::ValueId silu;  // run.c's val after `val *= 1 / (1 + expf(-val))`
  compiler::ValueId out;   // after `val *= hb2[i]`: the value run.c stores in hb[i]
};

// One lane. `enable` is a value that is exactly 1 on cycles that use the unit and
// exactly 0 otherwise (compiler::kOne: always on); every constant term of the unit's
// neurons reads it (compiler::enable_constants), so with enable 0 and hb = hb2 = 0 the
// unit writes only exact +-0 into every value it owns.
SwigluResult swiglu(compiler::Program& p, compiler::ValueId hb, compiler::ValueId hb2,
                    compiler::ValueId enable = compiler::kOne);

// Many lanes (each with its own ops; the scheduler runs them side by side).
std::vector<SwigluResult> swiglu_lanes(compiler::Program& p, const std::vector<compiler::ValueId>& hb,
                                       const std::vector<compiler::ValueId>& hb2,
                                       compiler::ValueId enable = compiler::kOne);

}  // namespace qpu::npu
