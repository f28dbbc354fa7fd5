#pragma once
// Stage 2: place every op of a Program into a host sublayer. Sublayer s belongs to
// decoder layer s / 2; even sublayers are mixers (attention / Gated DeltaNet), odd
// ones are MLPs. Greedy as-soon-as-possible in program order, under the dependence
// rules of ir.h (the program's explicit orders, Program::order, included) and
// per-sublayer resource limits. A mixer sublayer holds attention
// memories or GDN memories, never both (a host layer is one kind of mixer).
#include <cstdint>
#include <vector>

#include "compiler/ir.h"

namespace qpu::compiler {

struct ScheduleLimits {
  int64_t max_neurons_per_mlp = 9216;  // Qwen3.5-4B intermediate size
  int64_t max_memories_per_mixer = 4;  // KV heads of a Qwen3.5-4B attention layer
  int64_t max_gdn_memories_per_mixer = 16;  // key heads of a Qwen3.5-4B GDN layer
  // plan_dim_reuse (clear_dead.h) only: sink_schedule() the ops before the clears are
  // placed, so values start living as late as their first readers allow.
  bool sink = false;
  // plan_dim_reuse (clear_dead.h) only: schedule_by_deadline() instead of schedule().
  bool by_deadline = false;
  // plan_dim_reuse only: neurons of each MLP sublayer that the program's own ops leave
  // to the dead-value clears (they are split and scheduled for the rest). Without it,
  // a clear goes wherever an earlier sublayer has room left, and where the schedule
  // packs its sublayers full, far below the value's last reader: the value keeps its
  // dim all the way.
  int64_t clear_room = 0;
};

struct Schedule {
  std::vector<int64_t> sublayer;  // per op
  int64_t num_sublayers = 0;      // 1 + the last sublayer used (0 for an empty program)

  int64_t num_layers() const { return (num_sublayers + 1) / 2; }
  static bool is_mlp(int64_t s) { return s % 2 == 1; }
};

// Throws qpu::Error when one op alone exceeds a limit.
Schedule schedule(const Program& program, const ScheduleLimits& limits = {});

// The same greedy placement for the ops from placed.sublayer.size() on; the earlier ops
// stay where `placed` put them (which must obey the rules and limits). Appending ops to
// a program and scheduling them this way never moves the original ones.
Schedule schedule_after(const Program& program, const Schedule& placed, const ScheduleLimits& limits = {});

// List scheduling by deadline: every op gets its latest sublayer in a resource-free
// schedule as long as the critical path (its deadline), then sublayer by sublayer the
// ready ops (every op they depend on placed, under the rules of ir.h and the explicit
// orders) are placed most urgent first while the limits allow. Where the greedy
// schedule() fills sublayers in program order, so that ops off the critical path can
// push the ones on it down, this keeps the stack near the critical path when the limits
// are tight (few neurons per MLP, few memories per mixer). Throws qpu::Error when one op
// alone exceeds a limit.
Schedule schedule_by_deadline(const Program& program, const ScheduleLimits& limits = {});

// As-late-as-useful: moves ops to later sublayers, within the rules of ir.h, the limits
// and the schedule's length (num_sublayers does not change), when the move shortens the
// residual lives it touches: an op is sunk when it starts more lives (values whose first
// access it is, apart from `fixed` ones, e.g. interface inputs) than it ends (values
// whose last access it is, apart from `fixed` and `kept` ones, e.g. interface outputs
// that live to the end anyway). An op never sinks to or past an op it is explicitly
// ordered before (Program::order). ASAP puts a decode or a product as early as its inputs
// allow, often far above its only reader; sunk, its outputs occupy dims only from just
// before that reader on. Ops are visited in reverse program order (readers first), twice.
Schedule sink_schedule(const Program& program, const Schedule& schedule, const ScheduleLimits& limits,
                       const std::vector<bool>& fixed, const std::vector<bool>& kept);

// Throws qpu::Error naming the op when a schedule breaks a placement rule of ir.h (RAW,
// WAW and WAR against every earlier op, kinds, mixer kinds) or a limit (tests), and
// naming both ops when it breaks an explicit order (Program::order).
void check_schedule(const Program& program, const Schedule& schedule, const ScheduleLimits& limits = {});
// Length of the longest chain of dependent ops (each RAW/WAW edge and each explicit
// order edge counts one, a WAW edge between exclusive writes none): the
// floor on sublayers any schedule needs, ignoring sublayer kinds and resources.
int64_t critical_path(const Program& program);

}  // namespace qpu::compiler
