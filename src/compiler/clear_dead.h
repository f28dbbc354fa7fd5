#pragma once
// Dim reuse, the transform half: after the last read of a dead value, clear it to
// exactly +0 so that allocate(program, schedule, lifetimes) may give its residual dim
// to a value that starts later (docs/npu.md, "The compiler core", step 3).
//
// The clear of v is one neuron appended to the program as its own MLP op:
//   gate = 128 (the constant), up = -v/128, down = +1 into v.
// The scheduler puts it in the first MLP sublayer not before v's last read and after
// v's last write (the WAR/RAW rules of ir.h; a read by a memory op moves it to a later
// MLP sublayer, and other ops in v's last-read MLP see v as it was at its start, like
// the clear). Appending keeps the schedule of every original op as it was: ops are
// placed in program order and a clear only uses room left in a sublayer. The next
// value on the dim starts in a strictly later sublayer, so its first write never meets
// the clear in one down sum.
//
// Exactness (value window of emit.h: |v| in [2^(k-126), 2^(k-12)] or v = +-0):
//  * v nonzero: the up row has one nonzero weight, -2^k/128 on v's dim, which arrives
//    as v * 2^-k exactly, so up = -v/128 exactly (the other products are +-0);
//    silu(128) == 128 in fp32 and 128 * (-v/128) == -v; the down row adds 1 * -v and
//    +-0 terms: -v. The residual add v + (-v) is +0 (an exact zero sum in round to
//    nearest is +0).
//  * v == -0: the up product is (-2^k/128) * (-0) = +0, a sum with a +0 term is +0,
//    so the neuron adds +0 and -0 + +0 = +0. v == +0: +0 + (+-0) = +0. (Only inputs
//    can be -0 in the first place: a value starts at +0 and +0 + y is never -0.)
//  * Afterwards every sublayer adds a +-0 to the dim (ops of other values have weight
//    0 there) and +0 + +-0 = +0, until the next value's first write.
// So the window condition is needed only for v's final value. It holds for every
// value whose final value some op reads (the op builders' contract), which is why a
// value is cleared only when its last read comes after its last write. A value whose
// last write is never read (its final value may be anything) keeps its dim from its
// first access on; a value that is never written is +0 all along and needs no clear.
// Interface inputs keep their dims for the whole program, outputs (and values whose
// last write is never read) from their first access on.
#include <cstdint>
#include <vector>

#include "compiler/allocate.h"
#include "compiler/emit.h"
#include "compiler/ir.h"
#include "compiler/schedule.h"

namespace qpu::compiler {

struct DeadClears {
  Program program;                 // the input program, then one clear op per cleared value
  std::vector<Lifetime> lifetimes;  // per value, for allocate()
  std::vector<ValueId> cleared;    // the value of each clear op, in op order
};

DeadClears add_dead_value_clears(const Program& program, const Interface& interface);

// Stages 1-3 with dim reuse: validate, add_dead_value_clears, schedule, interval
// allocation. A clear only takes room the program's MLPs already have (the neuron
// limit is lowered to the largest MLP of the plain schedule), and a clear that would
// then land after the last sublayer of the plain schedule is dropped (its value keeps
// its dim from its first access on). So the original ops keep their sublayers and the
// layer count, intermediate size and heads stay as in compile(); only the hidden size
// shrinks (it never grows: a value never needs more than one dim).
// With limits.sink, the original ops are first moved as late as useful
// (schedule.h, sink_schedule: same length, same limits) and the clears placed after
// that: values start living just above their readers. Measured on the units
// (docs/npu-machine.md, "The width budget"): rmsnorm 320 -> 256 dims, 172 SwiGLU lanes
// 35,840 -> 17,536, the FFN block 38,720 -> 20,224.
struct ReusePlan {
  Program program;  // what is scheduled: the input program plus its clears
  std::vector<Lifetime> lifetimes;
  Schedule schedule;
  Allocation allocation;
};
ReusePlan plan_dim_reuse(const Program& program, const Interface& interface, const ScheduleLimits& limits = {});

struct CompiledWithReuse {
  Program program;  // ReusePlan::program
  Compiled compiled;
};

// compile() with dim reuse: plan_dim_reuse, then emit. Computes the same outputs as
// compile(), bit for bit, in fewer residual dims; values that are dead at the end no
// longer hold their final contents in the final residual stream.
CompiledWithReuse compile_reusing_dims(const Program& program, const Interface& interface,
                                       const ScheduleLimits& limits = {}, const EmitOptions& options = {});

}  // namespace qpu::compiler
