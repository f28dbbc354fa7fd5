// What overlaying the token machine's micro-op families on one short stack could save (a
// diagnostic, no run; docs/npu-machine.md, "The checkpoint on disk", and issue 30's item 1).
//
//   machine_overlay [positions=16]
//
// Each family (the control tokens whose names differ only in their numbers' '#', cut at
// the first ' ', '.' or '(': SLOW(3).5 -> SLOW; value tokens: VALUE) gets its static cone
// over the compiled IR: the token inputs any of its tokens sets, then every op in program
// order that may be nonzero on such a cycle (a neuron when its gate and its up each have a
// constant or a maybe-nonzero term; a memory when its read side may be on, or always when
// it reads through a conv tap). An op in the cone of one family alone is that family's; in
// two or more, it is shared (the register file, the uplink, the delay lines, RAMs that one
// family writes and another reads).
//
// The questions it answers are the ones a family-overlaid machine stands on. First: may
// two families' values share a residual dim at the same depth? On family A's cycle a dim
// shared with family B holds A's value, which B's ops then read. That is harmless only
// where B reads the dim in the up of a neuron whose gate terms are all B's own values (no
// constant: +0 on A's cycles, so silu(gate) = 0 and the product is +-0 whatever the up
// holds), or as the data of a memory whose key and flags are B's own (nothing is written
// or read). Such a value is "data"; every other value (read by a gate, or as a memory's
// address or flag, or by a neuron whose gate is not clean) is "control" and needs a dim of
// its own family at its depth.
//
// Second: what does a stack of overlaid families cost? Each family's private ops are
// scheduled alone from layer 0 (program order, the builders' explicit orders where both
// sides keep ops, as soon as possible and then sunk, the machine's limits). Laid over one
// another: layers = the deepest family; hidden = the widest sublayer of (the families'
// control values summed) + (the widest family's data values) + the shared values (as the
// machine has them live); neurons per layer = the families' sum at that layer. And the
// floor of any packing of them: every neuron is three hidden-wide vectors, and the hidden
// size holds at least the widest family alone. It ignores the order that a RAM written by
// one family and read by another imposes (such a hand-off would cross up instead), so these
// are bounds on what overlay can buy, not a machine.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/qwen35_layout.h"
#include "machine/token_machine.h"
#include "npu/tests/unit_harness.h"
#include "runner/cycle_profile.h"
#include "runner/story_stream.h"  // token_machine_options

namespace {

using qpu::compiler::kOne;
using qpu::compiler::Lin;
using qpu::compiler::Op;
using qpu::compiler::OpKind;
using qpu::compiler::ValueId;

std::string family_of(const std::string& control_name) {
  const std::string f = qpu::runner::micro_op_family(control_name);
  return f.substr(0, f.find_first_of(" .("));
}

bool maybe(const Lin& lin, const std::vector<char>& nz) {
  for (const auto& t : lin.terms)
    if (t.value == kOne ? t.weight != 0.0f : (nz[static_cast<size_t>(t.value)] && t.weight != 0.0f)) return true;
  return false;
}

// A memory's flag may be on: the constant always, kNever never, else when maybe-nonzero.
bool flag_on(ValueId flag, const std::vector<char>& nz) {
  return flag == kOne || (flag >= 0 && nz[static_cast<size_t>(flag)]);
}

// Runs the cone of one family: `nz` holds the token inputs its tokens set; on return
// every value that may be nonzero on its cycles. Returns the ops that may run.
std::vector<char> cone(const qpu::compiler::Program& p, std::vector<char>& nz) {
  std::vector<char> active(p.ops().size(), 0);
  for (size_t i = 0; i < p.ops().size(); ++i) {
    const Op& op = p.ops()[i];
    bool on = false;
    if (op.kind == OpKind::Mlp) {
      for (const auto& n : op.neurons)
        if (maybe(n.gate, nz) && maybe(n.up, nz)) {
          on = true;
          for (const auto& d : n.down) nz[static_cast<size_t>(d.value)] = 1;
        }
    } else if (op.kind == OpKind::GdnMemory) {
      const auto& g = op.gdn;
      const bool reads = flag_on(g.read_flag, nz) || g.query_tap > 0;
      if (reads)
        for (ValueId v : g.out) nz[static_cast<size_t>(v)] = 1;
      // A write changes no residual value on this cycle, but the op runs.
      on = reads || flag_on(g.write_flag, nz) || g.key_tap > 0;
    } else {
      const auto& a = op.memory;
      const bool reads = flag_on(a.read_flag, nz);
      if (reads)
        for (ValueId v : a.out) nz[static_cast<size_t>(v)] = 1;
      on = reads || flag_on(a.write_flag, nz);
    }
    active[i] = on;
  }
  return active;
}

// Each value's first and last accessed sublayer (-1: never accessed).
struct Intervals {
  std::vector<int64_t> first, last;
  explicit Intervals(size_t values) : first(values, -1), last(values, -1) {}
  void access(const Op& op, int64_t sublayer) {
    for (const auto& list : {op.reads(), op.writes()})
      for (ValueId v : list) {
        const auto u = static_cast<size_t>(v);
        if (first[u] < 0 || sublayer < first[u]) first[u] = sublayer;
        last[u] = std::max(last[u], sublayer);
      }
  }
};

// The values `counted` selects that are live at each of `sublayers` sublayers.
template <typename Counted>
std::vector<int64_t> live_per_sublayer(const Intervals& in, int64_t sublayers, Counted counted) {
  std::vector<int64_t> live(static_cast<size_t>(sublayers) + 1, 0);
  for (size_t v = 0; v < in.first.size(); ++v)
    if (in.first[v] >= 0 && counted(v))
      ++live[static_cast<size_t>(in.first[v])], --live[static_cast<size_t>(in.last[v]) + 1];
  for (size_t k = 1; k < live.size(); ++k) live[k] += live[k - 1];
  return live;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qpu;
  const int positions = argc > 1 ? std::atoi(argv[1]) : 16;
  const machine::TokenMachineOptions options = runner::token_machine_options(positions);
  const machine::TokenMachine m = machine::build_token_machine(npu::unit_testing::stories260k(), options);
  const compiler::Program& p = m.program;
  const compiler::Schedule& schedule = m.compiled.schedule;
  const compiler::Allocation& alloc = m.compiled.allocation;
  const auto& ops = p.ops();
  const auto nvalues = static_cast<size_t>(p.num_values());
  const auto& itf = m.interface;
  const size_t ninputs = itf.inputs.size();
  const auto& cfg = m.compiled.weights.config;
  std::printf("machine: %d positions, %lld layers, hidden %lld, intermediate %lld, %.2f billion parameters\n",
              m.max_positions, static_cast<long long>(alloc.num_layers), static_cast<long long>(alloc.hidden_size),
              static_cast<long long>(alloc.intermediate_size), static_cast<double>(io::qwen35_parameter_count(cfg)) / 1e9);

  // Families of host tokens: value tokens first, then the control tokens by name.
  std::map<std::string, std::vector<int64_t>> tokens;
  const auto nvalue_tokens = static_cast<int64_t>(m.encoding.vocab.size());
  for (int64_t t = 0; t < nvalue_tokens; ++t) tokens["VALUE"].push_back(t);
  for (size_t c = 0; c < m.control_names.size(); ++c)
    tokens[family_of(m.control_names[c])].push_back(m.id(m.control_names[c]));

  std::vector<std::string> families;
  std::vector<uint64_t> vmask(nvalues, 0);  // the families on whose cycles a value may be nonzero
  std::vector<int> families_of_op(ops.size(), 0), family_of_op(ops.size(), -1);
  for (const auto& [name, ids] : tokens) {
    std::vector<char> nz(nvalues, 0);
    for (int64_t t : ids)
      for (size_t j = 0; j < ninputs; ++j)
        if (itf.input_rows[static_cast<size_t>(t) * ninputs + j] != 0.0f) nz[static_cast<size_t>(itf.inputs[j])] = 1;
    const std::vector<char> active = cone(p, nz);
    const int f = static_cast<int>(families.size());
    if (f >= 64) fail("machine_overlay: more than 64 families");
    families.push_back(name);
    for (size_t v = 0; v < nvalues; ++v)
      if (nz[v]) vmask[v] |= uint64_t{1} << f;
    for (size_t i = 0; i < ops.size(); ++i)
      if (active[i]) ++families_of_op[i], family_of_op[i] = f;
  }
  const size_t F = families.size();
  // A value's family: the one family whose cycles may make it nonzero (else shared).
  auto private_family = [&](ValueId v) {
    const uint64_t bits = vmask[static_cast<size_t>(v)];
    return bits != 0 && (bits & (bits - 1)) == 0 ? __builtin_ctzll(bits) : -1;
  };

  // Its kind: data when a dim shared with another family's value is harmless (read only
  // in the up of neurons whose gate is +0 on every other family's cycles, or as the data
  // of a memory whose key and flags are), else control.
  std::vector<char> control(nvalues, 0);
  Intervals machine_live(nvalues);
  auto clean = [&](ValueId v, int f) { return v != kOne && f >= 0 && private_family(v) == f; };
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    machine_live.access(op, schedule.sublayer[i]);
    const int f = families_of_op[i] == 1 ? family_of_op[i] : -1;
    auto mark = [&](ValueId v) {
      if (v >= 0) control[static_cast<size_t>(v)] = 1;
    };
    if (op.kind == OpKind::Mlp) {
      for (const auto& n : op.neurons) {
        bool gate_clean = true;
        for (const auto& t : n.gate.terms) {
          gate_clean = gate_clean && clean(t.value, f);
          mark(t.value);
        }
        if (!gate_clean)
          for (const auto& t : n.up.terms) mark(t.value);
      }
    } else if (op.kind == OpKind::GdnMemory) {
      const auto& g = op.gdn;
      bool sides_clean = true;
      for (const auto& bits : {g.key_bits, g.query_bits})
        for (ValueId v : bits) sides_clean = sides_clean && clean(v, f), mark(v);
      for (ValueId v : {g.write_flag, g.read_flag, g.wipe_flag, g.key_enable, g.query_enable}) {
        if (v == compiler::kNever) continue;
        sides_clean = sides_clean && clean(v, f);
        mark(v);
      }
      if (!sides_clean || g.key_tap > 0 || g.query_tap > 0)
        for (ValueId v : g.data) mark(v);
    } else {
      const auto& a = op.memory;
      bool sides_clean = true;
      for (const auto& bits : {a.key_bits, a.query_bits})
        for (ValueId v : bits) sides_clean = sides_clean && clean(v, f), mark(v);
      for (ValueId v : {a.write_flag, a.read_flag}) {
        if (v == compiler::kNever) continue;
        sides_clean = sides_clean && clean(v, f);
        mark(v);
      }
      if (!sides_clean)
        for (ValueId v : a.data) mark(v);
    }
  }
  std::vector<int> vfam(nvalues, -1);
  for (size_t v = 0; v < nvalues; ++v) vfam[v] = private_family(static_cast<ValueId>(v));
  // Token inputs live from the embedding (as the allocator keeps them).
  for (ValueId v : itf.inputs)
    if (machine_live.last[static_cast<size_t>(v)] >= 0) machine_live.first[static_cast<size_t>(v)] = 0;

  // Each family scheduled alone from layer 0 (its private ops, in program order, under
  // the machine's limits), as an overlaid stack would place it; the shared ops and values
  // stay where the machine has them.
  int64_t shared_ops = 0, shared_neurons = 0;
  for (size_t i = 0; i < ops.size(); ++i)
    if (families_of_op[i] > 1) ++shared_ops, shared_neurons += static_cast<int64_t>(ops[i].neurons.size());
  const compiler::ScheduleLimits& limits = options.limits;
  struct Family {
    int64_t sublayers = 0, ops = 0, neurons = 0;
    std::vector<int64_t> control, data, neurons_at;  // live per sublayer, neurons per layer
  };
  std::vector<Family> fam(F);
  int64_t depth = 0;
  for (size_t f = 0; f < F; ++f) {
    compiler::Program sub;
    for (size_t v = 0; v < nvalues; ++v) sub.value(p.name(static_cast<ValueId>(v)));
    // index[i]: the number of the family's ops before op i (its index in `sub` when it is one).
    std::vector<size_t> index(ops.size() + 1, 0);
    for (size_t i = 0; i < ops.size(); ++i) {
      const bool mine = families_of_op[i] == 1 && family_of_op[i] == static_cast<int>(f);
      if (mine) sub.mutable_ops().push_back(ops[i]);
      index[i + 1] = index[i] + (mine ? 1 : 0);
    }
    Family& r = fam[f];
    r.ops = static_cast<int64_t>(sub.ops().size());
    if (r.ops == 0) continue;
    // The builders' explicit orders (which keep their units narrow), where both sides keep ops.
    for (const compiler::OpOrder& o : p.orders()) {
      const compiler::OpRange before{index[o.before.begin], index[o.before.end]};
      const compiler::OpRange after{index[o.after.begin], index[o.after.end]};
      if (before.begin < before.end && after.begin < after.end) sub.order(before, after);
    }
    // As late as useful (the machine's own schedule sinks too): token inputs fixed.
    std::vector<bool> fixed(nvalues, false), kept(nvalues, false);
    for (ValueId v : itf.inputs) fixed[static_cast<size_t>(v)] = true;
    const compiler::Schedule s = compiler::sink_schedule(sub, compiler::schedule(sub, limits), limits, fixed, kept);
    r.sublayers = s.num_sublayers;
    depth = std::max(depth, s.num_sublayers);
    r.neurons_at.assign(static_cast<size_t>(s.num_layers()), 0);
    Intervals live(nvalues);
    for (size_t i = 0; i < sub.ops().size(); ++i) {
      const compiler::Op& op = sub.ops()[i];
      r.neurons += static_cast<int64_t>(op.neurons.size());
      r.neurons_at[static_cast<size_t>(s.sublayer[i] / 2)] += static_cast<int64_t>(op.neurons.size());
      live.access(op, s.sublayer[i]);
    }
    // The family's own values (shared ones are counted where the machine has them).
    const int mine = static_cast<int>(f);
    r.control = live_per_sublayer(live, s.num_sublayers, [&](size_t v) { return vfam[v] == mine && control[v]; });
    r.data = live_per_sublayer(live, s.num_sublayers, [&](size_t v) { return vfam[v] == mine && !control[v]; });
  }
  // Shared values: live as the machine has them.
  const std::vector<int64_t> shared_live =
      live_per_sublayer(machine_live, schedule.num_sublayers, [&](size_t v) { return vfam[v] < 0; });
  int64_t n_control = 0, n_data = 0, n_shared = 0;
  for (size_t v = 0; v < nvalues; ++v)
    if (machine_live.first[v] >= 0) (vfam[v] < 0 ? n_shared : control[v] ? n_control : n_data)++;
  const int64_t shared_max = *std::max_element(shared_live.begin(), shared_live.end());

  std::printf("values: %lld control, %lld data (%.1f %% of the family values), %lld shared; ops in several cones: %lld "
              "(%lld neurons)\n",
              static_cast<long long>(n_control), static_cast<long long>(n_data),
              100.0 * static_cast<double>(n_data) / static_cast<double>(std::max<int64_t>(1, n_control + n_data)),
              static_cast<long long>(n_shared), static_cast<long long>(shared_ops), static_cast<long long>(shared_neurons));
  std::printf("%-8s %6s %7s %9s %8s %8s   (alone: layers, ops, neurons, widest control and data)\n", "family", "layers",
              "ops", "neurons", "control", "data");
  auto at = [](const std::vector<int64_t>& row, int64_t k) {
    return k < static_cast<int64_t>(row.size()) ? row[static_cast<size_t>(k)] : int64_t{0};
  };
  for (size_t f = 0; f < F; ++f) {
    const Family& r = fam[f];
    if (r.ops == 0) continue;
    std::printf("%-8s %6lld %7lld %9lld %8lld %8lld\n", families[f].c_str(), static_cast<long long>((r.sublayers + 1) / 2),
                static_cast<long long>(r.ops), static_cast<long long>(r.neurons),
                static_cast<long long>(*std::max_element(r.control.begin(), r.control.end())),
                static_cast<long long>(*std::max_element(r.data.begin(), r.data.end())));
  }
  // The overlaid stack, with and without data dims shared across families.
  int64_t h_shared = 0, h_private = 0, imax = 0;
  for (int64_t k = 0; k < depth; ++k) {
    int64_t c = 0, d = 0, dmax = 0, n = 0;
    for (size_t f = 0; f < F; ++f) {
      c += at(fam[f].control, k);
      d += at(fam[f].data, k);
      dmax = std::max(dmax, at(fam[f].data, k));
      if (k % 2 == 0) n += at(fam[f].neurons_at, k / 2);
    }
    h_shared = std::max(h_shared, c + dmax);
    h_private = std::max(h_private, c + d);
    imax = std::max(imax, n);
  }
  const int64_t layers = (depth + 1) / 2;
  // The machine's GDN rows per hidden dim and layer (its parameters less the MLPs').
  const double g = static_cast<double>(io::qwen35_parameter_count(cfg)) / static_cast<double>(alloc.num_layers) /
                       static_cast<double>(alloc.hidden_size) -
                   3.0 * static_cast<double>(alloc.intermediate_size);
  auto params = [&](int64_t h) {
    return static_cast<double>(layers) * static_cast<double>(h) * (3.0 * static_cast<double>(imax) + g) / 1e9;
  };
  std::printf("overlaid: %lld layers, neurons per layer up to %lld, shared values up to %lld live\n",
              static_cast<long long>(layers), static_cast<long long>(imax), static_cast<long long>(shared_max));
  std::printf("  data dims shared across families: hidden >= %lld: %.2f billion parameters\n",
              static_cast<long long>(h_shared + shared_max), params(h_shared + shared_max));
  std::printf("  every family in dims of its own:  hidden >= %lld: %.2f billion parameters\n",
              static_cast<long long>(h_private + shared_max), params(h_private + shared_max));
  // The floor of any packing: every neuron is a row of 3 hidden-wide vectors, and the hidden
  // size holds at least the widest family alone.
  int64_t neurons = shared_neurons, widest = 0;
  for (const Family& r : fam) {
    neurons += r.neurons;
    int64_t w = 0;
    for (size_t k = 0; k < r.control.size(); ++k) w = std::max(w, r.control[k] + r.data[k]);
    widest = std::max(widest, w);
  }
  std::printf("floor: %lld neurons x 3 x hidden >= %lld (the widest family alone + the shared values): %.2f billion "
              "parameters in the MLPs\n",
              static_cast<long long>(neurons), static_cast<long long>(widest + shared_max),
              3.0 * static_cast<double>(neurons) * static_cast<double>(widest + shared_max) / 1e9);
  return 0;
}
