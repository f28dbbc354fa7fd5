#include "compiler/host_sim.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace qpu::compiler {

namespace {

// Deliberately not the engine's x / (1 + exp(-x)): any correct fp32 silu must keep
// the exact windows (x for x >= 18, 0 at 0, -0 for x <= -89).
float silu(float x) { return x * (1.0f / (1.0f + std::exp(-x))); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

size_t sz(int64_t n) { return static_cast<size_t>(n); }

bool all_zero(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
}

}  // namespace

HostSim::HostSim(const io::Qwen35Weights& weights, uint64_t seed) : w_(weights), rng_(seed) {
  const auto& c = w_.config;
  conv_state_.resize(w_.layers.size());
  recurrent_state_.resize(w_.layers.size());
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    if (w_.layers[l].type != io::LayerType::LinearAttention) fail("HostSim: layer {} is an attention layer", l);
    if (c.linear_num_key_heads <= 0 || c.linear_num_value_heads % c.linear_num_key_heads != 0 ||
        c.linear_conv_kernel_dim < 1)
      fail("HostSim: invalid Gated DeltaNet shape in layer {}", l);
    const int64_t conv_dim = 2 * c.linear_num_key_heads * c.linear_key_head_dim +
                             c.linear_num_value_heads * c.linear_value_head_dim;
    conv_state_[l].assign(sz(conv_dim * (c.linear_conv_kernel_dim - 1)), 0.0f);
    recurrent_state_[l].assign(sz(c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim), 0.0f);
    // An all-zero GDN (the compiler's idle mixer) has q = k = v = z = 0, keeps a zero
    // state and outputs exactly +0 in any order: skip its arithmetic (most layers of
    // the deep primitive checkpoints are idle).
    const auto& la = w_.layers[l].linear;
    idle_.push_back(all_zero(la.in_proj_qkv) && all_zero(la.in_proj_z) && all_zero(la.out_proj));
  }
}

// Sum of the nonzero products w[j] x[j] in a random order (a random binary tree over
// them): any order an engine may use, dense or sparse. The zero products are left out:
// s + (+-0) == s for every s != 0 (infinities and NaN too), so they change no sum with a
// nonzero term, and the sums of zeros only end as +0 after the final 0 + s either way.
// (The simulator used to draw a random subset of the zeros into the tree as well; that
// changed only which trees over the nonzero terms came up, and its one draw per zero
// product was most of the time of the deep, sparse checkpoints.)
float HostSim::dot(const float* w, const float* x, int64_t n) {
  terms_.clear();
  for (int64_t j = 0; j < n; ++j) {
    const float p = w[j] * x[j];
    if (p != 0.0f) terms_.push_back(p);  // NaN != 0: kept
  }
  std::shuffle(terms_.begin(), terms_.end(), rng_);
  // Random binary tree: repeatedly add two random neighbours.
  while (terms_.size() > 1) {
    const size_t i = static_cast<size_t>(rng_() % (terms_.size() - 1));
    terms_[i] = terms_[i] + terms_[i + 1];
    terms_.erase(terms_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  }
  return terms_.empty() ? 0.0f : 0.0f + terms_[0];
}

void HostSim::rmsnorm(const std::vector<float>& x, const std::vector<float>& w, std::vector<float>& out) {
  const auto n = static_cast<int64_t>(x.size());
  const float ss = dot(x.data(), x.data(), n);
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + static_cast<float>(w_.config.rms_norm_eps));
  out.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = (x[i] * scale) * (1.0f + w[i]);
}

void HostSim::matvec(const std::vector<float>& m, int64_t rows, const std::vector<float>& x, std::vector<float>& out) {
  const auto n = static_cast<int64_t>(x.size());
  if (m.size() != sz(rows * n)) fail("HostSim: matrix has {} values, expected {} x {}", m.size(), rows, n);
  out.resize(sz(rows));
  for (int64_t r = 0; r < rows; ++r) out[sz(r)] = dot(&m[sz(r * n)], x.data(), n);
}

// qwen35-spec.md section 7 in fp32, one token, with the engine's first-token read-out
// (transformers' chunked kernel on an empty state: (q . k) * delta).
void HostSim::gated_delta_net(size_t l, const std::vector<float>& h, std::vector<float>& x) {
  const auto& c = w_.config;
  const auto& la = w_.layers[l].linear;
  const int64_t nk = c.linear_num_key_heads, nv = c.linear_num_value_heads;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim, taps = c.linear_conv_kernel_dim;
  const int64_t key_dim = nk * dk, conv_dim = 2 * key_dim + nv * dv, H = c.hidden_size;
  std::vector<float> mixed, z, b, a;
  matvec(la.in_proj_qkv, conv_dim, h, mixed);
  matvec(la.in_proj_z, nv * dv, h, z);
  matvec(la.in_proj_b, nv, h, b);
  matvec(la.in_proj_a, nv, h, a);

  std::vector<float> conv(sz(conv_dim)), window(sz(taps));
  std::vector<float>& past = conv_state_[l];
  for (int64_t ch = 0; ch < conv_dim; ++ch) {
    float* p = &past[sz(ch * (taps - 1))];
    std::copy(p, p + taps - 1, window.begin());
    window[sz(taps - 1)] = mixed[sz(ch)];
    conv[sz(ch)] = silu(dot(&la.conv1d[sz(ch * taps)], window.data(), taps));
    std::copy(window.begin() + 1, window.end(), p);
  }
  float* q = conv.data();
  float* k = conv.data() + key_dim;
  const float* v = conv.data() + 2 * key_dim;
  for (int64_t m = 0; m < nk; ++m)
    for (float* head : {q + m * dk, k + m * dk}) {
      const float r = 1.0f / std::sqrt(dot(head, head, dk) + 1e-6f);
      for (int64_t i = 0; i < dk; ++i) head[i] = head[i] * r;
    }
  const bool first = position_ == 0;
  const auto dkd = static_cast<double>(dk);
  const float divisor = static_cast<float>(std::pow(dkd, 0.5)), multiplier = static_cast<float>(std::pow(dkd, -0.5));
  for (int64_t i = 0; i < key_dim; ++i) q[i] = first ? q[i] * multiplier : q[i] / divisor;

  std::vector<float> normed(sz(nv * dv)), column(sz(dk)), kv(sz(dv)), o(sz(dv));
  const int64_t group = nv / nk;
  for (int64_t j = 0; j < nv; ++j) {
    const float* kh = k + (j / group) * dk;
    const float* qh = q + (j / group) * dk;
    const float* vh = v + j * dv;
    float* S = &recurrent_state_[l][sz(j * dk * dv)];
    const float beta = sigmoid(b[sz(j)]);
    const float decay = std::exp(-std::exp(la.A_log[sz(j)]) * softplus(a[sz(j)] + la.dt_bias[sz(j)]));
    for (int64_t e = 0; e < dk * dv; ++e) S[e] = S[e] * decay;
    for (int64_t cc = 0; cc < dv; ++cc) {
      for (int64_t i = 0; i < dk; ++i) column[sz(i)] = S[i * dv + cc];
      kv[sz(cc)] = (vh[cc] - dot(column.data(), kh, dk)) * beta;  // delta
    }
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t cc = 0; cc < dv; ++cc) S[i * dv + cc] = S[i * dv + cc] + kh[i] * kv[sz(cc)];
    if (first) {
      const float qk = dot(qh, kh, dk);
      for (int64_t cc = 0; cc < dv; ++cc) o[sz(cc)] = qk * kv[sz(cc)];
    } else {
      for (int64_t cc = 0; cc < dv; ++cc) {
        for (int64_t i = 0; i < dk; ++i) column[sz(i)] = S[i * dv + cc];
        o[sz(cc)] = dot(column.data(), qh, dk);
      }
    }
    const float r = 1.0f / std::sqrt(dot(o.data(), o.data(), dv) / static_cast<float>(dv) +
                                     static_cast<float>(c.rms_norm_eps));
    for (int64_t cc = 0; cc < dv; ++cc)
      normed[sz(j * dv + cc)] = (la.norm[sz(cc)] * (o[sz(cc)] * r)) * silu(z[sz(j * dv + cc)]);
  }
  std::vector<float> out;
  matvec(la.out_proj, H, normed, out);
  for (int64_t d = 0; d < H; ++d) x[sz(d)] = x[sz(d)] + out[sz(d)];
}

void HostSim::forward(int64_t token, std::span<float> logits, std::span<float> hidden) {
  const auto& c = w_.config;
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  if (token < 0 || token >= c.vocab_size) fail("HostSim: token {} outside the vocabulary", token);
  std::vector<float> x(w_.embed_tokens.begin() + token * H, w_.embed_tokens.begin() + (token + 1) * H);
  std::vector<float> h, g(sz(I)), u(sz(I));
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    const auto& lw = w_.layers[l];
    if (idle_[l]) {
      for (auto& xi : x) xi = xi + 0.0f;
    } else {
      rmsnorm(x, lw.input_layernorm, h);
      gated_delta_net(l, h, x);
    }
    rmsnorm(x, lw.post_attention_layernorm, h);
    for (int64_t r = 0; r < I; ++r) {
      g[sz(r)] = silu(dot(&lw.gate_proj[sz(r * H)], h.data(), H));
      u[sz(r)] = dot(&lw.up_proj[sz(r * H)], h.data(), H);
      g[sz(r)] = g[sz(r)] * u[sz(r)];
    }
    for (int64_t d = 0; d < H; ++d) x[sz(d)] = x[sz(d)] + dot(&lw.down_proj[sz(d * I)], g.data(), I);
  }
  ++position_;
  if (!hidden.empty()) std::copy(x.begin(), x.end(), hidden.begin());
  rmsnorm(x, w_.norm, h);
  const auto& out = w_.output_weights();
  for (int64_t r = 0; r < c.vocab_size && r < static_cast<int64_t>(logits.size()); ++r)
    logits[sz(r)] = dot(&out[sz(r * H)], h.data(), H);
}

}  // namespace qpu::compiler
