#pragma once
// Tiny checkpoints whose sublayers read and write a few groups of residual dims, so that
// they go idle and wake up again (the idle-sublayer tests, and the forward pairs that must
// reproduce every such path), and the bit-for-bit comparisons of their results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/float_bits.h"
#include "engine/model.h"
#include "same_run.h"
#include "tiny_model.h"

namespace qpu::engine::testing {

using io::LayerType;

inline constexpr int64_t kGroup = 16;  // residual dims per group: hidden 64 = 4 groups

inline void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  expect_same_bits(got, want, what);
}

inline void expect_same_state(const State& got, const State& want, const std::string& what) {
  expect_same_state_bits(got, want, what);
}

// Columns of a row-major [rows, cols] matrix outside `keep` (a group mask) set to 0.
inline void keep_columns(std::vector<float>& m, int64_t cols, uint32_t groups) {
  for (size_t i = 0; i < m.size(); ++i) {
    const auto col = static_cast<int64_t>(i % static_cast<size_t>(cols));
    if (!(groups >> (col / kGroup) & 1u)) m[i] = 0.0f;
  }
}
// Rows of a row-major [rows, cols] matrix outside `keep` set to 0.
inline void keep_rows(std::vector<float>& m, int64_t cols, uint32_t groups) {
  for (size_t i = 0; i < m.size(); ++i) {
    const auto row = static_cast<int64_t>(i / static_cast<size_t>(cols));
    if (!(groups >> (row / kGroup) & 1u)) m[i] = 0.0f;
  }
}

// One sublayer's wiring: which groups of residual dims it reads and writes.
struct Wiring {
  uint32_t mixer_reads = 1, mixer_writes = 1, mlp_reads = 1, mlp_writes = 1;
  bool decay_one = true;  // GDN: dt_bias = -200, so softplus = 0 and exp(g) = 1
};

// The GDN idle decay is 1 when softplus(0 + dt_bias) is 0: log1p(exp(-200)) = 0.
inline void wire(io::Qwen35Weights& w, const std::vector<Wiring>& wiring) {
  const int64_t h = w.config.hidden_size;
  for (size_t l = 0; l < wiring.size(); ++l) {
    io::LayerWeights& lw = w.layers[l];
    const Wiring& r = wiring[l];
    if (lw.type == LayerType::LinearAttention) {
      for (auto* m : {&lw.linear.in_proj_qkv, &lw.linear.in_proj_z, &lw.linear.in_proj_b, &lw.linear.in_proj_a}) {
        keep_columns(*m, h, r.mixer_reads);
      }
      keep_rows(lw.linear.out_proj, w.config.linear_num_value_heads * w.config.linear_value_head_dim, r.mixer_writes);
      if (r.decay_one) std::fill(lw.linear.dt_bias.begin(), lw.linear.dt_bias.end(), -200.0f);
    } else {
      for (auto* m : {&lw.full.q_proj, &lw.full.k_proj, &lw.full.v_proj}) keep_columns(*m, h, r.mixer_reads);
      keep_rows(lw.full.o_proj, w.config.num_attention_heads * w.config.head_dim, r.mixer_writes);
    }
    keep_columns(lw.gate_proj, h, r.mlp_reads);
    keep_columns(lw.up_proj, h, r.mlp_reads);
    keep_rows(lw.down_proj, w.config.intermediate_size, r.mlp_writes);
  }
}

// Embedding row t: nonzero only in the groups of `active(t)`; the other dims are +0 or
// -0 (random signs: -0 reaches the idle sublayers and their add).
template <class Active>
void embed_groups(io::Qwen35Weights& w, uint64_t seed, Active active) {
  TinyRandom rng(seed);
  const int64_t h = w.config.hidden_size;
  for (int64_t t = 0; t < w.config.vocab_size; ++t) {
    const uint32_t groups = active(t);
    for (int64_t i = 0; i < h; ++i) {
      float& v = w.embed_tokens[static_cast<size_t>(t * h + i)];
      if (!(groups >> (i / kGroup) & 1u)) v = rng.unit() < 0.5 ? -0.0f : 0.0f;
    }
  }
}


// ---- Random wiring: 4 groups (5 at hidden 70 and 72), every sublayer reads 1-2 random groups and writes 1 random
// group; tokens activate 0-2 random groups (a third of them none). Layers of both kinds,
// random decays, every option; many seeds.
inline TinySpec random_spec(uint64_t seed) {
  TinySpec spec;
  spec.seed = seed;
  spec.layers = {LayerType::LinearAttention, LayerType::LinearAttention, LayerType::FullAttention,
                 LayerType::LinearAttention, LayerType::LinearAttention, LayerType::LinearAttention};
  spec.tied = seed % 2 == 0;
  spec.bf16 = seed % 3 == 0;
  spec.conv_kernel = seed % 4 == 1 ? 2 : 4;
  // 72 and 70: a fifth group of 8 or 6 dims, a partial 64-dim word (70: not a multiple of 4).
  spec.hidden = seed % 2 == 0 ? 64 : seed % 4 == 1 ? 72 : 70;
  return spec;
}

inline io::Qwen35Weights random_checkpoint(uint64_t seed, const TinySpec& spec) {
  io::Qwen35Weights w = testing::make_tiny_weights(spec);
  TinyRandom rng(seed * 7919 + 3);
  const double group_count = static_cast<double>((spec.hidden + kGroup - 1) / kGroup);
  const auto groups = [&](int max) {
    uint32_t g = 0;
    const int n = 1 + static_cast<int>(rng.unit() * max);
    for (int i = 0; i < n; ++i) g |= 1u << static_cast<int>(rng.unit() * group_count);
    return g;
  };
  std::vector<Wiring> wiring(spec.layers.size());
  for (Wiring& r : wiring) {
    r.mixer_reads = groups(2);
    r.mlp_reads = groups(2);
    r.mixer_writes = groups(1);
    r.mlp_writes = groups(1);
    r.decay_one = rng.unit() < 0.6;
  }
  wire(w, wiring);
  embed_groups(w, seed + 11, [&](int64_t t) { return t % 3 == 0 ? 0u : groups(2); });
  return w;
}

inline io::Qwen35Weights random_checkpoint(uint64_t seed) { return random_checkpoint(seed, random_spec(seed)); }

inline std::vector<int64_t> random_tokens(uint64_t seed, int64_t vocab, int steps) {
  TinyRandom rng(seed * 31 + 1);
  std::vector<int64_t> tokens;
  while (static_cast<int>(tokens.size()) < steps) {
    // Runs of idle tokens (multiples of 3) between single live ones.
    const int idle_run = static_cast<int>(rng.unit() * 7);
    for (int i = 0; i < idle_run; ++i) tokens.push_back(3 * static_cast<int64_t>(rng.unit() * static_cast<double>(vocab / 3)));
    tokens.push_back(1 + 3 * static_cast<int64_t>(rng.unit() * static_cast<double>(vocab / 3 - 1)));
  }
  tokens.resize(static_cast<size_t>(steps));
  return tokens;
}

}  // namespace qpu::engine::testing
