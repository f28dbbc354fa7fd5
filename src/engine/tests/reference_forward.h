#pragma once
// A straightforward double-precision Qwen3.5 decoder (spec §11 pseudocode), written
// independently of the engine, for tests: the engine's fp32 results must agree with
// it to fp32 accuracy. Plain loops, no shared code with src/engine.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "io/qwen35_weights.h"

namespace qpu::engine::testing {

class ReferenceModel {
 public:
  explicit ReferenceModel(const io::Qwen35Weights& w) : w_(w), c_(w.config) {
    const int64_t L = c_.num_hidden_layers;
    conv_.resize(L);
    S_.resize(L);
    K_.resize(L);
    V_.resize(L);
    for (int64_t l = 0; l < L; ++l) {
      if (c_.layer_types[l] == io::LayerType::LinearAttention) {
        conv_[l].assign(conv_dim() * (c_.linear_conv_kernel_dim - 1), 0.0);
        S_[l].assign(c_.linear_num_value_heads * c_.linear_key_head_dim * c_.linear_value_head_dim, 0.0);
      }
    }
  }

  // Returns the logits of one decode step.
  std::vector<double> step(int64_t token) {
    const int64_t H = c_.hidden_size;
    std::vector<double> x(H);
    for (int64_t i = 0; i < H; ++i) x[i] = f(w_.embed_tokens[token * H + i]);
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      const io::LayerWeights& lw = w_.layers[l];
      std::vector<double> h = rms(x, lw.input_layernorm, true);
      std::vector<double> y = c_.layer_types[l] == io::LayerType::LinearAttention ? gdn(l, h) : attention(l, h);
      for (int64_t i = 0; i < H; ++i) x[i] += y[i];
      h = rms(x, lw.post_attention_layernorm, true);
      std::vector<double> g = matvec(lw.gate_proj, h), u = matvec(lw.up_proj, h);
      for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
      y = matvec(lw.down_proj, g);
      for (int64_t i = 0; i < H; ++i) x[i] += y[i];
    }
    hidden_ = x;
    std::vector<double> n = rms(x, w_.norm, true);
    ++position_;
    return matvec(w_.output_weights(), n);
  }

  const std::vector<double>& hidden() const { return hidden_; }

 private:
  int64_t conv_dim() const {
    return 2 * c_.linear_num_key_heads * c_.linear_key_head_dim + c_.linear_num_value_heads * c_.linear_value_head_dim;
  }
  static double f(float v) { return static_cast<double>(v); }
  static double silu(double x) { return x / (1.0 + std::exp(-x)); }
  static double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

  std::vector<double> rms(const std::vector<double>& x, const std::vector<float>& w, bool one_plus,
                          size_t offset = 0, size_t n = 0) const {
    if (n == 0) n = x.size() - offset;
    double ss = 0;
    for (size_t i = 0; i < n; ++i) ss += x[offset + i] * x[offset + i];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + c_.rms_norm_eps);
    std::vector<double> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = x[offset + i] * r * (one_plus ? 1.0 + f(w[i]) : f(w[i]));
    return out;
  }

  static std::vector<double> matvec(const std::vector<float>& m, const std::vector<double>& x) {
    const size_t cols = x.size(), rows = m.size() / cols;
    std::vector<double> y(rows, 0.0);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < cols; ++j) y[r] += static_cast<double>(m[r * cols + j]) * x[j];
    }
    return y;
  }

  std::vector<double> gdn(int64_t l, const std::vector<double>& h) {
    const io::LinearAttentionWeights& w = w_.layers[l].linear;
    const int64_t Hk = c_.linear_num_key_heads, Hv = c_.linear_num_value_heads;
    const int64_t dk = c_.linear_key_head_dim, dv = c_.linear_value_head_dim, K = c_.linear_conv_kernel_dim;
    const int64_t C = conv_dim();
    std::vector<double> mixed = matvec(w.in_proj_qkv, h), z = matvec(w.in_proj_z, h);
    std::vector<double> b = matvec(w.in_proj_b, h), a = matvec(w.in_proj_a, h);
    std::vector<double> conv(C);
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t t = 0; t < K - 1; ++t) acc += f(w.conv1d[c * K + t]) * conv_[l][c * (K - 1) + t];
      acc += f(w.conv1d[c * K + K - 1]) * mixed[c];
      for (int64_t t = 0; t + 1 < K - 1; ++t) conv_[l][c * (K - 1) + t] = conv_[l][c * (K - 1) + t + 1];
      if (K > 1) conv_[l][c * (K - 1) + K - 2] = mixed[c];
      conv[c] = silu(acc);
    }
    auto l2 = [](double* v, int64_t n) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += v[i] * v[i];
      const double r = 1.0 / std::sqrt(ss + 1e-6);
      for (int64_t i = 0; i < n; ++i) v[i] *= r;
    };
    double* q = conv.data();
    double* k = conv.data() + Hk * dk;
    double* v = conv.data() + 2 * Hk * dk;
    for (int64_t m = 0; m < Hk; ++m) {
      l2(q + m * dk, dk);
      l2(k + m * dk, dk);
    }
    std::vector<double> o(Hv * dv);
    for (int64_t j = 0; j < Hv; ++j) {
      const int64_t m = j / (Hv / Hk);
      const double beta = sigmoid(b[j]);
      const double apb = a[j] + f(w.dt_bias[j]);
      const double sp = apb > 20 ? apb : std::log1p(std::exp(apb));
      const double decay = std::exp(-std::exp(static_cast<double>(w.A_log[j])) * sp);
      double* S = S_[l].data() + j * dk * dv;
      for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
      for (int64_t c = 0; c < dv; ++c) {
        double kv = 0;
        for (int64_t i = 0; i < dk; ++i) kv += S[i * dv + c] * k[m * dk + i];
        const double delta = (v[j * dv + c] - kv) * beta;
        for (int64_t i = 0; i < dk; ++i) S[i * dv + c] += k[m * dk + i] * delta;
        double out = 0;
        for (int64_t i = 0; i < dk; ++i) out += S[i * dv + c] * q[m * dk + i] / std::sqrt(static_cast<double>(dk));
        o[j * dv + c] = out;
      }
      std::vector<double> head = rms(o, w.norm, false, j * dv, dv);
      for (int64_t c = 0; c < dv; ++c) o[j * dv + c] = head[c] * silu(z[j * dv + c]);
    }
    return matvec(w.out_proj, o);
  }

  std::vector<double> attention(int64_t l, const std::vector<double>& h) {
    const io::FullAttentionWeights& w = w_.layers[l].full;
    const int64_t nh = c_.num_attention_heads, nkv = c_.num_key_value_heads, d = c_.head_dim;
    const auto rot = static_cast<int64_t>(static_cast<double>(d) * c_.partial_rotary_factor);
    std::vector<double> qg = matvec(w.q_proj, h), k = matvec(w.k_proj, h), v = matvec(w.v_proj, h);
    auto rope = [&](std::vector<double>& x) {
      for (int64_t i = 0; i < rot / 2; ++i) {
        const double inv = std::pow(c_.rope_theta, -static_cast<double>(2 * i) / static_cast<double>(rot));
        const double ang = static_cast<double>(position_) * inv;
        const double x1 = x[i], x2 = x[i + rot / 2];
        x[i] = x1 * std::cos(ang) - x2 * std::sin(ang);
        x[i + rot / 2] = x2 * std::cos(ang) + x1 * std::sin(ang);
      }
    };
    std::vector<std::vector<double>> q(nh);
    for (int64_t hh = 0; hh < nh; ++hh) {
      q[hh] = rms(qg, w.q_norm, true, 2 * hh * d, d);
      rope(q[hh]);
    }
    for (int64_t g = 0; g < nkv; ++g) {
      std::vector<double> kg = rms(k, w.k_norm, true, g * d, d);
      rope(kg);
      K_[l].push_back(kg);
      V_[l].emplace_back(v.begin() + g * d, v.begin() + (g + 1) * d);
    }
    const int64_t T = static_cast<int64_t>(K_[l].size()) / nkv;
    std::vector<double> o(nh * d, 0.0);
    for (int64_t hh = 0; hh < nh; ++hh) {
      const int64_t g = hh / (nh / nkv);
      std::vector<double> s(T);
      double mx = -1e300;
      for (int64_t t = 0; t < T; ++t) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += q[hh][c] * K_[l][t * nkv + g][c];
        s[t] = dot / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, s[t]);
      }
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t c = 0; c < d; ++c) o[hh * d + c] += s[t] / sum * V_[l][t * nkv + g][c];
      }
      for (int64_t c = 0; c < d; ++c) o[hh * d + c] *= sigmoid(qg[2 * hh * d + d + c]);
    }
    return matvec(w.o_proj, o);
  }

  const io::Qwen35Weights& w_;
  const io::Qwen35Config& c_;
  int64_t position_ = 0;
  std::vector<std::vector<double>> conv_, S_;
  std::vector<std::vector<std::vector<double>>> K_, V_;
  std::vector<double> hidden_;
};

}  // namespace qpu::engine::testing
