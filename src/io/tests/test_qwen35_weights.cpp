// load_qwen35 / save_qwen35 on synthetic checkpoints: bit-exact round trips in
// every dtype and layout, and every way a checkpoint can disagree with its config
// (missing, misshaped, unexpected, wrongly typed tensors; tying variants), each
// error naming the file and the tensor.
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/float_bits.h"
#include "io/checkpoint.h"
#include "io/qwen35_layout.h"
#include "io/qwen35_save.h"
#include "io/safetensors_writer.h"
#include "test_helpers.h"

namespace qpu::io {
namespace {

using nlohmann::json;
using testing::expect_error;
using testing::expect_same_weights;
using testing::ScratchDir;

SaveOptions options(DType dtype, uint64_t max_shard_bytes = 5'000'000'000) {
  SaveOptions o;
  o.dtype = dtype;
  o.max_shard_bytes = max_shard_bytes;
  return o;
}

json tiny_config(bool tied = false) {
  return testing::tiny_qwen35_config(tied, {"linear_attention", "full_attention", "linear_attention", "full_attention"});
}

// Random weights; every value a bfloat16 so any dtype but F16 stores it exactly.
Qwen35Weights random_weights(const json& config_json, uint32_t seed) {
  Qwen35Weights w;
  w.config = parse_qwen35_config(config_json, "test");
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& v, size_t n) {
    v.resize(n);
    for (float& x : v) x = float_from_bits(float_bits(normal(rng)) & 0xffff0000u);
  };
  for (auto& slot : qwen35_weight_slots(w)) {
    size_t n = 1;
    for (int64_t d : slot.shape) n *= static_cast<size_t>(d);
    fill(*slot.values, n);
  }
  if (!w.config.tie_word_embeddings) fill(w.lm_head, static_cast<size_t>(w.config.vocab_size * w.config.hidden_size));
  return w;
}

// A checkpoint's tensors as editable data, to rewrite with changes.
struct Edit {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

std::vector<Edit> read_all(const std::filesystem::path& file) {
  SafetensorsFile f(file);
  std::vector<Edit> out;
  for (const auto& t : f.tensors()) out.push_back({t.name, t.dtype, t.shape, f.read_f32(t)});
  return out;
}

void write_all(const std::filesystem::path& file, const std::vector<Edit>& edits) {
  std::vector<TensorToWrite> tensors;
  for (const auto& e : edits) tensors.push_back({e.name, e.dtype, e.shape, e.values});
  write_safetensors(file, tensors);
}

Edit* find(std::vector<Edit>& edits, const std::string& name) {
  for (auto& e : edits) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

TEST(Qwen35RoundTrip, EveryDTypeAndLayout) {
  for (const DType dtype : {DType::F32, DType::BF16}) {
    for (const uint64_t shard : {uint64_t{5'000'000'000}, uint64_t{2000}}) {
      for (const bool tied : {false, true}) {
        SCOPED_TRACE(fmt::format("{} shard {} tied {}", dtype_name(dtype), shard, tied));
        ScratchDir dir;
        const Qwen35Weights w = random_weights(tiny_config(tied), 11);
        save_qwen35(dir.path(), w, options(dtype, shard));
        EXPECT_EQ(std::filesystem::exists(dir / "model.safetensors.index.json"), shard == 2000);
        const Qwen35Weights back = load_qwen35(dir.path());
        expect_same_weights(w, back);
        EXPECT_EQ(back.config.tie_word_embeddings, tied);
        EXPECT_EQ(back.config.layer_types, w.config.layer_types);
        EXPECT_EQ(back.config.rope_theta, 10000.0);
        EXPECT_EQ(back.lm_head.empty(), tied);
      }
    }
  }
}

TEST(Qwen35RoundTrip, HalfPrecisionAndPerTensorDTypes) {
  ScratchDir dir;
  Qwen35Weights w = random_weights(tiny_config(), 12);
  // Halves hold bf16 values only when they are in range with few mantissa bits;
  // use small integers / 8 everywhere, and an A_log that only F32 can hold.
  for (auto& slot : qwen35_weight_slots(w))
    for (float& x : *slot.values) x = std::round(x * 8.0f) / 8.0f;
  for (float& x : w.lm_head) x = std::round(x * 8.0f) / 8.0f;
  w.layers[0].linear.A_log[0] = 0.1f;
  SaveOptions per_tensor = options(DType::F16);
  per_tensor.dtype_for = [](std::string_view name) { return name.ends_with("A_log") ? DType::F32 : DType::F16; };
  save_qwen35(dir.path(), w, per_tensor);
  EXPECT_EQ(SafetensorsFile(dir / "model.safetensors").get("model.layers.0.linear_attn.A_log").dtype, DType::F32);
  EXPECT_EQ(SafetensorsFile(dir / "model.safetensors").get("model.layers.0.linear_attn.norm.weight").dtype, DType::F16);
  expect_same_weights(w, load_qwen35(dir.path()));

  // Without the override the same weights cannot be written: the error names the tensor.
  ScratchDir other;
  expect_error([&] { save_qwen35(other.path(), w, options(DType::BF16)); },
               {"model.layers.0.linear_attn.A_log", "element 0", "BF16"});
}

TEST(Qwen35RoundTrip, WrapperUsesLanguageModelPrefix) {
  ScratchDir dir;
  json config = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
                 {"model_type", "qwen3_5"},
                 {"tie_word_embeddings", true},
                 {"text_config", tiny_config()}};
  config["text_config"].erase("architectures");
  const Qwen35Weights w = random_weights(config, 13);
  EXPECT_EQ(w.config.tensor_prefix, "model.language_model.");
  save_qwen35(dir.path(), w);
  EXPECT_NE(SafetensorsFile(dir / "model.safetensors").find("model.language_model.layers.3.self_attn.k_norm.weight"),
            nullptr);
  const Qwen35Weights back = load_qwen35(dir.path());
  EXPECT_EQ(back.config.architecture, "Qwen3_5ForConditionalGeneration");
  expect_same_weights(w, back);
}

class BrokenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override { save(tiny_config()); }
  void save(const json& config) {
    save_qwen35(dir_.path(), random_weights(config, 14), options(DType::F32));
    edits_ = read_all(file());
  }
  std::filesystem::path file() const { return dir_ / "model.safetensors"; }
  void rewrite() { write_all(file(), edits_); }
  void drop(const std::string& name) {
    std::erase_if(edits_, [&](const Edit& e) { return e.name == name; });
  }
  void expect(const std::vector<std::string>& fragments) {
    auto all = fragments;
    all.push_back(file().string());
    expect_error([&] { load_qwen35(dir_.path()); }, all);
  }
  ScratchDir dir_;
  std::vector<Edit> edits_;
};

TEST_F(BrokenCheckpoint, MissingTensor) {
  drop("model.layers.2.linear_attn.A_log");
  rewrite();
  expect({"missing tensor 'model.layers.2.linear_attn.A_log'", "[2]"});
}

TEST_F(BrokenCheckpoint, WrongShape) {
  Edit* conv = find(edits_, "model.layers.0.linear_attn.conv1d.weight");
  conv->shape = {conv->shape[0], conv->shape[2]};  // squeezed [conv_dim, K] as GGUF stores it
  rewrite();
  expect({"'model.layers.0.linear_attn.conv1d.weight'", "shape [16, 4]", "requires [16, 1, 4]"});
}

TEST_F(BrokenCheckpoint, TransposedProjection) {
  Edit* k = find(edits_, "model.layers.1.self_attn.k_proj.weight");
  std::swap(k->shape[0], k->shape[1]);
  rewrite();
  expect({"'model.layers.1.self_attn.k_proj.weight'", "shape [16, 8]", "requires [8, 16]"});
}

TEST_F(BrokenCheckpoint, UnexpectedTensors) {
  edits_.push_back({"model.layers.0.self_attn.q_proj.weight", DType::F32, {1}, {1.0f}});  // layer 0 is linear
  rewrite();
  expect({"unexpected tensor 'model.layers.0.self_attn.q_proj.weight'"});
  drop("model.layers.0.self_attn.q_proj.weight");
  edits_.push_back({"model.layers.4.input_layernorm.weight", DType::F32, {16}, std::vector<float>(16)});
  rewrite();
  expect({"unexpected tensor 'model.layers.4.input_layernorm.weight'"});
}

TEST_F(BrokenCheckpoint, IgnoredPrefixesLoad) {
  edits_.push_back({"mtp.fc.weight", DType::F32, {2, 2}, {1, 2, 3, 4}});
  edits_.push_back({"mtp.layers.0.self_attn.q_proj.weight", DType::BF16, {1}, {1}});
  edits_.push_back({"model.visual.blocks.0.attn.qkv.weight", DType::F16, {1}, {1}});
  rewrite();
  EXPECT_EQ(load_qwen35(dir_.path()).layers.size(), 4u);
}

TEST_F(BrokenCheckpoint, NonFloatWeight) {
  // write_safetensors only writes floats: relabel the F32 tensor as I32 in the header.
  std::string bytes = testing::read_file(file());
  const std::string needle = R"("model.norm.weight":{"data_offsets")";
  const auto at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  const auto dtype_at = bytes.find("\"F32\"", at);
  bytes.replace(dtype_at, 5, "\"I32\"");
  testing::write_file(file(), bytes);
  expect({"'model.norm.weight'", "dtype I32"});
}

TEST_F(BrokenCheckpoint, UntiedNeedsLmHead) {
  drop("lm_head.weight");
  rewrite();
  expect({"missing tensor 'lm_head.weight'"});
}

TEST_F(BrokenCheckpoint, ConfigDeeperThanCheckpoint) {
  json config = tiny_config();
  config["num_hidden_layers"] = 5;
  config["layer_types"].push_back("linear_attention");
  testing::write_file(dir_ / "config.json", config.dump());
  expect({"missing tensor 'model.layers.4.input_layernorm.weight'"});
}

TEST_F(BrokenCheckpoint, NoEmbeddingAtAll) {
  for (auto& e : edits_) e.name = "transformer." + e.name;
  rewrite();
  expect({"neither 'model.embed_tokens.weight' nor 'model.language_model.embed_tokens.weight'"});
}

TEST_F(BrokenCheckpoint, CausalLMAcceptsLanguageModelNames) {
  for (auto& e : edits_) {
    if (e.name.starts_with("model.")) e.name = "model.language_model." + e.name.substr(6);
  }
  rewrite();
  const Qwen35Weights w = load_qwen35(dir_.path());
  EXPECT_EQ(w.config.tensor_prefix, "model.language_model.");
  EXPECT_EQ(w.config.architecture, "Qwen3_5ForCausalLM");
}

class TiedCheckpoint : public BrokenCheckpoint {
 protected:
  void SetUp() override { save(tiny_config(true)); }
  std::vector<float> embed() { return find(edits_, "model.embed_tokens.weight")->values; }
};

TEST_F(TiedCheckpoint, EqualLmHeadIsTheEmbedding) {
  edits_.push_back({"lm_head.weight", DType::BF16, {40, 16}, embed()});
  rewrite();
  const Qwen35Weights w = load_qwen35(dir_.path());
  EXPECT_TRUE(w.lm_head.empty());
  EXPECT_TRUE(w.config.tie_word_embeddings);
}

TEST_F(TiedCheckpoint, DifferentLmHeadIsKeptUntied) {
  auto head = embed();
  head[5] = -head[5] + 1.0f;
  edits_.push_back({"lm_head.weight", DType::F32, {40, 16}, head});
  rewrite();
  const Qwen35Weights w = load_qwen35(dir_.path());
  EXPECT_FALSE(w.config.tie_word_embeddings);
  ASSERT_EQ(w.lm_head.size(), head.size());
  EXPECT_EQ(float_bits(w.lm_head[5]), float_bits(head[5]));
  EXPECT_EQ(&w.output_weights(), &w.lm_head);
}

TEST_F(TiedCheckpoint, LmHeadAloneServesAsEmbedding) {
  const auto values = embed();
  find(edits_, "model.embed_tokens.weight")->name = "lm_head.weight";
  rewrite();
  const Qwen35Weights w = load_qwen35(dir_.path());
  EXPECT_EQ(w.embed_tokens, values);
  EXPECT_TRUE(w.lm_head.empty());
}

TEST_F(TiedCheckpoint, MisshapedLmHead) {
  edits_.push_back({"lm_head.weight", DType::F32, {16, 40}, embed()});
  rewrite();
  expect({"'lm_head.weight'", "shape [16, 40]", "requires [40, 16]"});
}

TEST(Qwen35Sharded, MissingTensorNamesTheIndex) {
  ScratchDir dir;
  save_qwen35(dir.path(), random_weights(tiny_config(), 15), options(DType::BF16, 1500));
  auto index = json::parse(testing::read_file(dir / "model.safetensors.index.json"));
  const std::string shard = index["weight_map"]["model.layers.3.mlp.up_proj.weight"];
  auto edits = read_all(dir / shard);
  std::erase_if(edits, [](const Edit& e) { return e.name == "model.layers.3.mlp.up_proj.weight"; });
  write_all(dir / shard, edits);
  index["weight_map"].erase("model.layers.3.mlp.up_proj.weight");
  testing::write_file(dir / "model.safetensors.index.json", index.dump());
  expect_error([&] { load_qwen35(dir.path()); },
               {"model.safetensors.index.json", "missing tensor 'model.layers.3.mlp.up_proj.weight'"});
}

TEST(Qwen35Config, SavedConfigParsesBack) {
  const Qwen35Weights w = random_weights(tiny_config(), 16);
  const Qwen35Config c = parse_qwen35_config(qwen35_config_to_json(w.config), "saved");
  EXPECT_EQ(c.architecture, w.config.architecture);
  EXPECT_EQ(c.layer_types, w.config.layer_types);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.linear_conv_dim(), w.config.linear_conv_dim());
}

}  // namespace
}  // namespace qpu::io
