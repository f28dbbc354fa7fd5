#pragma once
// A float RAM as wide as the uplink (npu/uplink.h: a float crosses up exactly when it is
// +-0 or |x| in [2^-47, 2^20)), for a machine that writes a vector down instead of
// sending it up: the token machine's X1 RAM (ATTO(l) writes x + wo xb, SW(l) and FFN(l)
// read it on later cycles; machine/token_machine.h).
//
// One float RAM window holds 37 binades (npu/float_ram.h); the uplink's window is 67. So
// every float goes to one of two tiers, both read into the same out value:
//
//   high tier  window [2^-17, 2^20) (low binade -17)  holds x when |x| >  2^-12
//   low tier   window [2^-47, 2^-10) (low binade -47) holds x when |x| <= 2^-12
//
// and the other tier gets +0 (a +-0 row reads +0, exact in any order). So the RAM holds
// EXACTLY +-0 (read back as +0) and every |x| in [2^-47, 2^20), the uplink's window; a
// nonzero |x| below 2^-47 or at or above 2^20 is outside both (as it is outside the
// uplink's). The tier test, per float, three MLP sublayers (no rounding anywhere):
//
//   y    = (silu(2^44 (x - 2^-12)) + silu(2^44 (-x - 2^-12))) 2^-30
//          |x| > 2^-12: |x| - 2^-12 >= 2^-35 (one ulp of binade -12), so one gate is
//          >= 2^9 (silu's identity range), the other <= -2^32, and y in [2^-21, 2^34)
//          (|x| < 2^20); |x| <= 2^-12: 2^-12 - |x| is 0 or >= 2^-36 (one ulp of binade
//          -13), so both gates are 0 or <= -2^8 (silu -0): y = +0.
//   low  = silu(128 - 2^30 y) / 128       exactly 1 (y = 0) or +0 (the gate <= -384)
//   lo   = silu(128 low) x / 128,  hi = silu(128 - 128 low) x / 128, and their negations
//          (the RAM's second column, npu::FloatRamHead::negated: no negation op)
//
// Idle: every constant of the three sublayers is `enable` (compiler::enable_constants):
// enable 0 and x = 0 write only +-0.
#include <cstddef>
#include <string>
#include <vector>

#include "compiler/ir.h"

namespace qpu::machine {

struct WideFloatRam {
  static constexpr int kHighLowBinade = -17, kLowLowBinade = -47;
  static constexpr float kTierBound = 0x1p-12f;  // |x| <= this: the low tier
  std::vector<compiler::ValueId> out;  // the floats read (+0 when `read` is 0)
  size_t first_op = 0;                 // the tier test's first op
  size_t tiers_end = 0;                // the tier test's ops end here, the memories follow
};

// Appends the tier test and the two tiers' memories. x: the floats (one row of each
// tier, in heads of at most `per_row` floats, npu::floats_per_row). `store` (0/1) wipes
// and writes every head at once; `read` (0/1) adds the row into `out`. `enable`: 1 when
// x is computed this cycle, else 0 (x is then +-0). Throws qpu::Error for an empty x or
// per_row < 1.
WideFloatRam wide_float_ram(compiler::Program& p, const std::vector<compiler::ValueId>& x, compiler::ValueId enable,
                            compiler::ValueId store, compiler::ValueId read, int per_row, const std::string& label);

// True for what the RAM reads back bit for bit: +-0 (as +0) and |x| in [2^-47, 2^20).
bool wide_float_ram_holds(float x);

}  // namespace qpu::machine
