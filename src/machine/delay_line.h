#pragma once
// The delay line: the looped machine's way to emit a token one, two or three cycles
// after the cycle that computed it (docs/npu-machine.md, "M1 skeleton").
//
// A micro-op computes, on its own cycle t, the LM head features of all three parts
// p0, p1, p2 of its result and of its successor control token, but the host emits one
// token per cycle. Qwen3.5's causal conv1d (kernel 4) gives a GDN layer the layer input
// of tokens t-1, t-2, t-3: a GDN memory whose data columns take p1's features at tap 1,
// p2's at tap 2 and the successor's at tap 3, writes row 0 on EVERY cycle (constant
// write flag, no address bits) and reads row 0 on every cycle (the read sees this
// cycle's write) hands cycle t's p1 features to cycle t+1, p2's to t+2 and the
// successor to t+3. Its out columns add into the LM head's feature values.
//
// A feature is 0 or its unit 2^u (npu::emit_features' mantissa one-hot is 2^-7, the
// other features 1); its cell is feature·2^(7 - u) (data exponent 7 - u): 0 or 128, exact
// through silu and on every overwrite (128 - 0, 0 - 128, 128 + (-128)), decoded back to
// exactly 0 or the unit (docs/npu-gdn-memory.md). A cell of 1 (the unit 2^-7 stored
// with exponent 7) would not be: silu(1) = 0.73. At most one column adds a nonzero term into
// any out value on any cycle (the caller's contract: features of different delays are
// never live on the same cycle for the same out value), so the adds are exact.
//
// Columns are packed into as many heads as the row capacity needs, one data exponent
// per head (so per unit); all columns that add into one out value stay in one head, because two ops never share a destination
// inside one sublayer (ir.h) and all heads of the line sit in one mixer.
#include <string>
#include <vector>

#include "compiler/ir.h"

namespace qpu::machine {

struct DelayColumn {
  compiler::ValueId source;  // a feature (0 or `unit`) computed at cycle t - tap
  int tap = 1;               // 0..3
  compiler::ValueId dest;    // out value it adds into at cycle t
  int unit_exponent = 0;     // the feature's nonzero value is 2^unit_exponent (its cell 2^7 = 128)
};

// Appends the heads; returns how many. capacity = data columns per head (GdnLayout).
int delay_line(compiler::Program& p, const std::vector<DelayColumn>& columns, int64_t capacity,
               const std::string& label);

}  // namespace qpu::machine
