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

namespace qpu::io {

struct LinearAttentionWeights {     // Gated DeltaNet, spec §2.2 / §7
  std::vector<float> in_proj_qkv;   // [conv_dim, hidden]
  std::vector<float> in_proj_z;     // [value_dim, hidden]
  std::vector<float> in_proj_b;     // [num_v_heads, hidden]
  std::vector<float> in_proj_a;     // [num_v_heads, hidden]
  std::vector<float> conv1d;        // [conv_dim, 1, kernel] stored as [conv_dim * kernel]
  std::vector<float> dt_bias;       // [num_v_heads]
  std::vector<float> A_log;         // [num_v_heads]
  std::vector<float> norm;          // [value_head_dim], plain weight (not 1+w)
  std::vector<float> out_proj;      // [hidden, value_dim]
};

struct FullAttentionWeights {       // gated attention, spec §2.3 / §5
  std::vector<float> q_proj;        // [2 * heads * head_dim, hidden], per-head [query | gate]
  std::vector<float> k_proj;        // [kv_heads * head_dim, hidden]
  std::vector<float> v_proj;        // [kv_heads * head_dim, hidden]
  std::vector<float> o_proj;        // [hidden, heads * head_dim]
  std::vector<float> q_norm;        // [head_dim], offset (scale = 1 + w)
  std::vector<float> k_norm;        // [head_dim], offset
};

struct LayerWeights {
  LayerType type = LayerType::LinearAttention;
  std::vector<float> input_layernorm;           // [hidden], offset
  std::vector<float> post_attention_layernorm;  // [hidden], offset
  LinearAttentionWeights linear;                // filled when type == LinearAttention
  FullAttentionWeights full;                    // filled when type == FullAttention
  std::vector<float> gate_proj;                 // [intermediate, hidden]
  std::vector<float> up_proj;                   // [intermediate, hidden]
  std::vector<float> down_proj;                 // [hidden, intermediate]
};

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
