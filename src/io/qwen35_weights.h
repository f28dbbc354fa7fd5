#pragma once
// All weights of a Qwen3.5 text decoder, upcast to fp32, with HF shapes ([out, in],
// row-major). Loading validates every tensor against the config: missing,
// unexpected (outside ignored prefixes such as mtp.* and model.visual.*) and
// misshaped tensors are errors that name the file and the tensor.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/qwen35_config.h"
#include "io/sparse_matrix.h"

namespace qpu::io {

// The layer's tensors. Matrix is how a projection is held: std::vector<float> (dense,
// row-major: what a checkpoint stores) or SparseMatrix (its entries: what a compiler
// emits for a layer of nearly all +0; engine::Model packs both the same way). The small
// vectors (norms, conv taps, biases) are dense either way.
template <class Matrix>
struct BasicLinearAttentionWeights {  // Gated DeltaNet, spec §2.2 / §7
  Matrix in_proj_qkv;                 // [conv_dim, hidden]
  Matrix in_proj_z;                   // [value_dim, hidden]
  Matrix in_proj_b;                   // [num_v_heads, hidden]
  Matrix in_proj_a;                   // [num_v_heads, hidden]
  std::vector<float> conv1d;          // [conv_dim, 1, kernel] stored as [conv_dim * kernel]
  std::vector<float> dt_bias;         // [num_v_heads]
  std::vector<float> A_log;           // [num_v_heads]
  std::vector<float> norm;            // [value_head_dim], plain weight (not 1+w)
  Matrix out_proj;                    // [hidden, value_dim]
};

template <class Matrix>
struct BasicFullAttentionWeights {  // gated attention, spec §2.3 / §5
  Matrix q_proj;                    // [2 * heads * head_dim, hidden], per-head [query | gate]
  Matrix k_proj;                    // [kv_heads * head_dim, hidden]
  Matrix v_proj;                    // [kv_heads * head_dim, hidden]
  Matrix o_proj;                    // [hidden, heads * head_dim]
  std::vector<float> q_norm;        // [head_dim], offset (scale = 1 + w)
  std::vector<float> k_norm;        // [head_dim], offset
};

template <class Matrix>
struct BasicLayerWeights {
  LayerType type = LayerType::LinearAttention;
  std::vector<float> input_layernorm;           // [hidden], offset
  std::vector<float> post_attention_layernorm;  // [hidden], offset
  BasicLinearAttentionWeights<Matrix> linear;   // filled when type == LinearAttention
  BasicFullAttentionWeights<Matrix> full;       // filled when type == FullAttention
  Matrix gate_proj;                             // [intermediate, hidden]
  Matrix up_proj;                               // [intermediate, hidden]
  Matrix down_proj;                             // [hidden, intermediate]
};

using LinearAttentionWeights = BasicLinearAttentionWeights<std::vector<float>>;
using FullAttentionWeights = BasicFullAttentionWeights<std::vector<float>>;
using LayerWeights = BasicLayerWeights<std::vector<float>>;
using SparseLayerWeights = BasicLayerWeights<SparseMatrix>;

struct Qwen35Weights {
  Qwen35Config config;
  std::vector<float> embed_tokens;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> norm;          // [hidden], offset
  std::vector<float> lm_head;       // [vocab, hidden]; empty when tied to embed_tokens

  const std::vector<float>& output_weights() const { return lm_head.empty() ? embed_tokens : lm_head; }
};

// Reads config.json and model.safetensors or model.safetensors.index.json + shards.
Qwen35Weights load_qwen35(const std::filesystem::path& checkpoint_dir);

// Added by io: the same checks as load_qwen35 (every tensor present with the exact
// shape and a float dtype, nothing unexpected) without reading any tensor data.
class Checkpoint;
void check_qwen35_tensors(const Checkpoint& checkpoint, const Qwen35Config& config);

}  // namespace qpu::io
