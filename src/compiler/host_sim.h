#pragma once
// A deliberately adversarial simulator of the host's fp32 arithmetic, for proving
// that compiled layers do not depend on summation order: every dot product (matmul
// rows and norm sums) is summed in a fresh random order. It covers what the MLP
// primitives use: embeddings, RMSNorm (1+w), SwiGLU MLPs, idle Gated DeltaNet mixers
// (checked to be all zero) and the output head. It is a test tool, not an engine:
// attention layers are rejected.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "io/qwen35_weights.h"

namespace qpu::compiler {

class HostSim {
 public:
  // Throws qpu::Error if a layer is an attention layer or a GDN layer has a nonzero weight.
  explicit HostSim(const io::Qwen35Weights& weights, uint64_t seed);

  // Residual stream after the last layer (what Model::forward's `hidden` returns) and logits.
  void forward(int64_t token, std::span<float> logits, std::span<float> hidden);

 private:
  float dot(const float* w, const float* x, int64_t n);
  void rmsnorm(const std::vector<float>& x, const std::vector<float>& w, std::vector<float>& out);

  const io::Qwen35Weights& w_;
  std::mt19937_64 rng_;
  std::vector<int64_t> order_;
  std::vector<float> terms_;
};

}  // namespace qpu::compiler
