#pragma once
// run.c's sampler on its temperature path, as exact NPU units (docs/npu-machine.md, "M3:
// sampling"): sample() with 0 < temperature and topp <= 0 or >= 1, over a vocabulary of n
// logits (n from the caller; stories260K: 512):
//
//   for q: logits[q] /= temperature                                       (TEMP, blocks)
//   softmax: max (strict >); e_q = expf(x_q - max); sum += e_q (q in order); p_q = e_q / sum
//                                   (TEMP's block max, MAX tree, EXP blocks, SUM row, PROB blocks)
//   coin = random_f32(&state)                                  (npu/rng_draw.h: the n-th draw)
//   sample_mult: cdf = 0; for q: cdf += p_q; if (coin < cdf) return q;  return n - 1  (CDF row)
//
// The units are shaped like the attention's (npu/unit_attention.h), whose softmax pieces
// they reuse: blocks of positions for the lane-parallel steps, a row over every position
// for the two chains in index order, state crossing from block to block.
//  * TEMP: fl(logit / t) for a block of logits: the temperature is data (a value the host
//    prompt writes), so divide.h's reciprocal once and divide_by per logit (C's `/`,
//    correctly rounded); and the block max (with a running max, or alone for the MAX tree).
//  * MAX: the tree over the blocks' maxima (attn_max_tree).
//  * EXP, SUM: expf_parts of x - max per position; attn_sum_block / attn_sum_row as they
//    are (the tier-encoded sum in C's order).
//  * PROB: attn_probability with the sum's reciprocal (pm, exponent: pm 2^exponent is
//    C's float p_q, subnormal included).
//  * CDF: attn_sum_row on the probabilities (the same two-tier chain: C adds the floats
//    p_q from 0.0f, in index order), with every running sum exposed, compared with the
//    coin per position; lt_q = [coin < cdf_q] is monotone in q (p_q >= 0 and RN is
//    monotone), so the first q with lt_q = 1 is the number of q with lt_q = 0, and run.c's
//    fallback n - 1 is that count minus 1 when no q crossed.
//
// Every unit takes `enable` (exactly 1 when it runs, 0 when idle; compiler::kOne for
// always on): its constants become `enable` (compiler::enable_constants), so with enable
// = 0 and every input +-0 every value it writes is +-0 (the machine's idle contract).
#include <cstddef>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "npu/divide.h"
#include "npu/unit_attention.h"

namespace qpu::npu {

// The temperature's window (divide.h): t in [2^-12, 2^12); each logit 0 or |logit| in
// [2^-40, 2^12] (stories260K: [2^-23, 24.6], docs/trace-ranges.md). The max's compares
// (greater) need the nonzero scaled logits pairwise equal or at least 2^-70 apart, which
// holds when every nonzero |logit / t| >= 2^-46 (its ulp is then >= 2^-69).
inline constexpr DivWindow kSampleTemperatureWindow{-12, 12};

// The temperature's reciprocal estimate (divide.h's reciprocal, 11 sublayers), shared by
// every logit of one sampled position.
ValueId sample_temperature_reciprocal(Program& p, ValueId temperature, ValueId enable = compiler::kOne);

// TEMP: scaled[r] = fl(logits[r] / temperature) (run.c's `logits[q] /= temperature`),
// and max = the max of running_max (kNoMax for the first block) and the block's scaled
// logits with run.c's strict > (value-wise order-free, as attn_max_tree). recip =
// sample_temperature_reciprocal(temperature). 26 + 5 ceil(log2(rows + 1)) sublayers.
struct SampleScaleBlock {
  std::vector<ValueId> scaled;
  ValueId max;
};
SampleScaleBlock sample_scale_block(Program& p, const std::vector<ValueId>& logits, ValueId temperature, ValueId recip,
                                    ValueId running_max, ValueId enable = compiler::kOne);

// MAX: run.c's softmax max over the blocks' maxima (sample_scale_block with kNoMax per
// block, then this tree: the machine's TEMP.b cycles and one MAX cycle, as SCORE / MAX).
ValueId sample_max_tree(Program& p, const std::vector<ValueId>& block_maxima, ValueId enable = compiler::kOne);

// EXP of a block: expf(scaled - max) as expf_parts' (mant, exponent) (run.c: x[i] =
// expf(x[i] - max_val)), the lanes the machine's EXP.b cycles run; SUM then reads them.
struct SampleExpBlock {
  std::vector<ValueId> mant, exponent;
};
SampleExpBlock sample_exp_block(Program& p, const std::vector<ValueId>& scaled, ValueId max,
                                ValueId enable = compiler::kOne);

// EXP + SUM of a block: attn_exp_sum_block (expf(scaled - max) as (mant, exponent), the
// running sum tier-encoded; acc_in +0 for the first block) under `enable`.
ExpSumBlock sample_exp_sum_block(Program& p, const std::vector<ValueId>& scaled, ValueId max, ValueId acc_in,
                                 ValueId enable = compiler::kOne);

// PROB of a block: pm[r] with pm[r] 2^exponent[r] == fl(e_r / sum) (run.c's x[i] /= sum)
// from the final tier-encoded sum (attn_sum_from_acc, sum in [1, 2^10): n <= 1023) and its
// reciprocal (computed here: 11 sublayers, once per block).
std::vector<ValueId> sample_prob_block(Program& p, const std::vector<ValueId>& mant, const std::vector<ValueId>& exponent,
                                       ValueId acc, ValueId enable = compiler::kOne);

// CDF: the state that crosses from block to block (all +0 for the first block: C's
// cdf = 0.0f, nothing seen, nothing crossed, count 0).
struct SampleCdfState {
  ValueId acc;      // C's cdf after the last position, tier-encoded as attn_sum_row's acc
  ValueId seen;     // [cdf > 0] (0/1): some earlier p_q > 0
  ValueId crossed;  // [coin < cdf] at the last position (0/1)
  ValueId count;    // positions so far with coin >= cdf (an exact integer)
};
struct SampleCdf {
  SampleCdfState out;
  std::vector<ValueId> cdf;     // per position: C's cdf_q, tier-encoded (sign = tier)
  std::vector<ValueId> lt;      // per position: [coin < cdf_q], exactly 0 or 1
  std::vector<ValueId> onehot;  // per position: 1 exactly at the sampled index
  ValueId token = -1;           // final row only: the sampled index, an exact integer
};
// The CDF over `positions` probabilities made on demand (prob_at(t) appends the ops that
// produce position t's (pm, exponent), e.g. a RAM read, as attn_sum_row's exp_at), the
// coin (random_f32's float: 0 or k 2^-24, k < 2^24; any float in [0, 2^9) works) and the
// incoming state. final_row: the row's last position is the vocabulary's last (n - 1):
// its one-hot takes run.c's fallback (1 when no position crossed) and `token` is set.
// Depth: attn_sum_row's chain (ceil(positions / 3) sublayers after ~10 for the terms)
// plus ~6 for the compare, the one-hot and the count.
SampleCdf sample_cdf_row(Program& p, size_t positions, const std::function<std::pair<ValueId, ValueId>(size_t)>& prob_at,
                         ValueId coin, const SampleCdfState& in, bool final_row, ValueId enable = compiler::kOne);
// The same over a block of (pm, exponent) pairs.
SampleCdf sample_cdf_block(Program& p, const std::vector<ValueId>& pm, const std::vector<ValueId>& exponent,
                           ValueId coin, const SampleCdfState& in, bool final_row, ValueId enable = compiler::kOne);

// ---- C of the same (run.c's operations, one C float operation each).

// Every intermediate of run.c's sample() on the temperature path with sample_mult.
struct SampleTrace {
  std::vector<float> scaled;          // logit / temperature
  float max = 0.0f;                   // softmax's max
  std::vector<float> e;               // expf(scaled - max), before the division
  float sum = 0.0f;                   // softmax's sum
  std::vector<float> prob;            // e / sum
  std::vector<float> cdf;             // cdf after each position
  std::vector<unsigned char> lt;      // coin < cdf
  int index = 0;                      // sample_mult's result
};
SampleTrace sample_reference(std::span<const float> logits, float temperature, float coin);

// The CDF block's outputs from C's floats: each cdf in attn_sum_row's tier encoding (high
// from the first position with pm > 0 and exponent >= kSumTierExp on, or when acc_in is
// high: attn_sum_block_reference's rule), lt, one-hot, and the state after `rows` positions.
struct SampleCdfReference {
  std::vector<float> cdf_encoded, lt, onehot;
  float acc = 0.0f, seen = 0.0f, crossed = 0.0f, count = 0.0f, token = 0.0f;
};
// pm/exponent: the block's probabilities in attn_probability's form; state in as the
// unit's (acc tier-encoded). final_row as sample_cdf_row's.
SampleCdfReference sample_cdf_block_reference(const float* pm, const float* exponent, int rows, float coin,
                                              float acc_in, float seen_in, float crossed_in, float count_in,
                                              bool final_row);

}  // namespace qpu::npu
