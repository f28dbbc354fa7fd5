#include "io/qwen35_save.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/qwen35_layout.h"
#include "io/safetensors_writer.h"

namespace qpu::io {

nlohmann::json qwen35_config_to_json(const Qwen35Config& c) {
  nlohmann::json text = {
      {"model_type", "qwen3_5_text"},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"linear_num_key_heads", c.linear_num_key_heads},
      {"linear_num_value_heads", c.linear_num_value_heads},
      {"linear_key_head_dim", c.linear_key_head_dim},
      {"linear_value_head_dim", c.linear_value_head_dim},
      {"linear_conv_kernel_dim", c.linear_conv_kernel_dim},
      {"rms_norm_eps", c.rms_norm_eps},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"rope_parameters",
       {{"rope_type", "default"}, {"rope_theta", c.rope_theta}, {"partial_rotary_factor", c.partial_rotary_factor}}},
      {"tie_word_embeddings", c.tie_word_embeddings},
      // The dtype the weights are meant in: without it, transformers' from_pretrained
      // (dtype "auto") takes the first tensor's dtype, bf16 in a checkpoint that stores
      // its bf16-exact tensors as bf16, and would round every fp32 tensor.
      {"dtype", "float32"},
  };
  if (c.max_position_embeddings > 0) text["max_position_embeddings"] = c.max_position_embeddings;
  auto& types = text["layer_types"] = nlohmann::json::array();
  for (LayerType t : c.layer_types) types.push_back(layer_type_name(t));
  text["bos_token_id"] = c.bos_token_id ? nlohmann::json(*c.bos_token_id) : nlohmann::json();
  if (c.eos_token_ids.size() > 1) {
    text["eos_token_id"] = c.eos_token_ids;
  } else if (c.eos_token_id) {
    text["eos_token_id"] = *c.eos_token_id;
  } else {
    text["eos_token_id"] = nullptr;
  }
  if (c.architecture != "Qwen3_5ForConditionalGeneration") {
    text["architectures"] = {"Qwen3_5ForCausalLM"};
    return text;
  }
  return {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
          {"model_type", "qwen3_5"},
          {"dtype", "float32"},
          {"tie_word_embeddings", c.tie_word_embeddings},
          {"text_config", text}};
}

void save_qwen35(const std::filesystem::path& dir, const Qwen35Weights& weights, const SaveOptions& options) {
  if (!std::filesystem::is_directory(dir)) fail("{}: not a directory", dir.string());
  auto slots = qwen35_weight_slots(weights);
  if (!weights.lm_head.empty()) {
    slots.push_back({kLmHeadName, {weights.config.vocab_size, weights.config.hidden_size}, &weights.lm_head});
  }

  std::vector<TensorToWrite> tensors;
  for (const auto& slot : slots) {
    const DType dtype = options.dtype_for ? options.dtype_for(slot.name) : options.dtype;
    tensors.push_back({slot.name, dtype, slot.shape, *slot.values});  // sizes are checked by the writer
  }
  Qwen35Config config = weights.config;
  config.tie_word_embeddings = weights.lm_head.empty();
  const std::string text = qwen35_config_to_json(config).dump(2) + "\n";
  // Tensors first, config last: a directory with a config.json is complete.
  write_sharded_safetensors(dir, tensors, options.max_shard_bytes, {{"format", "pt"}});
  write_file_atomically(dir / "config.json", text);
}

}  // namespace qpu::io
