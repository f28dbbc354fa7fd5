#include "compiler/host_sim.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace qpu::compiler {

namespace {

float silu(float x) { return x * (1.0f / (1.0f + std::exp(-x))); }

bool all_zero(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
}

}  // namespace

HostSim::HostSim(const io::Qwen35Weights& weights, uint64_t seed) : w_(weights), rng_(seed) {
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    const auto& lw = w_.layers[l];
    if (lw.type != io::LayerType::LinearAttention) fail("HostSim: layer {} is an attention layer", l);
    if (!all_zero(lw.linear.in_proj_qkv) || !all_zero(lw.linear.in_proj_z) || !all_zero(lw.linear.out_proj))
      fail("HostSim: layer {} has an active Gated DeltaNet", l);
  }
}

// Sum of w[j] x[j] over only the nonzero products plus a random number of the zero
// ones, in a random order: any order an engine may use, dense or sparse.
float HostSim::dot(const float* w, const float* x, int64_t n) {
  terms_.clear();
  for (int64_t j = 0; j < n; ++j) {
    const float p = w[j] * x[j];
    if (p != 0.0f || (rng_() & 7) == 0) terms_.push_back(p);
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

void HostSim::forward(int64_t token, std::span<float> logits, std::span<float> hidden) {
  const auto& c = w_.config;
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  std::vector<float> x(w_.embed_tokens.begin() + token * H, w_.embed_tokens.begin() + (token + 1) * H);
  std::vector<float> h, g(static_cast<size_t>(I)), u(static_cast<size_t>(I));
  for (const auto& lw : w_.layers) {
    for (auto& xi : x) xi = xi + 0.0f;  // the idle mixer adds +0 to every dim
    rmsnorm(x, lw.post_attention_layernorm, h);
    for (int64_t r = 0; r < I; ++r) {
      g[static_cast<size_t>(r)] = silu(dot(&lw.gate_proj[static_cast<size_t>(r * H)], h.data(), H));
      u[static_cast<size_t>(r)] = dot(&lw.up_proj[static_cast<size_t>(r * H)], h.data(), H);
      g[static_cast<size_t>(r)] = g[static_cast<size_t>(r)] * u[static_cast<size_t>(r)];
    }
    for (int64_t d = 0; d < H; ++d)
      x[static_cast<size_t>(d)] = x[static_cast<size_t>(d)] + dot(&lw.down_proj[static_cast<size_t>(d * I)], g.data(), I);
  }
  if (!hidden.empty()) std::copy(x.begin(), x.end(), hidden.begin());
  rmsnorm(x, w_.norm, h);
  const auto& out = w_.output_weights();
  for (int64_t r = 0; r < c.vocab_size && r < static_cast<int64_t>(logits.size()); ++r)
    logits[static_cast<size_t>(r)] = dot(&out[static_cast<size_t>(r * H)], h.data(), H);
}

}  // namespace qpu::compiler
