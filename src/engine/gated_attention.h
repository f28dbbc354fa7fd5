#pragma once
// One gated full-attention mixer, single-token decode, as transformers'
// Qwen3_5Attention runs it with the eager attention function on CPU in fp32
// (spec §5, §6): q_proj (per-head [query | gate]) -> q_norm, k_norm (1+w) ->
// partial NeoX RoPE on the first rotary_dim dims -> append k, v to the cache ->
// per head: scores = (q . k_t) * head_dim^-0.5, softmax (max-subtracted exp, times
// 1/sum) -> sum_t p_t v_t -> * sigmoid(gate) -> o_proj.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/packed_matrix.h"
#include "io/qwen35_weights.h"

namespace qpu::engine {

struct GatedAttentionShape {
  int64_t hidden = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  // int(head_dim * partial_rotary_factor), even
  double rope_theta = 0;

  int64_t kv_dim() const { return num_kv_heads * head_dim; }
};

// RoPE inverse frequencies as transformers computes them in fp32:
// 1.0 / (theta ** (arange(0, rot, 2, float32) / rot)). The fp32 power is evaluated in
// double and rounded once (matches torch on the configs tested).
std::vector<float> rope_inv_freq(double theta, int64_t rotary_dim);

// cos/sin of fp32(position) * inv_freq[i], each correctly rounded to fp32.
void rope_cos_sin(const std::vector<float>& inv_freq, int64_t position, float* cos_out,
                  float* sin_out);

// NeoX rotation of x[0..rotary_dim): pairs (i, i + rotary_dim/2) share frequency i.
// x' = x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1] (transformers).
void apply_rope(float* x, int64_t rotary_dim, const float* cos_half, const float* sin_half);

class GatedAttention {
 public:
  GatedAttention() = default;
  GatedAttention(io::FullAttentionWeights&& weights, const GatedAttentionShape& shape, float rms_eps,
                 const PackedMatrix::Options& options, const std::string& name);
  // The same layer from its projections' entries (io::SparseMatrix; PackedMatrix::pack).
  GatedAttention(io::BasicFullAttentionWeights<io::SparseMatrix>&& weights, const GatedAttentionShape& shape,
                 float rms_eps, const PackedMatrix::Options& options, const std::string& name);

  const GatedAttentionShape& shape() const { return shape_; }
  std::vector<const PackedMatrix*> matrices() const { return {&q_proj_, &k_proj_, &v_proj_, &o_proj_}; }
  // o_proj's product is +0 whatever its input (PackedMatrix::always_zero): step() then
  // writes +0 to `out` for every input and every cache (Model skips the mixer).
  bool output_always_zero() const { return o_proj_.always_zero(); }

  // h: normed input [hidden]; out: [hidden]. The caches hold [t, kv_heads, head_dim]
  // post-norm, post-RoPE keys and raw values; this step appends position `position`.
  void step(const float* h, int64_t position, std::vector<float>& key_cache,
            std::vector<float>& value_cache, float* out) const;

 private:
  // Both constructors: the shape's checks, the projections packed, the norms kept.
  template <class Matrix>
  void build(io::BasicFullAttentionWeights<Matrix>&& weights, const PackedMatrix::Options& options,
             const std::string& name);
  GatedAttentionShape shape_;
  float rms_eps_ = 0;
  float scaling_ = 0;  // float(head_dim ** -0.5)
  std::vector<float> inv_freq_;
  PackedMatrix q_proj_, k_proj_, v_proj_, o_proj_;
  std::vector<float> q_norm_scale_;  // 1 + w
  std::vector<float> k_norm_scale_;  // 1 + w
};

}  // namespace qpu::engine
