// Streaming construction (Model(globals, LayerSource), docs/engine.md "Streaming
// construction"): a model that pulls its layers one at a time is the model built from
// the same dense weights (the same logits, hidden and State bits on every step, at 1 and
// 2 threads), pulls each layer once in order, and rejects a bad layer naming it.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/float_bits.h"
#include "engine/model.h"
#include "reference_forward.h"
#include "same_run.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using testing::LayerType;
using testing::make_tiny_weights;
using testing::TinySpec;

const std::vector<int64_t> kTokens{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};

void expect_same_run(const Model& dense, const Model& streamed, const std::string& what) {
  testing::expect_same_run(dense, streamed, kTokens, what);
}

// The weights minus the layers, and a source that hands out copies of the layers while
// recording which it was asked for.
struct Split {
  io::Qwen35Weights globals;
  std::vector<io::LayerWeights> layers;
  std::vector<int64_t> asked;

  explicit Split(const io::Qwen35Weights& w) : globals(w), layers(w.layers) { globals.layers.clear(); }
  LayerSource source() {
    return [this](int64_t l) {
      asked.push_back(l);
      return layers.at(static_cast<size_t>(l));
    };
  }
};

// A layer whose mixer output projection is all +0: skipped (IdleMixers::Skip), no state.
void idle_mixer(io::LayerWeights& l) {
  auto& p = l.type == LayerType::LinearAttention ? l.linear.out_proj : l.full.o_proj;
  std::fill(p.begin(), p.end(), 0.0f);
}

struct Variant {
  TinySpec spec;
  ModelOptions options;
  std::vector<int64_t> idle;  // layers whose mixer outputs +0
  std::string name;
};

std::vector<Variant> variants() {
  std::vector<Variant> all;
  all.push_back({TinySpec{}, ModelOptions{}, {}, "mixed"});
  Variant tied;
  tied.spec.seed = 2;
  tied.spec.tied = true;
  tied.spec.layers = {LayerType::FullAttention, LayerType::LinearAttention, LayerType::LinearAttention};
  tied.spec.bf16 = true;
  tied.name = "tied bf16";
  all.push_back(tied);
  Variant sparse;  // CSR everywhere, idle mixers and zeros: the skip paths
  sparse.spec.seed = 3;
  sparse.spec.zero_fraction = 0.95;
  sparse.options.storage = WeightStorage::Sparse;
  sparse.idle = {1, 2};
  sparse.name = "sparse idle";
  all.push_back(sparse);
  return all;
}

TEST(StreamingModel, SameBitsAsTheDenseConstructorAtOneAndTwoThreads) {
  const int saved = omp_get_max_threads();
  for (const Variant& v : variants()) {
    io::Qwen35Weights w = make_tiny_weights(v.spec);
    for (int64_t l : v.idle) idle_mixer(w.layers[static_cast<size_t>(l)]);
    Split split(w);
    const Model streamed(std::move(split.globals), split.source(), v.options);
    const Model dense(w, v.options);
    std::vector<int64_t> in_order;
    for (int64_t l = 0; l < w.config.num_hidden_layers; ++l) in_order.push_back(l);
    EXPECT_EQ(split.asked, in_order) << v.name;  // each layer once, in order
    EXPECT_EQ(dense.skipped_mixers(), streamed.skipped_mixers()) << v.name;
    EXPECT_EQ(dense.skipped_mixers(), v.idle) << v.name;
    const StorageStats a = dense.storage_stats(), b = streamed.storage_stats();
    EXPECT_EQ(a.bytes, b.bytes) << v.name;
    EXPECT_EQ(a.sparse_matrices, b.sparse_matrices) << v.name;
    EXPECT_EQ(a.dense_bf16_matrices, b.dense_bf16_matrices) << v.name;
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      expect_same_run(dense, streamed, v.name + " threads " + std::to_string(threads));
    }
  }
  omp_set_num_threads(saved);
}

// ModelOptions::build_threads: layers pulled by several threads at once give the model of
// the one-at-a-time build, every layer pulled exactly once.
TEST(StreamingModel, BuildThreadsGiveTheSameModel) {
  for (const Variant& v : variants()) {
    io::Qwen35Weights w = make_tiny_weights(v.spec);
    for (int64_t l : v.idle) idle_mixer(w.layers[static_cast<size_t>(l)]);
    const Model dense(w, v.options);
    for (int threads : {2, 3, 8}) {
      Split split(w);
      std::mutex mutex;
      const LayerSource source = [&](int64_t l) {
        const std::lock_guard<std::mutex> lock(mutex);
        split.asked.push_back(l);
        return split.layers.at(static_cast<size_t>(l));
      };
      ModelOptions options = v.options;
      options.build_threads = threads;
      const Model built(split.globals, source, options);
      std::vector<int64_t> asked = split.asked, in_order;
      std::sort(asked.begin(), asked.end());
      for (int64_t l = 0; l < w.config.num_hidden_layers; ++l) in_order.push_back(l);
      const std::string what = v.name + " build threads " + std::to_string(threads);
      EXPECT_EQ(asked, in_order) << what;  // each layer once
      EXPECT_EQ(dense.skipped_mixers(), built.skipped_mixers()) << what;
      EXPECT_EQ(dense.storage_stats().bytes, built.storage_stats().bytes) << what;
      expect_same_run(dense, built, what);
    }
  }
}

// With several build threads the error is the lowest bad layer's, whatever failed first:
// layer 1's source is slow, so layer 3 fails before it (when a thread reaches layer 3
// before layer 1 has failed; else layer 3 is not built at all).
TEST(StreamingModel, BuildThreadsReportTheFirstBadLayer) {
  const io::Qwen35Weights w = make_tiny_weights(TinySpec{});  // [lin, lin, full, lin, full]
  for (int trial = 0; trial < 5; ++trial) {
    Split split(w);
    split.layers[3].type = LayerType::FullAttention;
    split.layers[1].type = LayerType::FullAttention;
    const LayerSource source = [&split](int64_t l) {
      if (l == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return split.layers.at(static_cast<size_t>(l));
    };
    ModelOptions options;
    options.build_threads = 4;
    try {
      const Model m(split.globals, source, options);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("layers.1: the weights' layer type differs"), std::string::npos)
          << e.what();
    }
  }
}

// A layer's projections as entries (what a compiler's SparseLayerSource hands over).
io::SparseLayerWeights entries_of(io::LayerWeights l, const io::Qwen35Config& c) {
  return io::convert_matrices<io::SparseMatrix>(std::move(l), [&c](std::vector<float>&& m, const char* name) {
    const std::string n = name;
    const int64_t cols = n == "mlp.down_proj"            ? c.intermediate_size
                         : n == "linear_attn.out_proj" ? c.linear_num_value_heads * c.linear_value_head_dim
                         : n == "self_attn.o_proj"     ? c.num_attention_heads * c.head_dim
                                                       : c.hidden_size;
    return m.empty() ? io::SparseMatrix{} : io::SparseMatrix::from_dense(m, static_cast<int64_t>(m.size()) / cols, cols);
  });
}

// SparseLayerSource: the layers as entries build the model of the dense layers (every
// variant: dense formats, where the entries are packed densely, and CSR), at one and two
// build threads, and a projection of the wrong shape is an error naming it.
TEST(StreamingModel, SparseSourceGivesTheDenseModel) {
  const int saved = omp_get_max_threads();
  for (const Variant& v : variants()) {
    io::Qwen35Weights w = make_tiny_weights(v.spec);
    for (int64_t l : v.idle) idle_mixer(w.layers[static_cast<size_t>(l)]);
    const Model dense(w, v.options);
    for (int build_threads : {1, 2}) {
      io::Qwen35Weights globals = w;
      globals.layers.clear();
      ModelOptions options = v.options;
      options.build_threads = build_threads;
      const SparseLayerSource source = [&](int64_t l) { return entries_of(w.layers[static_cast<size_t>(l)], w.config); };
      const Model sparse(std::move(globals), source, options);
      const std::string what = v.name + " build threads " + std::to_string(build_threads);
      EXPECT_EQ(dense.skipped_mixers(), sparse.skipped_mixers()) << what;
      const StorageStats a = dense.storage_stats(), b = sparse.storage_stats();
      EXPECT_EQ(a.bytes, b.bytes) << what;
      EXPECT_EQ(a.sparse_matrices, b.sparse_matrices) << what;
      EXPECT_EQ(a.dense_bf16_matrices, b.dense_bf16_matrices) << what;
      EXPECT_EQ(a.dense_f32_matrices, b.dense_f32_matrices) << what;
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        expect_same_run(dense, sparse, what + " threads " + std::to_string(threads));
      }
    }
  }
  omp_set_num_threads(saved);
  const io::Qwen35Weights w = make_tiny_weights(TinySpec{});
  io::Qwen35Weights globals = w;
  globals.layers.clear();
  const SparseLayerSource wrong = [&](int64_t l) {
    io::SparseLayerWeights s = entries_of(w.layers[static_cast<size_t>(l)], w.config);
    if (l == 1) s.down_proj.cols += 1;
    return s;
  };
  try {
    const Model m(globals, wrong);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.1.mlp.down_proj: expected 64 x 96"), std::string::npos) << e.what();
  }
}

// Not only the same as the dense path: right (against the double-precision reference).
TEST(StreamingModel, AgreesWithADoublePrecisionReference) {
  const io::Qwen35Weights w = make_tiny_weights(TinySpec{});
  testing::ReferenceModel reference(w);
  Split split(w);
  const Model model(std::move(split.globals), split.source());
  State state = model.new_state();
  double worst = 0;
  for (int64_t t : kTokens) {
    std::vector<float> logits(static_cast<size_t>(w.config.vocab_size));
    model.forward(t, state, logits);
    const std::vector<double> want = reference.step(t);
    double num = 0, den = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      num = std::max(num, std::fabs(static_cast<double>(logits[i]) - want[i]));
      den = std::max(den, std::fabs(want[i]));
    }
    worst = std::max(worst, num / den);
  }
  EXPECT_LT(worst, 1e-5);
  EXPECT_GT(worst, 0.0);
}

// The error names the layer (and the tensor); the layers after it are never asked for.
void expect_layer_error(const io::Qwen35Weights& w, int64_t bad, const std::function<void(io::LayerWeights&)>& spoil,
                        const std::string& want) {
  Split split(w);
  spoil(split.layers[static_cast<size_t>(bad)]);
  try {
    const Model m(std::move(split.globals), split.source());
    ADD_FAILURE() << "no error for " << want;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  std::vector<int64_t> asked;
  for (int64_t l = 0; l <= bad; ++l) asked.push_back(l);
  EXPECT_EQ(split.asked, asked) << want;
}

TEST(StreamingModel, ABadLayerIsAnErrorNamingIt) {
  const io::Qwen35Weights w = make_tiny_weights(TinySpec{});  // [lin, lin, full, lin, full]
  expect_layer_error(
      w, 2, [](io::LayerWeights& l) { l.type = LayerType::LinearAttention; },
      "layers.2: the weights' layer type differs from config.layer_types");
  expect_layer_error(
      w, 1, [](io::LayerWeights& l) { l.gate_proj.pop_back(); }, "layers.1.mlp.gate_proj: expected 96 x 64");
  expect_layer_error(
      w, 3, [](io::LayerWeights& l) { l.linear.conv1d.push_back(0.0f); }, "layers.3.linear_attn");
  expect_layer_error(
      w, 4, [](io::LayerWeights& l) { l.full.k_norm.clear(); }, "layers.4.self_attn");
  expect_layer_error(
      w, 0, [](io::LayerWeights& l) { l.post_attention_layernorm.resize(3); },
      "layers.0.post_attention_layernorm.weight: expected 64 values, got 3");
  // A layer of the other type with that type's tensors (a full layer where a GDN belongs).
  expect_layer_error(
      w, 0, [&](io::LayerWeights& l) { l = w.layers[2]; }, "layers.0: the weights' layer type differs");
}

TEST(StreamingModel, RejectsBadSourcesAndGlobals) {
  const io::Qwen35Weights w = make_tiny_weights(TinySpec{});
  Split split(w);
  io::Qwen35Weights with_layers = split.globals;
  with_layers.layers.push_back(w.layers[0]);
  EXPECT_THROW(Model(with_layers, split.source()), Error);
  EXPECT_THROW(Model(split.globals, LayerSource{}), Error);
  // An error inside the source reaches the caller as it is.
  const LayerSource failing = [](int64_t l) -> io::LayerWeights { fail("source: layer {} is not ready", l); };
  try {
    const Model m(split.globals, failing);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "source: layer 0 is not ready");
  }
  io::Qwen35Weights bad_norm = split.globals;
  bad_norm.norm.pop_back();
  EXPECT_THROW(Model(bad_norm, split.source()), Error);
  // The dense constructor's own check is kept.
  io::Qwen35Weights short_weights = w;
  short_weights.layers.pop_back();
  try {
    const Model m(short_weights);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "weights: 4 layers, config says 5");
  }
}

}  // namespace
}  // namespace qpu::engine
