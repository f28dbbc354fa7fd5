// `qpu generate CHECKPOINT_DIR (--tokens 1,2,3 | --prompt TEXT) [-n STEPS]
//   [--temperature T] [--top-p P] [--seed S] [--threads N] [--dump-logits FILE]
//   [--snapshot-at N,M,... --snapshot-dir DIR]`
//
// Runs a Qwen3.5 checkpoint on the engine, one token per forward: every prompt token,
// then STEPS sampled tokens (each fed back except the last). stdout: the generated
// token ids on one line, then their text when a tokenizer is available. stderr:
// progress and speed. --dump-logits writes every logits vector (float32 little
// endian, vocab_size per row): one row per forward, i.e. prompt_len + STEPS - 1 rows.
// Sampling is the documented deterministic sampler of engine/sampler.h (greedy by
// default); the result does not depend on --threads. --snapshot-at writes the host state
// after N tokens were consumed (prompt and generated) to DIR/state-N.safetensors
// (engine/state_snapshot.h), for another runtime to go on from there.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "common/error.h"
#include "engine/dot.h"
#include "engine/load_model.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/state_snapshot.h"
#include "io/qwen35_weights.h"
#include "machine/machine_checkpoint.h"
#if __has_include("tokenizer/tokenizer.h")
#include "tokenizer/tokenizer.h"
#define QPU_HAVE_TOKENIZER 1
#endif

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct GenerateOptions {
  std::string checkpoint;
  std::string tokens;
  std::optional<std::string> prompt;
  std::string tokenizer;
  int64_t steps = 64;
  double temperature = 0.0;
  double top_p = 1.0;
  uint64_t seed = 0;
  int threads = 0;
  std::string dump_logits;
  std::string storage = "auto";
  bool stop_at_eos = false;
  std::string snapshot_at;
  std::string snapshot_dir;
};

std::vector<int64_t> parse_token_list(const std::string& text) {
  std::vector<int64_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size()) qpu::fail("--tokens: '{}' is not a token id", item);
    ids.push_back(value);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int run(const GenerateOptions& o) {
  if (o.tokens.empty() == !o.prompt.has_value()) qpu::fail("give exactly one of --tokens and --prompt");
  if (o.steps < 1) qpu::fail("-n must be at least 1, got {}", o.steps);
  if (o.threads < 0) qpu::fail("--threads must be positive, got {}", o.threads);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  qpu::engine::ModelOptions model_options;
  if (o.storage == "dense") model_options.storage = qpu::engine::WeightStorage::Dense;
  else if (o.storage == "sparse") model_options.storage = qpu::engine::WeightStorage::Sparse;
  else if (o.storage != "auto") qpu::fail("--storage must be auto, dense or sparse, got '{}'", o.storage);
  model_options.build_threads = omp_get_max_threads();  // layers packed side by side while loading
  qpu::engine::Sampler sampler({o.temperature, o.top_p, o.seed});  // validates before the slow load

  // The tokenizer: --tokenizer, or tokenizer.json next to the weights.
  const fs::path tokenizer_path = o.tokenizer.empty() ? fs::path(o.checkpoint) / "tokenizer.json" : fs::path(o.tokenizer);
#ifdef QPU_HAVE_TOKENIZER
  std::optional<qpu::tokenizer::Tokenizer> tokenizer;
  if (fs::exists(tokenizer_path)) tokenizer = qpu::tokenizer::Tokenizer::load(tokenizer_path);
  else if (!o.tokenizer.empty()) qpu::fail("{}: no such tokenizer file", tokenizer_path.string());
#else
  if (o.prompt) qpu::fail("--prompt: text mode is not available (this build has no tokenizer library); use --tokens");
#endif

  std::vector<int64_t> prompt;
  if (o.prompt && fs::exists(fs::path(o.checkpoint) / qpu::machine::kMachineFileName))
    qpu::fail("--prompt: {} is a compiled story machine; its tokenizer.json decodes the story but does not encode "
              "run.c's prompts. Its host prompt comes from `qpu prompt DIR` (pass those ids with --tokens), or run it "
              "with `qpu run DIR -i TEXT`",
              o.checkpoint);
  if (o.prompt) {
#ifdef QPU_HAVE_TOKENIZER
    if (!tokenizer) {
      qpu::fail("--prompt needs a tokenizer: {} does not exist (pass --tokenizer or use --tokens)",
                tokenizer_path.string());
    }
    for (int32_t id : tokenizer->encode(*o.prompt)) prompt.push_back(id);
    if (prompt.empty()) qpu::fail("--prompt: the text encodes to no tokens");
#endif
  } else {
    prompt = parse_token_list(o.tokens);
  }

  const auto load_start = Clock::now();
  const qpu::engine::Model model = qpu::engine::load_model(o.checkpoint, model_options);
  const qpu::io::Qwen35Config& config = model.config();
  for (int64_t id : prompt) {
    if (id < 0 || id >= config.vocab_size) qpu::fail("prompt token {} is outside the vocabulary [0, {})", id, config.vocab_size);
  }
  const qpu::engine::StorageStats stats = model.storage_stats();
  std::fprintf(stderr,
               "qpu generate: loaded %s in %.1f s: %lld layers, vocab %lld; matrices %lld bf16 + %lld fp32 + %lld "
               "sparse (%.1f MiB); %d threads, %s kernels\n",
               o.checkpoint.c_str(), seconds_since(load_start), static_cast<long long>(config.num_hidden_layers),
               static_cast<long long>(config.vocab_size), static_cast<long long>(stats.dense_bf16_matrices),
               static_cast<long long>(stats.dense_f32_matrices), static_cast<long long>(stats.sparse_matrices),
               static_cast<double>(stats.bytes) / 1048576.0, omp_get_max_threads(),
               qpu::engine::dot::isa_name(qpu::engine::dot::active_isa()));

  std::unique_ptr<std::ofstream> dump;
  if (!o.dump_logits.empty()) {
    dump = std::make_unique<std::ofstream>(o.dump_logits, std::ios::binary);
    if (!*dump) qpu::fail("{}: cannot open for writing", o.dump_logits);
  }
  std::vector<float> logits(static_cast<size_t>(config.vocab_size));
  // Snapshot positions: tokens consumed when the state is written.
  std::vector<int64_t> snapshot_at;
  if (!o.snapshot_at.empty()) {
    if (o.snapshot_dir.empty()) qpu::fail("--snapshot-at needs --snapshot-dir");
    snapshot_at = parse_token_list(o.snapshot_at);
    for (int64_t n : snapshot_at)
      if (n < 1) qpu::fail("--snapshot-at: {} is not a positive token count", n);
    std::error_code ec;
    fs::create_directory(o.snapshot_dir, ec);
    if (!fs::is_directory(o.snapshot_dir)) qpu::fail("--snapshot-dir {}: not a directory ({})", o.snapshot_dir, ec.message());
  } else if (!o.snapshot_dir.empty()) {
    qpu::fail("--snapshot-dir needs --snapshot-at");
  }
  int64_t snapshots = 0;
  auto forward = [&](int64_t token, qpu::engine::State& state) {
    model.forward(token, state, logits);
    if (std::find(snapshot_at.begin(), snapshot_at.end(), state.position) != snapshot_at.end()) {
      const fs::path file = fs::path(o.snapshot_dir) / ("state-" + std::to_string(state.position) + ".safetensors");
      qpu::engine::write_state_snapshot(file, model, state);
      ++snapshots;
    }
    if (dump) {
      dump->write(reinterpret_cast<const char*>(logits.data()),
                  static_cast<std::streamsize>(logits.size() * sizeof(float)));
      if (!*dump) qpu::fail("{}: write failed", o.dump_logits);
    }
  };

  qpu::engine::State state = model.new_state();
  const auto prompt_start = Clock::now();
  for (int64_t id : prompt) forward(id, state);
  const double prompt_seconds = seconds_since(prompt_start);

  std::vector<int64_t> generated;
  const auto decode_start = Clock::now();
  while (true) {
    generated.push_back(sampler.sample(logits));
    const bool eos = o.stop_at_eos && std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(),
                                                generated.back()) != config.eos_token_ids.end();
    if (static_cast<int64_t>(generated.size()) == o.steps || eos) break;
    forward(generated.back(), state);
  }
  const double decode_seconds = seconds_since(decode_start);

  for (size_t i = 0; i < generated.size(); ++i) std::printf(i ? " %lld" : "%lld", static_cast<long long>(generated[i]));
  std::printf("\n");
#ifdef QPU_HAVE_TOKENIZER
  if (tokenizer) {
    std::vector<int32_t> ids(generated.begin(), generated.end());
    std::printf("%s\n", tokenizer->decode(ids).c_str());
  }
#endif
  std::fflush(stdout);
  const auto decoded = static_cast<double>(generated.size() - 1);
  if (!snapshot_at.empty() && snapshots < static_cast<int64_t>(snapshot_at.size()))
    std::fprintf(stderr, "qpu generate: %lld of %zu snapshots written (the run consumed %lld tokens)\n",
                 static_cast<long long>(snapshots), snapshot_at.size(), static_cast<long long>(state.position));
  std::fprintf(stderr, "qpu generate: prompt %zu tokens in %.3f s (%.2f tok/s), generated %zu tokens, decode %.2f tok/s\n",
               prompt.size(), prompt_seconds, static_cast<double>(prompt.size()) / prompt_seconds, generated.size(),
               decoded > 0 ? decoded / decode_seconds : 0.0);
  return 0;
}

qpu::cli::Runner setup(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  app.add_option("checkpoint", o->checkpoint, "Checkpoint directory (config.json + safetensors)")->required();
  app.add_option("--tokens", o->tokens, "Prompt token ids, comma separated (e.g. 1,2,3)");
  app.add_option("--prompt", o->prompt, "Prompt text (needs tokenizer.json in the checkpoint or --tokenizer)");
  app.add_option("--tokenizer", o->tokenizer, "tokenizer.json to use instead of CHECKPOINT/tokenizer.json");
  app.add_option("-n,--steps", o->steps, "Tokens to generate (default 64)");
  app.add_option("--temperature", o->temperature, "Sampling temperature; 0 = greedy (default 0)");
  app.add_option("--top-p", o->top_p, "Nucleus sampling mass in (0, 1] (default 1)");
  app.add_option("--seed", o->seed, "Sampler seed (default 0)");
  app.add_option("--threads", o->threads, "OpenMP threads (default: OpenMP's default); results do not depend on it");
  app.add_option("--dump-logits", o->dump_logits, "Write every logits vector to FILE (float32 LE)");
  app.add_option("--storage", o->storage, "Weight storage: auto, dense or sparse (same results)");
  app.add_flag("--stop-at-eos", o->stop_at_eos, "Stop at the config's eos_token_id(s)");
  app.add_option("--snapshot-at", o->snapshot_at,
                 "Write the host state after these many tokens were consumed, comma separated (e.g. 40,1000)");
  app.add_option("--snapshot-dir", o->snapshot_dir, "Where --snapshot-at writes state-N.safetensors (created if missing)");
  return [o] { return run(*o); };
}

qpu::cli::Registration reg{"generate", "Generate tokens with a Qwen3.5 checkpoint on the engine", setup};

}  // namespace
