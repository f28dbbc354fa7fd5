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
// value is cleared only when its last read comes after its last write. A value that is
// never written is +0 all along and needs no clear. Interface inputs keep their dims
// for the whole program (unless clear_inputs, below), outputs and the values of
// DeadClearOptions::keep from their first access on (never cleared: the final
// residual stream holds their final values, e.g. for an LM head row that reads them).
//
// Self-clearing values. A value whose last write is never read keeps its dim from its
// first access on (its final value may be anything), unless that last write is an
// exact clear of itself, recognised structurally: the op (an MLP) has exactly one down
// term into v, from a neuron with
//   gate = 128 * c (one term; c the constant, or v's enable below),
//   up   = s * v / 128 (one term, s = +1 or -1), down = -s onto v,
// and no op reads v afterwards (every read of v is in that op or earlier). This is the
// clear neuron above (s = -1) and npu::matvec_unit's "-v onto v" (s = +1). The op reads
// v, so v is in the window or +-0 there (the builders' contract), and the proof above
// applies word for word: silu(128) * (s v/128) = s v exactly, times -s is -v, and
// v + (-v) = +0 (for a gate on an enable, see below). Such a value gets
// Lifetime::ToLastAccess and no clear op (DeadClears::self_cleared).
//
// Enable-gated clears (DeadClearOptions::enable_of). The clear above reads the constant
// in its gate, so the input-sparse engine evaluates its MLP sublayer on every cycle. A
// unit under the idle contract (compiler/enable.h) may name, per value v, the unit's
// enable e; the caller promises: (a) e's final value (after its last write; the clears
// read that) is exactly 1 or +-0, and (b) on every token where it is +-0, v is +-0
// wherever a clear reads it (an idle unit writes +-0 only). v's clear then reads e
// instead of the constant: gate = 128 * e; a self-clear of v gated by e is recognised
// when e's last write comes before it in program order (it reads e's final value).
//  * e == 1: the emitter writes the gate term as 128 * 2^k in e's column and e reaches
//    the projection as exactly 2^-k (enable.h), so the gate is exactly 128: the clear
//    above, bit for bit.
//  * e == +-0: by (b) v is +-0. The gate's products are all +-0 (e's and the weight-0
//    ones) and include the rails' +0 * 8 = +0, so the gate is +0 (a sum with a +0 term
//    is +0; the engine's sparse sums, which leave weight-0 terms out, start at +0,
//    engine/dot.h, and HostSim's end with + 0), and silu(+0) = +0. v = +0: the neuron
//    adds +0 * (+-0) * 1 = +-0 and +0 + +-0 = +0. v = -0 (only an input can be -0, see
//    "Inputs"): the up sum has v's term (-2^k/128) * -0 = +0, so it is +0, the neuron
//    adds +0 * +0 * 1 = +0 and -0 + +0 = +0. The dim is +0 afterwards, as the ordinary
//    clear leaves it.
// On an idle cycle the clear then reads only +-0 dims and costs nothing. The clears are
// ordered so that a clear reading e comes before e's own clear (the schedule puts a
// write no earlier than the reads before it in program order: every gated clear sees e's
// final value); e may be its own enable (e -> e: its clear reads and writes e, exact by
// the same two cases). A value that gates a clear counts as read after its last write
// (so it is cleared too, after its readers; (a) puts it in the window). Throws when an
// enable chain has a cycle of two or more values, when a value is out of range, or when
// an enable of a cleared value is itself self-cleared (its final value would be +0).
//
// Inputs (DeadClearOptions::clear_inputs). Without it an interface input holds its dim
// from the embedding to the end. With it, an input that is neither an output nor in
// `keep` is a value whose first write is the embedding, before every op: when an op
// reads it after its last write (no op writes most inputs: when any op reads it), it
// gets the clear above after its last read, gated by its enable_of entry under (a) and
// (b) like any value, and a self-clear of it is recognised as above. Its lifetime is
// Lifetime::EmbeddingToLastAccess, from the embedding (sublayer -1) to the clear: it
// spans every read, however far apart (an input read at the top and again near the
// bottom lives to the bottom). An input that no op reads keeps its dim to the end
// (Lifetime::Program), as without the option: nothing puts its embedding values in the
// window, so no clear is exact for it. Leave such an input out of Interface::inputs
// (only the final residual stream could show it). A clear dropped past the end (see
// plan_dim_reuse) gives the input Lifetime::Program back.
// Exactness. What an op reads is in the window or +-0 (the builders' contract), and an
// input may be -0: the embedding sets it, it is no sum. The clear of v = -0 adds +0
// in every form: ungated (and gated on e == 1, the same neuron bit for bit) the up sum
// has v's term (-2^k/128) * -0 = +0, so the up is +0, the neuron 128 * +0 = +0 and the
// down sum 1 * +0 + ... = +0; gated on e == +-0, see above. -0 + +0 = +0. So after the
// clear's residual add the dim holds exactly +0, every later sublayer adds +-0 there
// (other values' weights on it are 0) and +0 + +-0 = +0: the next value on the dim,
// whose first access is in a strictly later sublayer (allocate.h), starts at +0 as on
// a dim nothing ever used, the assumption every unit makes. The embedding writes only
// the rails and the inputs' own dims, and inputs all live from sublayer -1, so no two
// share a dim and the embedding never touches a later value's dim. A 0/1 flag input may
// be its own enable (enable_of[f] = f: (a) and (b) hold by themselves), so that its
// clear costs nothing on the cycles where it is 0.
// Width. The input clears are appended after the other clears (but a clear that reads
// an enable still comes before the enable's own clear); sink_schedule treats cleared
// inputs as fixed, like every input. So when no input has an enable_of entry or gates
// a clear (and `keep` is the same), the original ops and the other clears are placed
// exactly as without clear_inputs, every life is the same or shorter, and the interval
// allocation (optimal on intervals) never needs more dims.
#include <cstdint>
#include <map>
#include <vector>

#include "compiler/allocate.h"
#include "compiler/emit.h"
#include "compiler/ir.h"
#include "compiler/schedule.h"

namespace qpu::compiler {

struct DeadClearOptions {
  // value -> its unit's enable (a value, not kOne), under the promises (a) and (b) above.
  std::map<ValueId, ValueId> enable_of;
  // Interface inputs give their dims back after their last read ("Inputs" above).
  bool clear_inputs = false;
  // Values never cleared, holding their dims from their first access (inputs: from the
  // embedding) to the end, e.g. what an LM head reads from the final residual stream.
  // Outputs always are.
  std::vector<ValueId> keep{};  // (an initializer: no -Wmissing-field-initializers for {enable_of})
};

struct DeadClears {
  Program program;                   // the input program, then one clear op per cleared value
  std::vector<Lifetime> lifetimes;   // per value, for allocate()
  std::vector<ValueId> cleared;      // the value of each clear op, in op order
  std::vector<ValueId> self_cleared;  // values whose last write clears them (no clear op)
};

DeadClears add_dead_value_clears(const Program& program, const Interface& interface,
                                 const DeadClearOptions& options = {});

// Stages 1-3 with dim reuse: validate, add_dead_value_clears, schedule, interval
// allocation. A clear only takes room the program's MLPs already have (the neuron
// limit is lowered to the largest MLP of the plain schedule), and a clear that would
// then land after the last sublayer of the plain schedule is dropped (its value keeps
// its dim from its first access on, an input from the embedding on). So the original ops keep their sublayers and the
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
ReusePlan plan_dim_reuse(const Program& program, const Interface& interface, const ScheduleLimits& limits = {},
                         const DeadClearOptions& options = {});

struct CompiledWithReuse {
  Program program;  // ReusePlan::program
  Compiled compiled;
};

// compile() with dim reuse: plan_dim_reuse, then emit. Computes the same outputs as
// compile(), bit for bit, in fewer residual dims; values that are dead at the end no
// longer hold their final contents in the final residual stream.
CompiledWithReuse compile_reusing_dims(const Program& program, const Interface& interface,
                                       const ScheduleLimits& limits = {}, const EmitOptions& options = {},
                                       const DeadClearOptions& clear_options = {});

}  // namespace qpu::compiler
