#pragma once
// A compiled machine written as a Hugging Face checkpoint directory, layer by layer: the
// machine's layers are emitted one at a time (AssembledMachine::layer) and streamed into
// safetensors shards (io::save_qwen35_streamed: bf16 wherever every value of a tensor is
// exact in bf16, fp32 elsewhere), with config.json and generation_config.json (greedy,
// DONE as the eos token), the optional tokenizer files and qpu-machine.json (what the
// machine is: the compiler's description; qpu-manifest.json stays the name of `qpu
// manifest`'s hashes, which cover this file too). Everything is written into a temporary
// directory beside `dir` and renamed to `dir` at the end: a failed write leaves nothing
// but, if the process is killed, the hidden temporary directory `.NAME.tmp-XXXXXX`.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "io/qwen35_stream_save.h"
#include "machine/assembler.h"

namespace qpu::machine {

inline constexpr const char* kMachineFileName = "qpu-machine.json";
// run.c's tokenizer of the nested model, as compiled (the bytes of its tokenizer.bin).
inline constexpr const char* kNestedTokenizerFileName = "nested-tokenizer.bin";

struct CheckpointExtras {
  nlohmann::json machine = nlohmann::json::object();  // qpu-machine.json
  std::string tokenizer_json;                          // tokenizer.json (empty: none)
  nlohmann::json tokenizer_config;                     // tokenizer_config.json (null: none)
  std::string nested_tokenizer;                        // nested-tokenizer.bin's bytes (empty: none)
};

struct CheckpointWriteOptions {
  uint64_t max_shard_bytes = 1'000'000'000;
  std::function<void(int64_t done, int64_t total)> progress;  // after each layer handed to the shards
};

// What the machine is made of, for qpu-machine.json ("map") and for tools that look at
// a checkpoint: its control tokens by family (the name with every number collapsed to
// '#', e.g. "SCORE(#).#": how many tokens each), and its memory map, one entry per GDN
// memory in program order: the op's label, the host layer whose mixer holds it, its head
// in that mixer, its row address bits and the values it holds per row.
nlohmann::json machine_map(const AssembledMachine& m);

// The parameter count of `m` as a dense checkpoint (every tensor at its config shape).
uint64_t machine_parameters(const AssembledMachine& m);

// The absolute path a checkpoint directory `dir` would be written to ("out/" names "out"),
// after the checks that need no machine: qpu::Error when it exists, its parent does not
// or cannot be written into. What a command checks before its long work.
std::filesystem::path check_checkpoint_target(const std::filesystem::path& dir);

// Writes `m` into the new directory `dir`. Throws qpu::Error when check_checkpoint_target
// does, or anything fails on the way (the temporary directory is removed).
io::StreamSaveResult write_machine_checkpoint(const std::filesystem::path& dir, const AssembledMachine& m,
                                              const CheckpointExtras& extras, const CheckpointWriteOptions& options = {});

}  // namespace qpu::machine
