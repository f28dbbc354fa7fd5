#pragma once
// Where every Qwen3.5 weight lives: its Hugging Face tensor name, its shape for a
// given config (spec §2.2/§2.3), and the Qwen35Weights member that holds it. The
// loader fills these slots and the saver writes them, so names and shapes are
// spelled out exactly once.
#include <cstdint>
#include <string>
#include <vector>

#include "io/qwen35_weights.h"

namespace qpu::io {

template <typename Values>
struct BasicWeightSlot {
  std::string name;             // e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;   // PyTorch order
  Values* values;               // the member of Qwen35Weights
};
using WeightSlot = BasicWeightSlot<std::vector<float>>;
using ConstWeightSlot = BasicWeightSlot<const std::vector<float>>;

// All slots except lm_head (whose presence depends on tying), in model order:
// embed_tokens, then each layer, then the final norm. Names use
// weights.config.tensor_prefix. The mutable version first resizes weights.layers
// to the config's depth and sets each layer's type from config.layer_types; the
// const version requires them to agree already (qpu::Error otherwise).
std::vector<WeightSlot> qwen35_weight_slots(Qwen35Weights& weights);
std::vector<ConstWeightSlot> qwen35_weight_slots(const Qwen35Weights& weights);

// The slots of one layer (index `index` of `config`, its type from layer.type), for
// writing a checkpoint one layer at a time.
std::vector<WeightSlot> qwen35_layer_slots(const Qwen35Config& config, int64_t index, LayerWeights& layer);
std::vector<ConstWeightSlot> qwen35_layer_slots(const Qwen35Config& config, int64_t index, const LayerWeights& layer);

inline constexpr const char* kLmHeadName = "lm_head.weight";

// Parameters of a checkpoint with this config, from the slots' shapes alone (nothing is
// allocated): every slot, plus lm_head when the embeddings are not tied. What a compiled
// machine would cost as a dense checkpoint before a byte of it is written.
uint64_t qwen35_parameter_count(const Qwen35Config& config);

}  // namespace qpu::io
