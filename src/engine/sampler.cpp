#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"
#include "common/splitmix64.h"
#include "engine/elementwise.h"

namespace qpu::engine {
int64_t argmax(std::span<const float> logits) {
  if (logits.empty()) fail("argmax of an empty vector");
  return elementwise::kernels().argmax(logits.data(), static_cast<int64_t>(logits.size()), 0.0f, nullptr);
}

Sampler::Sampler(const SamplerOptions& options) : options_(options) {
  if (!(options.temperature >= 0.0) || !std::isfinite(options.temperature)) {
    fail("temperature must be a finite number >= 0, got {}", options.temperature);
  }
  if (!(options.top_p > 0.0 && options.top_p <= 1.0)) fail("top-p must be in (0, 1], got {}", options.top_p);
  state_ = splitmix64(options.seed);
  if (state_ == 0) state_ = 1;  // xorshift's one forbidden state
}

double Sampler::next_uniform() {
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  const uint64_t r = state_ * 0x2545f4914f6cdd1dull;
  return static_cast<double>(r >> 11) * 0x1.0p-53;
}

int64_t Sampler::sample(std::span<const float> logits) {
  if (options_.temperature == 0.0) return argmax(logits);
  const size_t n = logits.size();
  const double max_logit = logits[static_cast<size_t>(argmax(logits))];
  weights_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    weights_[i] = std::exp((static_cast<double>(logits[i]) - max_logit) / options_.temperature);
  }
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), int64_t{0});
  size_t kept = n;
  double mass = 0.0;
  if (options_.top_p < 1.0) {
    std::stable_sort(order_.begin(), order_.end(),
                     [&](int64_t a, int64_t b) { return weights_[a] > weights_[b]; });
    double total = 0.0;
    for (size_t i = 0; i < n; ++i) total += weights_[i];
    const double target = options_.top_p * total;
    kept = 0;
    while (kept < n && (kept == 0 || mass < target)) mass += weights_[order_[kept++]];
  } else {
    for (size_t i = 0; i < n; ++i) mass += weights_[i];
  }
  const double u = next_uniform() * mass;
  double running = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    running += weights_[order_[i]];
    if (running > u) return order_[i];
  }
  return order_[kept - 1];  // u rounded up to the whole mass
}

}  // namespace qpu::engine
