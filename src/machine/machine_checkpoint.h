#pragma once
// A compiled machine written as a Hugging Face checkpoint directory, layer by layer: the
// machine's layers are emitted one at a time (AssembledMachine::layer) and streamed into
// safetensors shards (io::save_qwen35_streamed: bf16 wherever every value of a tensor is
// exact in bf16, fp32 elsewhere), with config.json, generation_config.json (greedy), the
// optional tokenizer files and qpu-manifest.json. Everything is written into a temporary
// directory beside `dir` and renamed to `dir` at the end: a failed write leaves nothing.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "io/qwen35_stream_save.h"
#include "machine/assembler.h"

namespace qpu::machine {

struct CheckpointExtras {
  nlohmann::json manifest = nlohmann::json::object();  // qpu-manifest.json
  std::string tokenizer_json;                          // tokenizer.json (empty: none)
  nlohmann::json tokenizer_config;                     // tokenizer_config.json (null: none)
};

struct CheckpointWriteOptions {
  uint64_t max_shard_bytes = 1'000'000'000;
  std::function<void(int64_t done, int64_t total)> progress;  // after each layer
};

// The parameter count of `m` as a dense checkpoint (every tensor at its config shape).
uint64_t machine_parameters(const AssembledMachine& m);

// Writes `m` into the new directory `dir`. Throws qpu::Error when `dir` exists, its
// parent does not, or anything fails on the way (the temporary directory is removed).
io::StreamSaveResult write_machine_checkpoint(const std::filesystem::path& dir, const AssembledMachine& m,
                                              const CheckpointExtras& extras, const CheckpointWriteOptions& options = {});

}  // namespace qpu::machine
