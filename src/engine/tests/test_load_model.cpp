// engine::load_model (a checkpoint directory streamed into the engine through
// io::Qwen35Reader): the model equals Model(io::load_qwen35(dir)) bit for bit (logits,
// hidden and State on every step, tied and untied, bf16 and fp32 files, one file and
// shards, one and two build threads); the reader's layers are load_qwen35's; a bad
// directory is refused with load_qwen35's own message before anything is built.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/testing/scratch_files.h"
#include "engine/load_model.h"
#include "io/qwen35_layout.h"
#include "io/qwen35_save.h"
#include "io/qwen35_weights.h"
#include "same_run.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using testing::LayerType;
using testing::make_tiny_weights;
using testing::TinySpec;
using testing::expect_same_run;

void expect_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  testing::expect_same_bits(a, b, what);
}

const std::vector<int64_t> kTokens{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};

struct Saved {
  TinySpec spec;
  io::SaveOptions save;
  std::string name;
};

std::vector<Saved> saved_variants() {
  std::vector<Saved> all;
  Saved untied;
  untied.save.dtype = io::DType::F32;
  untied.save.max_shard_bytes = 40'000;  // several shards and an index
  untied.name = "untied f32 shards";
  all.push_back(untied);
  Saved tied;
  tied.spec.seed = 2;
  tied.spec.tied = true;
  tied.spec.bf16 = true;
  tied.spec.layers = {LayerType::FullAttention, LayerType::LinearAttention, LayerType::LinearAttention};
  tied.name = "tied bf16 one file";
  all.push_back(tied);
  Saved sparse;
  sparse.spec.seed = 3;
  sparse.spec.zero_fraction = 0.95;
  sparse.save.dtype = io::DType::F32;
  sparse.name = "mostly zeros f32";
  all.push_back(sparse);
  return all;
}

TEST(LoadModel, StreamedFromFilesEqualsTheFullLoad) {
  for (const Saved& v : saved_variants()) {
    qpu::testing::ScratchDir dir("qpu-load-model");
    io::save_qwen35(dir.path(), make_tiny_weights(v.spec), v.save);
    const Model full(io::load_qwen35(dir.path()));
    for (int threads : {1, 2}) {
      ModelOptions options;
      options.build_threads = threads;
      const Model streamed = load_model(dir.path(), options);
      const std::string what = v.name + " build threads " + std::to_string(threads);
      const StorageStats a = full.storage_stats(), b = streamed.storage_stats();
      EXPECT_EQ(a.bytes, b.bytes) << what;
      EXPECT_EQ(a.sparse_matrices, b.sparse_matrices) << what;
      EXPECT_EQ(a.dense_bf16_matrices, b.dense_bf16_matrices) << what;
      EXPECT_EQ(full.config().tie_word_embeddings, streamed.config().tie_word_embeddings) << what;
      expect_same_run(full, streamed, kTokens, what);
    }
  }
}

TEST(LoadModel, ReaderLayersAreTheFullLoadsLayers) {
  for (const Saved& v : saved_variants()) {
    qpu::testing::ScratchDir dir("qpu-load-model");
    io::save_qwen35(dir.path(), make_tiny_weights(v.spec), v.save);
    const io::Qwen35Weights full = io::load_qwen35(dir.path());
    io::Qwen35Reader reader(dir.path());
    const io::Qwen35Weights globals = reader.globals();
    EXPECT_TRUE(globals.layers.empty()) << v.name;
    expect_bits(globals.embed_tokens, full.embed_tokens, v.name + " embed_tokens");
    expect_bits(globals.norm, full.norm, v.name + " norm");
    expect_bits(globals.lm_head, full.lm_head, v.name + " lm_head");
    const int64_t n = reader.config().num_hidden_layers;
    ASSERT_EQ(n, static_cast<int64_t>(full.layers.size())) << v.name;
    for (int64_t l = n - 1; l >= 0; --l) {  // any order
      const io::LayerWeights layer = reader.layer(l);
      const io::LayerWeights& want = full.layers[static_cast<size_t>(l)];
      ASSERT_EQ(layer.type, want.type) << v.name;
      const auto got_slots = io::qwen35_layer_slots(reader.config(), l, layer);
      const auto want_slots = io::qwen35_layer_slots(full.config, l, want);
      ASSERT_EQ(got_slots.size(), want_slots.size());
      for (size_t s = 0; s < got_slots.size(); ++s)
        expect_bits(*got_slots[s].values, *want_slots[s].values, v.name + " " + got_slots[s].name);
    }
    EXPECT_THROW(reader.layer(-1), Error);
    EXPECT_THROW(reader.layer(n), Error);
    // take_globals moves the tensors out and keeps the config.
    const io::Qwen35Weights taken = reader.take_globals();
    expect_bits(taken.embed_tokens, full.embed_tokens, v.name + " taken embed_tokens");
    EXPECT_TRUE(reader.globals().embed_tokens.empty());
    EXPECT_EQ(reader.config().hidden_size, full.config.hidden_size);
  }
}

// The message load_qwen35 gives for `dir`, which must fail.
std::string full_load_error(const std::filesystem::path& dir) {
  try {
    io::load_qwen35(dir);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "load_qwen35 accepted " << dir;
  return {};
}

void expect_refused_like_the_full_load(const std::filesystem::path& dir, const std::string& contains) {
  const std::string want = full_load_error(dir);
  EXPECT_NE(want.find(contains), std::string::npos) << want;
  try {
    load_model(dir);
    ADD_FAILURE() << "load_model accepted " << dir;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
}

TEST(LoadModel, ABadDirectoryIsRefusedWithTheFullLoadsMessage) {
  TinySpec spec;
  io::SaveOptions save;
  save.dtype = io::DType::F32;
  save.max_shard_bytes = 40'000;
  {
    // A config whose intermediate size disagrees with the tensors.
    qpu::testing::ScratchDir dir("qpu-load-model");
    io::save_qwen35(dir.path(), make_tiny_weights(spec), save);
    const auto config_path = dir / "config.json";
    nlohmann::json config = nlohmann::json::parse(qpu::testing::read_file(config_path));
    nlohmann::json& text = config.contains("text_config") ? config["text_config"] : config;
    text["intermediate_size"] = 80;
    qpu::testing::write_file(config_path, config.dump());
    expect_refused_like_the_full_load(dir.path(), "but the config requires");
  }
  {
    // A shard cut short.
    qpu::testing::ScratchDir dir("qpu-load-model");
    io::save_qwen35(dir.path(), make_tiny_weights(spec), save);
    std::filesystem::path shard;
    for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
      if (entry.path().extension() == ".safetensors") shard = entry.path();
    ASSERT_FALSE(shard.empty());
    std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 100);
    expect_refused_like_the_full_load(dir.path(), shard.filename().string());
  }
  {
    // A missing shard.
    qpu::testing::ScratchDir dir("qpu-load-model");
    io::save_qwen35(dir.path(), make_tiny_weights(spec), save);
    std::filesystem::path shard;
    for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
      if (entry.path().extension() == ".safetensors") shard = entry.path();
    std::filesystem::remove(shard);
    expect_refused_like_the_full_load(dir.path(), shard.filename().string());
  }
  {
    // Shards without config.json.
    qpu::testing::ScratchDir dir("qpu-load-model");
    io::save_qwen35(dir.path(), make_tiny_weights(spec), save);
    std::filesystem::remove(dir / "config.json");
    expect_refused_like_the_full_load(dir.path(), "config.json");
  }
  {
    // config.json without weights.
    qpu::testing::ScratchDir dir("qpu-load-model");
    io::save_qwen35(dir.path(), make_tiny_weights(spec), save);
    for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
      if (entry.path().filename() != "config.json") std::filesystem::remove(entry.path());
    expect_refused_like_the_full_load(dir.path(), "model.safetensors");
  }
}

}  // namespace
}  // namespace qpu::engine
