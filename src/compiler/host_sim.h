#pragma once
// A deliberately adversarial simulator of the host's fp32 arithmetic, for proving
// that compiled layers do not depend on summation order: every dot product (matmul
// rows, norm sums, the GDN conv taps, state reads and read-outs) is summed in a fresh
// random order. It covers embeddings, RMSNorm (1+w), SwiGLU MLPs, Gated DeltaNet
// mixers (qwen35-spec.md section 7, single-token decode with transformers' first-token
// read-out, like the engine) and the output head. It is a test tool, not an engine:
// attention layers are rejected.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "io/qwen35_weights.h"

namespace qpu::compiler {

class HostSim {
 public:
  // Throws qpu::Error if a layer is an attention layer or a GDN layer's shape is invalid.
  explicit HostSim(const io::Qwen35Weights& weights, uint64_t seed);

  // One decode step (the state advances): the residual stream after the last layer
  // (what Model::forward's `hidden` returns) and logits.
  void forward(int64_t token, std::span<float> logits, std::span<float> hidden);

 private:
  float dot(const float* w, const float* x, int64_t n);
  void rmsnorm(const std::vector<float>& x, const std::vector<float>& w, std::vector<float>& out);
  void matvec(const std::vector<float>& m, int64_t rows, const std::vector<float>& x, std::vector<float>& out);
  // Gated DeltaNet mixer of layer l on the normed input h; adds its output into x.
  void gated_delta_net(size_t l, const std::vector<float>& h, std::vector<float>& x);

  const io::Qwen35Weights& w_;
  std::mt19937_64 rng_;
  std::vector<float> terms_;
  int64_t position_ = 0;
  std::vector<std::vector<float>> conv_state_;       // per layer: [conv_dim, kernel - 1]
  std::vector<std::vector<float>> recurrent_state_;  // per layer: [v_heads, dk, dv]
  std::vector<bool> idle_;  // per layer: every GDN projection is 0 (the mixer adds exactly +0)
};

}  // namespace qpu::compiler
