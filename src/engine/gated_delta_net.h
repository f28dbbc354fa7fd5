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

// One value head of the gated delta rule, exposed for tests. state: [dk, dv], row i
// belongs to key index i. S *= decay; kv = S^T k; delta = (v - kv) * beta;
// S += k delta^T; o = S^T q (read after the write). delta and o receive dv values.
namespace delta_rule {

// Every row, every term: the order of docs/engine.md (the reference).
void dense(float* state, int64_t dk, int64_t dv, const float* k, const float* q, const float* v,
           float beta, float decay, float* delta, float* o);

// The same with the exact zeros left out: only rows with k_i != 0 are read and written,
// only rows with q_i != 0 are read out, and the decay multiply is skipped when decay is
// exactly 1. k_rows / q_rows: the ascending indices i with k[i] != 0 / q[i] != 0
// (nonzero_rows). delta and o get the bits of dense() whenever the state passed in is
// finite (docs/engine.md, "Exact zeros in the Gated DeltaNet"); the state gets them too,
// except that a -0 cell in a row with k_i = 0 may stay -0 where dense() writes +0 (the
// sign of a zero cell never reaches an output).
void skip_zeros(float* state, int64_t dk, int64_t dv, const float* k, std::span<const int32_t> k_rows,
                const float* q, std::span<const int32_t> q_rows, const float* v, float beta,
                float decay, float* delta, float* o);

// Writes the ascending indices i < n with x[i] != 0 (+0 and -0 are zeros) to rows and
// returns their count.
int64_t nonzero_rows(const float* x, int64_t n, int32_t* rows);

}  // namespace delta_rule

// Where GatedDeltaNet::step copies the state it is about to overwrite (Model's
// StateJournal: a forward that may have to be undone). The caller sizes the buffers and
// clears the flags; step sets a flag for each part it copied.
//   heads [v_heads, dk, dv], heads_saved [v_heads]: a value head's recurrent state, copied
//     whole just before its first write. Heads that the step leaves untouched (dead heads,
//     heads at rest, and heads whose only rows are read) are not copied.
//   conv [conv_dim, kernel-1], conv_saved [conv_blocks() + 1]: the conv history of a block
//     of 16 channels (the last flag: the channels past the last full block), copied before
//     the conv runs, unless the conv provably leaves it alone (its input and history are
//     +0: elementwise's conv_silu_tracked skips such a block).
struct StepSaves {
  float* heads = nullptr;
  uint8_t* heads_saved = nullptr;
  float* conv = nullptr;
  uint8_t* conv_saved = nullptr;
};

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
  // skip_zeros: run the recurrence with delta_rule::skip_zeros (the same output bits for
  // finite states) instead of delta_rule::dense. skip_idle_channels: the conv, l2norm,
  // q scaling and gated RMSNorm run on elementwise.h's kernels (vectorized, exact-zero
  // blocks skipped; the same bits for every input) instead of plain scalar loops.
  GatedDeltaNet(io::LinearAttentionWeights&& weights, const GatedDeltaNetShape& shape, float rms_eps,
                const PackedMatrix::Options& options, const std::string& name, bool skip_zeros = true,
                bool skip_idle_channels = true);
  // The same layer from its projections' entries (io::SparseMatrix; packed as the dense
  // arrays would be, PackedMatrix::pack).
  GatedDeltaNet(io::BasicLinearAttentionWeights<io::SparseMatrix>&& weights, const GatedDeltaNetShape& shape,
                float rms_eps, const PackedMatrix::Options& options, const std::string& name, bool skip_zeros = true,
                bool skip_idle_channels = true);

  const GatedDeltaNetShape& shape() const { return shape_; }
  std::vector<const PackedMatrix*> matrices() const { return {&in_proj_qkv_, &in_proj_z_, &in_proj_b_, &in_proj_a_, &out_proj_}; }
  // out_proj's product is +0 whatever its input (PackedMatrix::always_zero): step() then
  // writes +0 to `out` for every input and every state (Model skips the mixer).
  bool output_always_zero() const { return out_proj_.always_zero(); }
  // Idle steps (Model's IdleSublayers, docs/engine.md "Idle sublayers"): a step whose
  // in_proj_qkv/z/b/a products are all +0 and whose conv history is all +0.
  // idle_output_zero: then step() writes +0 to every out dim and leaves the conv state's
  //   bits unchanged, for every finite recurrent state (every weight, conv tap, norm
  //   weight and the heads' idle decay exp(g) at a = +0 are finite).
  // idle_decay_one: the idle decay is exactly 1 in every head, so with the SkipZeros
  //   recurrence such a step does not touch the recurrent state at all.
  bool idle_output_zero() const { return idle_output_zero_; }
  bool idle_decay_one() const { return idle_decay_one_; }

  // h: the normed input [hidden]; out: the mixer output [hidden].
  // conv_state: [conv_dim, kernel-1], the previous kernel-1 inputs of each channel,
  //   oldest first. recurrent_state: [v_heads, dk, dv], S[key index][value index].
  // first_token: the state is empty (position 0). transformers then runs its
  //   chunked kernel, whose read-out for one token is (q.k) * (v*beta) instead of
  //   sum_i (k_i * delta) * q_i: we reproduce that ordering (the state written is
  //   identical either way).
  // conv_zero_blocks: empty, or one count per block of 16 conv channels (conv_dim / 16,
  //   rounded down) kept by elementwise's conv_silu_tracked (Model keeps them in State):
  //   how many of the block's latest inputs were all +0, so that a block with a +0
  //   history and input costs no read of its history. The same bits either way.
  // projections_zero: the caller knows that in_proj_qkv/z/b/a give +0 in every row for
  //   this h (Model's idle test: every dim they read is +-0, h finite, the weights finite),
  //   so they are not run and h is not read: +0 is what they would write. A GDN layer
  //   whose input has gone idle while its conv history is still live runs this way.
  // h_blocks: nullptr, or h's support (PackedMatrix::Support): h is +-0 outside these
  //   blocks of 16, so the projections scan only them (the same plan, the same bits).
  // saves: nullptr, or where what it overwrites is copied first (StepSaves).
  // out_words: nullptr, or the 64-dim words of out_proj's stored rows (mark_stored_rows):
  //   out is then written only there (PackedMatrix::multiply_words), for a caller that
  //   reads no other dim of it; elsewhere the product is +0.
  void step(const float* h, std::span<float> conv_state, std::span<float> recurrent_state,
            bool first_token, float* out, std::span<uint8_t> conv_zero_blocks = {},
            bool projections_zero = false, const uint64_t* h_blocks = nullptr,
            const StepSaves* saves = nullptr, const std::vector<uint32_t>* out_words = nullptr) const;
  // The number of conv_zero_blocks counts (conv channel blocks of 16).
  int64_t conv_blocks() const;
  // Conv blocks with no input row and value heads that step() leaves out while those
  // blocks are at rest (tests check that a wiring meant to exercise them has some).
  int64_t dead_conv_blocks() const;
  int64_t dead_value_heads() const;

  // Steps (all layers, all threads) whose recurrence ran its value heads in an OpenMP
  // region: the work was at least the parallel threshold (tests check that the shapes
  // meant to exercise the parallel path take it; smaller steps run on the calling thread).
  static int64_t parallel_steps();

 private:
  // Both constructors: the shape's checks, the projections packed, the small vectors kept.
  template <class Matrix>
  void build(io::BasicLinearAttentionWeights<Matrix>&& weights, const PackedMatrix::Options& options,
             const std::string& name);
  // StepSaves' conv part: copies the blocks of conv_state that the conv may write for this
  // input (mixed, the in_proj_qkv output).
  void save_conv(std::span<const float> conv_state, const float* input, std::span<const uint8_t> conv_zero_blocks,
                 const StepSaves& saves) const;

  GatedDeltaNetShape shape_;
  float rms_eps_ = 0;
  bool skip_zeros_ = true;
  bool skip_idle_channels_ = true;
  bool conv_taps_finite_ = true;  // every conv1d weight is finite (elementwise::conv_silu)
  bool idle_output_zero_ = false;
  bool idle_decay_one_ = false;
  float q_divisor_ = 0;     // decode: q / float(dk ** 0.5)
  float q_multiplier_ = 0;  // first token (chunked kernel): q * float(dk ** -0.5)
  PackedMatrix in_proj_qkv_, in_proj_z_, in_proj_b_, in_proj_a_, out_proj_;
  std::vector<float> conv_weight_;  // [conv_dim, kernel]
  std::vector<float> neg_exp_a_;    // -exp(A_log), [v_heads]
  std::vector<float> dt_bias_;      // [v_heads]
  std::vector<float> norm_weight_;  // [v_head_dim], plain weight
  // The conv channel blocks of 16 that can receive a nonzero input: some channel's
  // in_proj_qkv row holds a stored weight (PackedMatrix::row_always_zero otherwise), as
  // runs [begin, end) of channels; the last run includes the channels past the last full
  // block. dead_blocks_[b] = 1 for the others (their input is +0 on every step).
  std::vector<std::pair<int64_t, int64_t>> conv_live_runs_;
  std::vector<uint8_t> dead_blocks_;
  bool has_dead_blocks_ = false;
  // Value heads that are +0 on every step while the dead blocks are idle (step()): all
  // conv channels of their q, k (key head) and v lie in dead blocks, their in_proj_z,
  // in_proj_b and in_proj_a rows are empty, their idle decay is exactly 1, and the norm
  // weights and eps are finite (eps > 0). Only with the SkipZeros recurrence and the
  // elementwise kernels (the paths whose bits the skip reproduces).
  std::vector<uint8_t> dead_heads_;
  bool has_dead_heads_ = false;
  // step() answers a head at rest (k = q = +0, decay 1, not the first token) without
  // skip_zeros: SkipZeros recurrence, elementwise kernels, finite norm weights and eps.
  bool rest_heads_ = false;
};

}  // namespace qpu::engine
