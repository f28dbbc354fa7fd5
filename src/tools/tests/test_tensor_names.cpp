#include <gtest/gtest.h>

#include "tools/tensor_names.h"

namespace qpu::tools {
namespace {

TEST(TensorNames, LayerStacksOfSeveralArchitectures) {
  struct Case {
    const char* name;
    const char* stack;
    int64_t layer;
    const char* kind;
  };
  const Case cases[] = {
      {"model.layers.7.mlp.up_proj.weight", "model.layers", 7, "mlp.up_proj.weight"},
      {"model.language_model.layers.12.linear_attn.A_log", "model.language_model.layers", 12, "linear_attn.A_log"},
      {"transformer.h.0.attn.c_attn.weight", "transformer.h", 0, "attn.c_attn.weight"},
      {"mtp.layers.0.mlp.gate_proj.weight", "mtp.layers", 0, "mlp.gate_proj.weight"},
      {"layers.3.attention.wq.weight", "layers", 3, "attention.wq.weight"},
  };
  for (const Case& c : cases) {
    const TensorName n = parse_tensor_name(c.name);
    ASSERT_TRUE(n.layer.has_value()) << c.name;
    EXPECT_EQ(n.stack, c.stack);
    EXPECT_EQ(*n.layer, c.layer);
    EXPECT_EQ(n.kind, c.kind);
    EXPECT_EQ(n.role, TensorRole::Layer);
    EXPECT_EQ(n.layer_id(), std::string(c.stack) + "." + std::to_string(c.layer));
  }
}

TEST(TensorNames, Roles) {
  EXPECT_EQ(parse_tensor_name("model.embed_tokens.weight").role, TensorRole::Embedding);
  EXPECT_EQ(parse_tensor_name("model.language_model.embed_tokens.weight").role, TensorRole::Embedding);
  EXPECT_EQ(parse_tensor_name("tok_embeddings.weight").role, TensorRole::Embedding);
  EXPECT_EQ(parse_tensor_name("transformer.wte.weight").role, TensorRole::Embedding);
  EXPECT_EQ(parse_tensor_name("lm_head.weight").role, TensorRole::LmHead);
  EXPECT_EQ(parse_tensor_name("output.weight").role, TensorRole::LmHead);
  const TensorName norm = parse_tensor_name("model.norm.weight");
  EXPECT_EQ(norm.role, TensorRole::Other);
  EXPECT_FALSE(norm.layer.has_value());
  EXPECT_EQ(norm.kind, "model.norm.weight");
  // A trailing number is not a layer (nothing after it), nor a leading one.
  EXPECT_FALSE(parse_tensor_name("model.weights.3").layer.has_value());
  EXPECT_FALSE(parse_tensor_name("3.weight").layer.has_value());
  // Too many digits to be a layer index.
  EXPECT_FALSE(parse_tensor_name("a.12345678901.b").layer.has_value());
}

}  // namespace
}  // namespace qpu::tools
