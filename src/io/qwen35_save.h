#pragma once
// Writing a Qwen3.5 text checkpoint that transformers loads as-is: config.json
// plus model.safetensors (or shards + index). This is how compiled weights leave
// the project; load_qwen35 reads them back bit for bit.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "io/dtype.h"
#include "io/qwen35_weights.h"

namespace qpu::io {

// config.json for `config`: every text field written explicitly (explicit
// layer_types, rope_parameters), under text_config for the
// Qwen3_5ForConditionalGeneration wrapper.
nlohmann::json qwen35_config_to_json(const Qwen35Config& config);

struct SaveOptions {
  DType dtype = DType::BF16;  // F32, BF16 or F16; every value must convert exactly
  // Per-tensor override (HF name -> dtype), e.g. keep A_log in F32 like the
  // released checkpoints. Empty: `dtype` for everything.
  std::function<DType(std::string_view name)> dtype_for;
  uint64_t max_shard_bytes = 5'000'000'000;  // transformers' default "5GB"
};

// Writes config.json and the tensors of `weights` (lm_head only when non-empty,
// i.e. untied) into `dir`, which must exist. Throws qpu::Error (naming the tensor
// and element) if a value is not exactly representable in its dtype.
void save_qwen35(const std::filesystem::path& dir, const Qwen35Weights& weights, const SaveOptions& options = {});

}  // namespace qpu::io
