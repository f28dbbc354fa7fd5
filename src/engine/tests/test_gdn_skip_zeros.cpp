// The Gated DeltaNet recurrence with exact zeros left out (delta_rule::skip_zeros)
// against the dense loops (delta_rule::dense): identical output bits on random states
// full of exact zeros and signed zeros, and identical logits on whole tiny checkpoints
// whose q/k have exact zeros, at 1 and 2 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/float_bits.h"
#include "engine/gated_delta_net.h"
#include "engine/model.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using testing::TinyRandom;

// A value with many exact zeros of either sign, tiny values (products that underflow
// to +-0) and ordinary ones.
float mixed_value(TinyRandom& rng, double zero_fraction, double scale) {
  const double u = rng.unit();
  if (u < zero_fraction * 0.5) return 0.0f;
  if (u < zero_fraction) return -0.0f;
  if (u < zero_fraction + (1 - zero_fraction) * 0.1) return rng.uniform(1e-38);
  return rng.uniform(scale);
}

struct HeadCase {
  int64_t dk = 0, dv = 0;
  std::vector<float> state, k, q, v;
  float beta = 0, decay = 0;
};

HeadCase random_case(TinyRandom& rng, int trial) {
  static const int64_t kDims[][2] = {{1, 1}, {3, 5}, {16, 8}, {24, 20}, {128, 64}, {64, 1}};
  HeadCase h;
  h.dk = kDims[trial % 6][0];
  h.dv = kDims[trial % 6][1];
  const double k_zeros = (trial / 6) % 4 == 0 ? 1.0 : rng.unit();  // some heads all zero
  const double q_zeros = (trial / 6) % 5 == 0 ? 1.0 : rng.unit();
  h.state.resize(static_cast<size_t>(h.dk * h.dv));
  for (float& x : h.state) x = mixed_value(rng, 0.3, 4.0);
  h.k.resize(static_cast<size_t>(h.dk));
  h.q.resize(static_cast<size_t>(h.dk));
  for (float& x : h.k) x = mixed_value(rng, k_zeros, 1.0);
  for (float& x : h.q) x = mixed_value(rng, q_zeros, 1.0);
  if (trial % 7 == 0) {  // one-hot k and q, as in a compiled RAM layer
    std::fill(h.k.begin(), h.k.end(), 0.0f);
    std::fill(h.q.begin(), h.q.end(), trial % 14 == 0 ? -0.0f : 0.0f);
    h.k[static_cast<size_t>(trial % h.dk)] = 1.0f;
    h.q[static_cast<size_t>((trial / 7) % h.dk)] = 0.125f;
  }
  h.v.resize(static_cast<size_t>(h.dv));
  for (float& x : h.v) x = mixed_value(rng, 0.3, 30.0);
  const float decays[] = {1.0f, 1.0f, 0.0f, 0.5f, static_cast<float>(rng.unit())};
  h.decay = decays[trial % 5];
  const float betas[] = {1.0f, 0.0f, static_cast<float>(rng.unit())};
  h.beta = betas[trial % 3];
  return h;
}

std::vector<int32_t> rows_of(const std::vector<float>& x) {
  std::vector<int32_t> rows(x.size());
  rows.resize(static_cast<size_t>(delta_rule::nonzero_rows(x.data(), static_cast<int64_t>(x.size()), rows.data())));
  return rows;
}

// Runs both paths on copies of the case; outputs must agree bit for bit, the states
// bit for bit except the documented -0 (skip) / +0 (dense) cell in a k_i = 0 row.
void expect_same(const HeadCase& h, std::vector<float>& dense_state, std::vector<float>& skip_state,
                 const std::string& what) {
  std::vector<float> dd(h.dv), od(h.dv), ds(h.dv), os(h.dv);
  delta_rule::dense(dense_state.data(), h.dk, h.dv, h.k.data(), h.q.data(), h.v.data(), h.beta, h.decay,
                    dd.data(), od.data());
  const std::vector<int32_t> kr = rows_of(h.k), qr = rows_of(h.q);
  delta_rule::skip_zeros(skip_state.data(), h.dk, h.dv, h.k.data(), kr, h.q.data(), qr, h.v.data(), h.beta,
                         h.decay, ds.data(), os.data());
  for (int64_t c = 0; c < h.dv; ++c) {
    ASSERT_EQ(float_bits(ds[c]), float_bits(dd[c])) << what << " delta " << c;
    ASSERT_EQ(float_bits(os[c]), float_bits(od[c])) << what << " o " << c;
  }
  for (int64_t i = 0; i < h.dk; ++i) {
    for (int64_t c = 0; c < h.dv; ++c) {
      const float a = dense_state[i * h.dv + c], b = skip_state[i * h.dv + c];
      if (float_bits(a) == float_bits(b)) continue;
      ASSERT_TRUE(h.k[i] == 0.0f && float_bits(a) == 0u && float_bits(b) == 0x80000000u)
          << what << " state " << i << " " << c << ": dense " << describe_float(a) << ", skip " << describe_float(b);
    }
  }
}

TEST(GdnSkipZeros, MatchesTheDenseLoopsOnRandomStatesOverManySteps) {
  TinyRandom rng(21);
  int differing_zero_signs = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    HeadCase h = random_case(rng, trial);
    std::vector<float> dense_state = h.state, skip_state = h.state;
    // Several steps on the same two states: a zero sign that differs must never show.
    for (int step = 0; step < 4; ++step) {
      expect_same(h, dense_state, skip_state, "trial " + std::to_string(trial) + " step " + std::to_string(step));
      if (step == 0) {
        for (size_t i = 0; i < dense_state.size(); ++i) differing_zero_signs += float_bits(dense_state[i]) != float_bits(skip_state[i]);
      }
      for (float& x : h.v) x = mixed_value(rng, 0.3, 30.0);
      if (step % 2) for (float& x : h.k) x = x == 0.0f ? x : mixed_value(rng, 0.5, 1.0);
    }
  }
  EXPECT_GT(differing_zero_signs, 0);  // the documented state difference does occur
}

TEST(GdnSkipZeros, SignedZerosInTheStateAndInputs) {
  // A state of -0 cells, k and q zero or one-hot, v and beta giving deltas of both
  // signs: kv, o and delta are exactly the dense ones, every zero output is +0.
  const int64_t dk = 4, dv = 4;
  for (int pattern = 0; pattern < 16; ++pattern) {
    HeadCase h;
    h.dk = dk;
    h.dv = dv;
    h.state.assign(16, -0.0f);
    h.k = {pattern & 1 ? -0.0f : 0.0f, 0.0f, pattern & 2 ? 1.0f : -0.0f, 0.0f};
    h.q = {0.0f, pattern & 4 ? 0.5f : -0.0f, 0.0f, -0.0f};
    h.v = {-0.0f, 0.0f, 3.0f, -2.0f};
    h.beta = pattern & 8 ? 1.0f : 0.0f;
    h.decay = 1.0f;
    std::vector<float> a = h.state, b = h.state;
    expect_same(h, a, b, "pattern " + std::to_string(pattern));
    std::vector<float> delta(dv), o(dv);
    delta_rule::dense(h.state.data(), dk, dv, h.k.data(), h.q.data(), h.v.data(), h.beta, h.decay,
                      delta.data(), o.data());
    if (!(pattern & 4)) {
      for (float x : o) EXPECT_EQ(float_bits(x), 0u) << pattern;  // sum of +-0 terms from +0
    }
  }
}

TEST(GdnSkipZeros, NonFiniteDeltaAndOverflowedWritesTakeTheDenseLoops) {
  const float inf = std::numeric_limits<float>::infinity();
  HeadCase h;
  h.dk = 3;
  h.dv = 2;
  h.k = {0.0f, 1.0f, 0.0f};
  h.q = {0.0f, 0.0f, 1.0f};
  h.beta = 1.0f;
  h.decay = 1.0f;
  // v = inf: delta is inf, so the dense write puts 0 * inf = NaN into rows 0 and 2.
  h.state = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  h.v = {inf, 1.0f};
  std::vector<float> a = h.state, b = h.state;
  expect_same(h, a, b, "inf delta");
  EXPECT_TRUE(std::isnan(b[0]));
  // A written row overflows (kv and delta finite): the dense read-out multiplies it by
  // q_1 = 0, which is NaN.
  h.state = {1.0f, 2.0f, 1e38f, 1e38f, 5.0f, 6.0f};
  h.k = {0.0f, 2.0f, 0.0f};
  h.v = {3.3e38f, -1.0f};
  a = h.state;
  b = h.state;
  expect_same(h, a, b, "overflow");
  EXPECT_EQ(b[2], inf);
  std::vector<float> delta(2), o(2);
  h.state = {1.0f, 2.0f, 1e38f, 1e38f, 5.0f, 6.0f};
  delta_rule::dense(h.state.data(), 3, 2, h.k.data(), h.q.data(), h.v.data(), 1.0f, 1.0f, delta.data(), o.data());
  EXPECT_TRUE(std::isfinite(delta[0]));
  EXPECT_TRUE(std::isnan(o[0]));
}

// A random tiny checkpoint whose GDN layers have exact zeros in q and k (in_proj_qkv
// rows of q/k channels set to 0 give silu(0) = +0), some heads with exp(g) == 1
// (dt_bias -200: softplus 0) and one value head with zero q, k and v.
io::Qwen35Weights zero_rich_weights(const testing::TinySpec& spec, uint64_t seed) {
  io::Qwen35Weights w = testing::make_tiny_weights(spec);
  TinyRandom rng(seed);
  const int64_t key_dim = spec.k_heads * spec.k_dim;
  for (io::LayerWeights& l : w.layers) {
    if (l.type != io::LayerType::LinearAttention) continue;
    for (int64_t ch = 0; ch < 2 * key_dim; ++ch) {
      const bool head0 = ch % key_dim < spec.k_dim;  // key head 0: q and k exactly zero
      if (head0 || rng.unit() < 0.7) {
        std::fill_n(l.linear.in_proj_qkv.begin() + ch * spec.hidden, spec.hidden, 0.0f);
      }
    }
    for (int64_t ch = 0; ch < spec.v_dim; ++ch) {  // value head 0: v exactly zero
      std::fill_n(l.linear.in_proj_qkv.begin() + (2 * key_dim + ch) * spec.hidden, spec.hidden, 0.0f);
    }
    for (int64_t j = 0; j < spec.v_heads; j += 2) l.linear.dt_bias[j] = -200.0f;
  }
  return w;
}

void expect_models_agree(const io::Qwen35Weights& weights, int64_t vocab, const std::string& what,
                         int steps = 24) {
  ModelOptions dense, skip;
  dense.gdn = GdnRecurrence::Dense;
  skip.gdn = GdnRecurrence::SkipZeros;
  const Model a(weights, dense), b(weights, skip);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    State sa = a.new_state(), sb = b.new_state();
    std::vector<float> la(vocab), lb(vocab), ha(weights.config.hidden_size), hb(weights.config.hidden_size);
    for (int step = 0; step < steps; ++step) {
      const int64_t token = (step * 37 + 11) % vocab;
      a.forward(token, sa, la, ha);
      b.forward(token, sb, lb, hb);
      for (int64_t i = 0; i < vocab; ++i) {
        ASSERT_EQ(float_bits(lb[i]), float_bits(la[i])) << what << " threads " << threads << " step " << step << " logit " << i;
      }
      for (size_t i = 0; i < ha.size(); ++i) {
        ASSERT_EQ(float_bits(hb[i]), float_bits(ha[i])) << what << " threads " << threads << " step " << step << " hidden " << i;
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST(GdnSkipZeros, WholeTinyCheckpointsGiveTheDenseBits) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    testing::TinySpec spec;
    spec.seed = seed;
    spec.layers = {io::LayerType::LinearAttention, io::LayerType::FullAttention,
                   io::LayerType::LinearAttention, io::LayerType::LinearAttention};
    spec.bf16 = seed % 2 == 0;
    spec.zero_fraction = seed % 3 == 0 ? 0.5 : 0.0;
    expect_models_agree(zero_rich_weights(spec, 100 + seed), spec.vocab, "seed " + std::to_string(seed));
    // Unmodified random checkpoints (no exact zeros in q/k) agree too.
    expect_models_agree(testing::make_tiny_weights(spec), spec.vocab, "plain seed " + std::to_string(seed));
  }
}

TEST(GdnSkipZeros, WideCheckpointTakesTheParallelPathWithTheSameBits) {
  testing::TinySpec spec;
  spec.seed = 9;
  spec.hidden = 256;
  spec.intermediate = 256;
  spec.vocab = 300;
  spec.layers = {io::LayerType::LinearAttention, io::LayerType::LinearAttention};
  spec.k_heads = 4;
  spec.v_heads = 8;
  spec.k_dim = 128;
  spec.v_dim = 128;  // 8 x 128 x 128 state: the recurrence reaches the parallel threshold
  const int64_t before = GatedDeltaNet::parallel_steps();
  expect_models_agree(zero_rich_weights(spec, 7), spec.vocab, "wide", 8);
  // Both recurrences at 2 threads (and at 1: a team of one) took the region on every
  // step of both layers; the comparison above is only meaningful if they did.
  EXPECT_GE(GatedDeltaNet::parallel_steps() - before, 2 * 2 * 2 * 8);
}

}  // namespace
}  // namespace qpu::engine
