#pragma once
// One nested attention head (run.c's scores, softmax and weighted sum) as exact NPU
// units for the looped machine (docs/npu-attention.md). Each unit is an IR builder
// plus the C it must equal bit for bit; the machine runs them block by block over the
// positions 0..pos, with the running max and the running sums crossing between blocks.
//
// Exps and probabilities span 2^-149..1 (docs/trace-ranges.md), wider than the value
// window [2^-78, 2^36] (docs/npu.md), so they travel as (mant, exponent) pairs:
// value == mant * 2^exponent exactly (expf_parts' form, docs/npu-expf.md).
#include <functional>
#include <utility>
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
// invalid (optional, one per key row): rows whose bit is 1 (exactly 0 or 1) do not take
// part in the max -- they stand in with row 0's scaled score, which must be valid (the
// machine's last block of positions, whose rows past the position hold stale or empty
// keys; invalid[0] is not read). `scaled` stays every row's own score.
ScoreBlock attn_score_block(Program& p, const std::vector<ValueId>& q, const std::vector<std::vector<ValueId>>& keys,
                            ValueId running_max, const std::vector<ValueId>& invalid = {});

// run.c's max scan (`if (x > max) max = x`) over `values` as a pairwise tree of greater +
// select: with strict > its value is the same in any order (no NaN, and no -0 among
// scores). 5 sublayers per level.
ValueId attn_max_tree(Program& p, std::vector<ValueId> values);

// [d >= 1] for an integer linear form d with |d| <= 2^16 (terms in value units, kOne for
// constants), exactly 0 or 1: silu(128 d) / 128 - silu(128 (d - 1)) / 128 = min(max(d, 0), 1)
// on integers (sigmoid(128) is 1 in fp32 and silu(-128) is -0). One sublayer, 2 neurons.
// With its constants turned into a unit's enable (compiler::enable_constants) and d's
// constants too, an idle unit whose d is <= 0 writes +-0.
ValueId attn_int_positive(Program& p, const compiler::Lin& d, const char* label = "attn.after");

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
// The same over `positions` exps made on demand: exp_at(t) appends the ops that produce
// position t's (mant, exponent) (e.g. a RAM read) and returns them. Positions go three
// per chain step; a group's ops (exp_at's included) are ordered a few steps behind the
// chain, so a long row keeps only a few groups' working values live at a time.
// partial (optional; the sampler's CDF, unit_sample.h): called with (t, value) right
// after the chain step that adds position t, value holding C's running sum after t in
// the tier of t (tier-encoded as acc: the sign is the tier). Each step's last sum is
// the chain's own value; the others are side values written by extra down terms of the
// step's neurons (the same roundings), so the depth stays the same. Without it the ops
// are exactly those of the plain row.
// acc_in: +0 or a running sum carried from an earlier part of the row (its tier from its
// sign, as acc encodes it).
ValueId attn_sum_row(Program& p, size_t positions, const std::function<std::pair<ValueId, ValueId>(size_t)>& exp_at,
                     ValueId acc_in, const std::function<void(size_t, ValueId)>& partial = {});
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

// ---- (d) the weighted sum: fast path with its runtime "unsafe" bit (docs/npu-attention.md 6).

// The fast path of xb[i] = sum_t p_t v_t[i] (C's order, from xb = 0) keeps one tier (values
// 0 or >= 2^-104, scale 2^26) and flushes probabilities below 2^-80. Its C model runs one
// lane (one dim i) through this state; `unsafe` is the runtime condition under which
// flushing could differ from C (then the machine must take the exact slow path); when it
// is false at the end (and `pending` too) the fast xb equals C's bit for bit (the tests
// check this claim on random and real values). Per row t (prob = p_t, v = v_t[i]):
//  * prob == 0: nothing (C adds +-0);
//  * 0 < prob < 2^-80 (flushed; its product is treated as nonzero whatever v is, a
//    conservative choice: the unit does not test v != 0 or C's underflow of the product):
//    xb == 0 -> pending (C holds a nonzero xb that the fast path holds as 0);
//    0 < |xb| < 2^-40 -> unsafe (the flushed product might not be absorbed);
//  * prob >= 2^-80 (kept): xb += fl(prob v); pending and |xb| < 2^-40 -> unsafe;
//    pending cleared; 0 < |xb| < 2^-104 (the chain left the tier) -> unsafe.
// At the end of the head: pending -> unsafe.
inline constexpr float kWsumFlushP = 0x1p-80f;  // probabilities below are flushed
inline constexpr float kWsumSafe = 0x1p-40f;    // |xb| >= this absorbs <= 512 flushed products (< 2^-66)
inline constexpr float kWsumTiny = 0x1p-104f;   // nonzero partial sums below this leave the tier
struct WsumLane {
  float xb = 0.0f;  // unscaled C value of the fast chain
  bool pending = false, unsafe = false;
};
void attn_wsum_lane_step(WsumLane& lane, float prob, float v);

struct WeightedSumModel {
  float xb = 0.0f;
  bool unsafe = false;  // includes a pending state at the end
};
WeightedSumModel attn_weighted_sum_fast_model(const float* prob, const float* v, int rows, int v_stride);

// The fast path's block unit: xb is carried times kWsumScale; probabilities (pm, exponent)
// below 2^-80 are flushed, the others scaled into the tier, p' = pm 2^(exponent + 26);
// then xb_i += fl(p' v_t[i]) in C's order (three additions per sublayer). Equals C's chain
// with those probabilities flushed (attn_wsum_block_reference) when every |v| is 0 or in
// [2^-24, 2^5) and no partial sum lands in (0, 2^-104) (then every product is a normal C
// product >= 2^-104 and every value lies in the window at scale 2^26).
inline constexpr float kWsumScale = 0x1p26f;
std::vector<ValueId> attn_wsum_block(Program& p, const std::vector<ValueId>& pm, const std::vector<ValueId>& exponent,
                                     const std::vector<std::vector<ValueId>>& v, const std::vector<ValueId>& xb_in);
// C of the same, on unscaled floats: xb[i] += p_t * v_t[i] for p_t >= 2^-80.
void attn_wsum_block_reference(const float* prob, const float* v, int rows, int dims, float* xb);

// The same block with the unsafe bit computed inside the unit, per lane (dim i), exactly
// as attn_wsum_lane_step defines it: unsafe and pending (exactly 0 or 1) cross from block
// to block with xb; the machine takes the slow path for a head when a lane ends with
// unsafe or pending set after its last block. The first block gets +0 for all three.
// Idle (every input 0): every output +0.
struct WsumChecked {
  std::vector<ValueId> xb, unsafe, pending;  // one per dim
};
WsumChecked attn_wsum_block_checked(Program& p, const std::vector<ValueId>& pm, const std::vector<ValueId>& exponent,
                                    const std::vector<std::vector<ValueId>>& v, const std::vector<ValueId>& xb_in,
                                    const std::vector<ValueId>& unsafe_in, const std::vector<ValueId>& pending_in);

// The checked weighted sum over a row of blocks made on demand: block_at(b) appends the
// ops that produce block b's rows (pm and exponent per row, v[row][dim]) and returns them;
// each block's unit continues the previous one's xb, unsafe and pending, the first block
// `start` (empty vectors: +0, C's xb = 0 with no bit set; e.g. a carry that crossed up from
// the row's previous segment). A block's own ops are ordered behind the unit two blocks
// earlier, so a long row keeps only a few blocks' working values live at a time. Returns
// the last block's state (xb at kWsumScale).
struct WsumRowBlock {
  std::vector<ValueId> pm, exponent;
  std::vector<std::vector<ValueId>> v;
};
WsumChecked attn_wsum_row(Program& p, size_t blocks, size_t dims, const std::function<WsumRowBlock(size_t)>& block_at,
                          const WsumChecked& start = {});

// A lane's state as one value for a crossing between the row's segments (docs/npu-machine.md,
// "Chains in segments"): c = xb + kWsumPendingMark pending. A pending lane's xb is 0, and
// every other xb at kWsumScale has |xb| < 2^31 (probabilities sum to at most 1, |v| < 2^5),
// so c is xb or the mark; both lie in the crossing's window. `enable`: 1 on the cycles
// that compute the lane (then +-0 inputs give +0). One MLP sublayer.
inline constexpr float kWsumPendingMark = 0x1p33f;
ValueId attn_wsum_carry(Program& p, ValueId xb, ValueId pending, ValueId enable);
// The lane back: pending = [c > 2^32], xb = c - kWsumPendingMark pending (exact: the mark
// minus itself is +0). 5 MLP sublayers.
struct WsumCarried {
  ValueId xb, pending;
};
WsumCarried attn_wsum_uncarry(Program& p, ValueId c, ValueId enable);

// ---- (d) the exact slow path (docs/npu-attention.md 6.4): C's chain with no flush, for the
// heads whose lanes the unsafe bit sends there. Two-tier values, C's products, the block.

// A value x of the weighted sum (a partial sum or a product, |x| <= 2^9) in both tiers at
// once: hi = x 2^26 if |x| >= 2^-104 (else 0), lo = x 2^71 if |x| <= 2^-36 (else 0), and
// big = [|x| > 2^-36] (0/1). x = 0 is (0, 0, 0), so an idle unit holds C's 0.
inline constexpr float kWsumLowScale = 0x1p71f;
inline constexpr float kWsumLowMax = 0x1p-36f;  // the low tier holds |x| <= this
struct TwoTier {
  ValueId hi, lo, big;
};
void attn_two_tier_encode(float x, float* hi, float* lo, float* big);

// The two-tier form again from its hi and lo alone (a running value that crossed up to the
// next segment's cycle without its big bit, docs/npu-machine.md "Chains in segments"):
// big = [|hi| > 2^-10], which holds for every value attn_two_tier_encode and
// attn_two_tier_add give (big = [|x| > 2^-36], and hi = x 2^26 whenever |x| >= 2^-104).
// 5 MLP sublayers.
TwoTier attn_two_tier_rejoin(Program& p, ValueId hi, ValueId lo);

// fl(a + b), C's float addition, for any a, b in two-tier form with |a|, |b| <= 2^9 (C's
// subnormal results included): in the low tier when both operands are there, else in the
// high tier, then re-encoded. 7 MLP sublayers, 76 neurons.
TwoTier attn_two_tier_add(Program& p, const TwoTier& a, const TwoTier& b);

// C's product fl(p v) in two-tier form for one probability p = pm 2^exponent
// (attn_probability's output: a float in [0, 1], subnormal included) and each v (0 or |v|
// in [2^-24, 2^5)), including C's rounding of a subnormal product on the 2^-149 grid
// (a 24-bit product rounded again on that grid, corrected by the sign of Dekker's exact
// residual where it sits on a grid midpoint). 34 MLP sublayers.
std::vector<TwoTier> attn_two_tier_products(Program& p, ValueId pm, ValueId exponent, const std::vector<ValueId>& v);

// The slow path's block: xb_i = fl(xb_i + fl(p_t v_t[i])) for the rows in order, C's own
// chain for every input of the window (no flush), xb carried in two-tier form from block
// to block (the first block gets (0, 0, 0)). At the end of a head xb = hi 2^-26 if big or
// |xb| >= 2^-104 (hi != 0), else lo 2^-71. 90 MLP sublayers per block of 8 rows.
std::vector<TwoTier> attn_wsum_slow_block(Program& p, const std::vector<ValueId>& pm, const std::vector<ValueId>& exponent,
                                          const std::vector<std::vector<ValueId>>& v, const std::vector<TwoTier>& xb_in);
// Its two halves, for a caller that overlaps blocks (the machine's SLOW, docs/npu-attention.md
// 6.4): the products of every row (34 sublayers, no input from the chain, so block b's
// can run beside block b - 1's chain), and the chain of C additions from xb_in (8 x 7
// sublayers). attn_wsum_slow_block = the chain of the products.
std::vector<std::vector<TwoTier>> attn_wsum_slow_products(Program& p, const std::vector<ValueId>& pm,
                                                           const std::vector<ValueId>& exponent,
                                                           const std::vector<std::vector<ValueId>>& v);  // [row][dim]
std::vector<TwoTier> attn_wsum_slow_chain(Program& p, const std::vector<std::vector<TwoTier>>& products,
                                          const std::vector<TwoTier>& xb_in);

}  // namespace qpu::npu
