// What `qpu info` reports: the layer pattern text, and exact parameter / byte
// counts for a synthetic checkpoint whose sizes are worked out here by hand.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "io/checkpoint_summary.h"
#include "io/qwen35_layout.h"
#include "io/qwen35_save.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "test_helpers.h"

namespace qpu::io {
namespace {

using L = LayerType;

TEST(LayerPattern, RepeatsAndRuns) {
  std::vector<L> qwen;
  for (int i = 0; i < 32; ++i) qwen.push_back((i + 1) % 4 ? L::LinearAttention : L::FullAttention);
  EXPECT_EQ(describe_layer_pattern(qwen), "(3×linear_attention, 1×full_attention) ×8");
  EXPECT_EQ(describe_layer_pattern({L::FullAttention, L::LinearAttention, L::LinearAttention}),
            "1×full_attention, 2×linear_attention");
  EXPECT_EQ(describe_layer_pattern({L::LinearAttention, L::LinearAttention}), "(1×linear_attention) ×2");
  EXPECT_EQ(describe_layer_pattern({L::FullAttention}), "1×full_attention");
  EXPECT_EQ(describe_layer_pattern({}), "");
  EXPECT_EQ(describe_layer_pattern({L::LinearAttention, L::FullAttention, L::LinearAttention, L::FullAttention,
                                    L::LinearAttention}),
            "1×linear_attention, 1×full_attention, 1×linear_attention, 1×full_attention, 1×linear_attention");
}

// H=16, I=24, V=40, 2 heads of 8 (1 kv head), GDN 1 key head x4, 2 value heads x4, K=4.
Qwen35Weights tiny(bool tied) {
  Qwen35Weights w;
  w.config = parse_qwen35_config(
      {{"model_type", "qwen3_5_text"}, {"vocab_size", 40}, {"hidden_size", 16}, {"intermediate_size", 24},
       {"num_hidden_layers", 4}, {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"head_dim", 8},
       {"linear_num_key_heads", 1}, {"linear_num_value_heads", 2}, {"linear_key_head_dim", 4},
       {"linear_value_head_dim", 4}, {"tie_word_embeddings", tied}},
      "test");
  for (auto& slot : qwen35_weight_slots(w)) {
    size_t n = 1;
    for (int64_t d : slot.shape) n *= static_cast<size_t>(d);
    slot.values->assign(n, 0.5f);
  }
  if (!tied) w.lm_head.assign(40 * 16, 0.25f);
  return w;
}

TEST(CheckpointSummary, ExactCounts) {
  testing::ScratchDir dir;
  SaveOptions options;
  options.dtype = DType::BF16;
  options.dtype_for = [](std::string_view name) { return name.ends_with("A_log") ? DType::F32 : DType::BF16; };
  options.max_shard_bytes = 3000;
  save_qwen35(dir.path(), tiny(false), options);
  const CheckpointSummary s = summarize_checkpoint(dir.path());
  EXPECT_EQ(s.check, "");
  EXPECT_TRUE(s.sharded);

  // GDN layer: qkv (2*4+8=16)x16=256, z 8x16=128, b 2x16=32, a 32, conv 16x1x4=64,
  // dt_bias 2, A_log 2, norm 4, out 16x8=128, two norms 32, MLP 3x24x16=1152.
  const uint64_t gdn = 256 + 128 + 32 + 32 + 64 + 2 + 2 + 4 + 128 + 32 + 1152;
  // Attention layer: q 32x16=512, k 8x16=128, v 128, o 16x16=256, q/k norm 16, two norms 32, MLP 1152.
  const uint64_t attn = 512 + 128 + 128 + 256 + 16 + 32 + 1152;
  EXPECT_EQ(s.by_group.at("linear_attention layers").parameters, 3 * gdn);
  EXPECT_EQ(s.by_group.at("full_attention layers").parameters, attn);
  EXPECT_EQ(s.by_group.at("linear_attention layers").tensors, 3u * 14u);  // 9 GDN + 2 norms + 3 MLP
  EXPECT_EQ(s.by_group.at("embedding").parameters, 640u);
  EXPECT_EQ(s.by_group.at("lm_head").parameters, 640u);
  EXPECT_EQ(s.by_group.at("final norm").parameters, 16u);
  EXPECT_EQ(s.total.parameters, 3 * gdn + attn + 640 + 640 + 16);
  EXPECT_EQ(qwen35_parameter_count(s.config), s.total.parameters);  // the count from the config alone
  EXPECT_EQ(s.by_kind.at("linear_attn.A_log").parameters, 6u);
  EXPECT_EQ(s.by_kind.at("mlp.up_proj.weight").tensors, 4u);
  EXPECT_EQ(s.by_dtype.at("F32").tensors, 3u);
  EXPECT_EQ(s.by_dtype.at("F32").bytes, 3u * 2u * 4u);
  EXPECT_EQ(s.by_dtype.at("BF16").bytes, 2 * (s.total.parameters - 6));
  uint64_t on_disk = 0;
  for (const auto& f : s.files) on_disk += std::filesystem::file_size(dir / f.name);
  EXPECT_EQ(s.bytes_on_disk, on_disk);
  EXPECT_GT(s.files.size(), 1u);

  const std::string text = format_summary(s);
  EXPECT_NE(text.find("layers         3×linear_attention, 1×full_attention\n"), std::string::npos) << text;
  EXPECT_NE(text.find("every tensor matches the config"), std::string::npos);
  const auto j = summary_to_json(s);
  EXPECT_EQ(j["total"]["parameters"].get<uint64_t>(), s.total.parameters);
  EXPECT_EQ(j["check"], "ok");
}

TEST(CheckpointSummary, ReportsIgnoredAndMismatchedTensors) {
  testing::ScratchDir dir;
  SaveOptions options;
  options.dtype = DType::F32;
  save_qwen35(dir.path(), tiny(true), options);
  // Add an MTP tensor and break a shape: the summary still describes everything.
  SafetensorsFile original(dir / "model.safetensors");
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> tensors;
  for (const auto& t : original.tensors()) data.push_back(original.read_f32(t));
  for (size_t i = 0; i < original.tensors().size(); ++i) {
    const auto& t = original.tensors()[i];
    std::vector<int64_t> shape = t.shape;
    if (t.name == "model.layers.3.self_attn.q_norm.weight") shape = {2, 4};
    tensors.push_back({t.name, t.dtype, shape, data[i]});
  }
  const std::vector<float> mtp(12, 1.0f);
  tensors.push_back({"mtp.fc.weight", DType::F32, {3, 4}, mtp});
  write_safetensors(dir / "model.safetensors", tensors);

  const CheckpointSummary s = summarize_checkpoint(dir.path());
  EXPECT_EQ(s.by_group.at("mtp (ignored)").parameters, 12u);
  EXPECT_FALSE(s.by_group.contains("lm_head"));
  EXPECT_EQ(qwen35_parameter_count(s.config), s.total.parameters - 12u);  // tied; the file adds MTP's 12; q_norm as {2, 4} is still 8
  EXPECT_NE(s.check.find("model.layers.3.self_attn.q_norm.weight"), std::string::npos) << s.check;
  EXPECT_NE(format_summary(s).find("FAILED"), std::string::npos);
}

}  // namespace
}  // namespace qpu::io
