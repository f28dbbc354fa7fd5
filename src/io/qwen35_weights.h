#pragma once
// All weights of a Qwen3.5 text decoder, upcast to fp32, with HF shapes ([out, in],
// row-major). Loading validates every tensor against the config: missing,
// unexpected (outside ignored prefixes such as mtp.* and model.visual.*) and
// misshaped tensors are errors that name the file and the tensor.
#include <cstdint>
#include <filesystem>
#include <memory>
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

// The same layer with every projection converted by f(Matrix&& m, const char* name) ->
// To (name: the tensor's, e.g. "mlp.down_proj"); the small vectors are moved as they are.
template <class To, class From, class F>
BasicLayerWeights<To> convert_matrices(BasicLayerWeights<From>&& from, F&& f) {
  BasicLayerWeights<To> to;
  to.type = from.type;
  to.input_layernorm = std::move(from.input_layernorm);
  to.post_attention_layernorm = std::move(from.post_attention_layernorm);
  auto& la = from.linear;
  to.linear.in_proj_qkv = f(std::move(la.in_proj_qkv), "linear_attn.in_proj_qkv");
  to.linear.in_proj_z = f(std::move(la.in_proj_z), "linear_attn.in_proj_z");
  to.linear.in_proj_b = f(std::move(la.in_proj_b), "linear_attn.in_proj_b");
  to.linear.in_proj_a = f(std::move(la.in_proj_a), "linear_attn.in_proj_a");
  to.linear.conv1d = std::move(la.conv1d);
  to.linear.dt_bias = std::move(la.dt_bias);
  to.linear.A_log = std::move(la.A_log);
  to.linear.norm = std::move(la.norm);
  to.linear.out_proj = f(std::move(la.out_proj), "linear_attn.out_proj");
  auto& fa = from.full;
  to.full.q_proj = f(std::move(fa.q_proj), "self_attn.q_proj");
  to.full.k_proj = f(std::move(fa.k_proj), "self_attn.k_proj");
  to.full.v_proj = f(std::move(fa.v_proj), "self_attn.v_proj");
  to.full.o_proj = f(std::move(fa.o_proj), "self_attn.o_proj");
  to.full.q_norm = std::move(fa.q_norm);
  to.full.k_norm = std::move(fa.k_norm);
  to.gate_proj = f(std::move(from.gate_proj), "mlp.gate_proj");
  to.up_proj = f(std::move(from.up_proj), "mlp.up_proj");
  to.down_proj = f(std::move(from.down_proj), "mlp.down_proj");
  return to;
}

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

class Checkpoint;

// A checkpoint opened for a streamed load (engine::Model's LayerSource): the files are
// mapped, every tensor is checked against the config as load_qwen35 checks it (missing,
// unexpected, misshaped, wrong dtype: an error before anything is built), the globals
// (embedding, final norm, LM head) are read, and each layer's tensors are read and upcast
// to fp32 only when layer(l) asks for them. So a loader holds one layer in fp32 at a time
// instead of the whole checkpoint. layer() only reads the mapped files: it may be called
// from several threads at once.
class Qwen35Reader {
 public:
  explicit Qwen35Reader(const std::filesystem::path& checkpoint_dir);
  ~Qwen35Reader();
  Qwen35Reader(const Qwen35Reader&) = delete;
  Qwen35Reader& operator=(const Qwen35Reader&) = delete;

  const Qwen35Config& config() const { return globals_.config; }
  // The config, embed_tokens, norm and lm_head, and no layers (a copy, or moved out:
  // take_globals leaves only the config behind).
  Qwen35Weights globals() const;
  Qwen35Weights take_globals();
  LayerWeights layer(int64_t index) const;

 private:
  std::unique_ptr<Checkpoint> checkpoint_;
  Qwen35Weights globals_;
};

// Added by io: the same checks as load_qwen35 (every tensor present with the exact
// shape and a float dtype, nothing unexpected) without reading any tensor data.
void check_qwen35_tensors(const Checkpoint& checkpoint, const Qwen35Config& config);

}  // namespace qpu::io
