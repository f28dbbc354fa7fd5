#pragma once
// Writing a Qwen3.5 checkpoint one layer at a time: a compiled machine of thousands of
// dense layers never exists in memory at once. The tensors go into safetensors shards
// of at most `max_shard_bytes` each (only the current shard is buffered), every tensor
// in bf16 when all of its values are exact in bf16 and in fp32 otherwise, then
// model.safetensors.index.json and config.json, as save_pretrained lays them out; load_qwen35
// and stock transformers read the result back bit for bit.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "io/qwen35_weights.h"

namespace qpu::io {

struct StreamSaveOptions {
  // Bytes of tensor data per shard. The shard being filled is held as fp32 values: peak
  // memory is up to twice this (a bf16 shard) plus the layer being handed over.
  uint64_t max_shard_bytes = 1'000'000'000;
  bool bf16_where_exact = true;              // false: every tensor in fp32
  // Called after each layer is handed to the shards (its tensors may still wait in the
  // current shard): (layers handed over, layers in all).
  std::function<void(int64_t done, int64_t total)> progress;
  // Changes the config written to config.json (e.g. its eos token); the tensors follow
  // `globals.config` whatever it does to shapes, so it must not change them.
  std::function<void(Qwen35Config&)> adjust_config;
};

struct StreamSaveResult {
  uint64_t parameters = 0;      // values written (every tensor, lm_head included)
  uint64_t tensor_bytes = 0;    // bytes of tensor data on disk
  int64_t bf16_tensors = 0, f32_tensors = 0;
  std::vector<std::string> files;  // shards, then the index (if any), then config.json
};

// Writes `globals` (config, embed_tokens, norm, and lm_head when non-empty; its `layers`
// are ignored) and the config's layers, layer(l) for l = 0 .. num_hidden_layers - 1 in
// order, into `dir` (which must exist and be empty). Each layer must have the config's layer type
// and shapes (qpu::Error naming the tensor otherwise). config.json is written last, so
// a directory holding one is complete; on an error the shards written so far stay (the
// caller writes into a temporary directory and removes it).
StreamSaveResult save_qwen35_streamed(const std::filesystem::path& dir, const Qwen35Weights& globals,
                                      const std::function<LayerWeights(int64_t)>& layer,
                                      const StreamSaveOptions& options = {});

}  // namespace qpu::io
