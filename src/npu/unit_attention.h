#pragma once
// One nested attention head (run.c's scores, softmax and weighted sum) as exact NPU
// units for the looped machine (docs/npu-attention.md). Each unit is an IR builder
// plus the C it must equal bit for bit; the machine runs them block by block over the
// positions 0..pos, with the running max and the running sums crossing between blocks.
//
// Exps and probabilities span 2^-149..1 (docs/trace-ranges.md), wider than the value
// window [2^-78, 2^36] (docs/npu.md), so they travel as (mant, exponent) pairs:
// value == mant * 2^exponent exactly (expf_parts' form, docs/npu-expf.md).
#include <vector>

#include "npu/primitives.h"

namespace qpu::npu {

// ---- (a) the probability step: fl(e / sum), one correct rounding, subnormal included.

// Exponents for which e / sum can be subnormal (sum in [1, 2^10), mant >= 2^-23):
// below this range the result is 0 (mant is 0 there), above it the result is normal.
inline constexpr int kProbExpMin = -151;
inline constexpr int kProbExpSub = -95;

// The reciprocal estimate of the softmax sum, shared by every dividend of one softmax:
// divide.h's reciprocal with the window sum in [1, 2^10) (sum >= 1: it holds the max's
// expf(0) = 1; sum <= pos + 1 <= 512). 11 sublayers.
ValueId attn_sum_reciprocal(Program& p, ValueId sum);

// pm with pm * 2^exponent == fl(e / sum) exactly (C's float division, round to nearest
// even, into the subnormal grid when the quotient is below 2^-126), where
// e = mant * 2^exponent is a float (mant = 0 or in [2^-23, 4); exponent an integer;
// exponent >= -94 or mant * 2^exponent a float: expf_parts' outputs are), sum a float in
// [1, 2^10) and recip = attn_sum_reciprocal(sum). pm is 0 or in [2^-54, 4).
ValueId attn_probability(Program& p, ValueId mant, ValueId exponent, ValueId sum, ValueId recip);

// The same in C: fl(ldexp(mant, exponent) / sum) scaled back by 2^-exponent.
float attn_probability_reference(float mant, int exponent, float sum);

// ---- (b) a block of positions: scores, scaled scores, and the running max.

// run.c: score = 0; for i: score += q[i] * k_t[i]; score /= sqrtf(head_size), for each
// key row k_t of the block, then the max with strict > (value-wise order-free).
// running_max: the max over earlier blocks; kNoMax for the first block.
inline constexpr ValueId kNoMax = -3;
struct ScoreBlock {
  std::vector<ValueId> scaled;  // one per key row
  ValueId max;                  // max(running_max, scaled...)
};
ScoreBlock attn_score_block(Program& p, const std::vector<ValueId>& q, const std::vector<std::vector<ValueId>>& keys,
                            ValueId running_max);

// C of the same: scores into `scaled`, returns the new running max (has_max: whether
// running_max is meaningful).
float attn_score_block_reference(const float* q, const float* keys, int rows, int head_size, bool has_max,
                                 float running_max, float* scaled);

// ---- (c) exps and the softmax sum over a block, continuing C's chain.

// C's sum = 0; for t: sum += e_t (e_t = expf(score_t - max) in [0, 1], 2^-149 at the
// smallest) spans 2^-149..512: no single scale fits the value window. It runs in two
// tiers, carried in ONE float `acc` whose sign is the tier (docs/npu-attention.md):
//  * low tier, before the first exp with exponent >= kSumTierExp (t*): acc = -sum 2^71
//    (every exp there is < 2^-59, every partial sum < 2^-50: C's subnormal sums are exact,
//    and so are the scaled ones);
//  * high tier from t* on: acc = sum 2^27 (sum >= 2^-61); at t* the low sum is converted
//    (times -2^-44) inside the fused chain step; exps below 2^-103 are flushed there:
//    C absorbs them (below half an ulp of a sum >= 2^-61), as it absorbs a low sum below
//    2^-105 at t*.
// acc = +0 before any nonzero exp. The first block gets acc_in = a fresh value (+0).
inline constexpr int kSumTierExp = -60;
inline constexpr float kSumHighScale = 0x1p27f, kSumLowScale = 0x1p71f;
struct ExpSumBlock {
  std::vector<ValueId> mant, exponent;  // expf(scaled_t - max) == mant_t 2^exponent_t
  ValueId acc;                          // the running sum after the block, tier-encoded
};
ExpSumBlock attn_exp_sum_block(Program& p, const std::vector<ValueId>& scaled, ValueId max, ValueId acc_in);
// The sum part alone, from exps already in (mant, exponent) form (the machine computes
// the exps in earlier cycles and stores them down; this is the unit that reads them).
ValueId attn_sum_block(Program& p, const std::vector<ValueId>& mant, const std::vector<ValueId>& exponent, ValueId acc_in);
// The softmax sum from a high-tier acc (every finished softmax is: it holds expf(0) = 1).
ValueId attn_sum_from_acc(Program& p, ValueId acc);

// C of the same: mant/exponent per row, returns the encoded acc after the block.
float attn_exp_sum_block_reference(const float* scaled, int rows, float max, float acc_in, float* mant,
                                   float* exponent);
float attn_sum_block_reference(const float* mant, const float* exponent, int rows, float acc_in);
// The tier encoding of C's running sum (high: whether an exp with exponent >=
// kSumTierExp and mant > 0 has been added), and back.
float attn_sum_encode(float sum, bool high);
float attn_sum_decode(float acc, bool* high);

// ---- (d) the weighted sum: design model only (docs/npu-attention.md, "not built").

// The planned fast path of xb[i] = sum_t p_t v_t[i] (C's order, from xb = 0), in C: one
// tier (values 0 or >= 2^-104, scale 2^26), probabilities below 2^-80 flushed. `unsafe` is the runtime
// condition under which flushing could differ from C (then the machine must take the exact
// slow path); when it is false the returned xb equals C's bit for bit (the tests check
// this claim on random and real values).
struct WeightedSumModel {
  float xb = 0.0f;
  bool unsafe = false;
};
WeightedSumModel attn_weighted_sum_fast_model(const float* prob, const float* v, int rows, int v_stride);

// The fast path's block unit (built; the unsafe bit and the slow path are not): xb is
// carried times kWsumScale; probabilities (pm, exponent) below 2^-80 are flushed, the
// others scaled into the tier, p' = pm 2^(exponent + 26); then xb_i += fl(p' v_t[i]) in
// C's order (three additions per sublayer). Equals C's chain with those probabilities
// flushed (attn_wsum_block_reference) when every |v| is 0 or in [2^-24, 2^5) and no
// partial sum lands in (0, 2^-104) (then every product is a normal C product >= 2^-104
// and every value lies in the window at scale 2^26).
inline constexpr float kWsumScale = 0x1p26f;
std::vector<ValueId> attn_wsum_block(Program& p, const std::vector<ValueId>& pm, const std::vector<ValueId>& exponent,
                                     const std::vector<std::vector<ValueId>>& v, const std::vector<ValueId>& xb_in);
// C of the same, on unscaled floats: xb[i] += p_t * v_t[i] for p_t >= 2^-80.
void attn_wsum_block_reference(const float* prob, const float* v, int rows, int dims, float* xb);

}  // namespace qpu::npu
