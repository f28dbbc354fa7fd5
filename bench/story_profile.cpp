// Where a token machine's cycle goes, for a machine shape the CLI does not offer
// (docs/npu-machine.md, "Where a 256-position cycle goes"): builds the token machine of
// stories260K for P positions with the attention's head groups and the FFN's chunk lanes as given, prints its
// shape, runs a greedy story from BOS for at most C host cycles on one engine thread with
// every crossing float, logits vector and story token checked against run.c
// (runner::StoryChecker, as `qpu story --verify`), and prints `qpu story --profile`'s table.
//
//   story_profile [positions=16] [steps=positions] [cycles=0: all] [exp_heads=2] [threads=1] [lanes=qpu story's, 22]
//                 [repeats=1]
//
// A measurement, not a test: it exits non-zero on the first difference from run.c.
//
// repeats > 1 runs the same story that many times on the one model (each run checked),
// prints every run's seconds and their minimum, and the table of the fastest run. This box
// is a VM whose speed drifts: five runs of the same 24-step story in one process took
// 24.8 to 34.7 s (docs/npu-machine.md, "Measuring on this box"), so one run compares
// nothing; the minimum of several, or two builds run side by side pinned to the two
// cores, do.
//
// With QPU_PERF_FAMILY (a micro-op family as the table names it, e.g. 'EXP(#).#.#') and
// QPU_PERF_CTL (the control fifo of `perf record --control=fifo:PATH -D -1`), perf samples
// only the forwards of that family ('value' for the value tokens): "enable" is written to
// the fifo before each of them and "disable" after, e.g.
//   mkfifo /tmp/ctl
//   QPU_PERF_FAMILY='EXP(#).#.#' QPU_PERF_CTL=/tmp/ctl perf record -D -1 --control=fifo:/tmp/ctl -o exp.data story_profile 256 40
//
// QPU_MAX_NEURONS=n, QPU_SEGMENTS=sum,wsum,slow, QPU_SLOW_BESIDE=1, QPU_DEADLINE=1,
// QPU_CLEAR_ROOM=n and QPU_MAX_MEMORIES=n build the machine as machine_shape does (the
// shapes qpu compile searches).
//
// With QPU_HOST_TOKENS=PATH the host tokens of the (last) run are written to PATH, one
// "id name" per line, for bench/draft_acceptance.py.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/dot.h"
#include "machine/token_machine.h"
#include "reference/llama2_checkpoint.h"
#include "runner/cycle_profile.h"
#include "runner/story_check.h"
#include "runner/story_stream.h"

int main(int argc, char** argv) {
  using namespace qpu;
  const int positions = argc > 1 ? std::atoi(argv[1]) : 16;
  const int steps = argc > 2 ? std::atoi(argv[2]) : positions;
  const long max_cycles = argc > 3 ? std::atol(argv[3]) : 0;
  const int exp_heads = argc > 4 ? std::atoi(argv[4]) : 2;
  const int threads = argc > 5 ? std::atoi(argv[5]) : 1;
  const int lanes = argc > 6 ? std::atoi(argv[6]) : runner::token_machine_options(positions).lanes;
  const int repeats = argc > 7 ? std::atoi(argv[7]) : 1;
  if (repeats < 1) {
    std::fprintf(stderr, "story_profile: repeats must be at least 1, got %s\n", argv[7]);
    return 1;
  }
  omp_set_num_threads(threads);
  try {
    engine::dot::active_isa();  // QPU_ISA's error here, not inside the parallel build
    const reference::Llama2Checkpoint ck = reference::load_llama2_checkpoint(QPU_SHARED_DIR "/models/stories260K/stories260K.bin");
    machine::TokenMachineOptions o = runner::token_machine_options(positions);
    o.exp_heads = exp_heads;
    o.lanes = lanes;
    // The layout knobs qpu compile searches (machine_shape's names).
    if (const char* e = std::getenv("QPU_MAX_NEURONS")) o.limits.max_neurons_per_mlp = std::atoi(e);
    if (const char* e = std::getenv("QPU_SEGMENTS"))
      if (std::sscanf(e, "%d,%d,%d", &o.sum_segment_blocks, &o.wsum_segment_blocks, &o.slow_segment_blocks) != 3) return 2;
    if (std::getenv("QPU_SLOW_BESIDE")) o.slow_beside_wsum = true;
    if (std::getenv("QPU_DEADLINE")) o.limits.by_deadline = true;
    if (const char* e = std::getenv("QPU_CLEAR_ROOM")) o.limits.clear_room = std::atoi(e);
    if (const char* e = std::getenv("QPU_MAX_MEMORIES")) o.limits.max_gdn_memories_per_mixer = std::atoi(e);
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const machine::TokenMachine m = machine::build_token_machine(ck, o);
    const auto t1 = Clock::now();
    engine::ModelOptions model_options;
    model_options.build_threads = threads;
    const engine::Model model = m.model(model_options);
    const auto& c = m.compiled.weights.config;
    std::printf("machine: %d positions, exp_heads %d, lanes %d: layers %lld, hidden %lld, intermediate %lld (built %.1f s, model %.1f s, %s kernels)\n",
                m.max_positions, exp_heads, lanes, static_cast<long long>(c.num_hidden_layers),
                static_cast<long long>(c.hidden_size), static_cast<long long>(c.intermediate_size),
                std::chrono::duration<double>(t1 - t0).count(),
                std::chrono::duration<double>(Clock::now() - t1).count(), engine::dot::isa_name(engine::dot::active_isa()));
    runner::StoryRunOptions ro;
    ro.prompt = m.prompt({1}, steps);
    ro.max_cycles = max_cycles;
    ro.logit_probes = m.logit_probes;
    ro.profile = true;
    // Sampling one family's forwards (above).
    const char* perf_family = std::getenv("QPU_PERF_FAMILY");
    const char* perf_ctl = std::getenv("QPU_PERF_CTL");
    std::FILE* ctl = perf_family && perf_ctl ? std::fopen(perf_ctl, "w") : nullptr;
    if (perf_family && perf_ctl && !ctl) {
      std::fprintf(stderr, "story_profile: cannot open the perf control fifo %s\n", perf_ctl);
      return 1;
    }
    // QPU_HOST_TOKENS=PATH: the host's input token of every forward of the last run, one
    // per line as "id name" ("v" for a value token): what a speculative decoder would have
    // to predict (bench/draft_acceptance.py; docs/npu-machine.md, "What the second core
    // could do").
    const char* tokens_path = std::getenv("QPU_HOST_TOKENS");
    std::vector<int64_t> host_tokens;
    if (ctl || tokens_path) {
      ro.around_forward = [&, target = std::string(perf_family ? perf_family : "")](int64_t token, bool before) {
        if (tokens_path && before) host_tokens.push_back(token);
        if (!ctl) return;
        const int64_t index = token - m.control.first;
        const bool control = index >= 0 && index < static_cast<int64_t>(m.control_names.size());
        // Value tokens (the crossing floats' parts, whatever family they follow): "value".
        const std::string family =
            control ? runner::micro_op_family(m.control_names[static_cast<size_t>(index)]) : std::string("value");
        if (family != target) return;
        std::fputs(before ? "enable\n" : "disable\n", ctl);
        std::fflush(ctl);
      };
    }
    // Every run checked against run.c; the fastest one's result is reported.
    runner::StoryRunResult r;
    int64_t floats = 0, logit_vectors = 0;
    std::string seconds;
    for (int run = 0; run < repeats; ++run) {
      host_tokens.clear();
      runner::StoryChecker checker(ck);
      runner::StreamCallbacks cb;
      cb.on_story = [&](const runner::StoryTokenEvent& e) { return checker.check(e); };
      cb.on_crossing = [&](const runner::CrossingEvent& e) { return checker.check(e); };
      cb.on_logits = [&](const runner::LogitEvent& e) { return checker.check(e); };
      runner::StoryRunResult this_run = runner::run_story(m.story_interface(), model, ro, cb);
      if (checker.first_difference()) {
        if (ctl) std::fclose(ctl);
        std::printf("DIFFERENCE (run %d): %s\n", run + 1, checker.first_difference()->message().c_str());
        return 1;
      }
      char one[32];
      std::snprintf(one, sizeof one, "%s%.2f", run == 0 ? "" : " ", this_run.seconds);
      seconds += one;
      if (run == 0 || this_run.seconds < r.seconds) {
        r = std::move(this_run);
        floats = checker.floats_compared();
        logit_vectors = checker.logit_vectors_compared();
      }
    }
    if (ctl) std::fclose(ctl);
    if (tokens_path) {
      std::FILE* out = std::fopen(tokens_path, "w");
      if (!out) {
        std::fprintf(stderr, "story_profile: cannot write %s\n", tokens_path);
        return 1;
      }
      for (const int64_t t : host_tokens) std::fprintf(out, "%lld %s\n", static_cast<long long>(t),
                                                       t >= m.control.first ? m.control_names[static_cast<size_t>(t - m.control.first)].c_str() : "v");
      std::fclose(out);
    }
    if (repeats > 1) std::printf("runs: %s s; the fastest below\n", seconds.c_str());
    std::printf("run: %lld host cycles, %.1f s (%.1f cycles/s), %lld story tokens, %lld floats and %lld logits vectors "
                "bit-identical to run.c, ambiguous %lld, done %d\n",
                static_cast<long long>(r.host_forwards), r.seconds, r.cycles_per_second(),
                static_cast<long long>(r.counts.story_tokens), static_cast<long long>(floats),
                static_cast<long long>(logit_vectors), static_cast<long long>(r.ambiguous),
                r.counts.done ? 1 : 0);
    std::printf("%-24s %8s %9s %10s %14s\n", "micro-op", "cycles", "seconds", "ms/cycle", "sublayers/cycle");
    for (const runner::ProfileRow& row : r.profile) {
      const auto n = static_cast<double>(row.cycles);
      std::printf("%-24s %8lld %9.2f %10.3f %14.1f\n", row.family.c_str(), static_cast<long long>(row.cycles),
                  row.seconds, 1e3 * row.seconds / n, static_cast<double>(row.sublayers_run) / n);
    }
    return r.ambiguous == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "story_profile: %s\n", e.what());
    return 1;
  }
}
