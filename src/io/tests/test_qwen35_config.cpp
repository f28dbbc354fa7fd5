// config.json parsing without Python: committed config.json files that
// transformers 5.24.0 wrote (with its own reading of them as expected.json), and
// every validation error naming the file and the field.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "config_expectations.h"
#include "io/qwen35_config.h"
#include "test_helpers.h"

namespace qpu::io {
namespace {

using nlohmann::json;

class CommittedConfig : public ::testing::TestWithParam<std::string> {};

TEST_P(CommittedConfig, ParsedLikeTransformers) {
  const auto dir = testing::test_data("configs/" + GetParam());
  const auto expected = json::parse(testing::read_file(dir / "expected.json"));
  testing::expect_matches_transformers(load_qwen35_config(dir), expected, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Samples, CommittedConfig,
                         ::testing::Values("qwen35_08b_wrapper", "tiny_causal", "text_defaults", "hand_nested_rope"));

TEST(Qwen35Config, ReleasedShapeDerivedSizes) {
  // Spec §1.2 (Qwen3.5-0.8B): key_dim 2048, value_dim 2048, conv_dim 6144, rotary 64.
  const Qwen35Config c = load_qwen35_config(testing::test_data("configs/qwen35_08b_wrapper"));
  EXPECT_EQ(c.linear_key_dim(), 2048);
  EXPECT_EQ(c.linear_value_dim(), 2048);
  EXPECT_EQ(c.linear_conv_dim(), 6144);
  EXPECT_EQ(c.rotary_dim(), 64);
  EXPECT_EQ(c.rope_theta, 1e7);
  int full = 0;
  for (size_t i = 0; i < c.layer_types.size(); ++i) {
    if (c.layer_types[i] == LayerType::FullAttention) {
      EXPECT_EQ(i % 4, 3u);
      ++full;
    }
  }
  EXPECT_EQ(full, 6);
}

json tiny() {
  return {{"model_type", "qwen3_5_text"}, {"vocab_size", 64},  {"hidden_size", 32},         {"intermediate_size", 48},
          {"num_hidden_layers", 4},       {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"head_dim", 16},
          {"linear_num_key_heads", 2},    {"linear_num_value_heads", 4}, {"linear_key_head_dim", 8},
          {"linear_value_head_dim", 8}};
}

// Parses and expects qpu::Error whose message has the source and every fragment.
void expect_error(const json& config, std::vector<std::string> fragments) {
  try {
    parse_qwen35_config(config, "dir/config.json");
    ADD_FAILURE() << "accepted: " << config.dump();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("dir/config.json"), std::string::npos) << message;
    for (const auto& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

json with(json base, const json& patch) {
  base.merge_patch(patch);
  return base;
}

TEST(Qwen35Config, TinyIsValid) {
  const Qwen35Config c = parse_qwen35_config(tiny(), "x");
  EXPECT_EQ(c.layer_types.size(), 4u);
  EXPECT_EQ(c.layer_types[3], LayerType::FullAttention);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(Qwen35Config, ValidationErrorsNameTheField) {
  expect_error(json::array(), {"not a JSON object"});
  expect_error(with(tiny(), {{"num_key_value_heads", 3}}), {"num_attention_heads", "num_key_value_heads 3"});
  expect_error(with(tiny(), {{"linear_num_value_heads", 3}}), {"linear_num_value_heads 3"});
  expect_error(with(tiny(), {{"head_dim", 10}, {"rope_parameters", {{"partial_rotary_factor", 0.5}}}}),
               {"rotary dim", "= 5"});
  expect_error(with(tiny(), {{"rope_parameters", {{"partial_rotary_factor", 1.5}}}}), {"partial_rotary_factor"});
  expect_error(with(tiny(), {{"rope_parameters", {{"rope_theta", -1}}}}), {"rope_theta"});
  expect_error(with(tiny(), {{"rope_parameters", {{"rope_type", "yarn"}}}}), {"rope_type 'yarn'"});
  expect_error(with(tiny(), {{"rope_parameters", {{"linear_attention", {{"rope_theta", 1.0}}}}}}), {"full_attention"});
  expect_error(with(tiny(), {{"rope_parameters", 5}}), {"rope_parameters"});
  expect_error(with(tiny(), {{"layer_types", {"linear_attention"}}}), {"layer_types has 1 entries", "4"});
  expect_error(with(tiny(), {{"layer_types", {"linear_attention", "sliding_attention", "full_attention", "full_attention"}}}),
               {"layer_types[1]", "sliding_attention"});
  expect_error(with(tiny(), {{"layer_types", "full_attention"}}), {"layer_types must be an array"});
  expect_error(with(tiny(), {{"full_attention_interval", 0}}), {"full_attention_interval"});
  expect_error(with(tiny(), {{"hidden_size", 0}}), {"hidden_size"});
  expect_error(with(tiny(), {{"vocab_size", -5}}), {"vocab_size"});
  expect_error(with(tiny(), {{"intermediate_size", 48.0}}), {"intermediate_size must be an integer"});
  expect_error(with(tiny(), {{"num_hidden_layers", "4"}}), {"num_hidden_layers must be an integer"});
  json null_head_dim = tiny();  // (merge_patch would delete a null)
  null_head_dim["head_dim"] = nullptr;
  expect_error(null_head_dim, {"head_dim must be an integer"});
  expect_error(with(tiny(), {{"hidden_size", int64_t{1} << 40}}), {"hidden_size must be in"});
  expect_error(with(tiny(), {{"rms_norm_eps", 0}}), {"rms_norm_eps"});
  expect_error(with(tiny(), {{"rms_norm_eps", "small"}}), {"rms_norm_eps must be a number"});
  expect_error(with(tiny(), {{"tie_word_embeddings", 1}}), {"tie_word_embeddings must be true or false"});
  expect_error(with(tiny(), {{"hidden_act", "gelu"}}), {"hidden_act 'gelu'"});
  expect_error(with(tiny(), {{"attention_bias", true}}), {"attention_bias"});
  expect_error(with(tiny(), {{"eos_token_id", -1}}), {"eos_token_id"});
  expect_error(with(tiny(), {{"eos_token_id", {1, "x"}}}), {"eos_token_id must be an integer"});
  expect_error(with(tiny(), {{"bos_token_id", 1.5}}), {"bos_token_id"});
  expect_error(with(tiny(), {{"model_type", "llama"}}), {"model_type 'llama'"});
  expect_error(with(tiny(), {{"architectures", {"LlamaForCausalLM"}}}), {"architecture 'LlamaForCausalLM'"});
  expect_error(with(tiny(), {{"architectures", json::array()}}), {"architectures"});
  expect_error(with(tiny(), {{"architectures", {"Qwen3_5ForConditionalGeneration"}}}), {"model_type 'qwen3_5_text'"});
  expect_error(json{{"model_type", "qwen3_5"}}, {"text_config"});
  expect_error(json{{"model_type", "qwen3_5"}, {"text_config", with(tiny(), {{"num_key_value_heads", 3}})}},
               {"text_config", "num_key_value_heads"});
  expect_error(json{{"model_type", "qwen3_5"}, {"text_config", with(tiny(), {{"model_type", "qwen3_text"}})}},
               {"text_config", "qwen3_text"});
  expect_error(json::object(), {"no architectures"});
}

TEST(Qwen35Config, FileErrorsNameTheFile) {
  testing::ScratchDir dir;
  try {
    load_qwen35_config(dir.path());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "config.json").string()), std::string::npos) << e.what();
  }
  testing::write_file(dir / "config.json", "{\"model_type\": ");
  try {
    load_qwen35_config(dir.path());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: not valid JSON"), std::string::npos) << e.what();
  }
}

TEST(Qwen35Config, IntervalRuleAndTruncatedRotaryDim) {
  // (i+1) % interval ? linear : full, for an interval that does not divide the depth.
  const Qwen35Config c = parse_qwen35_config(with(tiny(), {{"num_hidden_layers", 7}, {"full_attention_interval", 3}}), "x");
  const std::vector<LayerType> expected{LayerType::LinearAttention, LayerType::LinearAttention, LayerType::FullAttention,
                                        LayerType::LinearAttention, LayerType::LinearAttention, LayerType::FullAttention,
                                        LayerType::LinearAttention};
  EXPECT_EQ(c.layer_types, expected);
  // int(16 * 0.3) = int(4.8) = 4, like Python.
  const Qwen35Config r = parse_qwen35_config(with(tiny(), {{"rope_parameters", {{"partial_rotary_factor", 0.3}}}}), "x");
  EXPECT_EQ(r.rotary_dim(), 4);
}

}  // namespace
}  // namespace qpu::io
