// `qpu run DIR`, `qpu prompt DIR` and `qpu verify DIR MODEL.bin -z TOK.bin`: a story
// machine compiled into a checkpoint directory (`qpu compile`), driven from its files
// alone. DIR holds the Qwen3.5 checkpoint, qpu-machine.json (its "interface": the host
// vocabulary, the host prompt's recipe, the logit probes) and nested-tokenizer.bin (run.c's
// tokenizer, for -i and for printing the story as run.c prints it).
//
//   qpu run DIR [-n N] [-i PROMPT] [-t T] [-p P] [-s S] [--dump-logits F] [--dump-host-tokens F]
//       the story on stdout as it is written, progress on stderr;
//   qpu prompt DIR [same run.c flags]
//       the host prompt as token ids on one line: feed them to any runtime, then take the
//       argmax token and feed it back; the generated ids decode to the story;
//   qpu verify DIR MODEL.bin -z TOK.bin [same flags]
//       `qpu run` with run.c's model beside it: every crossing float, nested logits vector
//       and token compared bit for bit; the first difference is an error.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command_registry.h"
#include "cli/run_c_flags.h"
#include "common/error.h"
#include "engine/load_model.h"
#include "engine/model.h"
#include "io/qwen35_config.h"
#include "machine/machine_checkpoint.h"
#include "machine/story_interface.h"
#include "reference/llama2_checkpoint.h"
#include "reference/tokenizer.h"
#include "runner/story_session.h"

namespace {

using namespace qpu;
namespace fs = std::filesystem;

struct RunOptions {
  std::string dir;
  std::string model, tokenizer;  // verify: run.c's model and tokenizer
  int steps = 256;
  std::string prompt;
  std::string temperature = "0";  // greedy unless -t
  std::string topp = "0.9";
  std::optional<std::string> seed;
  std::string dump_logits, dump_host_tokens;
  int threads = 1;
  bool speculate = true;
};

// The machine's description from DIR/qpu-machine.json, checked.
machine::StoryInterface load_interface(const fs::path& dir) {
  const fs::path path = dir / machine::kMachineFileName;
  if (!fs::is_directory(dir)) fail("{}: not a directory", dir.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: missing: not a compiled story checkpoint (qpu compile writes it)", path.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
  if (!j.is_object() || !j.contains("interface"))
    fail("{}: no 'interface' (written by an older qpu compile, or not a story machine)", path.string());
  return machine::StoryInterface::from_json(j["interface"], path.string());
}

// run.c's tokenizer: -z, or the copy the compile put beside the weights.
reference::Tokenizer load_nested_tokenizer(const fs::path& dir, const std::string& explicit_path, int vocab) {
  const fs::path path = explicit_path.empty() ? dir / machine::kNestedTokenizerFileName : fs::path(explicit_path);
  if (!fs::exists(path)) fail("{}: missing (the nested model's tokenizer; pass -z)", path.string());
  return reference::Tokenizer::load(path, vocab);
}

runner::StoryRequest request_of(const RunOptions& o) {
  return cli::story_request(o.steps, o.prompt, cli::parse_run_c_sampling(o.temperature, o.topp, o.seed));
}

int run_prompt(const RunOptions& o) {
  const machine::StoryInterface m = load_interface(o.dir);
  const reference::Tokenizer tokenizer = load_nested_tokenizer(o.dir, "", m.nested_vocab());
  const runner::StoryPlan plan = runner::plan_story(m, tokenizer, request_of(o));
  std::string line;
  for (size_t i = 0; i < plan.host_prompt.size(); ++i) line += (i ? " " : "") + std::to_string(plan.host_prompt[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

int run_from_files(const RunOptions& o, bool verify) {
  if (o.threads < 0) fail("flag --threads: {} must not be negative", o.threads);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  // Everything that can be checked before the load is checked first.
  const machine::StoryInterface m = load_interface(o.dir);
  std::optional<reference::Llama2Checkpoint> reference_model;
  if (verify) {
    reference_model.emplace(reference::load_llama2_checkpoint(o.model));
    if (reference_model->config().vocab_size != m.nested_vocab())
      fail("{}: a vocabulary of {}, the checkpoint's machine runs a nested vocabulary of {}", o.model,
           reference_model->config().vocab_size, m.nested_vocab());
  }
  const reference::Tokenizer tokenizer = load_nested_tokenizer(o.dir, o.tokenizer, m.nested_vocab());
  const runner::StoryRequest request = request_of(o);
  const runner::StoryPlan plan = runner::plan_story(m, tokenizer, request, reference_model ? &*reference_model : nullptr);

  // config.json against the description before the weights are read.
  const int64_t config_vocab = io::load_qwen35_config(o.dir).vocab_size;
  if (config_vocab != m.fields().host_vocab)
    fail("{}: config.json has a vocabulary of {}, {} describes {} host tokens", o.dir, config_vocab,
         machine::kMachineFileName, m.fields().host_vocab);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  engine::ModelOptions model_options;
  model_options.build_threads = omp_get_max_threads();  // layers packed side by side while loading
  const engine::Model model = engine::load_model(o.dir, model_options);
  const auto& c = model.config();
  std::fprintf(stderr, "run: loaded %s in %.1f s: %lld layers, hidden %lld, vocab %lld; a machine for %d nested positions (%s)\n",
               o.dir.c_str(), std::chrono::duration<double>(Clock::now() - t0).count(),
               static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
               static_cast<long long>(c.vocab_size), m.max_positions(), machine::sampler_name(m.sampler()));
  runner::StorySessionOptions so;
  if (verify) so.verify_against = &*reference_model;
  so.dump_logits = o.dump_logits;
  so.dump_host_tokens = o.dump_host_tokens;
  so.speculate = o.speculate;
  const runner::StorySessionResult r = runner::run_story_session(m, model, tokenizer, plan, request, so);
  runner::print_session_summary(r);
  return 0;
}

// The run.c flags the three commands share.
void add_story_flags(CLI::App& app, RunOptions& o) {
  app.add_option("-n", o.steps, "nested positions to run; 0 or > seq_len = seq_len (default 256)");
  app.add_option("-i", o.prompt, "prompt text (run.c's -i; default: none, the story starts from BOS)");
  app.add_option("-t", o.temperature, "temperature: 0 = greedy (default 0); a sampling machine holds [0.05, 32]");
  app.add_option("-p", o.topp, "top-p as run.c (default 0.9); a top-p machine runs the p it was compiled for");
  app.add_option("-s", o.seed, "random seed as run.c's; 0 or absent = current time");
}

void add_run_flags(CLI::App& app, RunOptions& o) {
  add_story_flags(app, o);
  app.add_option("--dump-logits", o.dump_logits,
                 "write every nested logits vector as the machine holds it inside the host's forward pass "
                 "(float32 little-endian, vocab floats per nested step, prompt steps included)");
  app.add_option("--dump-host-tokens", o.dump_host_tokens, "write every host token id, the prompt's first, one per line");
  app.add_option("--threads", o.threads, "engine (OpenMP) threads; 0 = OpenMP's default (default 1)");
  app.add_flag("--speculate,!--no-speculate", o.speculate,
               "run each forward beside a guessed next host token's on a second thread (the same bits; default on)");
}

qpu::cli::Runner setup_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  app.footer("Runs the story machine of a checkpoint directory written by `qpu compile`, from its files alone.");
  app.add_option("dir", o->dir, "checkpoint directory (qpu compile's -o)")->required();
  add_run_flags(app, *o);
  return [o] { return run_from_files(*o, false); };
}

qpu::cli::Runner setup_prompt(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  app.footer(
      "Prints the host prompt of a story as token ids on one line, so that any runtime can drive the checkpoint: "
      "feed these ids, then take the argmax token and feed it back until the machine's DONE; "
      "tokenizer.decode(generated, skip_special_tokens=True) is the story. Reads only qpu-machine.json and "
      "nested-tokenizer.bin.");
  app.add_option("dir", o->dir, "checkpoint directory (qpu compile's -o)")->required();
  add_story_flags(app, *o);
  return [o] { return run_prompt(*o); };
}

qpu::cli::Runner setup_verify(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  app.footer(
      "Runs the checkpoint's story (qpu run) beside run.c's model (qpu ref) and compares every crossing float, every "
      "nested logits vector and every token bit for bit; the first difference is an error.");
  app.add_option("dir", o->dir, "checkpoint directory (qpu compile's -o)")->required();
  app.add_option("model", o->model, "the llama2.c checkpoint that was compiled, e.g. stories260K.bin")->required();
  app.add_option("-z", o->tokenizer, "its tokenizer.bin")->required();
  add_run_flags(app, *o);
  return [o] { return run_from_files(*o, true); };
}

qpu::cli::Registration reg_run{"run", "Run the story machine of a compiled checkpoint directory", setup_run};
qpu::cli::Registration reg_prompt{"prompt", "Print the host prompt of a compiled checkpoint's story", setup_prompt};
qpu::cli::Registration reg_verify{"verify", "Run a compiled checkpoint's story and compare it with run.c bit for bit",
                                  setup_verify};

}  // namespace
