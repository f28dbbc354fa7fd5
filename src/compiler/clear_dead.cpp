#include "compiler/clear_dead.h"

#include <algorithm>
#include <map>

#include "common/error.h"
#include "compiler/schedule.h"
#include "compiler/split_mlp.h"

namespace qpu::compiler {

namespace {

constexpr float kGate = 128.0f;  // silu(128) == 128 in fp32

// The one neuron of `op` with a down term into v, when the op has exactly one such term
// and that neuron is an exact clear of v gated by `gate` (kOne or v's enable):
// gate = 128 * gate, up = s v / 128, down -s onto v, s = +-1 (clear_dead.h).
bool is_self_clear(const Op& op, ValueId v, ValueId gate) {
  if (op.kind != OpKind::Mlp) return false;
  int terms = 0;
  bool clear = false;
  for (const Neuron& nr : op.neurons)
    for (const Term& t : nr.down) {
      if (t.value != v) continue;
      ++terms;
      clear = nr.gate.terms.size() == 1 && nr.gate.terms[0].value == gate && nr.gate.terms[0].weight == kGate &&
              nr.up.terms.size() == 1 && nr.up.terms[0].value == v &&
              ((nr.up.terms[0].weight == 1.0f / kGate && t.weight == -1.0f) ||
               (nr.up.terms[0].weight == -1.0f / kGate && t.weight == 1.0f));
    }
  return terms == 1 && clear;
}

}  // namespace

DeadClears add_dead_value_clears(const Program& program, const Interface& interface, const DeadClearOptions& options) {
  const auto n = static_cast<size_t>(program.num_values());
  DeadClears out{program, std::vector<Lifetime>(n, Lifetime::ToLastAccess), {}, {}};
  auto check = [&](ValueId v, const char* what) {
    if (v < 0 || static_cast<size_t>(v) >= n) fail("clear_dead: {} value {} out of range", what, v);
    return static_cast<size_t>(v);
  };
  // Outputs and `keep` hold their dims to the end; inputs from the embedding on, to the
  // end or (clear_inputs) to their clear. `embedded`: an input that may be cleared.
  std::vector<char> pinned(n, 0), embedded(n, 0);
  for (ValueId v : interface.outputs) {
    out.lifetimes[check(v, "interface")] = Lifetime::FromFirstAccess;
    pinned[static_cast<size_t>(v)] = 1;
  }
  for (ValueId v : options.keep) {
    out.lifetimes[check(v, "keep")] = Lifetime::FromFirstAccess;
    pinned[static_cast<size_t>(v)] = 1;
  }
  for (ValueId v : interface.inputs) {
    const size_t u = check(v, "interface");
    out.lifetimes[u] = Lifetime::Program;  // set by the embedding
    embedded[u] = options.clear_inputs && !pinned[u];
  }
  // The gate of each value's clear: the constant or its unit's enable.
  std::vector<ValueId> gate(n, kOne);
  for (const auto& [v, e] : options.enable_of) {
    check(v, "enable_of");
    check(e, "enable");
    gate[static_cast<size_t>(v)] = e;
  }
  // Depth along the enable chain (v -> e -> e2 ...; e -> e ends it): clears are emitted
  // deepest first, so every clear that reads e comes before e's own clear.
  std::vector<int64_t> depth(n, 0);
  for (size_t v = 0; v < n; ++v) {
    size_t u = v;
    int64_t d = 0;
    while (gate[u] != kOne && gate[u] != static_cast<ValueId>(u)) {
      u = static_cast<size_t>(gate[u]);
      if (++d > static_cast<int64_t>(n))
        fail("clear_dead: the enables of '{}' form a cycle", program.name(static_cast<ValueId>(v)));
    }
    depth[v] = d;
  }
  // Program order of the last read and the last write of each value (-1: none). The
  // schedule keeps these orders (ir.h), so "read after the last write" in program order
  // means the final value is read by some op, in a later sublayer than its last write.
  std::vector<int64_t> last_read(n, -1), last_write(n, -1);
  const auto& ops = program.ops();
  for (size_t i = 0; i < ops.size(); ++i) {
    for (ValueId v : ops[i].reads()) last_read[static_cast<size_t>(v)] = static_cast<int64_t>(i);
    for (ValueId v : ops[i].writes()) last_write[static_cast<size_t>(v)] = static_cast<int64_t>(i);
  }
  // Which values get a clear op. A gated clear reads its enable after every op, so the
  // enable counts as read after its last write: iterate until no enable is added
  // (monotone: a value only ever moves to "cleared").
  enum class Fate { Untouched, Cleared, SelfCleared, Kept };
  std::vector<Fate> fate(n, Fate::Untouched);
  std::vector<char> gates_a_clear(n, 0), gated_self(n, 0);
  // An input's embedding is its first write, before every op (program order -1).
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t v = 0; v < n; ++v) {
      gated_self[v] = 0;
      if (!embedded[v] && (out.lifetimes[v] != Lifetime::ToLastAccess || last_write[v] < 0))
        continue;  // interface or kept, or +0 all along
      Fate f = Fate::Kept;  // the final value is never read: no window guarantee
      if (last_read[v] > last_write[v] || gates_a_clear[v])
        f = Fate::Cleared;
      else if (last_write[v] < 0)
        f = Fate::Kept;  // an input no op reads or writes
      else if (is_self_clear(ops[static_cast<size_t>(last_write[v])], static_cast<ValueId>(v), kOne))
        f = Fate::SelfCleared;
      else if (gate[v] != kOne && is_self_clear(ops[static_cast<size_t>(last_write[v])], static_cast<ValueId>(v), gate[v]) &&
               (gate[v] == static_cast<ValueId>(v) || last_write[static_cast<size_t>(gate[v])] < last_write[v])) {
        f = Fate::SelfCleared;  // on the enable's final value, which (a) and (b) are about
        gated_self[v] = 1;
      }
      fate[v] = f;
      if (f == Fate::Cleared && gate[v] != kOne && gate[v] != static_cast<ValueId>(v) &&
          !gates_a_clear[static_cast<size_t>(gate[v])]) {
        gates_a_clear[static_cast<size_t>(gate[v])] = 1;
        changed = true;
      }
    }
  }
  // The clears of inputs go after the others (then the depth order below): the clears
  // of the other values take the room they take without clear_inputs.
  std::vector<ValueId> order, input_order;
  for (size_t v = 0; v < n; ++v) {
    const auto id = static_cast<ValueId>(v);
    if (fate[v] == Fate::Kept) out.lifetimes[v] = embedded[v] ? Lifetime::Program : Lifetime::FromFirstAccess;
    if (embedded[v] && (fate[v] == Fate::Cleared || fate[v] == Fate::SelfCleared))
      out.lifetimes[v] = Lifetime::EmbeddingToLastAccess;
    if (fate[v] == Fate::SelfCleared) out.self_cleared.push_back(id);
    if (fate[v] == Fate::Cleared) (embedded[v] ? input_order : order).push_back(id);
    // An enable whose last write clears it would read +0 in every clear it gates.
    const ValueId e = gate[v];
    if ((fate[v] == Fate::Cleared || gated_self[v]) && e != kOne && e != id && last_write[static_cast<size_t>(e)] >= 0 &&
        (is_self_clear(ops[static_cast<size_t>(last_write[static_cast<size_t>(e)])], e, kOne) ||
         is_self_clear(ops[static_cast<size_t>(last_write[static_cast<size_t>(e)])], e, gate[static_cast<size_t>(e)])))
      fail("clear_dead: enable '{}' of '{}' clears itself: its final value is +0", program.name(e), program.name(id));
  }
  order.insert(order.end(), input_order.begin(), input_order.end());
  std::stable_sort(order.begin(), order.end(),
                   [&](ValueId a, ValueId b) { return depth[static_cast<size_t>(a)] > depth[static_cast<size_t>(b)]; });
  for (ValueId id : order) {
    out.program.mlp("clear " + program.name(id),
                    {Neuron{Lin{{{gate[static_cast<size_t>(id)], kGate}}}, Lin{{{id, -1.0f / kGate}}}, {{id, 1.0f}}}});
    out.cleared.push_back(id);
  }
  return out;
}

ReusePlan plan_dim_reuse(const Program& unsplit, const Interface& interface, const ScheduleLimits& limits,
                         const DeadClearOptions& options) {
  unsplit.validate();
  if (limits.clear_room < 0 || limits.clear_room >= limits.max_neurons_per_mlp)
    fail("plan_dim_reuse: clear room of {} neurons in MLP sublayers of {}", limits.clear_room, limits.max_neurons_per_mlp);
  // The program's own ops get the sublayers less the clears' room (split to that width).
  ScheduleLimits base_limits = limits;
  base_limits.max_neurons_per_mlp -= limits.clear_room;
  // A program with no op over the limit is planned as it is (no copy of it).
  const bool wide = std::any_of(unsplit.ops().begin(), unsplit.ops().end(), [&](const Op& op) {
    return op.kind == OpKind::Mlp && static_cast<int64_t>(op.neurons.size()) > base_limits.max_neurons_per_mlp;
  });
  const Program split = wide ? split_wide_mlps(unsplit, base_limits.max_neurons_per_mlp) : Program{};
  const Program& program = wide ? split : unsplit;
  Schedule base = limits.by_deadline ? schedule_by_deadline(program, base_limits) : schedule(program, base_limits);
  const int64_t base_sublayers = base.num_sublayers;
  // Clears only take room the MLPs already have: with the neuron limit lowered to the
  // largest MLP of the plain schedule, the intermediate size does not grow; with a
  // clear room, up to the full limit. The original ops keep their sublayers
  // (schedule_after places only the clears); sinking them may take the clears' room too
  // (the ops that sink start more lives than they end: the clears' values die sooner).
  std::map<int64_t, int64_t> neurons;
  for (size_t i = 0; i < program.ops().size(); ++i)
    if (program.ops()[i].kind == OpKind::Mlp)
      neurons[base.sublayer[i]] += static_cast<int64_t>(program.ops()[i].neurons.size());
  ScheduleLimits capped = limits;
  capped.max_neurons_per_mlp = 1;
  for (const auto& [sublayer, count] : neurons) capped.max_neurons_per_mlp = std::max(capped.max_neurons_per_mlp, count);
  ScheduleLimits clears = capped;
  if (limits.clear_room > 0) clears.max_neurons_per_mlp = limits.max_neurons_per_mlp;
  DeadClears dc = add_dead_value_clears(program, interface, options);
  if (limits.sink) {
    // Interface inputs live from the embedding on; outputs and values whose final
    // contents nobody reads live to the end: moving their accesses does not change that.
    // A cleared input is `fixed` too (sink_schedule has no "start fixed, end free"), so
    // the original ops are placed as without clear_inputs.
    std::vector<bool> fixed(dc.lifetimes.size()), kept(dc.lifetimes.size());
    for (size_t v = 0; v < dc.lifetimes.size(); ++v) {
      fixed[v] = dc.lifetimes[v] == Lifetime::Program || dc.lifetimes[v] == Lifetime::EmbeddingToLastAccess;
      kept[v] = dc.lifetimes[v] != Lifetime::ToLastAccess;
    }
    base = sink_schedule(program, base, clears, fixed, kept);
  }
  Schedule s = schedule_after(dc.program, base, clears);
  // Drop the clears placed past the original end (their values keep their dims from
  // the first access on, inputs from the embedding on); the others are placed again
  // after the original ops, until none lands past the end (placed again with fewer
  // clears before it, a clear may still find its sublayers full).
  const size_t first_clear = program.ops().size();
  auto& ops = dc.program.mutable_ops();
  for (bool dropped = true; dropped;) {
    size_t kept_ops = first_clear;
    std::vector<ValueId> still_cleared;
    for (size_t i = first_clear; i < ops.size(); ++i) {
      const auto v = static_cast<size_t>(dc.cleared[i - first_clear]);
      if (s.sublayer[i] >= base_sublayers) {
        dc.lifetimes[v] = dc.lifetimes[v] == Lifetime::EmbeddingToLastAccess ? Lifetime::Program : Lifetime::FromFirstAccess;
        continue;
      }
      still_cleared.push_back(dc.cleared[i - first_clear]);
      if (kept_ops != i) ops[kept_ops] = std::move(ops[i]);
      ++kept_ops;
    }
    dropped = kept_ops != ops.size();
    if (dropped) {
      ops.resize(kept_ops);
      dc.cleared = std::move(still_cleared);
      s = schedule_after(dc.program, base, clears);
    }
  }
  ReusePlan r{std::move(dc.program), std::move(dc.lifetimes), std::move(s), {}};
  r.allocation = allocate(r.program, r.schedule, r.lifetimes);
  return r;
}

CompiledWithReuse compile_reusing_dims(const Program& program, const Interface& interface,
                                       const ScheduleLimits& limits, const EmitOptions& options,
                                       const DeadClearOptions& clear_options) {
  ReusePlan plan = plan_dim_reuse(program, interface, limits, clear_options);
  CompiledWithReuse r{std::move(plan.program), {std::move(plan.schedule), std::move(plan.allocation), {}}};
  r.compiled.weights = emit(r.program, r.compiled.schedule, r.compiled.allocation, interface, options);
  return r;
}

}  // namespace qpu::compiler
