// `qpu story --model stories260K.bin -z tok512.bin [-n steps] [-i prompt] [-t temp] [-p topp] [-s seed]
// [--verify] [--threads T] [--build-threads B] [--no-speculate]`: the whole nested model running inside the host
// (docs/story-cli.md). Builds the token machine (machine/token_machine.h) for the run in
// memory (with the sampler below HEAD when -t > 0), runs it on the engine from HDR with
// the host's greedy argmax fed back, and prints the story tokens the stream carries
// exactly as `qpu ref` with the same -t, -p, -s prints them (run.c's decode and safe
// printing, the final newline; a BOS ends the story). With --verify every crossing float,
// every nested logits vector (read from the host's residual on HEAD's cycle) and every
// story token is compared with run.c (runner/story_check.h); the first difference is an
// error. With 0 < -p < 1 the machine runs run.c's top-p (and refuses a position where no
// entry, or more than 128, reach run.c's cutoff: an error).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/command_registry.h"
#include "cli/run_c_flags.h"
#include "common/error.h"
#include "engine/dot.h"
#include "io/qwen35_layout.h"
#include "machine/sample_part.h"
#include "npu/unit_topp.h"
#include "reference/generate.h"
#include "reference/llama2_checkpoint.h"
#include "reference/tokenizer.h"
#include "runner/story_check.h"
#include "runner/story_precheck.h"
#include "runner/story_stream.h"

namespace {

using namespace qpu;

struct StoryOptions {
  std::string checkpoint;
  std::string tokenizer = "tokenizer.bin";  // run.c's default
  int steps = 256;
  std::string prompt;  // run.c's -i
  // run.c's -t, -p, -s as `qpu ref` reads them, but -t defaults to 0 (greedy): `qpu story`
  // was greedy before it could sample.
  std::string temperature = "0";
  std::string topp = "0.9";
  std::optional<std::string> seed;
  bool verify = false;
  bool profile = false;
  int threads = 1;
  int build_threads = 0;
  bool speculate = true;
};

// --profile: host cycles, wall time and computed sublayers per micro-op family, the
// largest share of the run's forward time first.
void print_profile(const std::vector<runner::ProfileRow>& rows) {
  double total = 0;
  int64_t cycles = 0;
  for (const runner::ProfileRow& r : rows) {
    total += r.seconds;
    cycles += r.cycles;
  }
  std::fprintf(stderr, "profile: %lld host forwards, %.1f s in forward passes\n", static_cast<long long>(cycles), total);
  std::fprintf(stderr, "profile: %-24s %10s %9s %7s %10s %14s\n", "micro-op", "cycles", "seconds", "share", "ms/cycle",
               "sublayers/cycle");
  for (const runner::ProfileRow& r : rows) {
    const auto n = static_cast<double>(r.cycles);
    std::fprintf(stderr, "profile: %-24s %10lld %9.2f %6.1f%% %10.3f %14.1f\n", r.family.c_str(),
                 static_cast<long long>(r.cycles), r.seconds, total > 0 ? 100.0 * r.seconds / total : 0.0,
                 1e3 * r.seconds / n, static_cast<double>(r.sublayers_run) / n);
  }
}

// A progress line on stderr at most 4 times a second on a terminal (rewritten in place),
// else every 10 s (one line each, for logs).
class Progress {
 public:
  Progress() : tty_(isatty(fileno(stderr)) != 0) {}
  void update(const runner::StreamCounts& c, double seconds, bool last) {
    if (!last && seconds - shown_ < (tty_ ? 0.25 : 10.0)) return;
    shown_ = seconds;
    const long long tokens = c.story_tokens > 0 ? c.story_tokens - 1 : 0;  // TOK.1 is BOS, not a story token
    std::fprintf(stderr, "%shost cycles %lld, nested tokens %lld, %.0f cycles/s, %.1f s%s", tty_ ? "\r" : "",
                 static_cast<long long>(c.cycles), tokens, seconds > 0 ? static_cast<double>(c.cycles) / seconds : 0.0,
                 seconds, tty_ && !last ? "\x1b[K" : "\n");
    std::fflush(stderr);
  }

 private:
  bool tty_;
  double shown_ = -1e9;
};

int run_story(const StoryOptions& o) {
  if (o.threads < 0) fail("flag --threads: {} must not be negative", o.threads);
  if (o.build_threads < 0) fail("flag --build-threads: {} must not be negative", o.build_threads);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const cli::RunCSampling sampling = cli::parse_run_c_sampling(o.temperature, o.topp, o.seed);
  const bool sampled = sampling.temperature > 0.0f;  // run.c: temperature 0 is the argmax, -p unused
  if (sampled && !(sampling.temperature >= machine::TokenMachine::kMinTemperature &&
                   sampling.temperature <= machine::TokenMachine::kMaxTemperature))
    fail("flag -t: the machine's sampler holds temperatures in [{}, {}] (or 0), not {}",
         machine::TokenMachine::kMinTemperature, machine::TokenMachine::kMaxTemperature, o.temperature);
  const reference::Llama2Checkpoint checkpoint = reference::load_llama2_checkpoint(o.checkpoint);
  const reference::Tokenizer tokenizer = reference::Tokenizer::load(o.tokenizer, checkpoint.config().vocab_size);
  const bool topp = sampled && sampling.topp > 0.0f && sampling.topp < 1.0f;
  if (topp && !machine::SamplePart::topp_fits(sampling.topp, checkpoint.config().vocab_size))
    fail("flag -p: the machine's top-p holds p in [2^-40, 1 - {} 2^-24] for a vocabulary of {} (run.c's cutoff "
         "(1 - p) / {} at least 2^-24), not {}; -p 1 samples the whole distribution",
         checkpoint.config().vocab_size - 1, checkpoint.config().vocab_size, checkpoint.config().vocab_size - 1, o.topp);
  const int vocab = checkpoint.config().vocab_size;
  const int block = machine::SamplePart::block_for(vocab, topp);
  if (vocab % block != 0)  // only top-p's fixed blocks can miss
    fail("flag -p: the machine's top-p works on blocks of {} logits, which do not divide the vocabulary of {}; -p 1 "
         "samples the whole distribution",
         block, vocab);
  const int steps = reference::run_c_steps(o.steps, checkpoint.config().seq_len);
  // The prompt, encoded here by run.c's BPE (the machine gets its tokens as data and forces
  // them as run.c does). Tokens past index `steps` are never used by run.c: left out.
  std::vector<int> prompt = tokenizer.encode(o.prompt, true, false);
  if (prompt.size() > static_cast<size_t>(steps) + 1) prompt.resize(static_cast<size_t>(steps) + 1);

  // A top-p story the machine would stop in the middle of is refused before the build.
  if (topp) {
    const auto over = runner::first_topp_overflow(checkpoint, tokenizer, o.prompt, steps, sampling.temperature,
                                                  sampling.topp, sampling.seed, npu::kToppSlots);
    if (over && over->kept == 0)
      fail("story: at nested position {} no entry reaches run.c's top-p cutoff (1 - p) / (vocab - 1) (run.c reads out "
           "of bounds there); refused before the run",
           over->position);
    if (over)
      fail("story: at nested position {} run.c's top-p keeps {} entries (those at or above its cutoff (1 - p) / "
           "(vocab - 1)); the machine orders at most {}: refused before the run",
           over->position, over->kept, npu::kToppSlots);
  }

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  // The prompt RAM holds a token at its own position: the machine covers the prompt too.
  machine::TokenMachineOptions options = runner::token_machine_options(std::max(steps, static_cast<int>(prompt.size())));
  options.sampling = sampled;
  if (sampled) options.sample.topp = sampling.topp;  // 0 < topp < 1: run.c's top-p on the machine, else sample_mult
  if (sampled) options.sample.block = block;
  const machine::TokenMachine m = machine::build_token_machine(checkpoint, options);
  const double built = since(t0);
  const auto t1 = Clock::now();
  // The layers are built side by side (the same model for any count), on every core by
  // default: the build parallelizes well (256 positions: 153.7 s on one thread, 82.3 s on
  // two), a cycle's many tiny sublayers do not (the same run's cycles 13 % slower on two
  // threads than on one: story_profile 256 40 0 2 T), hence --threads 1 by default.
  engine::ModelOptions model_options;
  model_options.build_threads = o.build_threads > 0 ? o.build_threads : omp_get_num_procs();
  const engine::Model model = m.model(model_options);
  const auto& c = m.compiled.weights.config;
  std::fprintf(stderr,
               "story: %stoken machine for %d nested positions: layers %lld, hidden %lld, intermediate %lld, vocab %lld "
               "(built in %.1f s, engine model in %.1f s, %s kernels)\n",
               sampled ? "sampling " : "", steps, static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
               static_cast<long long>(c.intermediate_size), static_cast<long long>(c.vocab_size), built, since(t1),
               engine::dot::isa_name(engine::dot::active_isa()));
  // What keeps `qpu compile` from writing this machine (docs/npu-machine.md, "The
  // checkpoint on disk"): the engine holds only its nonzeros, a checkpoint holds them all.
  const double parameters = static_cast<double>(io::qwen35_parameter_count(c));
  std::fprintf(stderr, "story: as a dense checkpoint: %.2f billion parameters, %.1f GB in fp32\n", parameters / 1e9, parameters * 4 / 1e9);

  if (sampled)  // the seed too: with -s absent it is the clock's, and a run is only reproducible with it
    std::fprintf(stderr, "story: run.c's sampling on the machine: temperature %s, topp %s, seed %llu\n",
                 o.temperature.c_str(), o.topp.c_str(), static_cast<unsigned long long>(sampling.seed));
  std::unique_ptr<runner::StoryChecker> checker;
  if (o.verify)
    checker = std::make_unique<runner::StoryChecker>(
        checkpoint, prompt,
        reference::Sampler(checkpoint.config().vocab_size, sampling.temperature, sampling.topp, sampling.seed));
  int previous = reference::kBosToken;
  bool bos_stop = false;
  runner::StreamCallbacks cb;
  cb.on_story = [&](const runner::StoryTokenEvent& e) {
    if (checker && !checker->check(e)) return false;
    if (e.position == 0) return true;  // run.c's first token, BOS: nothing printed
    if (e.token == reference::kBosToken) {  // run.c stops at BOS (it delimits sequences)
      bos_stop = true;
      return false;
    }
    const std::string_view bytes = reference::printable_piece(tokenizer.decode(previous, e.token));
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    std::fflush(stdout);  // run.c flushes after every token
    previous = e.token;
    return true;
  };
  if (checker) {
    cb.on_crossing = [&](const runner::CrossingEvent& e) { return checker->check(e); };
    cb.on_logits = [&](const runner::LogitEvent& e) { return checker->check(e); };
  }

  Progress progress;
  runner::StoryRunOptions ro;
  // The host prompt: HDR, the step count, the nested prompt's tokens for the prompt RAM;
  // the machine ends with DONE after the last step. The story-token limit is a backstop.
  ro.prompt = m.prompt(prompt, steps, sampling.temperature, sampling.seed);
  ro.stop_after_story_tokens = steps + 1;  // TOK.1 (BOS at position 0), then one per position
  if (checker) ro.logit_probes = m.logit_probes;  // the nested logits, read where HEAD computes them
  ro.on_cycle = [&](const runner::StreamCounts& counts, double seconds) { progress.update(counts, seconds, false); };
  ro.profile = o.profile;
  ro.speculate = o.speculate;
  const runner::StoryRunResult r = runner::run_story(m, model, ro, cb);
  progress.update(r.counts, r.seconds, true);
  if (o.profile) print_profile(r.profile);  // also when the check below fails: where the time went

  if (checker && checker->first_difference()) fail("verify: {}", checker->first_difference()->message());
  if (r.counts.refused)
    fail("story: the machine refused top-p at nested position {}: no entry or more than {} entries reach run.c's "
         "cutoff (1 - p) / (vocab - 1) (run.c reads out of bounds for none; the machine orders at most {})",
         r.counts.story_tokens - 1, npu::kToppSlots, npu::kToppSlots);
  const int64_t expected_tokens = steps + 1;
  if (!bos_stop && r.counts.story_tokens < expected_tokens)
    fail("story: the machine stopped after {} of {} story tokens ({}, {} host cycles)", r.counts.story_tokens,
         expected_tokens, r.counts.done ? "DONE" : "no DONE", r.counts.cycles);
  std::fwrite("\n", 1, 1, stdout);  // run.c's final newline
  std::fflush(stdout);

  const double nested = static_cast<double>(r.counts.story_tokens - 1);
  std::fprintf(stderr, "story: %lld host cycles, %.0f nested tokens in %.1f s: %.1f host cycles/s, %.4f nested tokens/s%s\n",
               static_cast<long long>(r.host_forwards), nested, r.seconds, r.cycles_per_second(),
               r.seconds > 0 ? nested / r.seconds : 0.0,
               r.ambiguous > 0 ? fmt::format(" ({} ambiguous host argmaxes)", r.ambiguous).c_str() : "");
  if (r.pairs > 0)
    std::fprintf(stderr, "story: %lld forwards ran beside a guessed next token, %lld guesses kept (%.1f %%)\n",
                 static_cast<long long>(r.pairs), static_cast<long long>(r.guesses_kept),
                 100.0 * static_cast<double>(r.guesses_kept) / static_cast<double>(r.pairs));
  if (checker)
    std::fprintf(stderr, "verify: %lld floats, %lld logits vectors and %lld tokens bit-identical to run.c\n",
                 static_cast<long long>(checker->floats_compared()),
                 static_cast<long long>(checker->logit_vectors_compared()),
                 static_cast<long long>(checker->tokens_compared()));
  return 0;
}

qpu::cli::Runner setup(CLI::App& app) {
  auto o = std::make_shared<StoryOptions>();
  app.footer(
      "The checkpoint is compiled into one Qwen3.5 token machine whose host forward passes, greedy argmax fed back, "
      "run the nested model. With -t > 0 the machine samples as run.c's sample_mult (its coins drawn from -s "
      "inside the machine), with top-p for 0 < -p < 1. The prompt (-i) is encoded "
      "by the CLI with run.c's BPE; the machine forces its tokens as run.c does.");
  app.add_option("--model", o->checkpoint, "llama2.c checkpoint (version 0), e.g. stories260K.bin")->required();
  app.add_option("-z", o->tokenizer, "tokenizer.bin-format tokenizer (default: tokenizer.bin)");
  app.add_option("-n", o->steps, "nested positions to run; 0 or > seq_len = seq_len (default 256)");
  app.add_option("-i", o->prompt, "prompt text (run.c's -i; default: none, the story starts from BOS)");
  app.add_option("-t", o->temperature,
                 "temperature: 0 = greedy (default 0), else in [0.05, 32], sampled on the machine as run.c");
  app.add_option("-p", o->topp,
                 "top-p as run.c (default 0.9; -p 0 or 1: the whole distribution); the machine refuses a position "
                 "where no entry or more than 128 reach run.c's cutoff (1 - p) / (vocab - 1)");
  app.add_option("-s", o->seed, "random seed as run.c's and qpu ref's; 0 or absent = current time");
  app.add_flag("--verify", o->verify,
               "compare every float crossing the machine's boundary, every nested logits vector (read inside the "
               "host's forward pass on HEAD's cycle) and every story token with run.c, bit for bit");
  app.add_flag("--profile", o->profile,
               "print host cycles, wall time and computed sublayers per micro-op family on stderr at the end");
  app.add_option("--threads", o->threads,
                 "engine (OpenMP) threads of the forward passes; 0 = OpenMP's default (default 1: a cycle's "
                 "sublayers are too small to share)");
  app.add_option("--build-threads", o->build_threads,
                 "threads that build the engine model's layers; 0 = one per core (default 0)");
  app.add_flag("--speculate,!--no-speculate", o->speculate,
               "run each cycle's forward beside the forward of a guessed next host token on a second thread, kept "
               "when the host's argmax is the guess (speculative decoding; the same bits). Off with --profile "
               "(default on; --no-speculate: one forward at a time)");
  return [o] { return run_story(*o); };
}

qpu::cli::Registration reg{"story", "Run a llama2.c model as a machine inside the host's forward passes",
                           setup};

}  // namespace
