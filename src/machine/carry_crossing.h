#pragma once
// A carry crossing: how a chain cut into segments hands its running value to the next
// segment's cycle (docs/npu-machine.md, "Chains in segments").
//
// By the depth law a value computed deep in cycle c reaches the top of cycle c + 1 only
// through the output token: the uplink (npu/uplink.h) sends a float when it is +-0 or
// |x| in [2^-47, 2^20), 67 binades. A chain's running value (a sum, a weighted sum in its
// tier encoding) is any value of the residual window, +-0 or |x| in [2^-78, 2^36): 114
// binades. So it crosses as two floats, one of them +0:
//
//   high = x 2^-17   when |x| >= 2^-30   in [2^-47, 2^19)
//   low  = x 2^31    when |x| <  2^-30   in [2^-47, 2^1)
//
// and the reader adds them back, x = high 2^17 + low 2^-31: two terms of which one is +-0
// (exact in any order), each an exact power-of-two scaling.
//
// The split, three MLP sublayers (the wide float RAM's tier test, machine/wide_float_ram.h,
// at this bound; no rounding anywhere):
//
//   y    = (silu(2^62 (x - T)) + silu(2^62 (-x - T))) 2^-64,  T = pred(2^-30) = 2^-30 - 2^-54
//          |x| >= 2^-30: |x| - T >= 2^-54, so one gate is >= 2^8 (silu's identity range)
//          and the other <= -2^32; y in [2^-56, 2^34). |x| <= T: |x| - T is 0 or <= -2^-54
//          (one ulp of binade -31, the largest below 2^-30), so both gates are 0 or
//          <= -2^8 (silu -0): y = +0. The gates' two terms round once: 2^62 fl(x - T).
//   low_tier = silu(128 - 2^65 y) / 128   exactly 1 (y = 0) or +0 (the gate <= -384)
//   low  = silu(128 low_tier) x 2^24 / 128,  high = silu(128 - 128 low_tier) x 2^-24 / 128
//
// Idle: every constant of the three sublayers reads `enable` (compiler::enable_constants):
// enable 0 and x = 0 write only +-0. x = +-0 with enable 1 gives high = low = +0.
#include <cstddef>
#include <string>

#include "compiler/ir.h"

namespace qpu::machine {

struct CarryParts {
  compiler::ValueId high = 0, low = 0;  // the two floats that cross (one of them +0)
  size_t first_op = 0;                  // the split's ops: [first_op, the program's end)
};

// The split of x (a value of the residual window) into the two floats that cross.
CarryParts carry_split(compiler::Program& p, compiler::ValueId x, compiler::ValueId enable, const std::string& label);

// For a chain that may cross one float only (a cheaper crossing) and stops where that
// would not carry it exactly: the high float of carry_split, and below = [0 < |x| < 2^-30]
// (exactly 0 or 1: x needs the low float). Seven MLP sublayers.
struct OneFloatCarry {
  compiler::ValueId high = 0, below = 0;
};
OneFloatCarry carry_split_one(compiler::Program& p, compiler::ValueId x, compiler::ValueId enable, const std::string& label);

// x again from the two crossed floats (e.g. read from two registers): one MLP sublayer,
// two neurons gated by `enable` (exactly 0 or 1; high and low +-0 when it is 0).
compiler::ValueId carry_join(compiler::Program& p, compiler::ValueId high, compiler::ValueId low,
                             compiler::ValueId enable, const std::string& label);

// The same in C: the floats that cross for x (+0 for -0), and x from them.
float carry_high_reference(float x);
float carry_low_reference(float x);
float carry_join_reference(float high, float low);
// True for what the crossing carries exactly: +-0 and |x| in [2^-78, 2^36).
bool carry_crossing_holds(float x);

}  // namespace qpu::machine
