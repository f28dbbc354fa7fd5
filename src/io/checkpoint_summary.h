#pragma once
// What `qpu info` reports about a checkpoint directory, computed from the config
// and the safetensors headers only (no tensor data is read, so it is instant even
// for multi-GB checkpoints).
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/qwen35_config.h"

namespace qpu::io {

// "(3×linear_attention, 1×full_attention) ×8", or the runs when nothing repeats:
// "1×full_attention, 2×linear_attention, 1×full_attention".
std::string describe_layer_pattern(const std::vector<LayerType>& types);

struct CheckpointSummary {
  std::filesystem::path dir;
  Qwen35Config config;

  struct Count {
    uint64_t tensors = 0;
    uint64_t parameters = 0;
    uint64_t bytes = 0;
  };
  // Groups: "linear_attention layers", "full_attention layers", "embedding",
  // "lm_head", "final norm", "mtp (ignored)", "visual (ignored)", "other".
  std::map<std::string, Count> by_group;
  // Tensor kind: the name without prefix and layer index ("linear_attn.A_log",
  // "mlp.up_proj.weight", "embed_tokens.weight", ...).
  std::map<std::string, Count> by_kind;
  std::map<std::string, Count> by_dtype;  // "BF16", ...
  Count total;

  struct File {
    std::string name;
    uint64_t bytes = 0;
    uint64_t tensors = 0;
  };
  std::vector<File> files;    // safetensors files (shards in index order)
  bool sharded = false;
  uint64_t bytes_on_disk = 0;  // all safetensors files together

  std::string check;  // "" when the tensors match the config, else the error
};

CheckpointSummary summarize_checkpoint(const std::filesystem::path& dir);
std::string format_summary(const CheckpointSummary& summary);
nlohmann::json summary_to_json(const CheckpointSummary& summary);

}  // namespace qpu::io
