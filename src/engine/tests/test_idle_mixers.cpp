// Idle mixers (ModelOptions::idle_mixers, docs/engine.md "Idle mixers"): a layer whose
// mixer output projection (attention o_proj, GDN out_proj) holds no stored weight is
// skipped, and the model gives the bits of running it: logits and hidden state over
// hundreds of tokens at 1, 2 and 3 threads, with -0, huge, inf and NaN values in the
// residual stream; the skipped layers keep no cache (the per-token cost stops growing
// with the position); matrices of zeros that are *not* always +0 (dense storage, a -0
// weight) are not skipped.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/float_bits.h"
#include "engine/model.h"
#include "engine/packed_matrix.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using io::LayerType;
using testing::TinyRandom;
using testing::TinySpec;

using testing::kInf;
using testing::kNaN;
constexpr float kHuge = 3.0e38f;  // adding two of these overflows; their squares do too

void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(float_bits(got[i]), float_bits(want[i]))
        << what << " [" << i << "]: " << describe_float(got[i]) << " vs " << describe_float(want[i]);
  }
}

// Inputs for a product: ordinary values, +0, -0, subnormals, huge values, inf, NaN.
std::vector<float> wild_input(TinyRandom& rng, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) {
    const double u = rng.unit();
    v = u < 0.2 ? 0.0f
        : u < 0.4 ? -0.0f
        : u < 0.45 ? rng.uniform(1.0) * 1e-40f
        : u < 0.5 ? rng.uniform(1.0) * kHuge
        : u < 0.53 ? (u < 0.515 ? kInf : -kInf)
        : u < 0.55 ? kNaN
                   : rng.uniform(4.0);
  }
  return x;
}

TEST(IdleMixers, AllPlusZeroCsrProductIsPlusZeroForEveryInput) {
  TinyRandom rng(7);
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {64, 64}, {200, 77}, {5000, 300}}) {
    const std::vector<float> zeros(static_cast<size_t>(rows * cols), 0.0f);
    for (const PackedMatrix::Path path : {PackedMatrix::Path::Auto, PackedMatrix::Path::Rows, PackedMatrix::Path::Columns}) {
      PackedMatrix::Options options;
      options.path = path;
      const PackedMatrix m = PackedMatrix::pack(zeros, rows, cols, options, "zeros");
      ASSERT_EQ(m.format(), PackedMatrix::Format::SparseCsr);
      ASSERT_TRUE(m.always_zero());
      for (int threads : {1, 3}) {
        omp_set_num_threads(threads);
        for (int trial = 0; trial < 4; ++trial) {
          // trial 0: finite inputs only (the column path may run), else wild ones.
          std::vector<float> x = wild_input(rng, cols);
          if (trial == 0) {
            for (float& v : x) v = std::isfinite(v) ? v : -0.0f;
          }
          std::vector<float> y(static_cast<size_t>(rows), kNaN), y_all(static_cast<size_t>(rows), kNaN);
          m.multiply(x.data(), y.data());
          const PackedMatrix::Job job{&m, x.data(), y_all.data()};
          PackedMatrix::multiply_all(std::span(&job, 1));
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_EQ(float_bits(y[r]), 0u) << rows << "x" << cols << " row " << r;
            ASSERT_EQ(float_bits(y_all[r]), 0u) << rows << "x" << cols << " row " << r;
          }
        }
      }
    }
  }
  omp_set_num_threads(1);
}

// Why the skip is restricted to CSR matrices without a stored entry: the same zeros
// stored dense, or a CSR matrix holding a -0 weight, give NaN for an inf or NaN input.
TEST(IdleMixers, ZerosThatReadTheirInputAreNotAlwaysZero) {
  const int64_t rows = 8, cols = 70;
  std::vector<float> x(static_cast<size_t>(cols), 1.0f);
  x[3] = kInf;
  std::vector<float> y(static_cast<size_t>(rows));

  PackedMatrix::Options dense;
  dense.force = PackedMatrix::Format::DenseF32;
  const PackedMatrix d = PackedMatrix::pack(std::vector<float>(rows * cols, 0.0f), rows, cols, dense, "dense");
  EXPECT_FALSE(d.always_zero());
  d.multiply(x.data(), y.data());
  for (float v : y) EXPECT_TRUE(std::isnan(v));  // 0 * inf = NaN in every row's sum

  std::vector<float> minus(static_cast<size_t>(rows * cols), 0.0f);
  minus[2 * cols + 3] = -0.0f;  // row 2, column 3
  const PackedMatrix s = PackedMatrix::pack(minus, rows, cols, PackedMatrix::Options{}, "minus");
  ASSERT_EQ(s.format(), PackedMatrix::Format::SparseCsr);
  EXPECT_FALSE(s.always_zero());
  s.multiply(x.data(), y.data());
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(float_bits(y[0]), 0u);
}

// GDN and attention layers between ordinary random ones; `idle` lists the layers whose
// output projection is made all +0. Layer 0 first so that the embedding's -0 entries
// meet an idle mixer directly.
ModelOptions computing() {
  ModelOptions o;
  o.idle_mixers = IdleMixers::Compute;
  return o;
}

TinySpec idle_spec(uint64_t seed) {
  TinySpec spec;
  spec.seed = seed;
  spec.layers = {LayerType::FullAttention, LayerType::LinearAttention, LayerType::FullAttention,
                 LayerType::LinearAttention, LayerType::LinearAttention, LayerType::FullAttention};
  spec.tied = seed % 2 == 0;
  spec.bf16 = seed % 3 == 0;
  return spec;
}

void zero_output_projection(io::LayerWeights& l) {
  std::vector<float>& w = l.type == LayerType::FullAttention ? l.full.o_proj : l.linear.out_proj;
  std::fill(w.begin(), w.end(), 0.0f);
}

// Embedding rows that put -0, huge values, inf and NaN into the residual stream:
// row 0 all -0, row 1 mixed +-0 and ordinary values, row 2 huge values (their squares
// overflow in the norms), row 3 with an inf, row 4 with a NaN. The rest stay random.
void wild_embeddings(io::Qwen35Weights& w, uint64_t seed) {
  TinyRandom rng(seed);
  const int64_t h = w.config.hidden_size;
  float* e = w.embed_tokens.data();
  std::fill_n(e, h, -0.0f);
  for (int64_t i = 0; i < h; ++i) e[h + i] = i % 3 == 0 ? -0.0f : i % 3 == 1 ? 0.0f : rng.uniform(1.0);
  for (int64_t i = 0; i < h; ++i) e[2 * h + i] = i % 2 == 0 ? rng.uniform(1.0) * kHuge : -0.0f;
  e[3 * h + 5] = kInf;
  e[4 * h + 9] = kNaN;
}

io::Qwen35Weights idle_checkpoint(uint64_t seed, const std::vector<int64_t>& idle) {
  io::Qwen35Weights w = testing::make_tiny_weights(idle_spec(seed));
  for (int64_t l : idle) zero_output_projection(w.layers[static_cast<size_t>(l)]);
  wild_embeddings(w, seed + 100);
  return w;
}

// Mostly ordinary tokens, every 7th one a wild row (0..4): the non-finite ones poison the
// stream for good (NaN everywhere), so they come late in the run.
int64_t token_at(int step, int steps, int64_t vocab) {
  if (step % 7 == 3) return step < steps - 20 ? step % 3 : 3 + step % 2;
  return 5 + (step * 37 + 11) % (vocab - 5);
}

// Skip vs Compute on the same weights and options: logits and hidden bit for bit after
// every step at 1, 2 and 3 threads; the skipping model's idle layers keep no state while
// every other layer's state is the computing model's, bit for bit.
void expect_skip_gives_compute_bits(const io::Qwen35Weights& weights, ModelOptions base,
                                    const std::vector<int64_t>& idle, const std::string& what, int steps) {
  ModelOptions compute = base, skip = base;
  compute.idle_mixers = IdleMixers::Compute;
  skip.idle_mixers = IdleMixers::Skip;
  const Model a(weights, compute), b(weights, skip);
  ASSERT_EQ(b.skipped_mixers(), idle) << what;
  ASSERT_TRUE(a.skipped_mixers().empty()) << what;
  const io::Qwen35Config& c = weights.config;
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
  bool saw_nan = false;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    State sa = a.new_state(), sb = b.new_state();
    std::vector<float> la(c.vocab_size), lb(c.vocab_size), ha(c.hidden_size), hb(c.hidden_size);
    for (int step = 0; step < steps; ++step) {
      const std::string at = what + " threads " + std::to_string(threads) + " step " + std::to_string(step);
      const int64_t token = token_at(step, steps, c.vocab_size);
      a.forward(token, sa, la, ha);
      b.forward(token, sb, lb, hb);
      expect_bits(lb, la, at + " logits");
      expect_bits(hb, ha, at + " hidden");
      for (float v : hb) saw_nan = saw_nan || std::isnan(v);
      for (size_t l = 0; l < c.layer_types.size(); ++l) {
        const bool skipped = std::find(idle.begin(), idle.end(), static_cast<int64_t>(l)) != idle.end();
        const std::string where = at + " layer " + std::to_string(l);
        if (skipped) {
          // No state at all: the cost of the layer no longer depends on the position.
          ASSERT_TRUE(sb.key_cache[l].empty() && sb.value_cache[l].empty() && sb.conv_state[l].empty() &&
                      sb.recurrent_state[l].empty()) << where;
          if (c.layer_types[l] == LayerType::FullAttention) {
            ASSERT_EQ(static_cast<int64_t>(sa.key_cache[l].size()), (step + 1) * kv_dim) << where;
          }
        } else {
          expect_bits(sb.key_cache[l], sa.key_cache[l], where + " key_cache");
          expect_bits(sb.value_cache[l], sa.value_cache[l], where + " value_cache");
          expect_bits(sb.conv_state[l], sa.conv_state[l], where + " conv_state");
          expect_bits(sb.recurrent_state[l], sa.recurrent_state[l], where + " recurrent_state");
        }
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  omp_set_num_threads(1);
  // The run did reach the inputs it is meant to cover.
  EXPECT_TRUE(saw_nan) << what;
}

TEST(IdleMixers, SkippedLayersGiveTheComputedBits) {
  const std::vector<int64_t> idle{0, 3};  // an attention layer and a GDN layer
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const io::Qwen35Weights w = idle_checkpoint(seed, idle);
    expect_skip_gives_compute_bits(w, ModelOptions{}, idle, "seed " + std::to_string(seed), 240);
    if (HasFatalFailure()) return;
  }
}

TEST(IdleMixers, SkippedLayersGiveTheComputedBitsOnEveryPath) {
  const std::vector<int64_t> idle{2, 4};
  const io::Qwen35Weights w = idle_checkpoint(11, idle);
  ModelOptions sparse;
  sparse.storage = WeightStorage::Sparse;
  for (const SparsePath path : {SparsePath::Rows, SparsePath::Columns}) {
    sparse.sparse_path = path;
    expect_skip_gives_compute_bits(w, sparse, idle, "sparse path " + std::to_string(static_cast<int>(path)), 60);
    if (HasFatalFailure()) return;
  }
  ModelOptions plain;
  plain.elementwise = Elementwise::Dense;
  plain.gdn = GdnRecurrence::Dense;
  expect_skip_gives_compute_bits(w, plain, idle, "dense elementwise and recurrence", 60);
}

// One idle attention layer and an MLP of zeros (its product is +0 too): hidden is
// (e + 0) + 0 for the embedding row e, computed here by hand, for -0 rows, huge values,
// inf and NaN. (The skipped layer still adds its +0, so the residual stream matches the
// computing model's at every point; at the outputs the MLP's add of a sum, which is
// never -0, would hide a missing add: (-0 + y) == (+0 + y) for every y but -0.)
TEST(IdleMixers, SkippedMixerStillAddsPlusZero) {
  TinySpec spec;
  spec.layers = {LayerType::FullAttention};
  io::Qwen35Weights w = testing::make_tiny_weights(spec);
  zero_output_projection(w.layers[0]);
  for (std::vector<float>* m : {&w.layers[0].gate_proj, &w.layers[0].up_proj, &w.layers[0].down_proj}) {
    std::fill(m->begin(), m->end(), 0.0f);
  }
  wild_embeddings(w, 5);
  const io::Qwen35Weights copy = w;
  const Model skip(std::move(w));
  const Model compute(copy, computing());
  ASSERT_EQ(skip.skipped_mixers(), std::vector<int64_t>{0});
  const int64_t h = spec.hidden;
  State ss = skip.new_state(), sc = compute.new_state();
  std::vector<float> logits(spec.vocab), hs(h), hc(h), want(h);
  for (int64_t token : {0, 1, 2, 7, 0}) {
    for (int64_t i = 0; i < h; ++i) want[i] = (copy.embed_tokens[token * h + i] + 0.0f) + 0.0f;
    skip.forward(token, ss, logits, hs);
    compute.forward(token, sc, logits, hc);
    expect_bits(hs, want, "skip token " + std::to_string(token));
    expect_bits(hc, want, "compute token " + std::to_string(token));
  }
  EXPECT_EQ(float_bits(want[0]), 0u);  // row 0 is all -0: the add made it +0
}

TEST(IdleMixers, TheCacheStopsGrowing) {
  const std::vector<int64_t> idle{0, 3};
  const Model model(idle_checkpoint(4, idle));
  const io::Qwen35Config& c = model.config();
  State s = model.new_state();
  std::vector<float> logits(c.vocab_size);
  for (int step = 0; step < 500; ++step) model.forward(5 + step % 50, s, logits);
  EXPECT_EQ(s.position, 500);
  EXPECT_TRUE(s.key_cache[0].empty());
  EXPECT_TRUE(s.value_cache[0].empty());
  EXPECT_TRUE(s.conv_state[3].empty());
  EXPECT_TRUE(s.recurrent_state[3].empty());
  EXPECT_EQ(static_cast<int64_t>(s.key_cache[2].size()), 500 * c.num_key_value_heads * c.head_dim);
  EXPECT_EQ(static_cast<int64_t>(s.conv_state[1].size()),
            (2 * c.linear_num_key_heads * c.linear_key_head_dim + c.linear_num_value_heads * c.linear_value_head_dim) *
                (c.linear_conv_kernel_dim - 1));
}

// Zeros whose product is not always +0 keep their mixer: dense storage, or a -0 weight.
TEST(IdleMixers, ZerosThatReadTheirInputKeepTheMixer) {
  const std::vector<int64_t> idle{0, 3};
  io::Qwen35Weights w = idle_checkpoint(6, idle);
  ModelOptions dense;
  dense.storage = WeightStorage::Dense;
  EXPECT_TRUE(Model(w, dense).skipped_mixers().empty());
  w.layers[0].full.o_proj[17] = -0.0f;
  w.layers[3].linear.out_proj[5] = -0.0f;
  const Model model(w);
  EXPECT_TRUE(model.skipped_mixers().empty());
  const State s = model.new_state();
  EXPECT_FALSE(s.conv_state[3].empty());
}

// A state made by the other kind of model is refused with a clear error, not misread.
TEST(IdleMixers, StatesDoNotCrossBetweenSkippingAndComputingModels) {
  const std::vector<int64_t> idle{0, 3};
  const io::Qwen35Weights w = idle_checkpoint(8, idle);
  const Model skip(w), compute(w, computing());
  std::vector<float> logits(w.config.vocab_size);
  State from_compute = compute.new_state();
  compute.forward(5, from_compute, logits);
  EXPECT_THROW(skip.forward(6, from_compute, logits), Error);
  State from_skip = skip.new_state();
  skip.forward(5, from_skip, logits);
  EXPECT_THROW(compute.forward(6, from_skip, logits), Error);
}

}  // namespace
}  // namespace qpu::engine
