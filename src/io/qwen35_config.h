#pragma once
// The Qwen3.5 text-decoder configuration, as read from a Hugging Face config.json
// (Qwen3_5ForCausalLM / model_type qwen3_5_text, or the Qwen3_5ForConditionalGeneration
// wrapper whose text part sits under "text_config"). See ../shared/docs/qwen35-spec.md §1.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace qpu::io {

enum class LayerType { LinearAttention, FullAttention };

const char* layer_type_name(LayerType type);  // "linear_attention" / "full_attention"

struct Qwen35Config {
  std::string architecture;   // e.g. "Qwen3_5ForCausalLM"
  std::string tensor_prefix;  // "model." or "model.language_model."

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;

  // Gated (full) attention.
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  double partial_rotary_factor = 0.25;
  double rope_theta = 1e7;

  // Gated DeltaNet (linear attention).
  int64_t linear_num_key_heads = 0;
  int64_t linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 0;

  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = true;
  std::vector<LayerType> layer_types;  // explicit, or derived from full_attention_interval

  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;

  int64_t rotary_dim() const;        // int(head_dim * partial_rotary_factor)
  int64_t linear_key_dim() const;    // linear_num_key_heads * linear_key_head_dim
  int64_t linear_value_dim() const;  // linear_num_value_heads * linear_value_head_dim
  int64_t linear_conv_dim() const;   // 2 * key_dim + value_dim
};

// Parses and validates (positive sizes, divisibility, layer_types length and values).
// `source` names the file in error messages.
Qwen35Config parse_qwen35_config(const nlohmann::json& json, const std::string& source);
Qwen35Config load_qwen35_config(const std::filesystem::path& checkpoint_dir);

}  // namespace qpu::io
