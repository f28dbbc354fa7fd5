// The engine's cost per machine cycle (one host forward) on a real looped machine:
// stories260K's QKV machine (machine/testing/qkv_machine.h, ~230 narrow Qwen3.5 layers), fed the
// token stream of src/machine/tests/qkv_machine_test.cpp's first test (HDR, the WX writes
// of run.c's x, WPOS, QKV(l), INC, RQ and RK read-backs at five (positions, layer) cases),
// every forward of it a cycle.
//
//   BM_MachineCycle/threads:T/cases:C   one iteration = the stream of the first C cases
//                               on a fresh State (omp_set_num_threads(T)); counters:
//                               ms_per_cycle (wall), cycles per iteration.
//
// The stream is recorded once by a greedy host run (the prompt tokens, then the argmax
// fed back until DONE) and then replayed: every replay must give the recorded argmax
// after every forward (checked on the first replay at each thread count, outside the
// timing) so the measured work is the machine's real work, not a diverged run.
//
//   BM_SmallGdnLayers/threads:T  24 GDN layers of the machine's mixer shape (16 heads of
//                               16 x 64, hidden 256) with random sparse weights and real
//                               decays, so every head runs its full recurrence (66,560
//                               state units per step: above the old 2^14 parallel
//                               threshold of the recurrence, below the new 2^17); the
//                               products stay below their own threshold. One forward per
//                               iteration.
//
//   BM_AttentionMachineCycle/threads:T/stages:S   the QKV machine WITH the attention
//                               stages (options.attention, max_positions 64: ~830 layers,
//                               hidden ~2,400), fed the stream of qkv_machine_test's
//                               AttentionStagesBitExactOnTheEngine, first case (layer 1,
//                               position 37, stale row 39): HDR, QKV(1) at 39 and at
//                               0..37 (WX writes of run.c's x, WPOS), WPOS 37, SCORE(1).0
//                               running itself to DONE, EXP(1).0.0 running itself to
//                               DONE, ATTO(1).0. S = 0: one iteration = the whole stream
//                               from a fresh State; S = 1: only the attention stages'
//                               cycles (SCORE onward) from a copy of the State the loads
//                               left. Recorded and checked like BM_MachineCycle.
//
//   BM_TokenMachineCycle/positions:P/steps:N   the token machine (machine/token_machine.h:
//                               the whole nested stories260K on one looped machine) built
//                               for P positions (16: 1,664 layers; 256 is the story's
//                               ~6,000), run by a greedy host from its prompt (HDR, N
//                               steps, BOS) to DONE, recorded and replayed like
//                               BM_MachineCycle (one thread). Almost every layer of a
//                               cycle is idle (one micro-op fires per cycle), so this is
//                               the engine's per-layer floor; counter us_per_layer.
//                               positions:256 is the story's machine (4,293 layers, hidden
//                               4,480; ~4 min and ~4.4 GB to build, 1,561 cycles a step).
//
//   machine_cycle_bench --benchmark_filter='BM_MachineCycle/threads:1/cases:5'
//   machine_cycle_bench --benchmark_filter='BM_TokenMachineCycle/positions:16'
//   machine_cycle_bench --benchmark_filter='BM_TokenMachineCycle/positions:256'
//   machine_cycle_bench --benchmark_filter='BM_AttentionMachineCycle/threads:1'
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "engine/model.h"
#include "engine/tests/tiny_model.h"
#include "machine/testing/qkv_machine.h"
#include "machine/token_machine.h"
#include "npu/tests/unit_harness.h"

namespace {

using namespace qpu;
using K = reference::TraceKind;
using npu::unit_testing::golden;
using npu::unit_testing::stories260k;

int64_t argmax(const std::vector<float>& logits) {
  return std::max_element(logits.begin(), logits.end()) - logits.begin();
}

struct Setup {
  machine::QkvMachine m;
  std::unique_ptr<engine::Model> model;
  std::vector<int64_t> stream;  // every token forwarded, in order
  std::vector<int64_t> next;    // the argmax after each forward (where it matters: -1 if not)
  std::vector<size_t> case_end;  // stream length after each (positions, layer) case
};

// The prompt, then the argmax fed back until DONE; records every forward into stream/next.
void run_greedy(const machine::AssembledMachine& m, const engine::Model& model, engine::State& state,
                std::vector<float>& logits, const std::vector<int64_t>& prompt, std::vector<int64_t>& stream,
                std::vector<int64_t>& next) {
  for (size_t i = 0; i < prompt.size(); ++i) {
    model.forward(prompt[i], state, logits);
    stream.push_back(prompt[i]);
    next.push_back(i + 1 == prompt.size() ? argmax(logits) : -1);
  }
  for (int64_t guard = 0; guard < 100000; ++guard) {
    const int64_t t = next.back();
    if (t == m.done()) return;
    model.forward(t, state, logits);
    stream.push_back(t);
    next.push_back(argmax(logits));
  }
  std::fprintf(stderr, "machine_cycle_bench: a run did not reach DONE\n");
  std::abort();
}

// One host session: the prompt runs and greedy continuations of the qkv machine test.
Setup& setup() {
  static std::unique_ptr<Setup> s;
  if (s) return *s;
  s = std::make_unique<Setup>();
  const auto start = std::chrono::steady_clock::now();
  s->m = machine::build_qkv_machine(stories260k(), machine::QkvMachineOptions{});
  s->model = std::make_unique<engine::Model>(s->m.model());
  const machine::QkvMachine& m = s->m;
  const auto& gold = golden();
  engine::State state = s->model->new_state();
  std::vector<float> logits(static_cast<size_t>(s->model->config().vocab_size));
  const auto run = [&](const std::vector<int64_t>& prompt) {
    run_greedy(m, *s->model, state, logits, prompt, s->stream, s->next);
  };
  bool first = true;
  for (const auto& [p1, p2, l] :
       std::vector<std::tuple<int, int, int>>{{0, 37, 0}, {37, 95, 1}, {95, 1, 2}, {12, 44, 3}, {64, 63, 4}}) {
    std::vector<int64_t> prompt;
    if (first) prompt.push_back(m.id("HDR"));
    first = false;
    for (int64_t tok : m.load_and_run(gold.at(K::x_in, p1, l), p1, l)) prompt.push_back(tok);
    for (int64_t tok : m.load_x(gold.at(K::x_in, p2, l))) prompt.push_back(tok);
    for (int64_t tok : m.set_pos(p2 - 1)) prompt.push_back(tok);
    prompt.push_back(m.id("INC"));
    run(prompt);
    run({m.qkv(l), m.id("RQ.0")});
    for (const int p : {p1, p2}) {
      std::vector<int64_t> read = m.set_pos(p);
      read.push_back(m.id("RK(" + std::to_string(l) + ").0"));
      run(read);
    }
    s->case_end.push_back(s->stream.size());
  }
  const auto& c = m.compiled.weights.config;
  std::fprintf(stderr, "machine_cycle_bench: qkv machine, %lld layers, hidden %lld, intermediate %lld; stream of %zu "
               "cycles; setup %.1f s\n",
               static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
               static_cast<long long>(c.intermediate_size), s->stream.size(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return *s;
}

// Forwards stream[begin, end) from `state`; with `check`, every recorded argmax must recur.
bool replay_range(const engine::Model& model, const std::vector<int64_t>& stream, const std::vector<int64_t>& next,
                  size_t begin, size_t end, engine::State& state, std::vector<float>& logits, bool check) {
  for (size_t i = begin; i < end; ++i) {
    model.forward(stream[i], state, logits);
    if (check && next[i] >= 0 && argmax(logits) != next[i]) return false;
  }
  benchmark::DoNotOptimize(logits.data());
  return true;
}

// Checks one replay against the recorded run (else the benchmark fails), then times one
// replay per iteration; `seconds` gets the replays' wall time. False when it diverged.
template <class Replay>
bool timed_replays(benchmark::State& bench, const Replay& replay_once, double& seconds) {
  if (!replay_once(true)) {
    bench.SkipWithError("the replayed stream diverged from the recorded greedy run");
    return false;
  }
  for (auto _ : bench) {
    const auto start = std::chrono::steady_clock::now();
    replay_once(false);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return true;
}

// The first `cycles` of the stream on a fresh state.
bool replay(const Setup& s, size_t cycles, std::vector<float>& logits, bool check) {
  engine::State state = s.model->new_state();
  return replay_range(*s.model, s.stream, s.next, 0, cycles, state, logits, check);
}

void BM_MachineCycle(benchmark::State& bench) {
  const Setup& s = setup();
  omp_set_num_threads(static_cast<int>(bench.range(0)));
  const size_t cycles = s.case_end.at(static_cast<size_t>(bench.range(1)) - 1);
  std::vector<float> logits(static_cast<size_t>(s.model->config().vocab_size));
  if (!replay(s, cycles, logits, true)) {
    bench.SkipWithError("the replayed stream diverged from the recorded greedy run");
    return;
  }
  double seconds = 0;
  for (auto _ : bench) {
    const auto start = std::chrono::steady_clock::now();
    replay(s, cycles, logits, false);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  bench.SetItemsProcessed(bench.iterations() * static_cast<int64_t>(cycles));
  bench.counters["cycles"] = static_cast<double>(cycles);
  bench.counters["ms_per_cycle"] = 1e3 * seconds / (static_cast<double>(cycles) * static_cast<double>(bench.iterations()));
}
// Args: threads, cases (1: the first (positions, layer) case, ~1,300 cycles; 5: all).
BENCHMARK(BM_MachineCycle)->ArgNames({"threads", "cases"})->ArgsProduct({{1, 2}, {1, 5}})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// The attention machine's session (qkv_machine_test's AttentionStagesBitExactOnTheEngine,
// first case: layer 1, position 37, the stale row at 39).
struct AttentionSetup {
  machine::QkvMachine m;
  std::unique_ptr<engine::Model> model;
  std::vector<int64_t> stream, next;
  size_t stages_begin = 0;       // the first cycle of the attention stages (SCORE(1).0)
  engine::State at_stages;       // the state before that cycle
};

AttentionSetup& attention_setup() {
  static std::unique_ptr<AttentionSetup> s;
  if (s) return *s;
  s = std::make_unique<AttentionSetup>();
  const auto start = std::chrono::steady_clock::now();
  machine::QkvMachineOptions o;
  o.attention = true;
  o.max_positions = 64;
  s->m = machine::build_qkv_machine(stories260k(), o);
  s->model = std::make_unique<engine::Model>(s->m.model());
  const machine::QkvMachine& m = s->m;
  const auto& gold = golden();
  const int l = 1, pos = 37, stale = 39;
  engine::State state = s->model->new_state();
  std::vector<float> logits(static_cast<size_t>(s->model->config().vocab_size));
  std::vector<int64_t> loads = {m.id("HDR")};
  for (int64_t tok : m.load_and_run(gold.at(K::x_in, stale, l), stale, l)) loads.push_back(tok);
  for (int p = 0; p <= pos; ++p)
    for (int64_t tok : m.load_and_run(gold.at(K::x_in, p, l), p, l)) loads.push_back(tok);
  for (int64_t tok : m.set_pos(pos)) loads.push_back(tok);
  // The loads are a prompt: only its last forward's argmax (SCORE's) is recorded, and
  // SCORE(l).0 is fed as the test feeds it.
  loads.push_back(m.score_and_max(l, pos)[0]);
  for (size_t i = 0; i + 1 < loads.size(); ++i) {
    s->model->forward(loads[i], state, logits);
    s->stream.push_back(loads[i]);
    s->next.push_back(-1);
  }
  s->stages_begin = s->stream.size();
  s->at_stages = state;
  run_greedy(m, *s->model, state, logits, {loads.back()}, s->stream, s->next);  // SCORE .. MAX .. DONE
  run_greedy(m, *s->model, state, logits, {m.exps(l, pos)[0]}, s->stream, s->next);  // EXP .. WSUM .. DONE
  run_greedy(m, *s->model, state, logits, {m.id("ATTO(" + std::to_string(l) + ").0")}, s->stream, s->next);
  const auto& c = m.compiled.weights.config;
  std::fprintf(stderr, "machine_cycle_bench: attention machine, %lld layers, hidden %lld, intermediate %lld; stream of "
               "%zu cycles (%zu of them the stages); setup %.1f s\n",
               static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
               static_cast<long long>(c.intermediate_size), s->stream.size(), s->stream.size() - s->stages_begin,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return *s;
}

void BM_AttentionMachineCycle(benchmark::State& bench) {
  const AttentionSetup& s = attention_setup();
  omp_set_num_threads(static_cast<int>(bench.range(0)));
  const bool stages_only = bench.range(1) != 0;
  const size_t begin = stages_only ? s.stages_begin : 0, cycles = s.stream.size() - begin;
  std::vector<float> logits(static_cast<size_t>(s.model->config().vocab_size));
  const auto replay_once = [&](bool check) {
    engine::State state = stages_only ? s.at_stages : s.model->new_state();
    return replay_range(*s.model, s.stream, s.next, begin, s.stream.size(), state, logits, check);
  };
  double seconds = 0;
  if (!timed_replays(bench, replay_once, seconds)) return;
  bench.SetItemsProcessed(bench.iterations() * static_cast<int64_t>(cycles));
  bench.counters["cycles"] = static_cast<double>(cycles);
  bench.counters["ms_per_cycle"] = 1e3 * seconds / (static_cast<double>(cycles) * static_cast<double>(bench.iterations()));
}
// Args: threads, stages (0: the whole stream; 1: the attention stages only).
BENCHMARK(BM_AttentionMachineCycle)->ArgNames({"threads", "stages"})->ArgsProduct({{1, 2}, {0, 1}})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// The token machine's session: built once per size, its greedy run recorded once.
struct TokenSetup {
  machine::TokenMachine m;
  std::unique_ptr<engine::Model> model;
  std::vector<int64_t> stream, next;
};

TokenSetup& token_setup(int positions, int steps) {
  static std::map<std::pair<int, int>, std::unique_ptr<TokenSetup>> setups;
  auto& s = setups[{positions, steps}];
  if (s) return *s;
  setups.clear();  // one machine alive at a time (the 256-position one is ~GBs)
  auto& fresh = setups[{positions, steps}];
  fresh = std::make_unique<TokenSetup>();
  const auto start = std::chrono::steady_clock::now();
  machine::TokenMachineOptions o;
  o.max_positions = positions;
  o.kv_banks = 32;  // as runner::token_machine_options (the machine needs 32 at 16 positions)
  fresh->m = machine::build_token_machine(stories260k(), o);
  fresh->model = std::make_unique<engine::Model>(fresh->m.model());
  engine::State state = fresh->model->new_state();
  std::vector<float> logits(static_cast<size_t>(fresh->model->config().vocab_size));
  const std::vector<int64_t> prompt = fresh->m.prompt({1}, steps);
  run_greedy(fresh->m, *fresh->model, state, logits, prompt, fresh->stream, fresh->next);
  const auto& c = fresh->m.compiled.weights.config;
  std::fprintf(stderr, "machine_cycle_bench: token machine (%d positions), %lld layers, hidden %lld, intermediate "
               "%lld; stream of %zu cycles (%d steps); setup %.1f s\n",
               positions, static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
               static_cast<long long>(c.intermediate_size), fresh->stream.size(), steps,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return *fresh;
}

void BM_TokenMachineCycle(benchmark::State& bench) {
  const TokenSetup& s = token_setup(static_cast<int>(bench.range(0)), static_cast<int>(bench.range(1)));
  omp_set_num_threads(1);
  std::vector<float> logits(static_cast<size_t>(s.model->config().vocab_size));
  const auto replay_once = [&](bool check) {
    engine::State state = s.model->new_state();
    return replay_range(*s.model, s.stream, s.next, 0, s.stream.size(), state, logits, check);
  };
  double seconds = 0;
  if (!timed_replays(bench, replay_once, seconds)) return;
  const auto cycles = static_cast<double>(s.stream.size());
  const engine::IdleSublayerCounts before = s.model->skipped_sublayers();
  replay_once(false);  // outside the timing: how many sublayers a cycle skips as idle
  const engine::IdleSublayerCounts after = s.model->skipped_sublayers();
  bench.counters["skipped_gdn"] = static_cast<double>(after.gdn - before.gdn) / cycles;
  bench.counters["skipped_mlp"] = static_cast<double>(after.mlp - before.mlp) / cycles;
  const double ms = 1e3 * seconds / (cycles * static_cast<double>(bench.iterations()));
  bench.SetItemsProcessed(bench.iterations() * static_cast<int64_t>(s.stream.size()));
  bench.counters["cycles"] = cycles;
  bench.counters["ms_per_cycle"] = ms;
  bench.counters["us_per_layer"] = 1e3 * ms / static_cast<double>(s.model->config().num_hidden_layers);
}
// Args: positions the machine is built for, nested steps run (one step: ~2,800 cycles).
BENCHMARK(BM_TokenMachineCycle)->ArgNames({"positions", "steps"})->Args({16, 1})->Args({32, 1})->Args({256, 1})
    ->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

void BM_SmallGdnLayers(benchmark::State& bench) {
  static const std::unique_ptr<engine::Model> model = [] {
    engine::testing::TinySpec spec;
    spec.vocab = 64;
    spec.hidden = 256;
    spec.intermediate = 256;
    spec.layers.assign(24, io::LayerType::LinearAttention);
    spec.k_heads = 16;
    spec.v_heads = 16;
    spec.k_dim = 16;
    spec.v_dim = 64;
    spec.zero_fraction = 0.97;  // CSR, and every product below its parallel threshold
    return std::make_unique<engine::Model>(engine::testing::make_tiny_weights(spec));
  }();
  omp_set_num_threads(static_cast<int>(bench.range(0)));
  engine::State state = model->new_state();
  std::vector<float> logits(static_cast<size_t>(model->config().vocab_size));
  int64_t token = 1;
  for (auto _ : bench) {
    model->forward(token, state, logits);
    token = (token * 7 + 3) % model->config().vocab_size;
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_SmallGdnLayers)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
