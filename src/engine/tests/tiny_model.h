#pragma once
// Random in-memory Qwen3.5 checkpoints for engine tests (no files, no io loader),
// with weights scaled so that activations stay O(1) and every nonlinearity works in
// its interesting range.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/float_bits.h"
#include "io/qwen35_weights.h"

namespace qpu::engine::testing {

using io::LayerType;

struct TinySpec {
  int64_t vocab = 97;
  int64_t hidden = 64;
  int64_t intermediate = 96;
  std::vector<LayerType> layers{LayerType::LinearAttention, LayerType::LinearAttention,
                                LayerType::FullAttention, LayerType::LinearAttention,
                                LayerType::FullAttention};
  int64_t heads = 4, kv_heads = 2, head_dim = 16;
  double partial_rotary_factor = 0.25;
  double rope_theta = 10000.0;
  int64_t k_heads = 2, v_heads = 4, k_dim = 16, v_dim = 8, conv_kernel = 4;
  bool tied = false;
  uint64_t seed = 1;
  double zero_fraction = 0.0;  // fraction of matrix entries set to exactly 0
  bool bf16 = false;           // round every weight to a bf16 number
};

class TinyRandom {
 public:
  explicit TinyRandom(uint64_t seed) : gen_(seed) {}
  // Uniform in [-scale, scale): built from raw 64-bit draws (portable, unlike <random>'s
  // distributions).
  float uniform(double scale) {
    const double u = static_cast<double>(gen_() >> 11) * 0x1.0p-53;
    return static_cast<float>((2.0 * u - 1.0) * scale);
  }
  double unit() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }

 private:
  std::mt19937_64 gen_;
};

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The engine's results against a reference: the same bits, or both NaN (fp32 arithmetic
// does not fix a NaN's payload or sign).
inline bool same(float a, float b) { return float_bits(a) == float_bits(b) || (std::isnan(a) && std::isnan(b)); }

// The residual's live words as the engine's idle tests see them: bit k of word w is set
// iff x[64 w + k] is not +-0 (NaN is live).
inline std::vector<uint64_t> live_bits(const std::vector<float>& x) {
  std::vector<uint64_t> live((x.size() + 63) / 64, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] != 0.0f || std::isnan(x[i])) live[i / 64] |= uint64_t{1} << (i % 64);
  }
  return live;
}

inline float round_bf16(float v) {
  uint32_t b = __builtin_bit_cast(uint32_t, v);
  b += 0x7fffu + ((b >> 16) & 1u);  // round to nearest even (finite values)
  return __builtin_bit_cast(float, b & 0xffff0000u);
}

inline io::Qwen35Weights make_tiny_weights(const TinySpec& s) {
  TinyRandom rng(s.seed);
  auto finish = [&](float v) { return s.bf16 ? round_bf16(v) : v; };
  auto matrix = [&](int64_t rows, int64_t cols, double gain = 1.0) {
    std::vector<float> m(static_cast<size_t>(rows * cols));
    const double scale = gain * std::sqrt(3.0 / static_cast<double>(cols));  // unit variance out
    for (float& v : m) v = rng.unit() < s.zero_fraction ? 0.0f : finish(rng.uniform(scale));
    return m;
  };
  auto vec = [&](int64_t n, double center, double spread) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = finish(static_cast<float>(center) + rng.uniform(spread));
    return v;
  };

  io::Qwen35Weights w;
  io::Qwen35Config& c = w.config;
  c.architecture = "Qwen3_5ForCausalLM";
  c.tensor_prefix = "model.";
  c.vocab_size = s.vocab;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.intermediate;
  c.num_hidden_layers = static_cast<int64_t>(s.layers.size());
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.partial_rotary_factor = s.partial_rotary_factor;
  c.rope_theta = s.rope_theta;
  c.linear_num_key_heads = s.k_heads;
  c.linear_num_value_heads = s.v_heads;
  c.linear_key_head_dim = s.k_dim;
  c.linear_value_head_dim = s.v_dim;
  c.linear_conv_kernel_dim = s.conv_kernel;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = s.tied;
  c.layer_types = s.layers;

  w.embed_tokens = matrix(s.vocab, s.hidden, std::sqrt(static_cast<double>(s.hidden)) / 4.0);
  const int64_t key_dim = s.k_heads * s.k_dim, value_dim = s.v_heads * s.v_dim;
  const int64_t conv_dim = 2 * key_dim + value_dim;
  for (LayerType type : s.layers) {
    io::LayerWeights l;
    l.type = type;
    l.input_layernorm = vec(s.hidden, 0.0, 0.3);
    l.post_attention_layernorm = vec(s.hidden, 0.0, 0.3);
    if (type == LayerType::LinearAttention) {
      l.linear.in_proj_qkv = matrix(conv_dim, s.hidden);
      l.linear.in_proj_z = matrix(value_dim, s.hidden);
      l.linear.in_proj_b = matrix(s.v_heads, s.hidden, 2.0);
      l.linear.in_proj_a = matrix(s.v_heads, s.hidden, 2.0);
      l.linear.conv1d = vec(conv_dim * s.conv_kernel, 0.0, 0.8);
      l.linear.dt_bias = vec(s.v_heads, 0.0, 1.0);
      l.linear.A_log = vec(s.v_heads, 0.0, 1.5);
      l.linear.norm = vec(s.v_dim, 1.0, 0.3);
      l.linear.out_proj = matrix(s.hidden, value_dim, 0.5);
    } else {
      l.full.q_proj = matrix(2 * s.heads * s.head_dim, s.hidden);
      l.full.k_proj = matrix(s.kv_heads * s.head_dim, s.hidden);
      l.full.v_proj = matrix(s.kv_heads * s.head_dim, s.hidden);
      l.full.o_proj = matrix(s.hidden, s.heads * s.head_dim, 0.5);
      l.full.q_norm = vec(s.head_dim, 0.0, 0.3);
      l.full.k_norm = vec(s.head_dim, 0.0, 0.3);
    }
    l.gate_proj = matrix(s.intermediate, s.hidden);
    l.up_proj = matrix(s.intermediate, s.hidden);
    l.down_proj = matrix(s.hidden, s.intermediate, 0.5);
    w.layers.push_back(std::move(l));
  }
  w.norm = vec(s.hidden, 0.0, 0.3);
  if (!s.tied) w.lm_head = matrix(s.vocab, s.hidden, 2.0);
  return w;
}

}  // namespace qpu::engine::testing
