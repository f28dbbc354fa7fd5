#pragma once
// M3 (docs/npu-machine.md, "M3: sampling"): run.c's sample() on its temperature path
// (0 < temperature, topp <= 0 or >= 1: sample_mult) as a part of a looped machine, below
// HEAD. HEAD computes the logits on its cycle; they go down into the logit RAM, and the
// stages run in blocks of `block` logits (nb = vocab / block cycles each), every stage
// reading a RAM the stage before wrote (so the stages stack one below the other):
//
//   TEMP.b  block b of the logit RAM / T (npu::sample_scale_block: fl(logit / t), the
//           block's max) -> the scaled RAM (banked: a row per block) and the block-max
//           RAM (a head per block);
//   MAX     every block max (npu::sample_max_tree) -> the max RAM; with SampleCoin::rng
//           also run.c's coin of this position (npu::rng_draw: draw n = POS - PLEN + 2
//           from the seed limbs) -> the coin RAM;
//   EXP.b   block b of the scaled RAM and the max: expf(x - max) as (mant, exponent)
//           (npu::sample_exp_block) -> the exp RAM (a head per block, read by SUM) and
//           the exp row RAM (banked, read by PROB);
//   SUM     every exp in run.c's order (npu::attn_sum_row; each block's head read where
//           the chain needs it) -> the sum RAM;
//   PROB.b  block b's exps and the sum: p = e / sum as (pm, exponent)
//           (npu::attn_probability; pm split in two columns as the attention's prob RAM)
//           -> the prob RAM (a head per block);
//   CDF     every probability and the coin (a register, or the coin RAM)
//           (npu::sample_cdf_row: C's cdf += p, coin < cdf, the first crossing or run.c's
//           fallback n - 1) -> the sampled index, whose one-hot (successor()) is the
//           computed successor, the story token TOK.k (HEAD's argmax when t = 0).
//
// With SampleOptions::topp_on (run.c's top-p; docs/npu-machine.md, M3 "Top-p on the
// sample machine"; machine/sample_topp_part.cpp), instead of CDF:
//
//   PROB.b  also the cutoff (npu::topp_cutoff of the constant topp), block b's keep bits
//           and in-block slots (npu::topp_keep_block from count 0) -> the keep RAM
//           (banked) and the block's count -> the count RAM (a head per block);
//   KEEP.b  count_in = the counts of the blocks before b (an exact integer sum of the
//           count RAM's heads, each read on the KEEP cycles after its block), slot c_q =
//           count_in + the in-block slot; each kept (p, q) -> the kept RAM at slot c_q:
//           head c_q mod 8, row c_q / 8, the row bits data (count_in's bits), at most one
//           write per head per cycle (a block's kept slots are consecutive); KEEP.0 wipes it;
//   SLOT.r  (r < 16) the kept RAM's row r (slots 8r .. 8r + 7) and n0 (every count), read
//           for the test; SLOT.15 branches on [1 <= n0 <= kToppSlots] to RANK.0.0, else to
//           REFUSE (names DONE: no story token; run.c reads out of bounds for n0 = 0);
//   RANK.i.j (i, j < ceil(n0 / 8)) npu::topp_rank_block (8 x 8) of the kept RAM's row i
//           against its row j (a second copy of the kept RAM: a head reads one row per
//           cycle) -> the partial rank RAM (head j, row i); a branch to RANK.i.(j + 1)
//           while 8 (j + 1) < n0, else RNEXT.i (to RANK.(i + 1).0 while 8 (i + 1) < n0,
//           else RANKSUM.0);
//   RANKSUM.i the ranks of slots 8i .. 8i + 7: the sum of row i's partial ranks over the
//           heads j with 8 j < n0 (the others are stale); their (p, q) -> the sorted RAM
//           (head (lane, rank mod 8), row rank / 8);
//   SORTED.b ranks 8b .. 8b + 7 read back; NUCLEUS instance b (npu::topp_nucleus_block,
//           one instance per block, each below the one before: its state through a
//           one-row state RAM) -> the pick RAM head b (cum before the block, its 8 running
//           sums, its 8 token indices); after the last, last_idx and cumulative_prob, and
//           R: r = coin * cumulative_prob (the coin read on SORTED.15) -> the r RAM;
//   PICK.b  the pick RAM's head b, r and last_idx: npu::topp_pick_block (one instance,
//           the lt before the block recomputed from its cum) -> the block's token (0 unless
//           the pick is there) into the token RAM; PICK.15 sums them: run.c's top-p token,
//           whose one-hot (successor()) names TOK.k.
//
// A count cannot go from KEEP.(b - 1) to KEEP.b at the same layers (a RAM is read at or
// below where it is written): that is why PROB writes the counts and KEEP sums them; the
// partial ranks and PICK's tokens likewise, and NUCLEUS's state by stacking.
//
// Every unit keeps the idle contract: its constants are its stage's flag, its operands
// RAM reads or registers read only on its cycles, so on every other cycle each value it
// writes is +-0 (and its dead-value clears read the flag).
#include <array>
#include <string>
#include <vector>

#include "compiler/ir.h"
#include "machine/assembler.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::machine {

struct SampleOptions {
  int block = 8;                 // logits per TEMP / EXP / PROB cycle (a divisor of the vocabulary)
  int logit_low_binade = -31;    // logits: 0 and |x| in [2^-31, 2^6) (stories260K: [2^-23, 24.6])
  // Scaled logits, their block maxima and max: 0 and |x| in [2^-28, 2^9), i.e. for
  // stories260K's logits every temperature in [0.05, 32].
  int scaled_low_binade = -28;
  int exp_low_binade = -24;      // mant in [2^-23, 4) and integer exponents >= -151
  int sum_low_binade = -27;      // the softmax sum in [1, n]
  int prob_low_binade = -29;     // pm in [2^-22, 4) or pm 2^30 in [2^-24, 2^8), exponents >= -151
  // run.c's -p: 0 < topp < 1 adds the top-p stages (below); any other value leaves the
  // machine exactly as without them (run.c's sample_mult).
  float topp = 1.0f;
  bool topp_on() const { return topp > 0.0f && topp < 1.0f; }
};

// Where the coin comes from: a register the CDF micro-op reads (`value`, its read flag
// `read`), or run.c's generator (`rng`): on MAX's cycle, the draw n = pos - plen +
// draw_offset of the seed (run.c draws one coin per sampled position, the first at run.c's
// pos = plen - 1, plen the prompt's tokens with BOS: offset 2 when `pos` is run.c's pos, 1
// when it is run.c's pos + 1 as in the token machine, whose INC runs before HEAD), all of
// them register values MAX reads (read flags `reads`), exact integers: the seed's 16-bit
// limbs, pos, plen.
struct SampleCoin {
  compiler::ValueId value = compiler::kNever, read = compiler::kNever;
  bool rng = false;
  std::array<compiler::ValueId, 4> seed_limbs{};
  compiler::ValueId pos = compiler::kNever, plen = compiler::kNever;
  std::vector<compiler::ValueId> reads;
  int max_draws = 256;  // the story's steps at most (npu::rng_draw: bit_width jumps)
  int draw_offset = 2;  // n = pos - plen + draw_offset (above)
};

// The values a test sees through AssembledMachine::probes on each stage's cycle.
struct SampleValues {
  std::vector<compiler::ValueId> scaled;         // TEMP.b: logits [block b, block b + block) / t
  compiler::ValueId block_max = 0;               // TEMP.b: their max
  compiler::ValueId max = 0;                     // MAX: softmax's max
  std::vector<compiler::ValueId> mant, exponent; // EXP.b: expf(scaled - max) = mant 2^exponent
  compiler::ValueId sum = 0;                     // SUM: softmax's sum
  std::vector<compiler::ValueId> pm;             // PROB.b: p = pm 2^exponent (the exp's exponent)
  std::vector<compiler::ValueId> cdf, lt, onehot;  // CDF: per index, cdf tier-encoded, [coin < cdf], the pick (successor())
  compiler::ValueId coin = 0;                    // MAX (SampleCoin::rng only): the drawn coin
  // Top-p (SampleOptions::topp_on only; npu/unit_topp.h):
  compiler::ValueId cutoff = 0;                  // PROB.b: run.c's (1.0f - topp) / (n - 1)
  compiler::ValueId count_in = 0;                // KEEP.b: the kept entries before block b
  std::vector<compiler::ValueId> keep, slot;     // KEEP.b: [p_q >= cutoff], c_q = #{kept q' < q}
  std::vector<compiler::ValueId> kept_p, kept_q; // SLOT.r: the kept RAM's slots 8r .. 8r + 7 read back
  compiler::ValueId n0 = 0;                      // SLOT.r: the kept entries (every block's count)
  std::vector<compiler::ValueId> rank;           // RANKSUM.i: the stable ranks of slots 8i .. 8i + 7 (0 past n0)
  std::vector<compiler::ValueId> sorted_p, sorted_q;  // SORTED.b: the sorted RAM's ranks 8b .. 8b + 7
  std::vector<compiler::ValueId> cum;            // SORTED.b (NUCLEUS): C's cumulative_prob after ranks 8b .. 8b + 7 (all 128)
  compiler::ValueId last_idx = 0, cumulative_prob = 0;  // SORTED.15 (NUCLEUS)
  compiler::ValueId r = 0;                       // SORTED.15 (R): coin * cumulative_prob
  compiler::ValueId pick = 0;                    // PICK.15: run.c's top-p token (the story token's index)
  compiler::ValueId pick_cum_in = 0, pick_part = 0;  // PICK.b: cum of rank 8b - 1, the block's token (0 unless picked there)
};

class SamplePart {
 public:
  // TEMP.b, MAX, EXP.b, SUM, PROB.b (b < nb), then CDF, or with top-p KEEP.b (b < nb),
  // SLOT.r, REFUSE, RANK.i.j with RNEXT.i, RANKSUM.i, SORTED.r and PICK.r (r, i, j < kToppSlots / 8).
  static std::vector<std::string> names(const reference::Llama2Config& config, const SampleOptions& options);
  static std::string temp_name(int b);
  static std::string exp_name(int b);
  static std::string prob_name(int b);
  static std::string keep_name(int b);
  static std::string slot_name(int r);
  static std::string rank_name(int i, int j);
  static std::string rsum_name(int i);
  static std::string sorted_name(int b);
  static std::string rnext_name(int i);
  static std::string pick_name(int b);
  static int slot_rows();  // the kept RAM's rows (SLOT cycles): kToppSlots / kToppHeads
  // Whether the top-p units' windows hold topp for a vocabulary of n (npu/unit_topp.h):
  // run.c's cutoff (1 - topp) / (n - 1) >= 2^-24 (n = 512: topp <= 1 - 511 2^-24) and topp
  // >= 2^-40 (greater's window for cum against topp: a nonzero difference >= 2^-70).
  static bool topp_fits(float topp, int n);
  // SampleOptions::block for a vocabulary of n: top-p's blocks are its kept RAM's heads (8);
  // without top-p the largest divisor of n up to 8, so that any vocabulary samples (a prime
  // one in blocks of 1: more cycles, the same values).
  static int block_for(int n, bool topp);
  // The stages' control names of one sampled position, from TEMP.0 to the cycle that names
  // the story token: TEMP.b, MAX, EXP.b, SUM, PROB.b (b < blocks), then CDF; with top-p
  // (`kept`: run.c's n0) KEEP.b, SLOT.r, RANK.i.j for i, j < ceil(n0 / 8) with RNEXT.i
  // after each row block i, RANKSUM.i, SORTED.b, PICK.b, or for n0 = 0 or n0 > kToppSlots
  // SLOT.15 then REFUSE (which names DONE).
  static std::vector<std::string> stream(int blocks, bool topp, int kept);

  // Appends the units and RAMs. `logits`: the vocabulary's logits, complete on the cycle
  // whose flag `logits_on` is 1 (HEAD's) and +-0 on every other; `temperature` a
  // register's value that only the TEMP micro-ops read (+0 on every other cycle: they set
  // `temperature_read`); the coin's registers likewise (only CDF or MAX read them).
  SamplePart(Assembler& as, const reference::Llama2Config& config, const SampleOptions& options,
             const std::vector<compiler::ValueId>& logits, compiler::ValueId logits_on, compiler::ValueId temperature,
             compiler::ValueId temperature_read, const SampleCoin& coin);

  int blocks() const { return blocks_; }
  // The story token's one-hot over the vocabulary (after successor(): CDF's pick on its
  // cycle, HEAD's greedy one on HEAD's, +-0 on every other).
  const std::vector<compiler::ValueId>& onehot() const { return values_.onehot; }
  const SampleValues& values() const { return values_; }
  // run.c's choice between greedy and sampling (temperature 0 or not) as HEAD's successor:
  // the one-hot over the control tokens TOK.0 ... TOK.(vocab - 1), TEMP.0 (consecutive
  // names: Assembler::computed_successor from TOK.0) that is, on HEAD's cycle (flag
  // `head_flag`), HEAD's one-hot (argmax or forced token, exactly 0/1, +-0 on other
  // cycles) when `temperature` (T as HEAD reads it, +0 on other cycles) is 0, else TEMP.0;
  // on CDF's cycle, CDF's one-hot. HEAD is then a Computed micro-op.
  std::vector<compiler::ValueId> successor(const std::vector<compiler::ValueId>& head_onehot,
                                           compiler::ValueId head_flag, compiler::ValueId temperature);
  // The stages' ops after the logit RAM (which sits among the classifier's blocks): a
  // machine orders them below HEAD (Program::order).
  compiler::OpRange stages() const { return stages_; }

  // Defines TEMP.0 ... CDF (CDF's successor is computed). What starts a sampled position
  // (names TEMP.0, e.g. HEAD) is the machine's.
  void define();

 private:
  struct Stage {
    compiler::ValueId on = 0;
    std::vector<compiler::ValueId> block;  // one flag per block (a head per block)
    std::vector<compiler::ValueId> group;  // one flag per banked head (rows_ blocks each)
    std::vector<compiler::ValueId> row;    // the block's row in its banked head (bits)
    std::vector<compiler::ValueId> wipe;   // per banked head: set at its row 0
  };
  void with_block(MicroOp& op, const Stage& s, int b, bool wipes) const;
  // A banked RAM: head g holds blocks [rows_ g, rows_ g + rows_), block b at row b mod
  // rows_; written by stage w (its group flag and row bits; head g wiped at its row 0),
  // read by stage r. `negated`: the data's negations when made already (empty: the RAM
  // makes them). Returns the heads' out values (one head reads at a time).
  std::vector<std::vector<compiler::ValueId>> banked(const std::vector<compiler::ValueId>& data,
                                                     const std::vector<compiler::ValueId>& negated, const Stage& w,
                                                     const Stage& r, int low_binade, const std::string& out_label,
                                                     const std::string& label) const;
  // The top-p stages after PROB (machine/sample_topp_part.cpp): `pe` PROB's gated exp rows
  // (mant, exponent), `zero` a +0 value.
  // The coin (`coin`) is read on SORTED.15.
  void build_topp(const SampleOptions& o, const std::vector<compiler::ValueId>& pe, compiler::ValueId zero,
                  compiler::ValueId coin);
  void define_topp();

  Assembler& as_;
  int vocab_ = 0, block_ = 0, blocks_ = 0, rows_ = 0, groups_ = 0;
  compiler::ValueId temperature_read_ = 0;
  SampleCoin coin_;
  Stage temp_, exp_, prob_, keep_;
  compiler::ValueId max_on_ = 0, sum_on_ = 0, cdf_on_ = 0;
  bool topp_ = false;
  std::vector<compiler::ValueId> keep_before_;  // KEEP.b sets those of the blocks before b (count RAM reads)
  compiler::ValueId keep_wipe_ = 0, slot_on_ = 0;
  std::vector<compiler::ValueId> slot_row_;     // the kept RAM's row read on SLOT.r / RANK.i.j (i), RANKSUM.i (bits)
  compiler::ValueId kept_read_ = 0, rank_on_ = 0, rsum_on_ = 0;
  std::vector<compiler::ValueId> rank_col_, rank_row_, rank_part_, rank_wipe_, rsum_row_, sorted_row_;
  compiler::ValueId sorted_wipe_ = 0, sorted_on_ = 0;
  std::vector<compiler::ValueId> nucleus_block_;  // SORTED.b: NUCLEUS instance b's flag
  compiler::ValueId slot_last_ = 0, rnext_on_ = 0, pick_on_ = 0;
  std::vector<compiler::ValueId> pick_block_;     // PICK.b
  compiler::ValueId final_on_ = 0;  // the cycle whose token_ the successor reads: CDF's, with top-p PICK.15's
  SampleValues values_;
  compiler::OpRange stages_;
  compiler::ValueId token_ = 0;  // the sampled index, CDF's or PICK's (an exact integer, +-0 on other cycles)
};

}  // namespace qpu::machine
