// Why the token machine's idle units are not idle (docs/engine.md, "The per-layer floor"):
// for the token machine (machine/token_machine.h) at P positions, a greedy host run of N
// nested steps, every cycle's MLP and GDN sublayers that the engine runs (not skipped as
// idle; followed through engine::SublayerTap), and for each the read dims that are live
// (not +-0) on that cycle, mapped back to what the machine's allocation put there: the value names
// and the op labels that read them (compiler::Program, Schedule, Allocation), or the
// constant rail (a kOne term: the emitter reads rail_dims[0], live on every cycle).
//
//   machine_live_dims [positions=16] [steps=1] [cycles=0: all] [family] [from=0]
//
// With a micro-op family (runner::micro_op_family, e.g. 'EXP(#).#.#'), only the cycles
// whose input is a control token of that family are counted (the run is the same). With
// `from`, the cycles before cycle `from` run untapped and uncounted (late positions
// without the tap's cost on the way there).
// Prints per cycle the sublayers run and skipped, then the reads that keep sublayers
// awake, grouped by (op label, value name) with their digits collapsed to '#': for each
// group, how many sublayers it woke and on what share of their runs; and the sublayers
// that ran with no live read dim (a GDN whose conv history is still draining).
// Environment: QPU_LEFTOVERS=n lists the first n live reads of values no op wrote on the
// cycle (a dead-value clear that did not leave +0); QPU_WATCH_DIM=d prints every change of
// residual dim d on the first counted cycle, with the values the sublayer writes there;
// QPU_WIDTH=n prints the n widest sublayers and what is live across the widest (no run);
// with QPU_WIDTH_BANDS=k also each of k bands' widest sublayer and the units holding it;
// QPU_WIDTH_AT=s lists what is live across sublayer s instead of the widest.
// QPU_MAX_NEURONS=n and QPU_SEGMENTS=sum,wsum,slow build the machine for n neurons per
// MLP sublayer and those blocks per segment, QPU_SLOW_BESIDE=1 SLOW beside WSUM,
// QPU_DEADLINE=1 and QPU_CLEAR_ROOM=n the schedule (as machine_shape).
// A diagnostic, not a test: the engine and the machine are as built.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "engine/model.h"
#include "machine/token_machine.h"
#include "runner/cycle_profile.h"
#include "runner/story_stream.h"
#include "npu/tests/unit_harness.h"

namespace {

using namespace qpu;
using compiler::kOne;
using compiler::ValueId;

int64_t argmax(const std::vector<float>& logits) {
  return std::max_element(logits.begin(), logits.end()) - logits.begin();
}

// "SCORE(3).1 lane[12]" -> "SCORE(#).# lane[#]": groups a unit's copies (the profile's
// micro-op families collapse names the same way).
std::string collapse(const std::string& s) { return runner::micro_op_family(s); }

// One read of a sublayer: residual dim `dim` read by op `op` as value `value` (kOne: the rail).
struct Read {
  int64_t dim;
  ValueId value;
  size_t op;
};

}  // namespace

int main(int argc, char** argv) {
  const int positions = argc > 1 ? std::atoi(argv[1]) : 16;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 1;
  const long max_cycles = argc > 3 ? std::atol(argv[3]) : 0;
  const std::string family = argc > 4 ? argv[4] : "";
  const long from = argc > 5 ? std::atol(argv[5]) : 0;
  omp_set_num_threads(1);
  const auto start = std::chrono::steady_clock::now();
  machine::TokenMachineOptions o = runner::token_machine_options(positions);
  if (const char* e = std::getenv("QPU_MAX_NEURONS")) o.limits.max_neurons_per_mlp = std::atoi(e);
  if (const char* e = std::getenv("QPU_SEGMENTS"))
    if (std::sscanf(e, "%d,%d,%d", &o.sum_segment_blocks, &o.wsum_segment_blocks, &o.slow_segment_blocks) != 3) return 2;
  if (std::getenv("QPU_SLOW_BESIDE")) o.slow_beside_wsum = true;
  if (std::getenv("QPU_DEADLINE")) o.limits.by_deadline = true;
  if (const char* e = std::getenv("QPU_CLEAR_ROOM")) o.limits.clear_room = std::atoi(e);
  const machine::TokenMachine m = machine::build_token_machine(npu::unit_testing::stories260k(), o);
  const compiler::Program& program = m.program;
  const compiler::Schedule& schedule = m.compiled.schedule;
  const compiler::Allocation& alloc = m.compiled.allocation;
  const int64_t layers = alloc.num_layers;
  const int64_t rail = alloc.rail_dims[0];

  // Per sublayer (2 l: mixer, 2 l + 1: MLP) the reads of its ops, as the emitter writes
  // them: MLP gate/up terms (kOne on the rail); GDN memories their bits, flags, enables
  // and data, and the rail unless both sides have an enable (beta, the output gate z, the
  // v rail cells, the address complement; compiler/emit.cpp).
  std::vector<std::vector<Read>> reads(static_cast<size_t>(2 * layers));
  const auto& ops = program.ops();
  for (size_t i = 0; i < ops.size(); ++i) {
    const int64_t s = schedule.sublayer[i];
    auto& r = reads[static_cast<size_t>(s)];
    const auto add = [&](ValueId v) {
      if (v == compiler::kNever) return;
      r.push_back({v == kOne ? rail : alloc.dim(v), v, i});
    };
    const compiler::Op& op = ops[i];
    if (op.kind == compiler::OpKind::Mlp) {
      for (const compiler::Neuron& n : op.neurons) {
        for (const auto& t : n.gate.terms) add(t.value);
        for (const auto& t : n.up.terms) add(t.value);
      }
    } else if (op.kind == compiler::OpKind::GdnMemory) {
      for (ValueId v : op.reads()) add(v);
      if (op.gdn.key_enable == kOne || op.gdn.query_enable == kOne) add(kOne);
    }
  }
  for (auto& r : reads) {
    std::sort(r.begin(), r.end(), [](const Read& a, const Read& b) {
      return a.dim != b.dim ? a.dim < b.dim : a.value != b.value ? a.value < b.value : a.op < b.op;
    });
    r.erase(std::unique(r.begin(), r.end(),
                        [](const Read& a, const Read& b) { return a.dim == b.dim && a.value == b.value && a.op == b.op; }),
            r.end());
  }

  // QPU_WIDTH=n: the n widest sublayers by values live across them (first to last access:
  // a value that keeps its dim to the end counts only to its last access), and what is
  // live across the widest one, grouped as above; then stops (no run).
  if (const char* w = std::getenv("QPU_WIDTH")) {
    const size_t n = static_cast<size_t>(std::max(1L, std::atol(w)));
    std::vector<int64_t> first(static_cast<size_t>(program.num_values()), -1), last(first.size(), -1);
    for (size_t i = 0; i < ops.size(); ++i)
      for (const auto& list : {ops[i].reads(), ops[i].writes()})
        for (ValueId v : list) {
          const auto u = static_cast<size_t>(v);
          if (first[u] < 0 || schedule.sublayer[i] < first[u]) first[u] = schedule.sublayer[i];
          last[u] = std::max(last[u], schedule.sublayer[i]);
        }
    std::vector<int64_t> live(static_cast<size_t>(2 * layers) + 1, 0);
    for (size_t v = 0; v < first.size(); ++v)
      if (first[v] >= 0) ++live[static_cast<size_t>(first[v])], --live[static_cast<size_t>(last[v]) + 1];
    for (size_t s = 1; s < live.size(); ++s) live[s] += live[s - 1];
    std::vector<size_t> order(static_cast<size_t>(2 * layers));
    for (size_t s = 0; s < order.size(); ++s) order[s] = s;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return live[a] > live[b]; });
    for (size_t i = 0; i < std::min(n, order.size()); ++i)
      std::printf("width: sublayer %zu (layer %zu, %s): %lld values live\n", order[i], order[i] / 2,
                  order[i] % 2 ? "MLP" : "mixer", static_cast<long long>(live[order[i]]));
    // QPU_WIDTH_BANDS=k: the widest sublayer of each of k bands of layers, with the units
    // (value name up to the first '.') that hold most of its live values.
    if (const char* b = std::getenv("QPU_WIDTH_BANDS")) {
      const auto bands = static_cast<size_t>(std::max(1L, std::atol(b)));
      const size_t per = (live.size() - 1 + bands - 1) / bands;
      for (size_t band = 0; band * per < live.size() - 1; ++band) {
        size_t widest = band * per;
        for (size_t s = band * per; s < std::min(live.size() - 1, (band + 1) * per); ++s)
          if (live[s] > live[widest]) widest = s;
        std::map<std::string, int64_t> units;
        for (size_t v = 0; v < first.size(); ++v)
          if (first[v] >= 0 && first[v] <= static_cast<int64_t>(widest) && last[v] >= static_cast<int64_t>(widest)) {
            const std::string name = program.name(static_cast<ValueId>(v));
            ++units[name.substr(0, name.find('.'))];
          }
        std::vector<std::pair<int64_t, std::string>> top;
        for (const auto& [k, c] : units) top.push_back({c, k});
        std::sort(top.rbegin(), top.rend());
        std::printf("layers %5zu-%5zu: widest %5lld at layer %zu:", band * per / 2, std::min(live.size() - 1, (band + 1) * per) / 2,
                    static_cast<long long>(live[widest]), widest / 2);
        for (size_t i = 0; i < std::min<size_t>(7, top.size()); ++i)
          std::printf(" %s %lld", top[i].second.c_str(), static_cast<long long>(top[i].first));
        std::printf("\n");
      }
    }
    // QPU_WIDTH_AT=s: what is live across sublayer s instead of the widest.
    const auto at = static_cast<int64_t>(std::getenv("QPU_WIDTH_AT") ? static_cast<size_t>(std::atol(std::getenv("QPU_WIDTH_AT"))) : order[0]);
    std::map<std::string, int64_t> names;
    for (size_t v = 0; v < first.size(); ++v)
      if (first[v] >= 0 && first[v] <= at && last[v] >= at)
        ++names[collapse(program.name(static_cast<ValueId>(v)))];
    // QPU_WIDTH_WHO=name: for the values of that collapsed name live there, their first
    // and last sublayers and the label of the op that first writes them.
    if (const char* who = std::getenv("QPU_WIDTH_WHO")) {
      std::map<std::string, int64_t> writers;
      for (size_t i = 0; i < ops.size(); ++i)
        for (ValueId v : ops[i].writes()) {
          const auto u = static_cast<size_t>(v);
          if (first[u] > at || last[u] < at || collapse(program.name(v)) != who) continue;
          ++writers[ops[i].label.substr(0, 40) + " [" + std::to_string(first[u]) + ", " + std::to_string(last[u]) + "]"];
        }
      for (const auto& [label, c] : writers) std::printf("  who: %4lld  %s\n", static_cast<long long>(c), label.c_str());
    }
    std::vector<std::pair<int64_t, std::string>> sorted;
    for (const auto& [k, c] : names) sorted.push_back({c, k});
    std::sort(sorted.rbegin(), sorted.rend());
    for (size_t i = 0; i < std::min<size_t>(40, sorted.size()); ++i)
      std::printf("  %6lld  %s\n", static_cast<long long>(sorted[i].first), sorted[i].second.c_str());
    return 0;
  }

  // Which sublayers hold a GDN memory (the others' mixers are idle mixers or attention).
  std::vector<char> memory_mixer(static_cast<size_t>(layers), 0);
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == compiler::OpKind::GdnMemory) memory_mixer[static_cast<size_t>(schedule.sublayer[i] / 2)] = 1;

  // Per sublayer: runs, skips, runs with no live read, and per (op, value) read how many
  // runs found it live. The engine's decision is followed from the residual before each
  // sublayer (engine::SublayerTap gives it after each): an MLP or GDN sublayer is skipped
  // when every read dim is +-0 (and x is finite), a GDN mixer moreover only once its last
  // kernel - 1 = 3 inputs were idle too (its conv history is +0; every head's idle decay is
  // 1, compiler/emit.cpp). The totals are checked against Model::skipped_sublayers().
  struct Stats {
    int64_t runs = 0, skips = 0, no_live_read = 0;
    std::map<std::pair<size_t, ValueId>, int64_t> live;
  };
  std::vector<Stats> stats(static_cast<size_t>(2 * layers));
  std::vector<int> zero_inputs(static_cast<size_t>(layers), 3);  // a fresh state's history is +0
  bool counted = true;  // this cycle's input is of `family` (or no family was given)
  // QPU_LEFTOVERS=n: list the first n live reads of a value that no op wrote on this
  // cycle (every writer's sublayer was skipped): a value its dim still held from an
  // earlier occupant, i.e. a dead-value clear that did not run.
  const long leftovers_wanted = std::getenv("QPU_LEFTOVERS") ? std::atol(std::getenv("QPU_LEFTOVERS")) : 0;
  long leftovers_found = 0;
  std::vector<std::vector<int64_t>> writer_sublayers(static_cast<size_t>(program.num_values()));
  for (size_t i = 0; i < ops.size(); ++i)  // the dead-value clears aside: they write -v
    if (ops[i].label.rfind("clear ", 0) != 0)
      for (ValueId v : ops[i].writes()) writer_sublayers[static_cast<size_t>(v)].push_back(schedule.sublayer[i]);
  std::vector<char> reported(writer_sublayers.size(), 0);
  std::vector<char> ran(static_cast<size_t>(2 * layers), 0);
  const auto report_leftover = [&](int64_t s, const Read& r, float x) {
    std::printf("leftover: sublayer %lld (%s) op '%s' reads '%s' (dim %lld) = %a, written in sublayers",
                static_cast<long long>(s), s % 2 ? "MLP" : "GDN", ops[r.op].label.c_str(), program.name(r.value).c_str(),
                static_cast<long long>(r.dim), static_cast<double>(x));
    for (int64_t w : writer_sublayers[static_cast<size_t>(r.value)]) std::printf(" %lld", static_cast<long long>(w));
    // The dim's occupant before: the value on this dim with the latest writer above s.
    int64_t best = -1;
    ValueId prev = kOne;
    for (size_t v = 0; v < writer_sublayers.size(); ++v) {
      if (static_cast<ValueId>(v) == r.value || alloc.dim_of_value[v] != r.dim) continue;
      for (int64_t w : writer_sublayers[v])
        if (w < s && w > best) best = w, prev = static_cast<ValueId>(v);
    }
    if (prev != kOne) std::printf("; the dim's last other writer: '%s' in sublayer %lld", program.name(prev).c_str(), static_cast<long long>(best));
    std::printf("\n");
  };
  const auto before_sublayer = [&](int64_t s, std::span<const float> x) {
    const int64_t l = s / 2;
    const bool mlp = s % 2 == 1;
    if (!mlp && !memory_mixer[static_cast<size_t>(l)]) return;  // attention or an idle mixer
    Stats& st = stats[static_cast<size_t>(s)];
    bool idle = true;  // x is finite on the machine's cycles (the engine's counts below would differ)
    std::vector<std::pair<size_t, ValueId>> live;
    for (const Read& r : reads[static_cast<size_t>(s)]) {
      if (x[static_cast<size_t>(r.dim)] == 0.0f) continue;
      idle = false;
      live.push_back({r.op, r.value});
      if (counted && leftovers_found < leftovers_wanted && r.value != kOne) {
        const auto& w = writer_sublayers[static_cast<size_t>(r.value)];
        const bool before = std::any_of(w.begin(), w.end(), [&](int64_t ws) { return ws < s; });  // else an input
        const bool written = std::any_of(w.begin(), w.end(), [&](int64_t ws) { return ws < s && ran[static_cast<size_t>(ws)]; });
        if (before && !written && !reported[static_cast<size_t>(r.value)]) {
          reported[static_cast<size_t>(r.value)] = 1;
          ++leftovers_found;
          report_leftover(s, r, x[static_cast<size_t>(r.dim)]);
        }
      }
    }
    bool skipped = idle;
    if (!mlp) {
      int& z = zero_inputs[static_cast<size_t>(l)];
      skipped = idle && z >= 3;
      z = idle ? std::min(z + 1, 3) : 0;
    }
    ran[static_cast<size_t>(s)] = !skipped;
    if (!counted) return;
    if (skipped) {
      ++st.skips;
      return;
    }
    ++st.runs;
    for (const auto& k : live) ++st.live[k];
    if (live.empty()) ++st.no_live_read;
  };
  // QPU_WATCH_DIM=d: on the first counted cycle, every change of residual dim d after a
  // sublayer, with the values the allocation puts on d that the sublayer's ops write.
  const long watch = std::getenv("QPU_WATCH_DIM") ? std::atol(std::getenv("QPU_WATCH_DIM")) : -1;
  bool watched = false, watching = false;
  float watch_last = 0.0f;
  const engine::SublayerTap tap = [&](int64_t s, std::span<const float> residual) {
    if (watching && residual[static_cast<size_t>(watch)] != watch_last) {
      watch_last = residual[static_cast<size_t>(watch)];
      std::printf("watch: dim %ld = %a after sublayer %lld:", watch, static_cast<double>(watch_last), static_cast<long long>(s));
      for (size_t i = 0; i < ops.size(); ++i)
        if (schedule.sublayer[i] == s)
          for (ValueId v : ops[i].writes())
            if (alloc.dim(v) == watch) std::printf(" '%s' writes '%s';", ops[i].label.c_str(), program.name(v).c_str());
      std::printf("\n");
    }
    if (s + 1 < 2 * layers) before_sublayer(s + 1, residual);
  };
  const engine::Model model = m.model();
  const auto& c = m.compiled.weights.config;
  std::printf("token machine, %d positions: %lld layers, hidden %lld, intermediate %lld; built in %.1f s\n", positions,
              static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.intermediate_size),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());

  // The greedy run: the prompt, then the argmax fed back until DONE (or max_cycles).
  engine::State state = model.new_state();
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  long cycles = 0, all_cycles = 0;
  int64_t next = -1;
  const int64_t first_control = m.id(m.control_names.front());
  const int64_t hidden = c.hidden_size;
  const auto forward = [&](int64_t t) {
    std::fill(ran.begin(), ran.end(), 0);
    watching = false;
    counted = all_cycles >= from &&
              (family.empty() || (t >= first_control &&
                                  runner::micro_op_family(m.control_names[static_cast<size_t>(t - first_control)]) == family));
    // Sublayer 0 reads the token's embedding row.
    before_sublayer(0, std::span<const float>(m.compiled.weights.embed_tokens).subspan(static_cast<size_t>(t * hidden),
                                                                                       static_cast<size_t>(hidden)));
    if (counted && watch >= 0 && !watched) watched = watching = true, watch_last = 0.0f;
    // The tap starts 3 cycles early: a GDN's conv history (zero_inputs) needs the last 3.
    model.forward(t, state, logits, {}, all_cycles + 3 >= from ? tap : engine::SublayerTap{});
    ++all_cycles;
    if (counted) ++cycles;
  };
  for (int64_t t : m.prompt({1}, steps)) forward(t);
  next = argmax(logits);
  while (next != m.done() && (max_cycles == 0 || all_cycles < max_cycles)) {
    forward(next);
    next = argmax(logits);
  }
  const double n = static_cast<double>(cycles);

  int64_t gdn_runs = 0, mlp_runs = 0, gdn_skips = 0, mlp_skips = 0, gdn_drain = 0, mlp_none = 0;
  for (size_t s = 0; s < stats.size(); ++s) {
    (s % 2 ? mlp_runs : gdn_runs) += stats[s].runs;
    (s % 2 ? mlp_skips : gdn_skips) += stats[s].skips;
    (s % 2 ? mlp_none : gdn_drain) += stats[s].no_live_read;
  }
  std::printf("%ld cycles (%s); per cycle: GDN mixers run %.1f, skipped %.1f (run with no live read dim: %.1f, "
              "the conv history draining); MLPs run %.1f, skipped %.1f (run with no live read dim: %.1f)\n",
              cycles, next == m.done() ? "to DONE" : "cut", static_cast<double>(gdn_runs) / n,
              static_cast<double>(gdn_skips) / n, static_cast<double>(gdn_drain) / n, static_cast<double>(mlp_runs) / n,
              static_cast<double>(mlp_skips) / n, static_cast<double>(mlp_none) / n);
  const engine::IdleSublayerCounts engine_skips = model.skipped_sublayers();
  if (!family.empty() || from > 0)
    std::printf("counted: the %ld cycles of %s among %ld (the engine's own counts cover all of them)\n", cycles,
                family.empty() ? "any family" : family.c_str(), all_cycles);
  else
    std::printf("the engine's own counts: GDN skipped %.1f, MLPs skipped %.1f per cycle%s\n",
              static_cast<double>(engine_skips.gdn) / n, static_cast<double>(engine_skips.mlp) / n,
              engine_skips.gdn == gdn_skips && engine_skips.mlp == mlp_skips ? " (the same)" : " (DIFFERENT: the read "
              "dims above are not the engine's)");

  // Sublayers that run on (almost) every cycle and the reads live on (almost) all of
  // their runs: the always-live values that keep them awake.
  struct Group {
    std::set<size_t> sublayers;
    int64_t live = 0, runs = 0;
  };
  for (const bool mlp : {false, true}) {
    std::map<std::string, Group> groups;     // "op label | value name" collapsed
    std::map<std::string, int64_t> sole;     // sublayers whose only always-live reads are this group
    int64_t always_run = 0;
    for (size_t s = mlp ? 1 : 0; s < stats.size(); s += 2) {
      const Stats& st = stats[s];
      if (st.runs < cycles * 9 / 10) continue;
      ++always_run;
      std::set<std::string> keys;
      for (const auto& [read, count] : st.live) {
        if (count < st.runs * 9 / 10) continue;
        const std::string key = collapse(ops[read.first].label) + " | " +
                                (read.second == kOne ? std::string("<rail: constant>") : collapse(program.name(read.second)));
        Group& g = groups[key];
        if (g.sublayers.insert(s).second) g.runs += st.runs;
        g.live += count;
        keys.insert(key);
      }
      if (keys.size() == 1) ++sole[*keys.begin()];
      if (keys.empty()) ++sole["<none live on 90% of runs>"];
    }
    std::printf("\n%s sublayers that run on >= 90%% of the cycles: %lld. Reads live on >= 90%% of such a sublayer's "
                "runs (op label | value), by sublayers woken:\n",
                mlp ? "MLP" : "GDN", static_cast<long long>(always_run));
    std::vector<std::pair<std::string, const Group*>> sorted;
    for (const auto& [k, g] : groups) sorted.push_back({k, &g});
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.second->sublayers.size() > b.second->sublayers.size(); });
    for (const auto& [k, g] : sorted) {
      const int64_t first = static_cast<int64_t>(*g->sublayers.begin()) / 2;
      std::printf("  %5zu sublayers (layers %lld..%lld)  %s  [sole always-live read of %lld]\n", g->sublayers.size(),
                  static_cast<long long>(first), static_cast<long long>(*g->sublayers.rbegin() / 2), k.c_str(),
                  static_cast<long long>(sole.count(k) ? sole[k] : 0));
    }
    if (sole.count("<none live on 90% of runs>"))
      std::printf("  %5lld sublayers with no read live on 90%% of their runs\n",
                  static_cast<long long>(sole["<none live on 90% of runs>"]));
  }

  // The sublayers that run sometimes (neither always nor never): how often.
  int64_t some = 0, some_runs = 0;
  for (const Stats& st : stats)
    if (st.runs > 0 && st.runs < cycles * 9 / 10) {
      ++some;
      some_runs += st.runs;
    }
  std::printf("\nsublayers that run on some cycles (< 90%%): %lld, %.1f runs per cycle\n", static_cast<long long>(some),
              static_cast<double>(some_runs) / n);
  // What wakes them: per (op label | value), the runs per cycle on which it was live
  // (a run with several live reads counts under each), the 30 largest.
  std::map<std::string, std::pair<int64_t, std::set<size_t>>> why;  // key -> (live runs, sublayers)
  for (size_t s = 0; s < stats.size(); ++s) {
    const Stats& st = stats[s];
    if (st.runs == 0 || st.runs >= cycles * 9 / 10) continue;
    for (const auto& [read, count] : st.live) {
      const std::string key = std::string(s % 2 ? "MLP " : "GDN ") + collapse(ops[read.first].label) + " | " +
                              (read.second == kOne ? std::string("<rail: constant>") : collapse(program.name(read.second)));
      why[key].first += count;
      why[key].second.insert(s);
    }
  }
  std::vector<std::pair<int64_t, std::string>> by_runs;
  for (const auto& [k, v] : why) by_runs.push_back({v.first, k});
  std::sort(by_runs.rbegin(), by_runs.rend());
  for (size_t i = 0; i < std::min<size_t>(30, by_runs.size()); ++i)
    std::printf("  %7.1f runs per cycle live, %5zu sublayers  %s\n", static_cast<double>(by_runs[i].first) / n,
                why[by_runs[i].second].second.size(), by_runs[i].second.c_str());
  return 0;
}
