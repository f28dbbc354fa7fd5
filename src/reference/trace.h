#pragma once
// Golden traces of run.c: every intermediate vector the forward pass and the sampler
// compute, reported in run.c's order to an optional TraceObserver. The NPU's stages are
// tested against these ("first difference at pos p, layer l, record R, index i").
//
// A record is (kind, pos, layer, head, values). layer is -1 outside the layers (final
// rmsnorm, logits, sampler), head is -1 outside the per-head attention records. The
// count of values is fixed by the kind, the model and pos (trace_count), so a reader can
// validate every record. Token ids are stored as exact float values (kind info says so).
//
// Values that exist inside run.c's kernels (rmsnorm's ss steps, the softmax max/exp/sum,
// SiLU's pieces, the raw attention scores, RoPE's cos/sin) are recomputed here from the
// kernel's input with the same float operations in the same order; the kernel's real
// outputs are recorded from the transformer's own buffers, and the tests check that the
// recomputed pieces lead to exactly those outputs. Not traced: partial sums inside
// matmuls and the attention-weighted sum over t, and RoPE's products.
#include <cstdint>
#include <span>
#include <string_view>

#include "reference/llama2_checkpoint.h"

namespace qpu::reference {

// How many values a record of a kind holds.
enum class TraceCount : uint8_t { kOne, kTwo, kDim, kKvDim, kHalfDim, kHidden, kHeadSize, kPositions, kVocab };
// Where a kind's records live: per (pos, layer), per (pos, layer, head), per pos.
enum class TraceScope : uint8_t { kLayer, kHead, kPosition };

// X(id, name, scope, count, is_token). Ids are the file format: append, never renumber.
#define QPU_TRACE_KINDS(X)                                                              \
  X(1, x_in, kLayer, kDim, false)              /* x at layer entry (layer 0: embedding) */ \
  X(2, att_rms_sq, kLayer, kDim, false)        /* x[j]*x[j] */                             \
  X(3, att_rms_sum, kLayer, kOne, false)       /* ss after the loop */                     \
  X(4, att_rms_mean, kLayer, kOne, false)      /* ss /= dim */                             \
  X(5, att_rms_eps, kLayer, kOne, false)       /* ss += 1e-5f */                           \
  X(6, att_rms_sqrt, kLayer, kOne, false)      /* sqrtf(ss) */                             \
  X(7, att_rms_inv, kLayer, kOne, false)       /* 1.0f / sqrtf(ss) */                      \
  X(8, att_rms_scaled, kLayer, kDim, false)    /* ss * x[j] */                             \
  X(9, att_rms_out, kLayer, kDim, false)       /* xb = w[j] * (ss * x[j]) */               \
  X(10, q, kLayer, kDim, false)                /* wq xb, before RoPE */                    \
  X(11, k, kLayer, kKvDim, false)              /* wk xb, before RoPE */                    \
  X(12, v, kLayer, kKvDim, false)              /* wv xb (RoPE leaves v alone) */           \
  X(13, rope_freq, kLayer, kHalfDim, false)    /* 1.0f / powf(10000, hd / head_size) */   \
  X(14, rope_angle, kLayer, kHalfDim, false)   /* pos * freq */                            \
  X(15, rope_cos, kLayer, kHalfDim, false)     /* cosf(angle) */                           \
  X(16, rope_sin, kLayer, kHalfDim, false)     /* sinf(angle) */                           \
  X(17, q_rope, kLayer, kDim, false)           /* q after RoPE */                          \
  X(18, k_rope, kLayer, kKvDim, false)         /* k after RoPE (the cache row) */          \
  X(19, att_raw, kHead, kPositions, false)     /* q . k_t, t = 0..pos */                   \
  X(20, att_scaled, kHead, kPositions, false)  /* raw / sqrtf(head_size) */                \
  X(21, att_max, kHead, kOne, false)           /* softmax max (strict >) */                \
  X(22, att_shifted, kHead, kPositions, false) /* score - max */                           \
  X(23, att_exp, kHead, kPositions, false)     /* expf(score - max) */                     \
  X(24, att_sum, kHead, kOne, false)           /* sum of exp, left to right */             \
  X(25, att_prob, kHead, kPositions, false)    /* exp / sum */                             \
  X(26, att_out, kHead, kHeadSize, false)      /* xb for this head: sum_t p_t v_t */       \
  X(27, wo_out, kLayer, kDim, false)           /* xb2 = wo xb */                           \
  X(28, x_att_res, kLayer, kDim, false)        /* x += xb2 */                              \
  X(29, ffn_rms_sq, kLayer, kDim, false)                                                    \
  X(30, ffn_rms_sum, kLayer, kOne, false)                                                   \
  X(31, ffn_rms_mean, kLayer, kOne, false)                                                  \
  X(32, ffn_rms_eps, kLayer, kOne, false)                                                   \
  X(33, ffn_rms_sqrt, kLayer, kOne, false)                                                  \
  X(34, ffn_rms_inv, kLayer, kOne, false)                                                   \
  X(35, ffn_rms_scaled, kLayer, kDim, false)                                                \
  X(36, ffn_rms_out, kLayer, kDim, false)                                                   \
  X(37, hb, kLayer, kHidden, false)            /* w1 xb */                                 \
  X(38, hb2, kLayer, kHidden, false)           /* w3 xb */                                 \
  X(39, silu_exp, kLayer, kHidden, false)      /* expf(-hb) */                             \
  X(40, silu_denom, kLayer, kHidden, false)    /* 1.0f + expf(-hb) */                      \
  X(41, silu_recip, kLayer, kHidden, false)    /* 1.0f / (1.0f + expf(-hb)) */             \
  X(42, silu, kLayer, kHidden, false)          /* hb * recip */                            \
  X(43, ffn_prod, kLayer, kHidden, false)      /* silu * hb2 */                            \
  X(44, w2_out, kLayer, kDim, false)           /* w2 hb */                                 \
  X(45, x_ffn_res, kLayer, kDim, false)        /* x += w2 hb: next layer's x_in */         \
  X(46, final_rms_sq, kPosition, kDim, false)                                               \
  X(47, final_rms_sum, kPosition, kOne, false)                                              \
  X(48, final_rms_mean, kPosition, kOne, false)                                             \
  X(49, final_rms_eps, kPosition, kOne, false)                                              \
  X(50, final_rms_sqrt, kPosition, kOne, false)                                             \
  X(51, final_rms_inv, kPosition, kOne, false)                                              \
  X(52, final_rms_scaled, kPosition, kDim, false)                                           \
  X(53, final_rms_out, kPosition, kDim, false)                                              \
  X(54, logits, kPosition, kVocab, false)      /* forward's output */                      \
  X(55, sample_scaled, kPosition, kVocab, false) /* logits / temperature */                \
  X(56, sample_max, kPosition, kOne, false)                                                 \
  X(57, sample_shifted, kPosition, kVocab, false)                                           \
  X(58, sample_exp, kPosition, kVocab, false)                                               \
  X(59, sample_sum, kPosition, kOne, false)                                                 \
  X(60, sample_prob, kPosition, kVocab, false)                                              \
  X(61, sample_coin, kPosition, kOne, false)   /* (u32 >> 8) / 2^24 */                     \
  X(62, topp_cutoff, kPosition, kOne, false)   /* (1 - topp) / (n - 1) */                  \
  X(63, topp_cumulative, kPosition, kOne, false) /* nucleus mass at the cut */             \
  X(64, topp_r, kPosition, kOne, false)        /* coin * cumulative */                     \
  X(65, token_in, kPosition, kOne, true)       /* token fed to forward at pos */           \
  X(66, next_token, kPosition, kTwo, true)     /* {next token, 1 if forced by prompt} */

enum class TraceKind : uint32_t {
#define QPU_TRACE_ENUM(id, name, scope, count, is_token) name = id,
  QPU_TRACE_KINDS(QPU_TRACE_ENUM)
#undef QPU_TRACE_ENUM
};

struct TraceKindInfo {
  TraceKind kind;
  std::string_view name;
  TraceScope scope;
  TraceCount count;
  bool is_token;  // values are token ids / flags stored as floats, not computed floats
};

// Every kind, in id order.
std::span<const TraceKindInfo> trace_kinds();
// nullptr for an id that is not a kind.
const TraceKindInfo* find_trace_kind(uint32_t id);
const TraceKindInfo& trace_kind_info(TraceKind kind);
// Values in one record of `kind` at `pos` for this model.
size_t trace_count(TraceKind kind, const Llama2Config& config, int pos);

// Receives records in run.c's order. `values` is valid only during the call.
class TraceObserver {
 public:
  virtual ~TraceObserver() = default;
  virtual void record(TraceKind kind, int pos, int layer, int head, std::span<const float> values) = 0;
};

// Recomputation of the values inside run.c's kernels (see the file comment). Each
// emits its records in the order run.c computes them.

// rmsnorm's pieces from its input x: `first` is the *_rms_sq kind; emits sq, sum, mean,
// eps, sqrt, inv, scaled (the 7 consecutive kinds). The output itself is not emitted.
void trace_rmsnorm_pieces(TraceObserver& observer, TraceKind first, int pos, int layer,
                          std::span<const float> x);
// RoPE's freq, angle, cos, sin for one layer (run.c recomputes them in every layer).
void trace_rope_pieces(TraceObserver& observer, int pos, int layer, int dim, int head_size);
// Raw scores q . k_t for t = 0..pos; key row t of this head starts at keys[t * stride].
void trace_attention_raw(TraceObserver& observer, int pos, int layer, int head, std::span<const float> q,
                         const float* keys, size_t stride);
// softmax's max, shifted, exp, sum from its input x: `max_kind` is *_max; the four
// consecutive kinds are emitted. The probabilities are not emitted.
void trace_softmax_pieces(TraceObserver& observer, TraceKind max_kind, int pos, int layer, int head,
                          std::span<const float> x);
// SiLU's expf(-v), 1 + e, 1 / (1 + e), v * recip from hb = w1 xb.
void trace_silu_pieces(TraceObserver& observer, int pos, int layer, std::span<const float> hb);
// The sampler at a sampled position (temperature > 0): `logits` as forward returned
// them, `rng_state` before the draw, `probabilities` what sample() left in the logits.
// Emits sample_scaled, the softmax pieces, sample_prob (the real ones), sample_coin and,
// for 0 < topp < 1, topp_cutoff, topp_cumulative, topp_r.
void trace_sampler(TraceObserver& observer, int pos, std::span<const float> logits, float temperature,
                   float topp, uint64_t rng_state, std::span<const float> probabilities);

}  // namespace qpu::reference
