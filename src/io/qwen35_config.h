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
  std::optional<int64_t> eos_token_id;  // the first of eos_token_ids

  // Added by io (not part of the original contract):
  std::string model_type;              // "qwen3_5_text" or "qwen3_5" (the file's top level)
  std::vector<int64_t> eos_token_ids;  // eos_token_id may be an int or a list in config.json
  int64_t max_position_embeddings = 0;

  int64_t rotary_dim() const;        // int(head_dim * partial_rotary_factor)
  int64_t linear_key_dim() const;    // linear_num_key_heads * linear_key_head_dim
  int64_t linear_value_dim() const;  // linear_num_value_heads * linear_value_head_dim
  int64_t linear_conv_dim() const;   // 2 * key_dim + value_dim
};

// Parses and validates (positive sizes, divisibility, layer_types length and values).
// `source` names the file in error messages. Absent fields take the defaults of
// transformers 5.24.0's Qwen3_5TextConfig (the 9B shape, head_dim 256, rope_theta
// 10000, partial_rotary_factor 0.25, tie_word_embeddings false), NOT the member
// initialisers above. tensor_prefix is the class's own ("model." for the CausalLM,
// "model.language_model." for the wrapper); load_qwen35 corrects it from the tensors.
Qwen35Config parse_qwen35_config(const nlohmann::json& json, const std::string& source);
Qwen35Config load_qwen35_config(const std::filesystem::path& checkpoint_dir);

}  // namespace qpu::io
