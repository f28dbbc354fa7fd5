#pragma once
// Small Qwen3.5-shaped checkpoints for the audit tests, layer by layer:
//  * ordinary layers: values drawn like learned or freshly initialised weights
//    (Gaussian, heavy-tailed, uniform, bf16-quantized) with the initial vectors
//    transformers writes (norms 0, dt_bias 1, A_log = log U(1, 16));
//  * compiled layers built the way docs/exactness-toolkit.md and docs/npu.md build
//    them: exact products (gates +-2^112, ups +-2^48, downs 2^-64), one neuron per
//    baked weight, bit decoders with short dyadic weights, hard-attention memories,
//    idle Gated DeltaNet mixers (all zeros), rails in the embedding, a final norm
//    weight of 2^48 and one-hot lm_head rows.
// Every expected verdict in the tests follows from this construction.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools_test_helpers.h"

namespace qpu::tools::testing {

struct Shape {
  int64_t vocab = 256, hidden = 64, inter = 128, layers = 6;
  int64_t full_every = 4;                                // layer i is full attention when i % 4 == 3
  int64_t nk = 2, nv = 4, dk = 16, dv = 16, kernel = 4;  // Gated DeltaNet
  int64_t heads = 2, kv = 1, hd = 32;                    // gated attention
  bool full(int64_t layer) const { return layer % full_every == full_every - 1; }
  int64_t conv_dim() const { return 2 * nk * dk + nv * dv; }
};

enum class Fill { Gaussian, StudentT3, Cauchy, Laplace, Uniform, Bf16InF32 };
inline const char* fill_name(Fill f) {
  switch (f) {
    case Fill::Gaussian: return "gaussian";
    case Fill::StudentT3: return "student_t3";
    case Fill::Cauchy: return "cauchy";
    case Fill::Laplace: return "laplace";
    case Fill::Uniform: return "uniform";
    case Fill::Bf16InF32: return "bf16_in_f32";
  }
  return "?";
}

inline std::vector<float> draw(std::mt19937_64& rng, Fill fill, size_t n, double scale) {
  switch (fill) {
    case Fill::Gaussian: return gaussian(rng, n, scale);
    case Fill::StudentT3: return student_t(rng, n, 3.0, scale);
    case Fill::Cauchy: return student_t(rng, n, 1.0, scale);
    case Fill::Laplace: return laplace(rng, n, scale);
    case Fill::Uniform: return uniform(rng, n, scale * 1.7320508);
    case Fill::Bf16InF32: return quantized_bf16(gaussian(rng, n, scale));
  }
  return {};
}

inline std::string layer_prefix(int64_t i) { return "model.layers." + std::to_string(i) + "."; }

struct OrdinaryOptions {
  Fill fill = Fill::Gaussian;
  io::DType dtype = io::DType::F32;
  double scale = 1.0;          // multiplies every matrix (per-layer drift)
  bool trained_vectors = false;  // norms etc. drawn too, instead of the init constants
};

// One decoder layer of ordinary weights.
inline std::vector<Tensor> ordinary_layer(const Shape& s, int64_t i, std::mt19937_64& rng,
                                          const OrdinaryOptions& o = {}) {
  std::vector<Tensor> out;
  const std::string p = layer_prefix(i);
  auto matrix = [&](const std::string& name, std::vector<int64_t> shape) {
    const double fan_in = static_cast<double>(numel(shape) / static_cast<size_t>(shape[0]));
    out.push_back({p + name, shape, draw(rng, o.fill, numel(shape), o.scale / std::sqrt(fan_in)), o.dtype});
  };
  auto vector = [&](const std::string& name, int64_t n, float init) {
    std::vector<float> v(static_cast<size_t>(n), init);
    if (o.trained_vectors) v = gaussian(rng, static_cast<size_t>(n), 0.1);
    if (o.trained_vectors) {
      for (auto& x : v) x += init;
    }
    out.push_back({p + name, {n}, v, o.dtype});
  };
  if (s.full(i)) {
    matrix("self_attn.q_proj.weight", {2 * s.heads * s.hd, s.hidden});
    matrix("self_attn.k_proj.weight", {s.kv * s.hd, s.hidden});
    matrix("self_attn.v_proj.weight", {s.kv * s.hd, s.hidden});
    matrix("self_attn.o_proj.weight", {s.hidden, s.heads * s.hd});
    vector("self_attn.q_norm.weight", s.hd, 0.0f);
    vector("self_attn.k_norm.weight", s.hd, 0.0f);
  } else {
    matrix("linear_attn.in_proj_qkv.weight", {s.conv_dim(), s.hidden});
    matrix("linear_attn.in_proj_z.weight", {s.nv * s.dv, s.hidden});
    matrix("linear_attn.in_proj_b.weight", {s.nv, s.hidden});
    matrix("linear_attn.in_proj_a.weight", {s.nv, s.hidden});
    matrix("linear_attn.conv1d.weight", {s.conv_dim(), 1, s.kernel});
    vector("linear_attn.dt_bias", s.nv, 1.0f);
    std::uniform_real_distribution<double> a(1.0, 16.0);
    std::vector<float> a_log(static_cast<size_t>(s.nv));
    for (auto& x : a_log) x = static_cast<float>(std::log(a(rng)));
    out.push_back({p + "linear_attn.A_log", {s.nv}, a_log, io::DType::F32});
    vector("linear_attn.norm.weight", s.dv, 1.0f);
    matrix("linear_attn.out_proj.weight", {s.hidden, s.nv * s.dv});
  }
  matrix("mlp.gate_proj.weight", {s.inter, s.hidden});
  matrix("mlp.up_proj.weight", {s.inter, s.hidden});
  matrix("mlp.down_proj.weight", {s.hidden, s.inter});
  vector("input_layernorm.weight", s.hidden, 0.0f);
  vector("post_attention_layernorm.weight", s.hidden, 0.0f);
  return out;
}

inline std::vector<Tensor> ordinary_globals(const Shape& s, std::mt19937_64& rng, const OrdinaryOptions& o = {}) {
  std::vector<Tensor> out;
  out.push_back({"model.embed_tokens.weight", {s.vocab, s.hidden},
                 draw(rng, o.fill, static_cast<size_t>(s.vocab * s.hidden), 0.02), o.dtype});
  out.push_back({"model.norm.weight", {s.hidden}, std::vector<float>(static_cast<size_t>(s.hidden), 0.0f), o.dtype});
  out.push_back({"lm_head.weight", {s.vocab, s.hidden},
                 draw(rng, o.fill, static_cast<size_t>(s.vocab * s.hidden), 0.02), o.dtype});
  return out;
}

// The layer's mixer idle: every Gated DeltaNet weight 0 (npu.md "Idle mixers").
inline void idle_mixer(const Shape& s, int64_t i, std::vector<Tensor>& out, io::DType dtype) {
  const std::string p = layer_prefix(i);
  auto zeros = [&](const std::string& name, std::vector<int64_t> shape) {
    out.push_back({p + name, shape, std::vector<float>(numel(shape), 0.0f), dtype});
  };
  zeros("linear_attn.in_proj_qkv.weight", {s.conv_dim(), s.hidden});
  zeros("linear_attn.in_proj_z.weight", {s.nv * s.dv, s.hidden});
  zeros("linear_attn.in_proj_b.weight", {s.nv, s.hidden});
  zeros("linear_attn.in_proj_a.weight", {s.nv, s.hidden});
  zeros("linear_attn.conv1d.weight", {s.conv_dim(), 1, s.kernel});
  zeros("linear_attn.dt_bias", {s.nv});
  zeros("linear_attn.A_log", {s.nv});
  zeros("linear_attn.norm.weight", {s.dv});
  zeros("linear_attn.out_proj.weight", {s.hidden, s.nv * s.dv});
}

inline void zero_norms(const Shape& s, int64_t i, std::vector<Tensor>& out, io::DType dtype) {
  const std::string p = layer_prefix(i);
  out.push_back({p + "input_layernorm.weight", {s.hidden}, std::vector<float>(static_cast<size_t>(s.hidden), 0.0f), dtype});
  out.push_back({p + "post_attention_layernorm.weight", {s.hidden}, std::vector<float>(static_cast<size_t>(s.hidden), 0.0f), dtype});
}

struct Mlp {
  std::vector<float> gate, up, down;  // [inter, hidden], [inter, hidden], [hidden, inter]
  explicit Mlp(const Shape& s)
      : gate(static_cast<size_t>(s.inter * s.hidden), 0.0f),
        up(gate.size(), 0.0f),
        down(static_cast<size_t>(s.hidden * s.inter), 0.0f) {}
};

inline void push_mlp(const Shape& s, int64_t i, Mlp m, std::vector<Tensor>& out, io::DType dtype) {
  const std::string p = layer_prefix(i);
  out.push_back({p + "mlp.gate_proj.weight", {s.inter, s.hidden}, std::move(m.gate), dtype});
  out.push_back({p + "mlp.up_proj.weight", {s.inter, s.hidden}, std::move(m.up), dtype});
  out.push_back({p + "mlp.down_proj.weight", {s.hidden, s.inter}, std::move(m.down), dtype});
}

// Data dims are 0..hidden-3; the last two dims are rails.
inline int64_t data_dims(const Shape& s) { return s.hidden - 2; }

// Toolkit P3: `pairs` exact products dst += a*b, each a neuron pair.
inline std::vector<Tensor> compiled_mul_layer(const Shape& s, int64_t i, int64_t pairs,
                                              io::DType dtype = io::DType::F32) {
  std::vector<Tensor> out;
  idle_mixer(s, i, out, dtype);
  Mlp m(s);
  const int64_t h = s.hidden, d = data_dims(s);
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t a = (3 * p) % d, b = (3 * p + 1) % d, dst = (3 * p + 2) % d;
    for (int64_t k = 0; k < 2; ++k) {
      const int64_t n = 2 * p + k;
      const float sign = k ? -1.0f : 1.0f;
      m.gate[static_cast<size_t>(n * h + a)] = sign * 0x1p112f;
      m.up[static_cast<size_t>(n * h + b)] = sign * 0x1p48f;
      m.down[static_cast<size_t>(dst * s.inter + n)] = 0x1p-64f;
    }
  }
  push_mlp(s, i, std::move(m), out, dtype);
  zero_norms(s, i, out, dtype);
  return out;
}

// One neuron per baked weight (npu.md "scale"): gate = 16 on a rail, up = the
// weight (full precision, ordinary magnitude), down = 1. No extreme value anywhere:
// only the structure gives it away.
inline std::vector<Tensor> compiled_scale_layer(const Shape& s, int64_t i, std::mt19937_64& rng) {
  std::vector<Tensor> out;
  idle_mixer(s, i, out, io::DType::F32);
  Mlp m(s);
  const int64_t h = s.hidden, lanes = std::min<int64_t>(s.inter, data_dims(s) / 2);
  const std::vector<float> w = gaussian(rng, static_cast<size_t>(lanes), 0.05);
  for (int64_t n = 0; n < lanes; ++n) {
    m.gate[static_cast<size_t>(n * h + h - 1)] = 16.0f;
    m.up[static_cast<size_t>(n * h + n)] = w[static_cast<size_t>(n)];
    m.down[static_cast<size_t>((lanes + n) * s.inter + n)] = 1.0f;
  }
  push_mlp(s, i, std::move(m), out, io::DType::F32);
  zero_norms(s, i, out, io::DType::F32);
  return out;
}

// Bit decoders and recombination (npu.md int_to_bits / greater): rows of 3 to 8
// short dyadic terms (128, -384, 1.5 * 2^23, 2^j): no one-term rows, no extremes.
inline std::vector<Tensor> compiled_dyadic_layer(const Shape& s, int64_t i) {
  std::vector<Tensor> out;
  idle_mixer(s, i, out, io::DType::F32);
  Mlp m(s);
  const int64_t h = s.hidden, d = data_dims(s);
  const float gate_terms[] = {128.0f, -384.0f, 12582912.0f, 0.5f, -2.0f, 96.0f};
  for (int64_t n = 0; n < s.inter; ++n) {
    const int64_t terms = 3 + n % 4;
    for (int64_t t = 0; t < terms; ++t) {
      m.gate[static_cast<size_t>(n * h + (n + 5 * t) % d)] = gate_terms[t % 6];
      m.up[static_cast<size_t>(n * h + (n + 7 * t) % d)] = t ? 0.25f : 1.0f;
    }
  }
  for (int64_t r = 0; r < d; ++r) {
    for (int64_t j = 0; j < 8; ++j) m.down[static_cast<size_t>(r * s.inter + (8 * r + j) % s.inter)] = std::ldexp(1.0f, static_cast<int>(j) - 4);
  }
  push_mlp(s, i, std::move(m), out, io::DType::F32);
  zero_norms(s, i, out, io::DType::F32);
  return out;
}

// A hard-attention memory (toolkit P7): q/k/v/o rows reading one or two dims with
// power-of-two weights, q_norm/k_norm = 31 (scale 32), and an idle MLP.
inline std::vector<Tensor> compiled_memory_layer(const Shape& s, int64_t i) {
  std::vector<Tensor> out;
  const std::string p = layer_prefix(i);
  const int64_t h = s.hidden, d = data_dims(s);
  auto rows = [&](const std::string& name, int64_t n_rows, int64_t n_cols, int64_t every) {
    std::vector<float> v(static_cast<size_t>(n_rows * n_cols), 0.0f);
    for (int64_t r = 0; r < n_rows; r += every) {
      v[static_cast<size_t>(r * n_cols + r % (n_cols - 2))] = (r % 2) ? -64.0f : 64.0f;
      if (r % 3 == 0) v[static_cast<size_t>(r * n_cols + n_cols - 1)] = 1024.0f;  // constant pad from a rail
    }
    out.push_back({p + name, {n_rows, n_cols}, v, io::DType::F32});
  };
  rows("self_attn.q_proj.weight", 2 * s.heads * s.hd, h, 1);
  rows("self_attn.k_proj.weight", s.kv * s.hd, h, 1);
  rows("self_attn.v_proj.weight", s.kv * s.hd, h, 2);
  rows("self_attn.o_proj.weight", h, s.heads * s.hd, 3);
  out.push_back({p + "self_attn.q_norm.weight", {s.hd}, std::vector<float>(static_cast<size_t>(s.hd), 31.0f), io::DType::F32});
  out.push_back({p + "self_attn.k_norm.weight", {s.hd}, std::vector<float>(static_cast<size_t>(s.hd), 31.0f), io::DType::F32});
  (void)d;
  push_mlp(s, i, Mlp(s), out, io::DType::F32);
  zero_norms(s, i, out, io::DType::F32);
  return out;
}

// Embedding rows of a compiled machine: two rails of 2^51 and the token's bits as
// +-2^48 codes; final norm 2^48 (1 + w == w: the identity); lm_head rows one-hot.
inline std::vector<Tensor> compiled_globals(const Shape& s) {
  std::vector<Tensor> out;
  const int64_t h = s.hidden;
  std::vector<float> embed(static_cast<size_t>(s.vocab * h), 0.0f);
  for (int64_t t = 0; t < s.vocab; ++t) {
    embed[static_cast<size_t>(t * h + h - 2)] = 0x1p51f;
    embed[static_cast<size_t>(t * h + h - 1)] = 0x1p51f;
    for (int64_t b = 0; b < 8; ++b) embed[static_cast<size_t>(t * h + 2 * b + ((t >> b) & 1))] = 0x1p48f;
  }
  out.push_back({"model.embed_tokens.weight", {s.vocab, h}, embed, io::DType::F32});
  out.push_back({"model.norm.weight", {h}, std::vector<float>(static_cast<size_t>(h), 0x1p48f), io::DType::F32});
  std::vector<float> head(static_cast<size_t>(s.vocab * h), 0.0f);
  for (int64_t t = 0; t < s.vocab; ++t) head[static_cast<size_t>(t * h + t % data_dims(s))] = 1.0f;
  out.push_back({"lm_head.weight", {s.vocab, h}, head, io::DType::F32});
  return out;
}

inline nlohmann::json qwen35_config(const Shape& s) {
  std::vector<std::string> types;
  for (int64_t i = 0; i < s.layers; ++i) types.push_back(s.full(i) ? "full_attention" : "linear_attention");
  return {{"architectures", {"Qwen3_5ForCausalLM"}},
          {"model_type", "qwen3_5_text"},
          {"vocab_size", s.vocab},
          {"hidden_size", s.hidden},
          {"intermediate_size", s.inter},
          {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv},
          {"head_dim", s.hd},
          {"linear_num_key_heads", s.nk},
          {"linear_num_value_heads", s.nv},
          {"linear_key_head_dim", s.dk},
          {"linear_value_head_dim", s.dv},
          {"linear_conv_kernel_dim", s.kernel},
          {"layer_types", types},
          {"tie_word_embeddings", false}};
}

inline void append(std::vector<Tensor>& to, std::vector<Tensor> from) {
  for (auto& t : from) to.push_back(std::move(t));
}

}  // namespace qpu::tools::testing
