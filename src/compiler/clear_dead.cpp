#include "compiler/clear_dead.h"

#include <algorithm>
#include <map>

#include "common/error.h"
#include "compiler/schedule.h"

namespace qpu::compiler {

DeadClears add_dead_value_clears(const Program& program, const Interface& interface) {
  const auto n = static_cast<size_t>(program.num_values());
  DeadClears out{program, std::vector<Lifetime>(n, Lifetime::ToLastAccess), {}};
  auto check = [&](ValueId v) {
    if (v < 0 || static_cast<size_t>(v) >= n) fail("clear_dead: interface value {} out of range", v);
    return static_cast<size_t>(v);
  };
  for (ValueId v : interface.outputs) out.lifetimes[check(v)] = Lifetime::FromFirstAccess;
  for (ValueId v : interface.inputs) out.lifetimes[check(v)] = Lifetime::Program;  // set by the embedding
  // Program order of the last read and the last write of each value (-1: none). The
  // schedule keeps these orders (ir.h), so "read after the last write" in program order
  // means the final value is read by some op, in a later sublayer than its last write.
  std::vector<int64_t> last_read(n, -1), last_write(n, -1);
  const auto& ops = program.ops();
  for (size_t i = 0; i < ops.size(); ++i) {
    for (ValueId v : ops[i].reads()) last_read[static_cast<size_t>(v)] = static_cast<int64_t>(i);
    for (ValueId v : ops[i].writes()) last_write[static_cast<size_t>(v)] = static_cast<int64_t>(i);
  }
  for (size_t v = 0; v < n; ++v) {
    if (out.lifetimes[v] != Lifetime::ToLastAccess || last_write[v] < 0) continue;  // interface, or +0 all along
    if (last_read[v] <= last_write[v]) {
      out.lifetimes[v] = Lifetime::FromFirstAccess;  // the final value is never read: no window guarantee
      continue;
    }
    const auto id = static_cast<ValueId>(v);
    out.program.mlp("clear " + program.name(id),
                    {Neuron{Lin{{{kOne, 128.0f}}}, Lin{{{id, -1.0f / 128.0f}}}, {{id, 1.0f}}}});
    out.cleared.push_back(id);
  }
  return out;
}

ReusePlan plan_dim_reuse(const Program& program, const Interface& interface, const ScheduleLimits& limits) {
  program.validate();
  Schedule base = schedule(program, limits);
  const int64_t base_sublayers = base.num_sublayers;
  // Clears only take room the MLPs already have: with the neuron limit lowered to the
  // largest MLP of the plain schedule, the intermediate size does not grow. The
  // original ops keep their sublayers (schedule_after places only the clears).
  std::map<int64_t, int64_t> neurons;
  for (size_t i = 0; i < program.ops().size(); ++i)
    if (program.ops()[i].kind == OpKind::Mlp)
      neurons[base.sublayer[i]] += static_cast<int64_t>(program.ops()[i].neurons.size());
  ScheduleLimits capped = limits;
  capped.max_neurons_per_mlp = 1;
  for (const auto& [sublayer, count] : neurons) capped.max_neurons_per_mlp = std::max(capped.max_neurons_per_mlp, count);
  DeadClears dc = add_dead_value_clears(program, interface);
  if (limits.sink) {
    // Interface inputs live from the embedding on; outputs and values whose final
    // contents nobody reads live to the end: moving their accesses does not change that.
    std::vector<bool> fixed(dc.lifetimes.size()), kept(dc.lifetimes.size());
    for (size_t v = 0; v < dc.lifetimes.size(); ++v) {
      fixed[v] = dc.lifetimes[v] == Lifetime::Program;
      kept[v] = dc.lifetimes[v] != Lifetime::ToLastAccess;
    }
    base = sink_schedule(program, base, capped, fixed, kept);
  }
  Schedule s = schedule_after(dc.program, base, capped);
  // Drop the clears placed past the original end (their values keep their dims from
  // the first access on); the others are placed again after the original ops.
  const size_t first_clear = program.ops().size();
  auto& ops = dc.program.mutable_ops();
  size_t kept_ops = first_clear;
  for (size_t i = first_clear; i < ops.size(); ++i) {
    if (s.sublayer[i] >= base_sublayers) {
      dc.lifetimes[static_cast<size_t>(dc.cleared[i - first_clear])] = Lifetime::FromFirstAccess;
      continue;
    }
    if (kept_ops != i) ops[kept_ops] = std::move(ops[i]);
    ++kept_ops;
  }
  if (kept_ops != ops.size()) {
    ops.resize(kept_ops);
    s = schedule_after(dc.program, base, capped);
  }
  ReusePlan r{std::move(dc.program), std::move(dc.lifetimes), std::move(s), {}};
  r.allocation = allocate(r.program, r.schedule, r.lifetimes);
  return r;
}

CompiledWithReuse compile_reusing_dims(const Program& program, const Interface& interface,
                                       const ScheduleLimits& limits, const EmitOptions& options) {
  ReusePlan plan = plan_dim_reuse(program, interface, limits);
  CompiledWithReuse r{std::move(plan.program), {std::move(plan.schedule), std::move(plan.allocation), {}}};
  r.compiled.weights = emit(r.program, r.compiled.schedule, r.compiled.allocation, interface, options);
  return r;
}

}  // namespace qpu::compiler
