// load_qwen35 on tiny checkpoints written by transformers 5.24.0 itself
// (save_pretrained: F32, BF16 with F32 A_log/norm like the released models, F16,
// tied + sharded, and the vision wrapper), compared bit for bit with every tensor
// as the safetensors Python library reads it (widened to fp32 by torch).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/float_bits.h"
#include "io/qwen35_weights.h"
#include "test_helpers.h"
#include "transformers_fixture.h"

namespace qpu::io {
namespace {

using testing::ScratchDir;
using testing::TransformersCheckpoint;

struct ReferenceTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

std::map<std::string, ReferenceTensor> read_reference(const std::filesystem::path& dir) {
  const auto manifest = nlohmann::json::parse(testing::read_file(dir / "reference.json"));
  const std::string blob = testing::read_file(dir / "reference.bin");
  std::map<std::string, ReferenceTensor> out;
  for (const auto& [name, entry] : manifest["tensors"].items()) {
    ReferenceTensor t;
    t.shape = entry["shape"].get<std::vector<int64_t>>();
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    t.values.resize(static_cast<size_t>(n));
    const size_t offset = entry["offset"].get<size_t>() * sizeof(float);
    EXPECT_LE(offset + t.values.size() * sizeof(float), blob.size()) << name;
    std::memcpy(t.values.data(), blob.data() + offset, t.values.size() * sizeof(float));
    out.emplace(name, std::move(t));
  }
  return out;
}

// Written out here, independently of the loader, from the spec's tensor list (§2.2/2.3).
std::map<std::string, const std::vector<float>*> by_hf_name(const Qwen35Weights& w) {
  std::map<std::string, const std::vector<float>*> m;
  const std::string& p = w.config.tensor_prefix;
  m[p + "embed_tokens.weight"] = &w.embed_tokens;
  m[p + "norm.weight"] = &w.norm;
  if (!w.lm_head.empty()) m["lm_head.weight"] = &w.lm_head;
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const std::string lp = p + "layers." + std::to_string(i) + ".";
    m[lp + "input_layernorm.weight"] = &l.input_layernorm;
    m[lp + "post_attention_layernorm.weight"] = &l.post_attention_layernorm;
    m[lp + "mlp.gate_proj.weight"] = &l.gate_proj;
    m[lp + "mlp.up_proj.weight"] = &l.up_proj;
    m[lp + "mlp.down_proj.weight"] = &l.down_proj;
    if (l.type == LayerType::LinearAttention) {
      m[lp + "linear_attn.in_proj_qkv.weight"] = &l.linear.in_proj_qkv;
      m[lp + "linear_attn.in_proj_z.weight"] = &l.linear.in_proj_z;
      m[lp + "linear_attn.in_proj_b.weight"] = &l.linear.in_proj_b;
      m[lp + "linear_attn.in_proj_a.weight"] = &l.linear.in_proj_a;
      m[lp + "linear_attn.conv1d.weight"] = &l.linear.conv1d;
      m[lp + "linear_attn.dt_bias"] = &l.linear.dt_bias;
      m[lp + "linear_attn.A_log"] = &l.linear.A_log;
      m[lp + "linear_attn.norm.weight"] = &l.linear.norm;
      m[lp + "linear_attn.out_proj.weight"] = &l.linear.out_proj;
    } else {
      m[lp + "self_attn.q_proj.weight"] = &l.full.q_proj;
      m[lp + "self_attn.k_proj.weight"] = &l.full.k_proj;
      m[lp + "self_attn.v_proj.weight"] = &l.full.v_proj;
      m[lp + "self_attn.o_proj.weight"] = &l.full.o_proj;
      m[lp + "self_attn.q_norm.weight"] = &l.full.q_norm;
      m[lp + "self_attn.k_norm.weight"] = &l.full.k_norm;
    }
  }
  return m;
}


// One test per checkpoint: generating it (starting torch) is the slow part.
TEST_P(TransformersCheckpoint, LoadsLikeTransformers) {
  const Qwen35Weights weights = load_qwen35(dir_);
  const auto reference = read_reference(dir_);
  const auto loaded = by_hf_name(weights);

  size_t compared = 0;
  for (const auto& [name, ref] : reference) {
    if (name.starts_with("model.visual.") || name.starts_with("mtp.")) {
      EXPECT_FALSE(loaded.contains(name)) << name;
      continue;
    }
    const auto it = loaded.find(name);
    ASSERT_NE(it, loaded.end()) << "checkpoint tensor not loaded: " << name;
    ASSERT_EQ(it->second->size(), ref.values.size()) << name;
    for (size_t i = 0; i < ref.values.size(); ++i) {
      ASSERT_EQ(float_bits((*it->second)[i]), float_bits(ref.values[i]))
          << name << "[" << i << "]: " << describe_float((*it->second)[i]) << " vs " << describe_float(ref.values[i]);
    }
    ++compared;
  }
  // Nothing loaded that the file does not have (a tied lm_head stays empty).
  EXPECT_EQ(compared, loaded.size());
  EXPECT_GT(compared, 40u);

  const Qwen35Weights& w = weights;
  const Qwen35Config& c = w.config;
  EXPECT_EQ(c.vocab_size, 64);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.linear_conv_dim(), 2 * 2 * 8 + 4 * 8);
  EXPECT_EQ(c.rotary_dim(), 4);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(c.eos_token_id, 3);
  ASSERT_EQ(w.layers.size(), 5u);

  using L = LayerType;
  const std::string variant = GetParam();
  if (variant == "wrapper_bf16") {
    EXPECT_EQ(c.architecture, "Qwen3_5ForConditionalGeneration");
    EXPECT_EQ(c.tensor_prefix, "model.language_model.");
    EXPECT_EQ(c.layer_types, (std::vector<L>{L::FullAttention, L::LinearAttention, L::LinearAttention,
                                             L::FullAttention, L::LinearAttention}));
  } else {
    EXPECT_EQ(c.architecture, "Qwen3_5ForCausalLM");
    EXPECT_EQ(c.tensor_prefix, "model.");
  }
  if (variant == "causal_tied_sharded") {
    EXPECT_EQ(c.layer_types, (std::vector<L>{L::LinearAttention, L::FullAttention, L::LinearAttention,
                                             L::FullAttention, L::LinearAttention}));
  } else if (variant != "wrapper_bf16") {
    EXPECT_EQ(c.layer_types, (std::vector<L>{L::LinearAttention, L::LinearAttention, L::LinearAttention,
                                             L::FullAttention, L::LinearAttention}));
  }
  const bool tied = variant == "causal_tied_sharded" || variant == "wrapper_bf16";
  EXPECT_EQ(c.tie_word_embeddings, tied);
  EXPECT_EQ(w.lm_head.empty(), tied);
  EXPECT_EQ(&w.output_weights(), tied ? &w.embed_tokens : &w.lm_head);

  // The script stores [-0, tiny subnormal, -tiny, inf, -inf, nan] in embed row 0.
  const float* row = w.embed_tokens.data();
  EXPECT_EQ(float_bits(row[0]), 0x80000000u);
  EXPECT_TRUE(std::fpclassify(row[1]) == FP_SUBNORMAL || variant == "causal_f16") << describe_float(row[1]);
  EXPECT_GT(row[1], 0.0f);
  EXPECT_EQ(row[2], -row[1]);
  EXPECT_EQ(row[3], INFINITY);
  EXPECT_EQ(row[4], -INFINITY);
  EXPECT_TRUE(std::isnan(row[5]));
}

INSTANTIATE_TEST_SUITE_P(SavePretrained, TransformersCheckpoint,
                         ::testing::Values("causal_f32", "causal_bf16", "causal_f16", "causal_tied_sharded",
                                           "wrapper_bf16"));

}  // namespace
}  // namespace qpu::io
