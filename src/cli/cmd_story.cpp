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

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "cli/command_registry.h"
#include "cli/run_c_flags.h"
#include "common/error.h"
#include "engine/dot.h"
#include "io/qwen35_layout.h"
#include "machine/sample_part.h"
#include "reference/generate.h"
#include "reference/llama2_checkpoint.h"
#include "reference/tokenizer.h"
#include "runner/story_session.h"

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
  const runner::StoryRequest request = cli::story_request(o.steps, o.prompt, sampling);
  // The machine is built for this run: the prompt RAM holds a token at its own position,
  // so it covers the prompt too.
  const int steps = reference::run_c_steps(o.steps, checkpoint.config().seq_len);
  const size_t prompt_tokens = std::min(tokenizer.encode(o.prompt, true, false).size(), static_cast<size_t>(steps) + 1);

  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  machine::TokenMachineOptions options = runner::token_machine_options(std::max(steps, static_cast<int>(prompt_tokens)));
  options.sampling = sampled;
  if (sampled) options.sample.topp = sampling.topp;  // 0 < topp < 1: run.c's top-p on the machine, else sample_mult
  if (sampled) options.sample.block = block;
  // A top-p story the machine would stop in the middle of is refused before the build.
  runner::refuse_topp_beyond_machine(checkpoint, tokenizer, request, steps);
  const auto t0 = Clock::now();
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
  const machine::StoryInterface interface = m.story_interface();
  const runner::StoryPlan plan = runner::plan_story(interface, tokenizer, request);
  runner::StorySessionOptions so;
  if (o.verify) so.verify_against = &checkpoint;
  so.profile = o.profile;
  so.speculate = o.speculate;
  const runner::StorySessionResult sr = runner::run_story_session(interface, model, tokenizer, plan, request, so);
  runner::print_session_summary(sr);
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
