#pragma once
// Compares a parsed Qwen35Config with expected.json, the interpretation that
// transformers 5.24.0 gives the same config.json (see make_qwen35_configs.py).
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "io/qwen35_config.h"

namespace qpu::io::testing {

inline void expect_matches_transformers(const Qwen35Config& c, const nlohmann::json& e, const std::string& name) {
  SCOPED_TRACE(name);
  EXPECT_EQ(c.model_type, e["model_type"].get<std::string>());
  EXPECT_EQ(c.vocab_size, e["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.hidden_size, e["hidden_size"].get<int64_t>());
  EXPECT_EQ(c.intermediate_size, e["intermediate_size"].get<int64_t>());
  EXPECT_EQ(c.num_hidden_layers, e["num_hidden_layers"].get<int64_t>());
  EXPECT_EQ(c.num_attention_heads, e["num_attention_heads"].get<int64_t>());
  EXPECT_EQ(c.num_key_value_heads, e["num_key_value_heads"].get<int64_t>());
  EXPECT_EQ(c.head_dim, e["head_dim"].get<int64_t>());
  EXPECT_EQ(c.linear_num_key_heads, e["linear_num_key_heads"].get<int64_t>());
  EXPECT_EQ(c.linear_num_value_heads, e["linear_num_value_heads"].get<int64_t>());
  EXPECT_EQ(c.linear_key_head_dim, e["linear_key_head_dim"].get<int64_t>());
  EXPECT_EQ(c.linear_value_head_dim, e["linear_value_head_dim"].get<int64_t>());
  EXPECT_EQ(c.linear_conv_kernel_dim, e["linear_conv_kernel_dim"].get<int64_t>());
  EXPECT_EQ(c.max_position_embeddings, e["max_position_embeddings"].get<int64_t>());
  EXPECT_EQ(c.rms_norm_eps, e["rms_norm_eps"].get<double>());
  EXPECT_EQ(c.rope_theta, e["rope_theta"].get<double>());
  EXPECT_EQ(c.partial_rotary_factor, e["partial_rotary_factor"].get<double>());
  EXPECT_EQ(c.rotary_dim(), e["rotary_dim"].get<int64_t>());
  std::vector<std::string> types;
  for (LayerType t : c.layer_types) types.emplace_back(layer_type_name(t));
  EXPECT_EQ(types, e["layer_types"].get<std::vector<std::string>>());
  EXPECT_EQ(c.tie_word_embeddings, e["tie_word_embeddings"].get<bool>());
  EXPECT_EQ(c.eos_token_ids, e["eos_token_ids"].get<std::vector<int64_t>>());
  if (c.eos_token_ids.empty()) {
    EXPECT_FALSE(c.eos_token_id.has_value());
  } else {
    EXPECT_EQ(c.eos_token_id, c.eos_token_ids.front());
  }
  if (e["bos_token_id"].is_null()) {
    EXPECT_FALSE(c.bos_token_id.has_value());
  } else {
    EXPECT_EQ(c.bos_token_id, e["bos_token_id"].get<int64_t>());
  }
  const bool wrapper = e["model_type"] == "qwen3_5";
  EXPECT_EQ(c.architecture, wrapper ? "Qwen3_5ForConditionalGeneration" : "Qwen3_5ForCausalLM");
  EXPECT_EQ(c.tensor_prefix, wrapper ? "model.language_model." : "model.");
}

}  // namespace qpu::io::testing
