#pragma once
// One Gated DeltaNet (linear_attention) mixer, single-token decode, as
// transformers' Qwen3_5GatedDeltaNet runs it on CPU in fp32 (spec §7):
// in_proj_qkv -> causal depthwise conv update + silu -> split q,k,v -> l2norm(q,k)
// -> q / sqrt(dk) -> gated delta rule (decay, read, delta, write, read-out after
// the write) -> per-head gated RMSNorm * silu(z) -> out_proj.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/packed_matrix.h"
#include "io/qwen35_weights.h"

namespace qpu::engine {

struct GatedDeltaNetShape {
  int64_t hidden = 0;
  int64_t num_k_heads = 0;
  int64_t num_v_heads = 0;
  int64_t k_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t conv_kernel = 0;

  int64_t key_dim() const { return num_k_heads * k_head_dim; }
  int64_t value_dim() const { return num_v_heads * v_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  int64_t conv_state_size() const { return conv_dim() * (conv_kernel - 1); }
  int64_t recurrent_state_size() const { return num_v_heads * k_head_dim * v_head_dim; }
};

class GatedDeltaNet {
 public:
  GatedDeltaNet() = default;
  // Consumes the weight vectors. `name` prefixes error messages ("layers.0.linear_attn").
  GatedDeltaNet(io::LinearAttentionWeights&& weights, const GatedDeltaNetShape& shape, float rms_eps,
                const PackedMatrix::Options& options, const std::string& name);

  const GatedDeltaNetShape& shape() const { return shape_; }
  std::vector<const PackedMatrix*> matrices() const { return {&in_proj_qkv_, &in_proj_z_, &in_proj_b_, &in_proj_a_, &out_proj_}; }

  // h: the normed input [hidden]; out: the mixer output [hidden].
  // conv_state: [conv_dim, kernel-1], the previous kernel-1 inputs of each channel,
  //   oldest first. recurrent_state: [v_heads, dk, dv], S[key index][value index].
  // first_token: the state is empty (position 0). transformers then runs its
  //   chunked kernel, whose read-out for one token is (q.k) * (v*beta) instead of
  //   sum_i (k_i * delta) * q_i: we reproduce that ordering (the state written is
  //   identical either way).
  void step(const float* h, std::span<float> conv_state, std::span<float> recurrent_state,
            bool first_token, float* out) const;

 private:
  GatedDeltaNetShape shape_;
  float rms_eps_ = 0;
  float q_divisor_ = 0;     // decode: q / float(dk ** 0.5)
  float q_multiplier_ = 0;  // first token (chunked kernel): q * float(dk ** -0.5)
  PackedMatrix in_proj_qkv_, in_proj_z_, in_proj_b_, in_proj_a_, out_proj_;
  std::vector<float> conv_weight_;  // [conv_dim, kernel]
  std::vector<float> neg_exp_a_;    // -exp(A_log), [v_heads]
  std::vector<float> dt_bias_;      // [v_heads]
  std::vector<float> norm_weight_;  // [v_head_dim], plain weight
};

}  // namespace qpu::engine
