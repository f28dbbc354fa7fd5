#include "io/qwen35_layout.h"

#include <fmt/format.h>

#include <type_traits>

#include "common/error.h"

namespace qpu::io {

namespace {

// Layer i's slots (config c), appended to `slots`; L is LayerWeights or const LayerWeights.
template <typename L, typename Slot>
void append_layer_slots(const Qwen35Config& c, int64_t i, L& layer, std::vector<Slot>& slots) {
  const std::string& p = c.tensor_prefix;
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const int64_t conv_dim = c.linear_conv_dim(), value_dim = c.linear_value_dim();
  const int64_t v_heads = c.linear_num_value_heads, head_dim = c.head_dim;
  const int64_t q_out = 2 * c.num_attention_heads * head_dim;  // per head: [query | gate]
  const int64_t kv_out = c.num_key_value_heads * head_dim;
  const std::string lp = fmt::format("{}layers.{}.", p, i);
  slots.push_back({lp + "input_layernorm.weight", {H}, &layer.input_layernorm});
  if (layer.type == LayerType::LinearAttention) {
    const std::string ap = lp + "linear_attn.";
    auto& la = layer.linear;
    slots.push_back({ap + "in_proj_qkv.weight", {conv_dim, H}, &la.in_proj_qkv});
    slots.push_back({ap + "in_proj_z.weight", {value_dim, H}, &la.in_proj_z});
    slots.push_back({ap + "in_proj_b.weight", {v_heads, H}, &la.in_proj_b});
    slots.push_back({ap + "in_proj_a.weight", {v_heads, H}, &la.in_proj_a});
    slots.push_back({ap + "conv1d.weight", {conv_dim, 1, c.linear_conv_kernel_dim}, &la.conv1d});
    slots.push_back({ap + "dt_bias", {v_heads}, &la.dt_bias});
    slots.push_back({ap + "A_log", {v_heads}, &la.A_log});
    slots.push_back({ap + "norm.weight", {c.linear_value_head_dim}, &la.norm});
    slots.push_back({ap + "out_proj.weight", {H, value_dim}, &la.out_proj});
  } else {
    const std::string ap = lp + "self_attn.";
    auto& fa = layer.full;
    slots.push_back({ap + "q_proj.weight", {q_out, H}, &fa.q_proj});
    slots.push_back({ap + "k_proj.weight", {kv_out, H}, &fa.k_proj});
    slots.push_back({ap + "v_proj.weight", {kv_out, H}, &fa.v_proj});
    slots.push_back({ap + "o_proj.weight", {H, c.num_attention_heads * head_dim}, &fa.o_proj});
    slots.push_back({ap + "q_norm.weight", {head_dim}, &fa.q_norm});
    slots.push_back({ap + "k_norm.weight", {head_dim}, &fa.k_norm});
  }
  slots.push_back({lp + "post_attention_layernorm.weight", {H}, &layer.post_attention_layernorm});
  slots.push_back({lp + "mlp.gate_proj.weight", {I, H}, &layer.gate_proj});
  slots.push_back({lp + "mlp.up_proj.weight", {I, H}, &layer.up_proj});
  slots.push_back({lp + "mlp.down_proj.weight", {H, I}, &layer.down_proj});
}

// W is Qwen35Weights or const Qwen35Weights; the slots point into it.
template <typename W, typename Slot = BasicWeightSlot<std::conditional_t<std::is_const_v<W>, const std::vector<float>, std::vector<float>>>>
std::vector<Slot> slots_of(W& weights) {
  const Qwen35Config& c = weights.config;
  const std::string& p = c.tensor_prefix;
  const int64_t H = c.hidden_size, V = c.vocab_size;

  std::vector<Slot> slots;
  slots.push_back({p + "embed_tokens.weight", {V, H}, &weights.embed_tokens});
  for (size_t i = 0; i < weights.layers.size(); ++i) append_layer_slots(c, static_cast<int64_t>(i), weights.layers[i], slots);
  slots.push_back({p + "norm.weight", {H}, &weights.norm});
  return slots;
}

}  // namespace

std::vector<WeightSlot> qwen35_layer_slots(const Qwen35Config& config, int64_t index, LayerWeights& layer) {
  std::vector<WeightSlot> slots;
  append_layer_slots(config, index, layer, slots);
  return slots;
}

std::vector<ConstWeightSlot> qwen35_layer_slots(const Qwen35Config& config, int64_t index, const LayerWeights& layer) {
  std::vector<ConstWeightSlot> slots;
  append_layer_slots(config, index, layer, slots);
  return slots;
}

std::vector<WeightSlot> qwen35_weight_slots(Qwen35Weights& weights) {
  weights.layers.resize(weights.config.layer_types.size());
  for (size_t i = 0; i < weights.layers.size(); ++i) weights.layers[i].type = weights.config.layer_types[i];
  return slots_of(weights);
}

std::vector<ConstWeightSlot> qwen35_weight_slots(const Qwen35Weights& weights) {
  const auto& types = weights.config.layer_types;
  if (weights.layers.size() != types.size())
    fail("Qwen3.5 weights have {} layers but the config has {}", weights.layers.size(), types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    if (weights.layers[i].type != types[i])
      fail("Qwen3.5 weights: layer {} is {} but the config says {}", i, layer_type_name(weights.layers[i].type),
           layer_type_name(types[i]));
  }
  return slots_of(weights);
}

uint64_t qwen35_parameter_count(const Qwen35Config& config) {
  Qwen35Weights shapes;  // layers and their types only: the slots' vectors stay empty
  shapes.config = config;
  uint64_t total = 0;
  for (const WeightSlot& slot : qwen35_weight_slots(shapes)) {
    uint64_t n = 1;
    for (int64_t d : slot.shape) n *= static_cast<uint64_t>(d);
    total += n;
  }
  if (!config.tie_word_embeddings) total += static_cast<uint64_t>(config.vocab_size) * static_cast<uint64_t>(config.hidden_size);
  return total;
}

}  // namespace qpu::io
