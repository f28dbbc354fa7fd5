// `qpu ref MODEL.bin -z TOKENIZER.bin [-t temp] [-p topp] [-s seed] [-n steps] [-i prompt]
//  [--dump-logits FILE] [--dump-tokens FILE] [--trace FILE]`:
// llama2.c's `run` in generate mode, bit for bit (src/reference). Flags mean what they
// mean in run.c; stdout gets exactly run.c's story, stderr the "achieved tok/s" line.
// Differences from run.c, all on input run.c would accept silently: a temperature
// below 0, a topp outside [0, 1], negative steps or a flag value that is not a number
// are errors here (run.c clamps them or reads them as 0).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/command_registry.h"
#include "cli/run_c_flags.h"
#include "common/error.h"
#include "reference/generate.h"
#include "reference/llama2_checkpoint.h"
#include "reference/sampler.h"
#include "reference/tokenizer.h"
#include "reference/trace_file.h"
#include "reference/transformer.h"

namespace {

using namespace qpu::reference;

struct RefOptions {
  std::string checkpoint;
  std::string tokenizer = "tokenizer.bin";  // run.c's default
  std::string temperature = "1.0";
  std::string topp = "0.9";
  std::optional<std::string> seed;
  std::string steps = "256";
  std::string prompt;
  std::string dump_logits;
  std::string dump_tokens;
  std::string trace;
};

class Dump {
 public:
  explicit Dump(const std::string& path) : path_(path) {
    if (path_.empty()) return;
    out_.open(path_, std::ios::binary | std::ios::trunc);
    if (!out_) qpu::fail("{}: cannot open for writing", path_);
  }
  bool enabled() const { return !path_.empty(); }
  template <typename T>
  void write(const T* data, size_t count) {
    out_.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * sizeof(T)));
    if (!out_) qpu::fail("{}: write error", path_);
  }
  void close() {
    if (!enabled()) return;
    out_.close();
    if (!out_) qpu::fail("{}: write error", path_);
  }

 private:
  std::string path_;
  std::ofstream out_;
};

int run_ref(const RefOptions& o) {
  const qpu::cli::RunCSampling sampling = qpu::cli::parse_run_c_sampling(o.temperature, o.topp, o.seed);
  const float temperature = sampling.temperature, topp = sampling.topp;
  const uint64_t seed = sampling.seed;
  const int steps_flag = qpu::cli::parse_atoi("-n", o.steps);
  if (steps_flag < 0) qpu::fail("flag -n: steps {} must not be negative", o.steps);

  const Llama2Checkpoint checkpoint = load_llama2_checkpoint(o.checkpoint);
  const Tokenizer tokenizer = Tokenizer::load(o.tokenizer, checkpoint.config().vocab_size);
  Transformer transformer(checkpoint);
  Sampler sampler(checkpoint.config().vocab_size, temperature, topp, seed);
  const int steps = run_c_steps(steps_flag, checkpoint.config().seq_len);

  Dump logits_dump(o.dump_logits);
  Dump tokens_dump(o.dump_tokens);
  GenerateCallbacks callbacks;
  callbacks.on_print = [](std::string_view bytes) {
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    std::fflush(stdout);  // run.c flushes after every token
  };
  if (logits_dump.enabled()) {
    // Streamed, so a long run does not hold every vector in memory.
    callbacks.on_step = [&](const GenerateStep& step) {
      logits_dump.write(step.logits.data(), step.logits.size());
    };
  }

  // The golden trace (reference/trace_file.h); its info line says how it was made.
  std::optional<TraceWriter> trace;
  if (!o.trace.empty()) {
    const std::string info =
        fmt::format("qpu ref {} -z {} -t {} -p {} -s {} -n {} -i {:?}", o.checkpoint, o.tokenizer, o.temperature,
                    o.topp, seed, steps, o.prompt);
    trace.emplace(o.trace, TraceHeader{checkpoint.config(), info});
    callbacks.trace = &*trace;
  }

  const GenerateResult result = generate(transformer, tokenizer, sampler, o.prompt, steps, false, callbacks);
  if (tokens_dump.enabled()) {
    const std::vector<int32_t> tokens(result.tokens.begin(), result.tokens.end());
    tokens_dump.write(tokens.data(), tokens.size());
  }
  logits_dump.close();
  if (trace) trace->close();
  tokens_dump.close();

  if (result.positions > 1) {
    std::fprintf(stderr, "achieved tok/s: %f\n",
                 (result.positions - 1) / result.seconds_after_first);
  }
  return 0;
}

qpu::cli::Runner setup(CLI::App& app) {
  auto o = std::make_shared<RefOptions>();
  app.add_option("checkpoint", o->checkpoint, "llama2.c checkpoint (version 0), e.g. stories260K.bin")
      ->required();
  app.add_option("-z", o->tokenizer, "tokenizer.bin-format tokenizer (default: tokenizer.bin)");
  app.add_option("-t", o->temperature, "temperature in [0, inf), 0 = greedy (default 1.0)");
  app.add_option("-p", o->topp, "top-p in [0, 1]; <= 0 or >= 1 samples the whole distribution (default 0.9)");
  app.add_option("-s", o->seed, "random seed; 0 or absent = current time");
  app.add_option("-n", o->steps, "positions to run incl. the prompt; 0 or > seq_len = seq_len (default 256)");
  app.add_option("-i", o->prompt, "prompt text");
  app.add_option("--dump-logits", o->dump_logits,
                 "write every position's logits (float32 LE, vocab_size each, in order)");
  app.add_option("--dump-tokens", o->dump_tokens,
                 "write the token sequence (int32 LE: first prompt token, then each position's next token)");
  app.add_option("--trace", o->trace,
                 "write the golden trace: every intermediate vector of every position (docs/reference.md)");
  return [o] { return run_ref(*o); };
}

qpu::cli::Registration reg{"ref", "Run a llama2.c checkpoint exactly as llama2.c's run.c does", setup};

}  // namespace
