// `qpu compile MODEL.bin -z TOK.bin -o DIR [--max-params N] [--positions P]
// [--intermediate I] [--max-shard-bytes B]`: a llama2.c checkpoint compiled into the token machine
// (machine/token_machine.h) and written as a Hugging Face checkpoint directory
// (machine/machine_checkpoint.h): config.json, the safetensors shards and their index,
// generation_config.json and qpu-machine.json.
// The machine's size as a dense checkpoint is known once it is scheduled, before any
// layer is emitted: over the parameter budget the compile stops there with the numbers
// and writes nothing. The directory appears only when complete.
// The shape is searched: the machine is scheduled for each layout of the attention's
// chains in kLayouts and each intermediate size (neurons per MLP sublayer) and schedule
// in kCandidates (ops wider than one are split, compiler/split_mlp.h), and the one
// with the fewest parameters is kept. The hidden size, set by the widest sublayer, moves
// by tens of percent with these choices, in no monotone way (docs/npu-machine.md, "The
// checkpoint on disk"), so only a search finds the smallest. --intermediate pins the size
// (the schedules are still tried there).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command_registry.h"
#include "cli/run_c_flags.h"
#include "common/error.h"
#include "machine/machine_checkpoint.h"
#include "machine/sample_part.h"
#include "machine/story_tokenizer.h"
#include "machine/token_machine.h"
#include "reference/llama2_checkpoint.h"
#include "reference/tokenizer.h"
#include "runner/story_stream.h"
#include "tools/manifest.h"

namespace {

using namespace qpu;

// How the compile schedules a machine (compiler/schedule.h): greedy in program order or
// by deadline, with a share of each MLP sublayer (sixteenths) left to the dead-value clears.
struct Scheduling {
  bool by_deadline = false;
  int room_sixteenths = 0;
  int64_t clear_room(int64_t intermediate) const { return intermediate * room_sixteenths / 16; }
  std::string describe(int64_t intermediate) const {
    std::string s = by_deadline ? "by deadline" : "greedy";
    if (room_sixteenths > 0) s += ", " + std::to_string(clear_room(intermediate)) + " neurons kept for the clears";
    return s;
  }
};

// The intermediate sizes and schedules the compile tries, largest first. Below ~640
// neurons per MLP sublayer a greedy schedule in program order lets ops off the critical
// path push it down and the clears land far below their values' last readers; the
// deadline schedule and the clears' room keep both (docs/npu-machine.md, "The compile
// searches the shape").
struct Candidate {
  int64_t intermediate;
  Scheduling scheduling;
};
constexpr Candidate kCandidates[] = {{1024, {}},          {768, {}},          {640, {}},
                                     {512, {}},           {512, {false, 4}},  {512, {true, 4}},
                                     {512, {true, 5}},    {448, {true, 5}},   {384, {true, 6}}};
// With --intermediate, each of these schedules at that size.
constexpr Scheduling kSchedulings[] = {{}, {false, 4}, {true, 4}, {true, 5}, {true, 6}};

struct CompileOptions {
  std::string checkpoint;
  std::string tokenizer;
  std::string output;
  double max_params = 4e9;
  int positions = 0;  // 0: the model's seq_len
  int64_t intermediate = 0;  // 0: search kCandidates
  double max_shard_bytes = 1e9;
  std::string sampler = "greedy";  // greedy, sample_mult or top-p
  std::string topp = "0.9";        // the top-p machine's p (run.c's -p, parsed as run.c's atof)
};

// What qpu-machine.json says: the nested model (header and the sha256 of the files that
// were compiled), the machine's shape and its control tokens.
struct InputHashes {
  std::string model, tokenizer;
};

nlohmann::json machine_description(const CompileOptions& o, const reference::Llama2Config& cfg, const InputHashes& hashes,
                                   const machine::TokenMachine& m, const machine::StoryInterface& interface,
                                   uint64_t parameters) {
  const auto& c = m.compiled.weights.config;
  nlohmann::json controls = nlohmann::json::object();
  for (const std::string& name : m.control_names) controls[name] = m.id(name);
  return {
      {"format", "qpu-machine-v1"},
      {"nested_model",
       {{"file", std::filesystem::path(o.checkpoint).filename().string()},
        {"sha256", hashes.model},
        {"dim", cfg.dim},
        {"hidden_dim", cfg.hidden_dim},
        {"n_layers", cfg.n_layers},
        {"n_heads", cfg.n_heads},
        {"n_kv_heads", cfg.n_kv_heads},
        {"vocab_size", cfg.vocab_size},
        {"seq_len", cfg.seq_len},
        {"shared_classifier", cfg.shared_classifier}}},
      {"tokenizer", {{"file", std::filesystem::path(o.tokenizer).filename().string()}, {"sha256", hashes.tokenizer}}},
      {"machine",
       {{"kind", std::string("token machine, ") + machine::sampler_name(interface.sampler())},
        {"positions", m.max_positions},
        {"layers", c.num_hidden_layers},
        {"hidden_size", c.hidden_size},
        {"intermediate_size", c.intermediate_size},
        {"vocab_size", c.vocab_size},
        {"parameters", parameters},
        {"value_tokens", m.encoding.vocab.size()},
        {"done", m.done()},
        {"controls", controls}}},
  };
}

// A layout of the attention's chains the compile tries (machine/attention_stages.h):
// WSUM's and SLOW's blocks per segment and, when those are equal (SLOW reads WSUM's RAM
// heads), SLOW's chain beside WSUM's or below it.
struct Layout {
  int wsum_blocks = 8, slow_blocks = 4;
  bool beside = false;
  std::string describe() const {
    return std::string("WSUM / SLOW segments of ") + std::to_string(wsum_blocks) + " / " + std::to_string(slow_blocks) +
           " blocks" + (wsum_blocks == slow_blocks ? beside ? ", SLOW beside WSUM" : ", SLOW below WSUM" : "");
  }
};
constexpr Layout kLayouts[] = {{8, 4, false}, {4, 4, false}, {4, 4, true}};

// What the compile kept, for its report and qpu-machine.json.
struct Kept {
  Layout layout;
  Scheduling scheduling;
};

// The token machine for each layout and candidate (each schedule at the pinned size, when
// `intermediate` is not 0), the one with the fewest parameters kept. A layout that comes
// out the same as an earlier one for this many positions (segments longer than the
// cache are cut to it) is not built twice. The candidates are built shape only (no
// embedding or LM head: HostOptions::shape_only), one at a time; the best one is built
// again in full at the end (the build is deterministic, its size is checked).
machine::TokenMachine smallest_machine(const reference::Llama2Checkpoint& checkpoint, machine::TokenMachineOptions options,
                                       int64_t intermediate, Kept& kept, uint64_t& parameters) {
  using Clock = std::chrono::steady_clock;
  std::vector<Candidate> candidates(std::begin(kCandidates), std::end(kCandidates));
  if (intermediate != 0) {
    candidates.clear();
    for (const Scheduling& s : kSchedulings) candidates.push_back({intermediate, s});
  }
  const int blocks = (options.positions(checkpoint.config()) + 7) / 8;
  std::vector<Layout> tried;
  machine::TokenMachine last;
  machine::TokenMachineOptions best_options = options;
  options.shape_only = true;
  parameters = 0;
  std::string first_error;
  for (Layout layout : kLayouts) {
    layout.wsum_blocks = std::min(layout.wsum_blocks, blocks);
    layout.slow_blocks = std::min(layout.slow_blocks, blocks);
    layout.beside = layout.beside && layout.wsum_blocks == layout.slow_blocks;
    if (std::any_of(tried.begin(), tried.end(), [&](const Layout& t) {
          return t.wsum_blocks == layout.wsum_blocks && t.slow_blocks == layout.slow_blocks && t.beside == layout.beside;
        }))
      continue;
    tried.push_back(layout);
    options.wsum_segment_blocks = layout.wsum_blocks;
    options.slow_segment_blocks = layout.slow_blocks;
    options.slow_beside_wsum = layout.beside;
    for (const Candidate& candidate : candidates) {
      const auto ts = Clock::now();
      const int64_t size = candidate.intermediate;
      options.limits.max_neurons_per_mlp = size;
      options.limits.by_deadline = candidate.scheduling.by_deadline;
      options.limits.clear_room = candidate.scheduling.clear_room(size);
      const std::string what = layout.describe() + "; " + candidate.scheduling.describe(size);
      last = machine::TokenMachine{};  // the previous candidate's memory back first
      machine::TokenMachine& m = last;
      try {
        m = machine::build_token_machine(checkpoint, options);
      } catch (const Error& e) {
        // A size below the widest op that cannot be split (compiler/split_mlp.h).
        if (first_error.empty()) first_error = e.what();
        std::fprintf(stderr, "compile: intermediate %lld (%s): %s\n", static_cast<long long>(size), what.c_str(), e.what());
        continue;
      }
      const auto& c = m.compiled.weights.config;
      const uint64_t n = machine::machine_parameters(m);
      std::fprintf(stderr,
                   "compile: token machine for %d positions (%s): %lld layers, hidden %lld, intermediate %lld, vocab "
                   "%lld: %.2f billion parameters (scheduled in %.1f s)\n",
                   m.max_positions, what.c_str(), static_cast<long long>(c.num_hidden_layers),
                   static_cast<long long>(c.hidden_size), static_cast<long long>(c.intermediate_size),
                   static_cast<long long>(c.vocab_size), static_cast<double>(n) / 1e9,
                   std::chrono::duration<double>(Clock::now() - ts).count());
      if (parameters == 0 || n < parameters) {
        best_options = options;
        best_options.shape_only = false;
        parameters = n;
        kept = {layout, candidate.scheduling};
      }
    }
  }
  if (parameters == 0 && intermediate != 0)
    fail("flag --intermediate: the machine does not fit {} neurons per MLP sublayer: {}", intermediate, first_error);
  if (parameters == 0) fail("compile: the machine fits none of the intermediate sizes tried");
  last = machine::TokenMachine{};
  machine::TokenMachine best = machine::build_token_machine(checkpoint, best_options);
  if (machine::machine_parameters(best) != parameters)
    fail("compile: the kept machine built again has {} parameters, not {}", machine::machine_parameters(best), parameters);
  return best;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) fail("{}: cannot read", path);
  return bytes;
}

int run_compile(const CompileOptions& o) {
  if (!(o.max_params > 0)) fail("flag --max-params: {} is not a positive count", o.max_params);
  if (o.positions < 0) fail("flag --positions: {} must not be negative", o.positions);
  if (o.intermediate != 0 && (o.intermediate < 128 || o.intermediate > 65536))
    fail("flag --intermediate: {} is outside [128, 65536]", o.intermediate);
  if (o.sampler != "greedy" && o.sampler != "sample_mult" && o.sampler != "top-p")
    fail("flag --sampler: '{}' is not greedy, sample_mult or top-p", o.sampler);
  if (!(o.max_shard_bytes >= 1e6 && o.max_shard_bytes <= 1e12))
    fail("flag --max-shard-bytes: {} is outside [1e6, 1e12]", o.max_shard_bytes);
  // Everything that can be checked before the work is checked first.
  machine::check_checkpoint_target(o.output);
  const reference::Llama2Checkpoint checkpoint = reference::load_llama2_checkpoint(o.checkpoint);
  // The bytes that are compiled: hashed as loaded (the files could change during the build).
  const InputHashes hashes{tools::file_sha256(o.checkpoint), tools::file_sha256(o.tokenizer)};
  const reference::Llama2Config& cfg = checkpoint.config();
  const reference::Tokenizer tokenizer = reference::Tokenizer::load(o.tokenizer, cfg.vocab_size);
  if (o.positions > cfg.seq_len) fail("flag --positions: {} is more than the model's seq_len {}", o.positions, cfg.seq_len);
  const int positions = o.positions > 0 ? o.positions : cfg.seq_len;

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  machine::TokenMachineOptions options = runner::token_machine_options(positions);
  if (o.sampler != "greedy") {
    options.sampling = true;
    options.sample.topp = 1.0f;
    if (o.sampler == "top-p") {
      options.sample.topp = cli::parse_atof_float("--topp", o.topp);
      if (!(options.sample.topp > 0.0f && options.sample.topp < 1.0f) ||
          !machine::SamplePart::topp_fits(options.sample.topp, cfg.vocab_size))
        fail("flag --topp: {} is not a p the machine's top-p holds for a vocabulary of {} (0 < p < 1, run.c's cutoff "
             "(1 - p) / {} at least 2^-24)",
             o.topp, cfg.vocab_size, cfg.vocab_size - 1);
    }
    options.sample.block = machine::SamplePart::block_for(cfg.vocab_size, options.sample.topp_on());
    if (cfg.vocab_size % options.sample.block != 0)
      fail("flag --sampler: the machine's top-p works on blocks of {} logits, which do not divide the vocabulary of {}",
           options.sample.block, cfg.vocab_size);
  }
  Kept kept;
  uint64_t parameters = 0;
  const machine::TokenMachine m = smallest_machine(checkpoint, options, o.intermediate, kept, parameters);
  const auto& c = m.compiled.weights.config;
  std::fprintf(stderr, "compile: kept %s, intermediate %lld, scheduled %s (%.2f billion parameters, %.1f s in all)\n",
               kept.layout.describe().c_str(), static_cast<long long>(c.intermediate_size),
               kept.scheduling.describe(c.intermediate_size).c_str(), static_cast<double>(parameters) / 1e9,
               std::chrono::duration<double>(Clock::now() - t0).count());
  if (static_cast<double>(parameters) > o.max_params)
    fail("compile: the machine is {:.2f} billion parameters as a dense Qwen3.5 checkpoint ({} layers of hidden {}, "
         "intermediate {}), over the budget of {:.0f} parameters (--max-params); nothing was written. Its depth "
         "grows with --positions (the attention's RAMs hold one GDN head per position, docs/npu-machine.md)",
         static_cast<double>(parameters) / 1e9, c.num_hidden_layers, c.hidden_size, c.intermediate_size, o.max_params);

  machine::CheckpointExtras extras;
  const machine::StoryInterface interface = m.story_interface();
  extras.machine = machine_description(o, cfg, hashes, m, interface, parameters);
  // How the kept machine was built: the search's choices, so that it can be rebuilt.
  extras.machine["machine"]["build"] = {{"wsum_segment_blocks", kept.layout.wsum_blocks},
                                        {"slow_segment_blocks", kept.layout.slow_blocks},
                                        {"slow_beside_wsum", kept.layout.beside},
                                        {"schedule", kept.scheduling.by_deadline ? "deadline" : "greedy"},
                                        {"clear_room", kept.scheduling.clear_room(c.intermediate_size)}};
  extras.machine["interface"] = interface.to_json();
  extras.machine["map"] = machine::machine_map(m);
  extras.nested_tokenizer = read_file(o.tokenizer);
  extras.tokenizer_json = machine::story_tokenizer_json(interface, tokenizer);
  extras.tokenizer_config = machine::story_tokenizer_config(interface);
  machine::CheckpointWriteOptions wo;
  wo.max_shard_bytes = static_cast<uint64_t>(o.max_shard_bytes);
  const bool tty = isatty(fileno(stderr)) != 0;
  const auto t1 = Clock::now();
  double shown = -1e9;
  wo.progress = [&](int64_t done, int64_t total) {
    const double s = std::chrono::duration<double>(Clock::now() - t1).count();
    if (done < total && s - shown < (tty ? 0.25 : 10.0)) return;
    shown = s;
    std::fprintf(stderr, "%scompile: layer %lld of %lld emitted, %.1f s%s", tty ? "\r" : "", static_cast<long long>(done),
                 static_cast<long long>(total), s, tty && done < total ? "\x1b[K" : "\n");
    std::fflush(stderr);
  };
  const io::StreamSaveResult r = machine::write_machine_checkpoint(o.output, m, extras, wo);
  std::fprintf(stderr, "compile: wrote %s: %zu files, %.2f GB of tensors (%lld bf16, %lld fp32 tensors) in %.1f s\n",
               o.output.c_str(), r.files.size(), static_cast<double>(r.tensor_bytes) / 1e9,
               static_cast<long long>(r.bf16_tensors), static_cast<long long>(r.f32_tensors),
               std::chrono::duration<double>(Clock::now() - t1).count());
  return 0;
}

qpu::cli::Runner setup(CLI::App& app) {
  auto o = std::make_shared<CompileOptions>();
  app.footer(
      "Compiles the llama2.c checkpoint into the token machine (the machine `qpu story` runs in memory) and writes "
      "it as a Qwen3.5 checkpoint directory. A machine larger than --max-params is refused before any file is "
      "written.");
  app.add_option("model", o->checkpoint, "llama2.c checkpoint (version 0), e.g. stories260K.bin")->required();
  app.add_option("-z", o->tokenizer, "its tokenizer.bin")->required();
  app.add_option("-o", o->output, "the checkpoint directory to write (must not exist)")->required();
  app.add_option("--max-params", o->max_params, "parameter budget of the dense checkpoint (default 4e9)");
  app.add_option("--positions", o->positions, "nested positions the machine serves (default: the model's seq_len)");
  app.add_option("--intermediate", o->intermediate,
                 "neurons per MLP sublayer, each schedule tried at it (default: the size and schedule among "
                 "1024 to 384 neurons that give the fewest parameters)");
  app.add_option("--sampler", o->sampler,
                 "run.c's sampler the machine holds: greedy (default; -t 0 only), sample_mult (-t T -p 1) or top-p "
                 "(-t T -p P with the P of --topp); a sampling machine also runs -t 0");
  app.add_option("--topp", o->topp, "the p of a top-p machine (default 0.9)");
  app.add_option("--max-shard-bytes", o->max_shard_bytes, "bytes of tensor data per safetensors shard (default 1e9)");
  return [o] { return run_compile(*o); };
}

qpu::cli::Registration reg{"compile", "Compile a llama2.c model into a Qwen3.5 checkpoint directory", setup};

}  // namespace
