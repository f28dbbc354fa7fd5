#pragma once
// A llama2.c version-0 checkpoint ("legacy" export, as read by run.c @ 350e04fe):
//
//   header: 7 little-endian int32: dim, hidden_dim, n_layers, n_heads, n_kv_heads,
//           vocab_size, seq_len. A negative vocab_size means the file carries its own
//           classifier (wcls); a positive one means the classifier is the token
//           embedding.
//   then float32, in this order: token_embedding [vocab][dim], rms_att [L][dim],
//   wq [L][dim][dim], wk [L][kv_dim][dim], wv [L][kv_dim][dim], wo [L][dim][dim],
//   rms_ffn [L][dim], w1 [L][hidden][dim], w2 [L][dim][hidden], w3 [L][hidden][dim],
//   rms_final [dim], freq_cis_real [seq_len*head_size/2], freq_cis_imag [same],
//   and wcls [vocab][dim] only when vocab_size was negative.
//
// run.c trusts the file; we check the header and require the file size to equal
// exactly what the header implies, so a truncated or mismatched file is an error
// naming the file instead of an out-of-bounds read.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace qpu::reference {

struct Llama2Config {
  int dim = 0;
  int hidden_dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int vocab_size = 0;              // always positive here (|header value|)
  int seq_len = 0;
  bool shared_classifier = true;   // header vocab_size > 0: wcls is token_embedding

  int head_size() const { return dim / n_heads; }
  // run.c's formula, in 64 bits so that a hostile header cannot overflow it.
  int kv_dim() const { return static_cast<int>(int64_t{dim} * n_kv_heads / n_heads); }
  int kv_mul() const { return n_heads / n_kv_heads; }        // query heads per kv head
  // The header's 7th field as written in the file (sign encodes shared_classifier).
  int header_vocab_size() const { return shared_classifier ? vocab_size : -vocab_size; }
};

// Where each tensor lies, in floats from the first float after the header.
struct Llama2Layout {
  struct Range {
    size_t offset = 0;
    size_t count = 0;
  };
  Range token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final;
  Range freq_cis_real, freq_cis_imag;  // legacy RoPE tables: present, never used
  Range wcls;                          // same range as token_embedding when shared
  size_t total_floats = 0;             // floats in the file after the header
  size_t file_bytes() const { return 28 + total_floats * sizeof(float); }
};

// Throws qpu::Error (mentioning `what`, usually the file name) for header values
// run.c cannot run: non-positive dims, vocab 0, n_heads not dividing dim,
// n_kv_heads not dividing n_heads, odd dim or kv_dim (RoPE rotates pairs), or sizes
// that do not fit in memory arithmetic.
void validate_llama2_config(const Llama2Config& config, const std::string& what);
Llama2Layout llama2_layout(const Llama2Config& config);  // config must be valid

// Read-only views of one checkpoint's tensors (row-major, as in the file).
struct Llama2Weights {
  std::span<const float> token_embedding;  // [vocab][dim]
  std::span<const float> rms_att;          // [L][dim]
  std::span<const float> wq;               // [L][dim][dim]
  std::span<const float> wk;               // [L][kv_dim][dim]
  std::span<const float> wv;               // [L][kv_dim][dim]
  std::span<const float> wo;               // [L][dim][dim]
  std::span<const float> rms_ffn;          // [L][dim]
  std::span<const float> w1;               // [L][hidden][dim]
  std::span<const float> w2;               // [L][dim][hidden]
  std::span<const float> w3;               // [L][hidden][dim]
  std::span<const float> rms_final;        // [dim]
  std::span<const float> freq_cis_real;    // [seq_len*head_size/2], unused by run.c
  std::span<const float> freq_cis_imag;    // [seq_len*head_size/2], unused by run.c
  std::span<const float> wcls;             // [vocab][dim]; aliases token_embedding when shared
};

// A whole checkpoint held in memory. Movable; the views from weights() point into
// this object's buffer and stay valid while it lives (also across moves).
class Llama2Checkpoint {
 public:
  Llama2Checkpoint(Llama2Config config, std::vector<float> floats);  // validates sizes

  const Llama2Config& config() const { return config_; }
  const Llama2Layout& layout() const { return layout_; }
  Llama2Weights weights() const;
  std::span<const float> floats() const { return floats_; }  // everything after the header

 private:
  Llama2Config config_;
  Llama2Layout layout_;
  std::vector<float> floats_;
};

// Parses the 28-byte header (no validation).
Llama2Config parse_llama2_header(std::span<const std::byte, 28> header);

// Reads and validates a checkpoint. Errors name the file.
Llama2Checkpoint load_llama2_checkpoint(const std::filesystem::path& path);

}  // namespace qpu::reference
