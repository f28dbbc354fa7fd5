// save_qwen35_streamed: layers handed over one at a time, shards of a bounded size, each
// tensor in bf16 exactly when all its values are bf16 values; load_qwen35 reads back the
// same bits as the weights that went in, and the index names every tensor's shard.
#include <fstream>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/float_bits.h"
#include "io/qwen35_layout.h"
#include "io/qwen35_stream_save.h"
#include "io/qwen35_weights.h"
#include "io/safetensors.h"
#include "test_helpers.h"

namespace qpu::io {
namespace {

using nlohmann::json;
using testing::expect_error;
using testing::expect_same_weights;
using testing::ScratchDir;

json tiny_config(bool tied) {
  return testing::tiny_qwen35_config(
      tied, {"linear_attention", "full_attention", "linear_attention", "linear_attention", "full_attention"});
}

// Random weights: normal values cut to bf16 except in the tensors whose name contains
// `fp32_marker`, which keep all 24 bits (at least one value there is not a bf16 value).
Qwen35Weights random_weights(const json& config_json, uint32_t seed, const std::string& fp32_marker) {
  Qwen35Weights w;
  w.config = parse_qwen35_config(config_json, "test");
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& v, size_t n, bool full) {
    v.resize(n);
    for (float& x : v) x = full ? normal(rng) : float_from_bits(float_bits(normal(rng)) & 0xffff0000u);
    if (full) v[0] = 1.0f + 0x1p-20f;  // surely not a bf16 value
  };
  for (auto& slot : qwen35_weight_slots(w)) {
    size_t n = 1;
    for (int64_t d : slot.shape) n *= static_cast<size_t>(d);
    fill(*slot.values, n, slot.name.find(fp32_marker) != std::string::npos);
  }
  if (!w.config.tie_word_embeddings)
    fill(w.lm_head, static_cast<size_t>(w.config.vocab_size * w.config.hidden_size), false);
  return w;
}

StreamSaveResult save(const std::filesystem::path& dir, const Qwen35Weights& w, uint64_t shard,
                      std::vector<int64_t>* order = nullptr) {
  Qwen35Weights globals = w;
  globals.layers.clear();
  StreamSaveOptions o;
  o.max_shard_bytes = shard;
  return save_qwen35_streamed(
      dir, globals,
      [&](int64_t l) {
        if (order) order->push_back(l);
        return w.layers[static_cast<size_t>(l)];
      },
      o);
}

// The dtype every tensor has on disk, from the shards the index (or the single file) names.
std::map<std::string, DType> dtypes_on_disk(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  if (std::filesystem::exists(dir / "model.safetensors.index.json")) {
    std::ifstream in(dir / "model.safetensors.index.json");
    const json index = json::parse(in);
    std::set<std::string> names;
    for (const auto& [tensor, file] : index["weight_map"].items()) names.insert(file.get<std::string>());
    for (const std::string& n : names) files.push_back(dir / n);
  } else {
    files.push_back(dir / "model.safetensors");
  }
  std::map<std::string, DType> out;
  for (const auto& f : files) {
    SafetensorsFile file(f);
    for (const auto& t : file.tensors()) out[t.name] = t.dtype;
  }
  return out;
}

TEST(Qwen35StreamSave, RoundTripInShardsAndOneFile) {
  for (const bool tied : {false, true})
    for (const uint64_t shard : {uint64_t{1} << 30, uint64_t{3000}}) {
      SCOPED_TRACE(fmt::format("tied {} shard {}", tied, shard));
      ScratchDir dir;
      const Qwen35Weights w = random_weights(tiny_config(tied), 21, "down_proj");
      std::vector<int64_t> order;
      const StreamSaveResult r = save(dir.path(), w, shard, &order);
      EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));  // each layer once, in order
      const bool sharded = shard == 3000;
      EXPECT_EQ(std::filesystem::exists(dir / "model.safetensors.index.json"), sharded);
      EXPECT_EQ(std::filesystem::exists(dir / "model.safetensors"), !sharded);
      EXPECT_EQ(r.files.back(), "config.json");
      for (const auto& e : std::filesystem::directory_iterator(dir.path()))  // no provisional names left
        EXPECT_EQ(e.path().string().find("partial"), std::string::npos) << e.path();
      if (sharded) {
        EXPECT_GT(r.files.size(), 4u);
        EXPECT_EQ(r.files.front(), fmt::format("model-00001-of-{:05d}.safetensors", r.files.size() - 2));
      }
      const Qwen35Weights back = load_qwen35(dir.path());
      expect_same_weights(w, back);
      EXPECT_EQ(back.config.tie_word_embeddings, tied);
      EXPECT_EQ(back.config.layer_types, w.config.layer_types);
      EXPECT_EQ(r.parameters, qwen35_parameter_count(w.config));
      // down_proj holds values that are not bf16: fp32 there (5 layers), bf16 elsewhere.
      const std::map<std::string, DType> dtypes = dtypes_on_disk(dir.path());
      int64_t f32 = 0;
      for (const auto& [name, dtype] : dtypes) {
        EXPECT_EQ(dtype, name.find("down_proj") != std::string::npos ? DType::F32 : DType::BF16) << name;
        f32 += dtype == DType::F32;
      }
      EXPECT_EQ(f32, 5);
      EXPECT_EQ(r.f32_tensors, 5);
      EXPECT_EQ(r.bf16_tensors, static_cast<int64_t>(dtypes.size()) - 5);
    }
}

TEST(Qwen35StreamSave, ShardsStayWithinTheirSize) {
  ScratchDir dir;
  const Qwen35Weights w = random_weights(tiny_config(false), 22, "nothing");
  const uint64_t shard = 4000;
  const StreamSaveResult r = save(dir.path(), w, shard);
  uint64_t total = 0;
  for (const std::string& f : r.files) {
    if (f.find("-of-") == std::string::npos) continue;
    SafetensorsFile file(dir / f);
    uint64_t bytes = 0;
    for (const auto& t : file.tensors()) bytes += t.nbytes();
    // A shard holds more than max_shard_bytes only when a single tensor is larger.
    if (file.tensors().size() > 1) {
      EXPECT_LE(bytes, shard) << f;
    }
    total += bytes;
  }
  EXPECT_EQ(total, r.tensor_bytes);
  EXPECT_EQ(r.tensor_bytes, 2 * r.parameters);  // all bf16
}

TEST(Qwen35StreamSave, OnlyAnEmptyDirectoryIsWrittenInto) {
  ScratchDir dir;
  qpu::testing::write_file(dir / "model.safetensors", "an older checkpoint");
  const Qwen35Weights w = random_weights(tiny_config(false), 25, "nothing");
  expect_error([&] { save(dir.path(), w, 1 << 30); }, {"not empty"});
  EXPECT_EQ(qpu::testing::read_file(dir / "model.safetensors"), "an older checkpoint");
}

TEST(Qwen35StreamSave, ALayerOfTheWrongTypeIsAnError) {
  ScratchDir dir;
  const Qwen35Weights w = random_weights(tiny_config(false), 23, "nothing");
  Qwen35Weights globals = w;
  globals.layers.clear();
  expect_error(
      [&] {
        save_qwen35_streamed(dir.path(), globals, [&](int64_t l) { return w.layers[static_cast<size_t>(l == 1 ? 0 : l)]; });
      },
      {"layer 1 is linear_attention but the config says full_attention"});
  EXPECT_FALSE(std::filesystem::exists(dir / "config.json"));
}

TEST(Qwen35StreamSave, AMisshapedTensorIsAnErrorNamingIt) {
  ScratchDir dir;
  const Qwen35Weights w = random_weights(tiny_config(false), 24, "nothing");
  Qwen35Weights globals = w;
  globals.layers.clear();
  expect_error(
      [&] {
        save_qwen35_streamed(dir.path(), globals, [&](int64_t l) {
          LayerWeights layer = w.layers[static_cast<size_t>(l)];
          if (l == 3) layer.up_proj.pop_back();
          return layer;
        });
      },
      {"model.layers.3.mlp.up_proj.weight"});
  EXPECT_FALSE(std::filesystem::exists(dir / "config.json"));
}

}  // namespace
}  // namespace qpu::io
