// Where a token machine's cycle goes, for a machine shape the CLI does not offer
// (docs/npu-machine.md, "Where a 256-position cycle goes"): builds the token machine of
// stories260K for P positions with the attention's head groups and the FFN's chunk lanes as given, prints its
// shape, runs a greedy story from BOS for at most C host cycles on one engine thread with
// every crossing float, logits vector and story token checked against run.c
// (runner::StoryChecker, as `qpu story --verify`), and prints `qpu story --profile`'s table.
//
//   story_profile [positions=16] [steps=positions] [cycles=0: all] [exp_heads=2] [threads=1] [lanes=qpu story's, 22]
//
// A measurement, not a test: it exits non-zero on the first difference from run.c.
//
// With QPU_PERF_FAMILY (a micro-op family as the table names it, e.g. 'EXP(#).#.#') and
// QPU_PERF_CTL (the control fifo of `perf record --control=fifo:PATH -D -1`), perf samples
// only the forwards of that family: "enable" is written to the fifo before each of them
// and "disable" after, e.g.
//   mkfifo /tmp/ctl
//   QPU_PERF_FAMILY='EXP(#).#.#' QPU_PERF_CTL=/tmp/ctl perf record -D -1 --control=fifo:/tmp/ctl -o exp.data story_profile 256 40
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

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
  omp_set_num_threads(threads);
  try {
    const reference::Llama2Checkpoint ck = reference::load_llama2_checkpoint(QPU_SHARED_DIR "/models/stories260K/stories260K.bin");
    machine::TokenMachineOptions o = runner::token_machine_options(positions);
    o.exp_heads = exp_heads;
    o.lanes = lanes;
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const machine::TokenMachine m = machine::build_token_machine(ck, o);
    const auto t1 = Clock::now();
    engine::ModelOptions model_options;
    model_options.build_threads = threads;
    const engine::Model model = m.model(model_options);
    const auto& c = m.compiled.weights.config;
    std::printf("machine: %d positions, exp_heads %d, lanes %d: layers %lld, hidden %lld, intermediate %lld (built %.1f s, model %.1f s)\n",
                m.max_positions, exp_heads, lanes, static_cast<long long>(c.num_hidden_layers),
                static_cast<long long>(c.hidden_size), static_cast<long long>(c.intermediate_size),
                std::chrono::duration<double>(t1 - t0).count(),
                std::chrono::duration<double>(Clock::now() - t1).count());
    runner::StoryChecker checker(ck);
    runner::StreamCallbacks cb;
    cb.on_story = [&](const runner::StoryTokenEvent& e) { return checker.check(e); };
    cb.on_crossing = [&](const runner::CrossingEvent& e) { return checker.check(e); };
    cb.on_logits = [&](const runner::LogitEvent& e) { return checker.check(e); };
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
    if (ctl) {
      ro.around_forward = [&, target = std::string(perf_family)](int64_t token, bool before) {
        const int64_t index = token - m.control.first;
        if (index < 0 || index >= static_cast<int64_t>(m.control_names.size())) return;
        if (runner::micro_op_family(m.control_names[static_cast<size_t>(index)]) != target) return;
        std::fputs(before ? "enable\n" : "disable\n", ctl);
        std::fflush(ctl);
      };
    }
    const runner::StoryRunResult r = runner::run_story(m, model, ro, cb);
    if (ctl) std::fclose(ctl);
    if (checker.first_difference()) {
      std::printf("DIFFERENCE: %s\n", checker.first_difference()->message().c_str());
      return 1;
    }
    std::printf("run: %lld host cycles, %.1f s (%.1f cycles/s), %lld story tokens, %lld floats and %lld logits vectors "
                "bit-identical to run.c, ambiguous %lld, done %d\n",
                static_cast<long long>(r.host_forwards), r.seconds, r.cycles_per_second(),
                static_cast<long long>(r.counts.story_tokens), static_cast<long long>(checker.floats_compared()),
                static_cast<long long>(checker.logit_vectors_compared()), static_cast<long long>(r.ambiguous),
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
