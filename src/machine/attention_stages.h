#pragma once
// M2c (docs/npu-machine.md, "M2c"): the nested attention's stages on the looped machine,
// in the stack below the KV cache of the QKV machine (machine/testing/qkv_machine.h), one
// micro-op kind per stage of run.c's attention (docs/npu-attention.md §1, §7.1):
//
//   SCORE(l).b  1 cycle per block b of 8 positions (8 b .. 8 b + 7): reads q and the
//               block's keys (one row of 8 cache banks, the address a constant of the
//               token), every head's scaled scores -> the score RAM, and the block's
//               max (rows past POS left out) -> the block-max RAM;
//   MAX(l)      reads every block max, leaves out the blocks past POS: each head's max
//               -> the max RAM (past max_side_by_side_blocks blocks, the heads' trees
//               in waves of wave_heads, one below the other);
//   EXP(l).b.g  reads the block's scores and the max of head group g (exp_heads heads):
//               expf(score - max) as expf_parts' (mant, exponent) -> the exp RAM
//               (rows past POS get expf(0), a placeholder the later stages leave out);
//   SUM(l).h.s  reads head h's exps at the positions of segment s (sum_segment_blocks
//               blocks) and adds those up to POS in run.c's order (npu::attn_sum_row, one
//               chain of C additions in two tiers) from the carry (segment 0 from +0);
//               while POS lies past the segment the acc crosses to SUM(l).h.(s + 1)
//               through the crossing routine, else -> the sum RAM;
//   PROB(l).b.g the block's exps and the sums of head group g: run.c's att[t] / sum as
//               (pm, exponent) (npu::attn_probability) -> the prob RAM;
//   WSUM(l).h.s head h's probabilities and v at the positions of segment s
//               (wsum_segment_blocks blocks): run.c's xb = sum_t p_t v_t in C's order, the
//               fast path with its unsafe bit (npu::attn_wsum_row), from the carry
//               (segment 0 from C's 0). While POS lies past the segment and no lane is
//               unsafe, the lanes' state (xb, and the pending mark) crosses to WSUM(l).h.(s+1)
//               through the crossing routine; else -> the xb RAM (xb and the bit) and
//               WSUMX(l).h;
//   WSUMX(l).h  a Branch on head h's bit, read back from the xb RAM: when it is set (the
//               fast xb may differ from C's) on to SLOW(l).h.0, else on;
//   SLOW(l).h.s the exact slow path of head h (C's chain with no flush, xb in two-tier
//               form; docs/npu-attention.md 6.4), one cycle per segment s of
//               slow_segment_blocks blocks: the segment's products
//               (npu::attn_wsum_slow_products, block by block, each beside the previous
//               block's chain) and C's chain of additions (npu::attn_wsum_slow_chain) from
//               the carry (segment 0 from C's 0); rows past POS have p = 0, which leaves
//               C's xb as it is. While POS lies past the segment it calls the crossing
//               routine (CROSS.j ... : every lane's hi and lo into the carry register)
//               with SLOW(l).h.(s + 1) as the continuation; POS's segment writes its xb
//               and the bit 1 into head h's row of the xb RAM and goes on to what
//               WSUMX(l).h names;
// and on the QKV machine, ATTO(l).i: x + wo xb (run.c's x after the attention), lane i.
//
// RAM layouts: the score RAM uses the cache's banks (position t in bank t mod banks, row
// t / banks; one row = every head's score at t), so a stage reads the 8 positions of a
// block in one cycle from one row of 8 banks, and a read-back token reads the position
// POS holds. The exp RAM has one head per position, one row per head group (mant and
// exponent of the group's heads), so SUM reads every position in one cycle, each at
// the depth where its chain needs it; the prob RAM has the same layout, and the v RAM
// (v again, written by QKV) one head per (position, chunk of kv heads), a row per layer.
// The block-max RAM has one head (one row) per block, the max RAM one row, the sum RAM
// one head per place in a head group (a row per group), the xb RAM one one-row head per
// nested head. SLOW reads the prob RAM's and v RAM's position heads on its own segment
// flags when its segments hold WSUM's positions (slow_shares_wsum_heads); otherwise it
// has its own copies of them, each read by the unit of its place in a segment on the
// cycles of its segment. Rows are
// write-once: a group of banks is wiped at its row 0, a head at the write of its row 0.
//
// Read-backs (4 cycles each, for tests and tools): RS.h the score of head h at POS, RM.h
// the max of head h, RE.h / RX.h the mant / exponent of head h's exp at POS, RSUM.h the
// sum of head h, RP.h / RPX.h the pm / exponent of head h's probability at POS, RXB(h).i
// element i of head h's xb (i = head_size: its unsafe bit; 1 also after the slow path,
// whose xb is then C's).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir.h"
#include "machine/assembler.h"
#include "machine/crossing_routine.h"

namespace qpu::machine {

struct AttentionGeometry {
  int layers = 0, heads = 0, kv_heads = 0, head_size = 0;
  int banks = 0, row_bits = 0;  // the cache's banks (a multiple of 8) and row address bits
  int positions = 0;            // positions the cache holds
  int wave_heads = 4;           // heads scored side by side (the others in waves below)
  int max_side_by_side_blocks = 32;  // past this many blocks MAX takes its heads in waves too
  int exp_heads = 2;            // heads one EXP cycle exponentiates (a divisor of heads)
  int score_low_binade = -27;   // scaled scores and maxima (binades -23..9)
  int exp_low_binade = -24;     // mant in [2^-23, 4) and integer exponents >= -151
  int prob_low_binade = -29;    // pm in [2^-22, 4) or pm 2^30 in [2^-24, 2^8), exponents >= -151
  int v_low_binade = -31;       // v (binades -23..1)
  int row_floats = 31;          // floats one RAM row holds (npu::floats_per_row)
  // SLOW's segments: blocks of 8 positions one SLOW cycle adds up (the chain's depth), and
  // the register row its carry crosses into between segments (machine/crossing_routine.h).
  int slow_segment_blocks = 4;
  int wsum_segment_blocks = 8;  // the same for WSUM's fast path
  int sum_segment_blocks = 16;  // and for SUM
  int64_t carry_register = 1;
  // Sharing WSUM's heads: SLOW's chain beside WSUM's (the two share depth, their widths
  // add) or below it (the places' operands live across WSUM's band). Which gives the
  // smaller machine depends on the rest of the schedule.
  bool slow_beside_wsum = false;

  int groups() const { return banks / 8; }
  int blocks() const { return (positions + 7) / 8; }
  int slow_blocks() const { return std::max(1, std::min(slow_segment_blocks, blocks())); }
  int slow_positions() const { return 8 * slow_blocks(); }
  int slow_segments() const { return (blocks() + slow_blocks() - 1) / slow_blocks(); }
  int wsum_blocks() const { return std::max(1, std::min(wsum_segment_blocks, blocks())); }
  int wsum_positions() const { return 8 * wsum_blocks(); }
  int wsum_segments() const { return (blocks() + wsum_blocks() - 1) / wsum_blocks(); }
  int sum_blocks() const { return std::max(1, std::min(sum_segment_blocks, blocks())); }
  int sum_positions() const { return 8 * sum_blocks(); }
  int sum_segments() const { return (blocks() + sum_blocks() - 1) / sum_blocks(); }
  // SLOW reads WSUM's prob and v RAM heads (no copies of its own) when their segments hold
  // the same positions: place o of either segment reads the heads of positions s' W + o.
  bool slow_shares_wsum_heads() const { return slow_blocks() == wsum_blocks(); }
  // Whether any chain runs in more than one segment (then the machine has the crossing routine).
  bool crosses() const { return slow_segments() > 1 || wsum_segments() > 1 || sum_segments() > 1; }
  int exp_groups() const { return heads / exp_heads; }
  static int bits_for(int n) {  // address bits for n rows
    int b = 0;
    while ((1 << b) < n) ++b;
    return b;
  }
};

class AttentionStages {
 public:
  // The control names the stages add (SCORE(l).b, MAX(l), EXP(l).b.g, SUM(l).h,
  // PROB(l).b.g, WSUM(l).h, the read-backs).
  static std::vector<std::string> names(const AttentionGeometry& g);

  // Creates the stages' token inputs. Call before the cache is built: the cache reads
  // its banks at the address cache_read() gives.
  AttentionStages(Assembler& as, const AttentionGeometry& g);

  // The read address of layer l's cache banks: POS's (row bits, bank one-hot: the
  // read-back micro-ops) or a SCORE token's (row bits, the 8 banks of its group).
  void cache_read(int layer, std::vector<compiler::ValueId>& row_bits, std::vector<compiler::ValueId>& bank_flags);

  // Appends the units and RAMs: q (heads * head_size values, read when `q_read` is
  // set), the cache's 8 slots (k || v of every kv head), v (QKV's, kv_dim values, written
  // into the v RAM when qkv_on, QKV's enable, is 1), pos (the POS register's value, read
  // when `pos_read` is set). Every op of the score unit runs after `before`.
  void build(const std::vector<compiler::ValueId>& q, const std::vector<std::vector<compiler::ValueId>>& slots,
             const std::vector<compiler::ValueId>& v, compiler::ValueId qkv_on, compiler::ValueId pos,
             compiler::OpRange before);

  // What QKV(l) sets beside its own flags: the v RAM row (the layer) it writes.
  std::vector<std::pair<compiler::ValueId, float>> qkv_sets(int layer) const;

  // run.c's xb of every head (heads * head_size values, the attention's output for wo),
  // read from the xb RAM when `xb_read()` is set (after build()).
  const std::vector<compiler::ValueId>& xb() const { return xb_; }
  compiler::ValueId xb_read() const { return xb_back_; }

  // The values the read-backs send, in lane order (after build()).
  const std::vector<compiler::ValueId>& lanes() const { return lanes_; }

  // Defines the stages' micro-ops; their read-back lanes start at `first_lane` of the
  // machine's send(); `send` is the send() enable; q_read / pos_read the read flags of
  // the q RAM and POS. Chained: MAX(l) goes on to EXP(l).0.0 and the last WSUM(l) to
  // ATTO(l).0 (the machine defines ATTO); else to RM.0 and DONE (stages started by the
  // host, for tests).
  void define(int first_lane, compiler::ValueId send, compiler::ValueId q_read, compiler::ValueId pos_read,
              bool chained);

 private:
  struct Inputs;
  // The exp or prob RAM's head of position t (one row per head group: written at the
  // stage's row bits when its block flag of t's block is set, with the stage's flag as
  // the write side's enable, wiped with its wipe flag, read at `query_bits` when `read` is
  // set); data[s] and negated[s] for slot s = t mod 8. Returns
  // its out values.
  std::vector<compiler::ValueId> position_head(compiler::Program& p, const std::string& ram, size_t t,
                                               const std::vector<std::vector<compiler::ValueId>>& data,
                                               const std::vector<std::vector<compiler::ValueId>>& negated,
                                               const Inputs& stage, const std::vector<compiler::ValueId>& query_bits,
                                               compiler::ValueId read, int low_binade);

  // SLOW's operands at each place o of a segment, picked from WSUM's heads by WSUM's pick
  // ops on SLOW's cycles (its segment and head flags), so that a head's outs die at one
  // op however far below WSUM's chain SLOW's runs: pm, exponent and v (head_size values)
  // of position s W + o, +-0 past POS and on other cycles; and [s W + o > POS] and SLOW's
  // copy of POS they are made from.
  struct SlowPlaces {
    compiler::ValueId pos = 0;
    std::vector<compiler::ValueId> past, pm, exponent;
    std::vector<std::vector<compiler::ValueId>> v;
  };
  // SLOW's unit for one segment: its operands from SlowInputs::places or its own copies of
  // the prob RAM's and v RAM's position heads; its first products after `below` (SLOW's
  // chain below WSUM's), or with none beside it. Returns C's xb after the segment (head_size values, +0 when idle) and
  // `more` (the segment's branch: 1 when POS lies past it; the carry is then parked for
  // the crossing routine).
  struct SlowInputs {
    const std::vector<std::vector<compiler::ValueId>>& probs;     // PROB's data per slot, and negated
    const std::vector<std::vector<compiler::ValueId>>& prob_neg;
    const std::vector<std::vector<compiler::ValueId>>& v_data;    // QKV's v per chunk, and negated
    const std::vector<std::vector<compiler::ValueId>>& v_neg;
    compiler::ValueId qkv_on, pos;
    // With AttentionGeometry::slow_shares_wsum_heads: what WSUM's picks read for SLOW
    // (SlowPlaces); else nullptr (SLOW builds its own copies of the heads).
    const SlowPlaces* places;
  };
  SlowPlaces slow_places(compiler::ValueId pos);
  struct SlowResult {
    std::vector<compiler::ValueId> xb;
    compiler::ValueId more = compiler::kNever;
  };
  SlowResult build_slow(const SlowInputs& in, std::optional<compiler::OpRange> below);
  // [POS == t] on the cycles where `on` is 1, else +-0, made where it is called from
  // `pos_copy`, a copy of POS gated by `on` (e.g. v_pos_, QKV's: a v RAM head's write flag).
  compiler::ValueId position_flag(size_t t, compiler::ValueId pos_copy, compiler::ValueId on, const std::string& label);
  compiler::ValueId v_pos_ = 0;

  Assembler& as_;
  AttentionGeometry g_;
  struct Inputs {
    compiler::ValueId on = 0;            // the stage's enable (any of its tokens)
    std::vector<compiler::ValueId> group, block;
    std::vector<compiler::ValueId> wipe;  // score: one per bank group; exp and prob: one per block
    std::vector<compiler::ValueId> row;   // exp and prob: the row bits (a head group) their heads are written at
  };
  std::vector<compiler::ValueId> row_;   // row bits of a stage token's block (shared)
  std::vector<compiler::ValueId> cache_group_;  // [layer * groups + group]: SCORE's cache banks
  std::vector<std::vector<compiler::ValueId>> cache_row_;  // [layer]: SCORE's cache row bits
  Inputs score_, exp_;  // exp_.group: the score RAM's bank group EXP reads; exp_.block: the exp heads written
  std::vector<compiler::ValueId> exp_head_group_;  // the head group an EXP token computes
  std::vector<compiler::ValueId> exp_query_;       // the exp RAM row SUM and RE/RX read (a head group)
  std::vector<compiler::ValueId> sum_k_;           // the head of its group SUM adds up
  compiler::ValueId max_on_ = 0, score_back_ = 0, max_back_ = 0, exp_back_ = 0;
  compiler::ValueId sum_on_ = 0, sum_back_ = 0, prob_back_ = 0;
  std::vector<compiler::ValueId> sum_wipe_;        // per sum RAM (place k in a head group)
  std::vector<compiler::ValueId> sum_segment_;     // SUM(l).h.s: the segment s (one-hot)
  Inputs prob_;                                    // block / wipe: the prob RAM heads written
  compiler::ValueId wsum_on_ = 0, xb_back_ = 0;
  std::vector<compiler::ValueId> wsum_segment_;  // WSUM(l).h.s: the segment s (one-hot)
  std::vector<compiler::ValueId> wsumx_head_;    // WSUMX(l).h: the head whose unsafe bit it reads
  compiler::ValueId wsum_cross_ = 0;             // 1 when WSUM's state crosses to its next segment
  std::vector<compiler::ValueId> wsum_k_, wsum_kv_;  // WSUM's head: its place in its group, its kv head
  std::vector<compiler::ValueId> wsum_head_;         // ... and the head itself (its xb RAM head)
  std::vector<compiler::ValueId> xb_;                // the xb RAM's out values, heads * head_size
  std::vector<compiler::ValueId> vram_row_;          // the v RAM row (a layer) QKV writes
  std::vector<compiler::ValueId> wsum_vrow_, slow_vrow_;  // ... and the row WSUM / SLOW read
  // SLOW(l).h.s: its enable, head h as its place in its group, its kv head and its xb RAM
  // head.
  compiler::ValueId slow_on_ = 0;
  std::vector<compiler::ValueId> slow_k_, slow_kv_, slow_head_;
  std::vector<compiler::ValueId> slow_segment_;  // SLOW(l).h.s: the segment s (one-hot)
  // The carry crossing between the chains' segments (when a chain has several:
  // AttentionGeometry::crosses) and where its lanes start among lanes().
  std::optional<CrossingRoutine> cross_;
  int cross_lane_ = 0;
  // What the write sides of the v RAMs read instead of the rail: 1 on the cycles of the
  // stages that set their row bits (the position heads read their stage's flag).
  compiler::ValueId v_write_enable_ = 0;
  std::vector<compiler::ValueId> lanes_;
};

}  // namespace qpu::machine
