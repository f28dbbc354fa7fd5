#pragma once
// The looped machine's "idle = zero" contract as an IR transform (docs/npu-machine.md,
// Decision 2026-11-30; docs/npu-units.md): a functional unit that is not used this
// cycle sees all-zero operands and flags and must write exact +-0 everywhere, so that
// the input-sparse engine skips all of it. The builders' neurons read the constant 1.0
// (kOne, the rail) in gates and ups; the rail is never zero, so such a neuron is always
// on and a constant term can make an idle unit write something. This transform makes
// the constant a value of the unit instead: `enable`, exactly 1 when the unit runs and
// exactly 0 when it is idle (e.g. the sum of its one-hot flags).
//
// enable == 1 changes nothing, bit for bit: the emitter (emit.h) writes a kOne term of
// weight c as c/8 in the rail's column, and the rail reaches the projection as exactly
// 2^(k+3) * 2^-k = 8, so the term is fl(8 * (c/8)) = c; a value term of weight c is
// written as c * 2^k and the value 1 reaches the projection as exactly 2^-k, so the
// term is fl(2^-k * (c * 2^k)) = c. Every term of every gate and up form is the same
// float as before, only in another column; the builders' forms are exact in any
// summation order (that is what HostSim checks), so every sum, every silu and every
// write is the same float.
//
// enable == 0 with every other value the unit reads equal to +-0: by induction over the
// unit's sublayers, every value is +-0 at the start of a sublayer, so every gate and up
// form is a sum of +-0 terms (+-0), silu(+-0) * (+-0) = +-0, every down sum is +-0, and
// the residual add onto a +-0 value leaves +-0 (+0 + -0 = +0). Memory ops (attention,
// GDN) are not touched: their flags are their own enable.
#include <cstddef>
#include <cstdint>

#include "compiler/ir.h"

namespace qpu::compiler {

// In every MLP neuron of ops [first_op, end), replaces the constant terms (kOne) of the
// gate and up forms by the value `enable`. Returns the number of terms replaced. Throws
// qpu::Error when `enable` is not a value of the program, or when a form already reads
// `enable` next to a constant (the emitter would add the two weights into one column:
// one rounding more).
int64_t enable_constants(Program& program, size_t first_op, ValueId enable);

}  // namespace qpu::compiler
