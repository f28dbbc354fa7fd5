#pragma once
// Where a tensor sits in a model, from its name alone, for any architecture that
// numbers its blocks: "model.layers.7.mlp.up_proj.weight" (Llama, Qwen),
// "model.language_model.layers.7...." (Qwen3.5 with vision), "transformer.h.7..."
// (GPT-2), "mtp.layers.0...." (a second stack).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace qpu::tools {

enum class TensorRole { Layer, Embedding, LmHead, Other };
const char* tensor_role_name(TensorRole role);  // "layer", "embedding", "lm_head", "other"

struct TensorName {
  std::string stack;             // the name up to the layer index ("model.layers"); "" outside a stack
  std::optional<int64_t> layer;  // the index
  std::string kind;              // the rest ("mlp.up_proj.weight"), or the full name outside a stack
  TensorRole role = TensorRole::Other;

  std::string layer_id() const;  // "model.layers.7" ("" outside a stack)
};

// The first dot-separated component made only of digits (with something before
// it) is the layer index.
TensorName parse_tensor_name(std::string_view name);

}  // namespace qpu::tools
