#include "engine/gated_attention.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "engine/dot.h"
#include "engine/numerics.h"

namespace qpu::engine {
namespace {

std::vector<float> one_plus(std::vector<float>&& w, int64_t size, const std::string& name) {
  if (static_cast<int64_t>(w.size()) != size) fail("{}: expected {} values, got {}", name, size, w.size());
  // transformers: output * (1.0 + self.weight.float()), the same fp32 add every call.
  for (float& v : w) v = 1.0f + v;
  return std::move(w);
}

constexpr int64_t kParallelMinWork = int64_t{1} << 15;

// The step's vectors, reused between steps (one set per calling thread; the workers of
// the parallel region only use the caller's set): no allocation per token once warm.
std::vector<float>& scratch() {
  thread_local std::vector<float> s;
  return s;
}

}  // namespace

std::vector<float> rope_inv_freq(double theta, int64_t rotary_dim) {
  const auto base = static_cast<float>(theta);  // torch: python scalar ** fp32 tensor -> fp32
  std::vector<float> inv_freq(static_cast<size_t>(rotary_dim / 2));
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    const auto power = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
    inv_freq[i] = 1.0f / power;
  }
  return inv_freq;
}

void rope_cos_sin(const std::vector<float>& inv_freq, int64_t position, float* cos_out, float* sin_out) {
  const auto pos = static_cast<float>(position);  // position_ids.float()
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double angle = static_cast<double>(pos * inv_freq[i]);
    cos_out[i] = static_cast<float>(std::cos(angle));
    sin_out[i] = static_cast<float>(std::sin(angle));
  }
}

void apply_rope(float* x, int64_t rotary_dim, const float* cos_half, const float* sin_half) {
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = x[i];
    const float x2 = x[i + half];
    x[i] = (x1 * cos_half[i]) + ((-x2) * sin_half[i]);
    x[i + half] = (x2 * cos_half[i]) + (x1 * sin_half[i]);
  }
}

GatedAttention::GatedAttention(io::FullAttentionWeights&& w, const GatedAttentionShape& shape,
                               float rms_eps, const PackedMatrix::Options& options,
                               const std::string& name)
    : shape_(shape), rms_eps_(rms_eps) {
  build(std::move(w), options, name);
}

GatedAttention::GatedAttention(io::BasicFullAttentionWeights<io::SparseMatrix>&& w, const GatedAttentionShape& shape,
                               float rms_eps, const PackedMatrix::Options& options, const std::string& name)
    : shape_(shape), rms_eps_(rms_eps) {
  build(std::move(w), options, name);
}

template <class Matrix>
void GatedAttention::build(io::BasicFullAttentionWeights<Matrix>&& w, const PackedMatrix::Options& options,
                           const std::string& name) {
  const GatedAttentionShape& s = shape_;
  if (s.hidden <= 0 || s.num_heads <= 0 || s.num_kv_heads <= 0 || s.head_dim <= 0 ||
      s.num_heads % s.num_kv_heads != 0 || s.rotary_dim < 0 || s.rotary_dim > s.head_dim ||
      s.rotary_dim % 2 != 0) {
    fail("{}: invalid shape (heads {}, kv heads {}, head_dim {}, rotary_dim {})", name, s.num_heads,
         s.num_kv_heads, s.head_dim, s.rotary_dim);
  }
  scaling_ = static_cast<float>(std::pow(static_cast<double>(s.head_dim), -0.5));
  inv_freq_ = rope_inv_freq(s.rope_theta, s.rotary_dim);

  q_proj_ = pack_matrix(w.q_proj, 2 * s.num_heads * s.head_dim, s.hidden, options, name + ".q_proj");
  k_proj_ = pack_matrix(w.k_proj, s.kv_dim(), s.hidden, options, name + ".k_proj");
  v_proj_ = pack_matrix(w.v_proj, s.kv_dim(), s.hidden, options, name + ".v_proj");
  o_proj_ = pack_matrix(w.o_proj, s.hidden, s.num_heads * s.head_dim, options, name + ".o_proj");
  q_norm_scale_ = one_plus(std::move(w.q_norm), s.head_dim, name + ".q_norm.weight");
  k_norm_scale_ = one_plus(std::move(w.k_norm), s.head_dim, name + ".k_norm.weight");
}

void GatedAttention::step(const float* h, int64_t position, std::vector<float>& key_cache,
                          std::vector<float>& value_cache, float* out) const {
  const GatedAttentionShape& s = shape_;
  const int64_t d = s.head_dim;
  const int64_t kv_dim = s.kv_dim();
  if (static_cast<int64_t>(key_cache.size()) != position * kv_dim ||
      static_cast<int64_t>(value_cache.size()) != position * kv_dim) {
    fail("gated attention: cache holds {} / {} values, expected {} for position {}", key_cache.size(),
         value_cache.size(), position * kv_dim, position);
  }

  // Scratch: qg [2 * heads * d], k, v [kv_dim], cos, sin [rotary/2], q, attn [heads * d],
  // probs [heads * steps].
  const int64_t steps = position + 1;
  const auto half = static_cast<int64_t>(inv_freq_.size());
  std::vector<float>& scr = scratch();
  scr.resize(static_cast<size_t>(4 * s.num_heads * d + 2 * kv_dim + 2 * half + s.num_heads * steps));
  float* const qg = scr.data();
  float* const k = qg + 2 * s.num_heads * d;
  float* const v = k + kv_dim;
  float* const cos_half = v + kv_dim;
  float* const sin_half = cos_half + half;
  float* const q = sin_half + half;
  float* const attn = q + s.num_heads * d;
  float* const probs = attn + s.num_heads * d;
  const PackedMatrix::Job projections[] = {{&q_proj_, h, qg}, {&k_proj_, h, k}, {&v_proj_, h, v}};
  PackedMatrix::multiply_all(projections);

  rope_cos_sin(inv_freq_, position, cos_half, sin_half);

  // Head hh of q_proj's output is [query (d) | gate (d)].
  for (int64_t hh = 0; hh < s.num_heads; ++hh) {
    numerics::rms_norm(qg + 2 * hh * d, d, q_norm_scale_.data(), rms_eps_, q + hh * d);
    apply_rope(q + hh * d, s.rotary_dim, cos_half, sin_half);
  }
  for (int64_t g = 0; g < s.num_kv_heads; ++g) {
    float* kg = k + g * d;
    numerics::rms_norm(kg, d, k_norm_scale_.data(), rms_eps_, kg);
    apply_rope(kg, s.rotary_dim, cos_half, sin_half);
  }
  key_cache.insert(key_cache.end(), k, k + kv_dim);
  value_cache.insert(value_cache.end(), v, v + kv_dim);

  const int64_t group = s.num_heads / s.num_kv_heads;  // query head hh reads kv head hh / group
#pragma omp parallel for schedule(static) if (s.num_heads * steps * d >= kParallelMinWork)
  for (int64_t hh = 0; hh < s.num_heads; ++hh) {
    const float* qh = q + hh * d;
    const int64_t g = hh / group;
    float* p = probs + hh * steps;
    // Eager attention: (q @ k^T) * scaling, softmax in fp32 over the cached positions.
    float max_score = -INFINITY;
    for (int64_t t = 0; t < steps; ++t) {
      p[t] = dot::dot_f32(qh, key_cache.data() + t * kv_dim + g * d, d) * scaling_;
      max_score = std::max(max_score, p[t]);
    }
    float sum = 0.0f;
    for (int64_t t = 0; t < steps; ++t) {
      p[t] = std::exp(p[t] - max_score);
      sum = sum + p[t];
    }
    const float inv_sum = 1.0f / sum;  // torch's softmax multiplies by 1/sum
    for (int64_t t = 0; t < steps; ++t) p[t] = p[t] * inv_sum;

    float* oh = attn + hh * d;
    std::fill(oh, oh + d, 0.0f);
    for (int64_t t = 0; t < steps; ++t) {
      const float* vt = value_cache.data() + t * kv_dim + g * d;
#pragma omp simd  // columns are independent: same results, vectorized
      for (int64_t c = 0; c < d; ++c) oh[c] = oh[c] + p[t] * vt[c];
    }
    // attn_output * sigmoid(gate)
    const float* gate = qg + 2 * hh * d + d;
    for (int64_t c = 0; c < d; ++c) oh[c] = oh[c] * numerics::sigmoid(gate[c]);
  }

  o_proj_.multiply(attn, out);
}

}  // namespace qpu::engine
