#pragma once
// run.c's top-p (nucleus) sampling, sample_topp, as exact NPU units (docs/npu-machine.md,
// "M3: sampling", "Top-p"). The oracle is reference::sample_topp_trace:
//
//   cutoff = (1.0f - topp) / (n - 1)                                          (CUTOFF)
//   keep p_q >= cutoff, in index order                                        (KEEP, blocks of q)
//   stable sort descending (ties: ascending index)                            (RANK, blocks of slots)
//   cumulative += p (sorted order) until > topp: last_idx, cumulative_prob    (NUCLEUS, blocks of ranks)
//   r = coin * cumulative_prob                                                (R)
//   first rank <= last_idx with r < cdf (cdf: the same running sums), else last_idx  (PICK, blocks of ranks)
//
// The probabilities come as PROB writes them (npu/unit_sample.h): p = pm 2^exponent. The
// machine moves entries between the units through RAMs: KEEP gives each kept q its slot
// c_q (the kept RAM: p and q at c_q, index order), RANK gives each slot its rank (the
// sorted RAM: p and q at the rank), NUCLEUS writes the running sums by rank (PICK reads
// them back: C's second loop adds the same floats in the same order).
//
// Windows: 0 < topp < 1 with cutoff >= 2^-24 (n = 512: topp <= 1 - 511 2^-24, 0.99997),
// so every kept p >= 2^-24 is a plain float in the value window and every compare
// below is inside greater's window. At most kToppSlots kept entries (RANK compares each
// with every slot; measured n0 on stories260K: max 95 over 256 steps of -t 1.0 -p 0.9):
// n0 > kToppSlots is outside the units (KEEP's count shows it; the machine must refuse
// it). Nothing kept (n0 = 0: run.c reads probindex[-1], undefined; the reference throws)
// is likewise visible as KEEP's final count 0: NUCLEUS then selects slot 0 and PICK its
// entry, whatever the sorted RAM holds there -- the units do not model run.c's read out
// of bounds, the machine must refuse the case.
//
// Every unit takes `enable` (exactly 1 when it runs, 0 idle); with enable 0 and every
// input +-0 every value it writes is +-0 (the idle contract, npu/unit_sample.h).
#include <vector>

#include "npu/primitives.h"

namespace qpu::npu {

inline constexpr int kToppSlots = 128;      // kept entries the RANK unit orders (16 blocks of 8)
inline constexpr int kToppExpMin = -25;     // exponents below cannot be kept (p < 2^-24 <= cutoff)
inline constexpr float kToppCutoffMin = 0x1p-24f;

// CUTOFF: fl(fl(1 - topp) / (n - 1)), C's `(1.0f - topp) / (n - 1)`. 27 sublayers.
ValueId topp_cutoff(Program& p, ValueId topp, int n, ValueId enable = compiler::kOne);

// KEEP over a block of (pm, exponent): prob = pm 2^exponent (C's p) for exponent >=
// kToppExpMin, else 0 (never kept); keep = [p >= cutoff]; slot = count_in + the kept
// entries before it in the block (its slot in the kept RAM when kept; exact integers);
// count = count_in + the block's kept entries (the last block's: n0). 7 sublayers.
struct ToppKeepBlock {
  std::vector<ValueId> prob, keep, slot;
  ValueId count;
};
ToppKeepBlock topp_keep_block(Program& p, const std::vector<ValueId>& pm, const std::vector<ValueId>& exponent,
                              ValueId cutoff, ValueId count_in, ValueId enable = compiler::kOne);

// RANK of a block of the kept RAM's slots base .. base + block.size() - 1 against a block
// of slots slot_base .. slot_base + slots.size() - 1 (base, slot_base exact integers, data:
// the machine's block rows; `block` holds the rows base .., `slots` the rows slot_base ..
// of the kept RAM, slot order = index order), n0 the kept count. Slots >= n0 (stale RAM
// rows) take no part. rank_i = rank_in_i + #{j: p_j > p_i} + #{j < i: p_j = p_i} over
// the slot block (run.c's stable sort, counted block by block: after every slot block,
// the rank) for a valid slot i (i < n0), rank_in_i for the others (0 from +0);
// valid_i = [i < n0]. One pair (i, j) costs two `greater` and one int bit (44 neurons with
// the shared slot-order bits); 7 sublayers. The machine's cost per position is
// ceil(n0 / rows) x ceil(n0 / slots) pairs of blocks (all kToppSlots: 16 x 8 at 8 x 16).
struct ToppRankBlock {
  std::vector<ValueId> rank, valid;
};
ToppRankBlock topp_rank_block(Program& p, const std::vector<ValueId>& block, ValueId base,
                              const std::vector<ValueId>& slots, ValueId slot_base, ValueId n0,
                              const std::vector<ValueId>& rank_in, ValueId enable = compiler::kOne);

// NUCLEUS over a block of the sorted RAM (ranks base .. base + rows - 1): C's
// `cumulative_prob += p` from the incoming sum, lt_k = [cum_k > topp or k >= n0 - 1]
// (monotone in k: the first 1 is last_idx), the one-hot of last_idx, and the state
// crossing from block to block (all +0 for the first block).
struct ToppNucleusState {
  ValueId cum;       // the running sum after the last rank
  ValueId crossed;   // lt of the last rank
  ValueId count;     // ranks so far with lt = 0: after the last block, last_idx
  ValueId selected;  // cumulative_prob once crossed (cum at last_idx), else +0
};
struct ToppNucleusBlock {
  std::vector<ValueId> cum, lt, onehot;
  ToppNucleusState out;
};
ToppNucleusBlock topp_nucleus_block(Program& p, const std::vector<ValueId>& sorted, ValueId base, ValueId n0,
                                    ValueId topp, const ToppNucleusState& in, ValueId enable = compiler::kOne);

// R: fl(coin * cumulative_prob). One sublayer.
ValueId topp_r(Program& p, ValueId cumulative, ValueId coin, ValueId enable = compiler::kOne);

// PICK over a block of ranks: cum the running sums NUCLEUS wrote, index the sorted RAM's
// token indices; lt_k = [r < cum_k or k >= last_idx]; the one-hot of the first; token =
// token_in + the index at the one-hot (exact integers; the last block's is run.c's pick).
struct ToppPickBlock {
  std::vector<ValueId> lt, onehot;
  ValueId crossed, token;
};
ToppPickBlock topp_pick_block(Program& p, const std::vector<ValueId>& cum, const std::vector<ValueId>& index,
                              ValueId base, ValueId last_idx, ValueId r, ValueId crossed_in, ValueId token_in,
                              ValueId enable = compiler::kOne);

}  // namespace qpu::npu
