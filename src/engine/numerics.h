#pragma once
// Scalar fp32 functions written exactly as PyTorch's CPU kernels write them
// (torch 2.15, checked against torch on random inputs), so that the exact windows
// the NPU relies on behave like transformers:
//   silu(x)     = x / (1 + exp(-x))          -> x for x >= 18 (1 + e^-x rounds to 1),
//                                               -0 for x <= -89 (exp overflows to inf)
//   sigmoid(x)  = 1 / (1 + exp(-x))          -> exactly 1 for x >= 18, 0 for x <= -89
//   softplus(x) = x > 20 ? x : log1p(exp(x)) (torch's threshold 20, beta 1)
//   rsqrt(x)    = 1 / sqrt(x)                 (correctly rounded sqrt, then a division)
// exp/log1p are glibc's expf/log1pf; torch's vectorized versions agree with them on
// the exact windows (0, 1, overflow, underflow) and may differ by an ulp elsewhere.
#include <cmath>
#include <cstdint>

#include "engine/dot.h"

namespace qpu::engine::numerics {

// torch's silu, x / (1 + exp(-x)), with its exact windows returned without the exp (the
// same bits; compiled layers live in these windows, and an expf that overflows goes
// through glibc's slow error path):
//   x = +-0:            +-0 / (1 + 1) = +-0.
//   x >= 18 (+inf too): exp(-x) <= e^-18 < 2^-25, below half an ulp of 1, so
//                       1 + exp(-x) rounds to 1 and x / 1 = x.
//   -inf < x < -89:     exp(-x) > e^89 > FLT_MAX overflows to +inf, and a finite
//                       negative x / +inf = -0. (-inf itself: -inf / inf = NaN, computed.)
// silu_formula is the plain expression (tests compare the two over every float there).
inline float silu_formula(float x) { return x / (1.0f + std::exp(-x)); }
inline float silu(float x) {
  if (x == 0.0f || x >= 18.0f) return x;
  if (x < -89.0f && x > -HUGE_VALF) return -0.0f;
  return silu_formula(x);
}
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }

// torch: x.pow(2).mean(-1) + eps, mean = sum / n (true division, not * 1/n).
inline float mean_square_plus_eps(const float* x, int64_t n, float eps) {
  return dot::dot_f32(x, x, n) / static_cast<float>(n) + eps;
}

// Qwen3_5RMSNorm: out = (x * rsqrt(mean(x^2) + eps)) * scale, scale = 1 + w
// precomputed in fp32 (the same single rounding torch does per call).
inline void rms_norm(const float* x, int64_t n, const float* scale, float eps, float* out) {
  const float r = rsqrt(mean_square_plus_eps(x, n, eps));
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * r) * scale[i];
}

// GDN l2norm (transformers' l2norm, fp32): x * rsqrt(sum(x*x) + 1e-6), in place.
inline void l2norm(float* x, int64_t n) {
  const float r = rsqrt(dot::dot_f32(x, x, n) + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * r;
}

}  // namespace qpu::engine::numerics
