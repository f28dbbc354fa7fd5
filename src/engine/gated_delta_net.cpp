#include "engine/gated_delta_net.h"

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "engine/numerics.h"

namespace qpu::engine {
namespace {

void expect_size(const std::vector<float>& v, int64_t size, const std::string& name) {
  if (static_cast<int64_t>(v.size()) != size) fail("{}: expected {} values, got {}", name, size, v.size());
}

// Per-head work below this many state elements is not worth a parallel region.
constexpr int64_t kParallelMinState = int64_t{1} << 14;

}  // namespace

GatedDeltaNet::GatedDeltaNet(io::LinearAttentionWeights&& w, const GatedDeltaNetShape& shape,
                             float rms_eps, const PackedMatrix::Options& options,
                             const std::string& name)
    : shape_(shape), rms_eps_(rms_eps) {
  const GatedDeltaNetShape& s = shape_;
  if (s.hidden <= 0 || s.num_k_heads <= 0 || s.num_v_heads <= 0 || s.k_head_dim <= 0 ||
      s.v_head_dim <= 0 || s.conv_kernel < 1 || s.num_v_heads % s.num_k_heads != 0) {
    fail("{}: invalid shape (k heads {}, v heads {}, dk {}, dv {}, kernel {})", name, s.num_k_heads,
         s.num_v_heads, s.k_head_dim, s.v_head_dim, s.conv_kernel);
  }
  // transformers: query / (head_k_dim ** 0.5) when decoding, query * head_k_dim ** -0.5 in the
  // chunked kernel; Python evaluates both in double, torch rounds the scalar to fp32.
  const auto dk = static_cast<double>(s.k_head_dim);
  q_divisor_ = static_cast<float>(std::pow(dk, 0.5));
  q_multiplier_ = static_cast<float>(std::pow(dk, -0.5));

  in_proj_qkv_ = PackedMatrix::pack(w.in_proj_qkv, s.conv_dim(), s.hidden, options, name + ".in_proj_qkv");
  in_proj_z_ = PackedMatrix::pack(w.in_proj_z, s.value_dim(), s.hidden, options, name + ".in_proj_z");
  in_proj_b_ = PackedMatrix::pack(w.in_proj_b, s.num_v_heads, s.hidden, options, name + ".in_proj_b");
  in_proj_a_ = PackedMatrix::pack(w.in_proj_a, s.num_v_heads, s.hidden, options, name + ".in_proj_a");
  out_proj_ = PackedMatrix::pack(w.out_proj, s.hidden, s.value_dim(), options, name + ".out_proj");
  w.in_proj_qkv = {};
  w.in_proj_z = {};
  w.in_proj_b = {};
  w.in_proj_a = {};
  w.out_proj = {};

  expect_size(w.conv1d, s.conv_dim() * s.conv_kernel, name + ".conv1d.weight");
  expect_size(w.dt_bias, s.num_v_heads, name + ".dt_bias");
  expect_size(w.A_log, s.num_v_heads, name + ".A_log");
  expect_size(w.norm, s.v_head_dim, name + ".norm.weight");
  conv_weight_ = std::move(w.conv1d);
  dt_bias_ = std::move(w.dt_bias);
  norm_weight_ = std::move(w.norm);
  // transformers: -self.A_log.float().exp(), recomputed each call with the same bits.
  neg_exp_a_.resize(w.A_log.size());
  for (size_t j = 0; j < w.A_log.size(); ++j) neg_exp_a_[j] = -std::exp(w.A_log[j]);
}

void GatedDeltaNet::step(const float* h, std::span<float> conv_state,
                         std::span<float> recurrent_state, bool first_token, float* out) const {
  const GatedDeltaNetShape& s = shape_;
  const int64_t conv_dim = s.conv_dim();
  const int64_t taps = s.conv_kernel;
  const int64_t history = taps - 1;
  const int64_t dk = s.k_head_dim;
  const int64_t dv = s.v_head_dim;
  if (static_cast<int64_t>(conv_state.size()) != s.conv_state_size() ||
      static_cast<int64_t>(recurrent_state.size()) != s.recurrent_state_size()) {
    fail("gated delta net: state has {} conv / {} recurrent values, expected {} / {}",
         conv_state.size(), recurrent_state.size(), s.conv_state_size(), s.recurrent_state_size());
  }

  std::vector<float> mixed(static_cast<size_t>(conv_dim));
  std::vector<float> z(static_cast<size_t>(s.value_dim()));
  std::vector<float> b(static_cast<size_t>(s.num_v_heads));
  std::vector<float> a(static_cast<size_t>(s.num_v_heads));
  const PackedMatrix::Job projections[] = {{&in_proj_qkv_, h, mixed.data()},
                                           {&in_proj_z_, h, z.data()},
                                           {&in_proj_b_, h, b.data()},
                                           {&in_proj_a_, h, a.data()}};
  PackedMatrix::multiply_all(projections);

  // Causal depthwise conv over [previous kernel-1 inputs, this input], no bias, then
  // silu (torch_causal_conv1d_update). The sum runs over the taps left to right from +0.
  std::vector<float> conv(static_cast<size_t>(conv_dim));
  for (int64_t c = 0; c < conv_dim; ++c) {
    float* past = conv_state.data() + c * history;
    const float* wc = conv_weight_.data() + c * taps;
    float acc = 0.0f;
    for (int64_t t = 0; t < history; ++t) acc = acc + wc[t] * past[t];
    acc = acc + wc[history] * mixed[c];
    for (int64_t t = 0; t + 1 < history; ++t) past[t] = past[t + 1];
    if (history > 0) past[history - 1] = mixed[c];
    conv[c] = numerics::silu(acc);
  }
  float* q = conv.data();
  float* k = conv.data() + s.key_dim();
  const float* v = conv.data() + 2 * s.key_dim();

  // l2norm per key head (transformers normalizes after repeat_interleave: same values).
  for (int64_t m = 0; m < s.num_k_heads; ++m) {
    numerics::l2norm(q + m * dk, dk);
    numerics::l2norm(k + m * dk, dk);
  }
  std::vector<float> q_scaled(static_cast<size_t>(s.key_dim()));
  for (int64_t i = 0; i < s.key_dim(); ++i) {
    q_scaled[i] = first_token ? q[i] * q_multiplier_ : q[i] / q_divisor_;
  }

  // beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias).
  std::vector<float> beta(static_cast<size_t>(s.num_v_heads));
  std::vector<float> decay(static_cast<size_t>(s.num_v_heads));
  for (int64_t j = 0; j < s.num_v_heads; ++j) {
    beta[j] = numerics::sigmoid(b[j]);
    const float g = neg_exp_a_[j] * numerics::softplus(a[j] + dt_bias_[j]);
    decay[j] = std::exp(g);
  }

  // The gated delta rule, one value head per iteration; value head j reads key head
  // j / (v_heads / k_heads) (repeat_interleave, grouped).
  std::vector<float> normed(static_cast<size_t>(s.value_dim()));
  std::vector<float> scratch(static_cast<size_t>(2 * s.value_dim()));
  const int64_t group = s.num_v_heads / s.num_k_heads;
#pragma omp parallel for schedule(static) if (s.recurrent_state_size() >= kParallelMinState)
  for (int64_t j = 0; j < s.num_v_heads; ++j) {
    const float* kh = k + (j / group) * dk;
    const float* qh = q_scaled.data() + (j / group) * dk;
    const float* vh = v + j * dv;
    float* state = recurrent_state.data() + j * dk * dv;
    float* kv = scratch.data() + 2 * j * dv;  // then delta
    float* o = kv + dv;
    const float g_exp = decay[j];

    // S = S * exp(g); kv_mem[v] = sum_i S[i][v] * k[i]   (i ascending from +0)
    // (omp simd: the columns c are independent, so vectorizing them changes no result.)
    std::fill(kv, kv + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      float* row = state + i * dv;
#pragma omp simd
      for (int64_t c = 0; c < dv; ++c) {
        row[c] = row[c] * g_exp;
        kv[c] = kv[c] + row[c] * kh[i];
      }
    }
    // delta = (v - kv_mem) * beta
    float* delta = kv;
    for (int64_t c = 0; c < dv; ++c) delta[c] = (vh[c] - kv[c]) * beta[j];
    // S = S + k outer delta; o[v] = sum_i S[i][v] * q[i]   (read after the write)
    std::fill(o, o + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      float* row = state + i * dv;
#pragma omp simd
      for (int64_t c = 0; c < dv; ++c) {
        row[c] = row[c] + kh[i] * delta[c];
        o[c] = o[c] + row[c] * qh[i];
      }
    }
    if (first_token) {
      // Chunked kernel with a zero initial state: (q @ k^T) * exp(0) @ (v * beta), plus
      // the zero read of the empty state.
      const float qk = dot::dot_f32(qh, kh, dk);
      for (int64_t c = 0; c < dv; ++c) o[c] = qk * delta[c];
    }

    // Qwen3_5RMSNormGated: weight * (o * rsqrt(mean(o^2) + eps)), then * silu(z).
    const float r = numerics::rsqrt(numerics::mean_square_plus_eps(o, dv, rms_eps_));
    const float* zh = z.data() + j * dv;
    float* yh = normed.data() + j * dv;
    for (int64_t c = 0; c < dv; ++c) {
      yh[c] = (norm_weight_[c] * (o[c] * r)) * numerics::silu(zh[c]);
    }
  }

  out_proj_.multiply(normed.data(), out);
}

}  // namespace qpu::engine
