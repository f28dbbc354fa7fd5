// run.c's top-p stages of the sample part (machine/sample_part.h: KEEP, SLOT, RANK, RNEXT,
// RANKSUM, SORTED with NUCLEUS and R, PICK; REFUSE), split from sample_part.cpp.
#include <array>
#include <string>

#include "common/error.h"
#include "compiler/enable.h"
#include "machine/sample_part.h"
#include "machine/sample_ram.h"
#include "npu/float_ram.h"
#include "npu/primitives.h"
#include "npu/table_lookup.h"
#include "npu/unit_attention.h"
#include "npu/unit_gate.h"
#include "npu/unit_topp.h"

namespace qpu::machine {

using compiler::Lin;
using compiler::Neuron;
using compiler::ValueId;
using namespace sample_ram;

namespace {

// Entries' (p, q) and n0 through a stage's flag (Assembler::gated): other stages read the
// same RAM outs, and an idle unit's operands must be +-0.
struct Entries {
  std::vector<ValueId> p, q;
  ValueId n0 = 0;
};
Entries gated_entries(Assembler& as, const std::vector<ValueId>& p, const std::vector<ValueId>& q, ValueId n0,
                      ValueId flag, const std::string& label) {
  std::vector<ValueId> all = p;
  all.insert(all.end(), q.begin(), q.end());
  all.push_back(n0);
  all = as.gated(all, {flag}, label);
  return {{all.begin(), all.begin() + static_cast<std::ptrdiff_t>(p.size())},
          {all.begin() + static_cast<std::ptrdiff_t>(p.size()), all.end() - 1},
          all.back()};
}

}  // namespace

void SamplePart::build_topp(const SampleOptions& o, const std::vector<ValueId>& pe, ValueId zero, ValueId coin) {
  Assembler& as = as_;
  compiler::Program& p = as.program();
  const int B = block_;
  // Top-p's KEEP (docs/npu-machine.md, M3 "Top-p on the machine"). The count of kept
  // entries before block b cannot go from KEEP.(b - 1) to KEEP.b at the same layers
  // (a RAM is read at or below where it is written), so PROB.b computes each block's
  // keep bits and in-block slots (npu::topp_keep_block from count 0) into the keep RAM
  // (banked) and its count into the count RAM (a head per block); KEEP.b, below, reads
  // them back, adds the counts of the blocks before b (an exact integer sum) and writes
  // each kept (p, q) into the kept RAM at its slot: an address that is data.
  const size_t first_keep = p.ops().size();
  const ValueId topp_value = p.value("topp.p");
  npu::const_acc(p, topp_value, o.topp, "topp.p");
  compiler::enable_constants(p, first_keep, prob_.on);
  values_.cutoff = npu::topp_cutoff(p, topp_value, vocab_, prob_.on);
  std::vector<ValueId> pm = values_.pm, exponent(pe.begin() + B, pe.end());
  const npu::ToppKeepBlock kb = npu::topp_keep_block(p, pm, exponent, values_.cutoff, p.value("keep.count0"), prob_.on);
  std::vector<ValueId> keep_data;  // kept p (0 when not kept: p may lie below the window), keep, in-block slot
  const size_t first_sel = p.ops().size();
  for (int s = 0; s < B; ++s) keep_data.push_back(npu::select(p, kb.keep[at(s)], kb.prob[at(s)], zero, "keep.kept_p"));
  compiler::enable_constants(p, first_sel, prob_.on);
  keep_data.insert(keep_data.end(), kb.keep.begin(), kb.keep.end());
  keep_data.insert(keep_data.end(), kb.slot.begin(), kb.slot.end());
  as.gate_clears(first_keep, p.ops().size(), prob_.on);
  const auto keep_rows = banked(keep_data, {}, prob_, keep_, kToppLowBinade, "keep RAM.out", "keep RAM");
  const std::vector<ValueId> counts =
      per_block_ram(p, kb.count, prob_.block, keep_before_, prob_.on, kToppLowBinade, "keep.count_out", "count RAM");

  // KEEP.b: slot c_q = count_in + the in-block slot j_q. The block's kept slots are
  // consecutive from count_in = 8 base + d, so the lane with j goes to head (d + j) mod 8
  // and every head h to one row: base + [h < d] (the wrapped heads). A lane's one-hot over
  // the 8 heads (of an index past them when not kept) says which head it writes; a head
  // whose row is >= kToppSlots / 8 (slot >= kToppSlots: refused) writes nothing.
  const size_t first = p.ops().size();
  const std::vector<ValueId> row = as.gated(keep_rows, {keep_.on}, "keep.row");
  Lin count_in;
  for (ValueId c : counts) count_in.terms.push_back({c, 1.0f});
  values_.count_in = npu::detail::integer_value(p, count_in, "keep.count_in");
  const int count_bits = bits_for(vocab_ + 1), kept_row_bits = bits_for(slot_rows());
  const std::vector<ValueId> cb = npu::int_to_bits(p, values_.count_in, count_bits);  // most significant first
  Lin d, base;
  for (int j = 0; j < count_bits; ++j) {
    const ValueId bit = cb[at(count_bits - 1 - j)];
    if (j < 3) d.terms.push_back({bit, static_cast<float>(1 << j)});
    else base.terms.push_back({bit, static_cast<float>(1 << (j - 3))});
  }
  // The two rows a block writes, as bits (least significant first, as key bits).
  std::array<std::vector<ValueId>, 2> row_of;
  for (int w = 0; w < 2; ++w) {
    Lin r = base;
    r.terms.push_back({compiler::kOne, static_cast<float>(w)});
    std::vector<ValueId> msb = npu::int_to_bits(p, npu::detail::integer_value(p, r, "kept.base"), count_bits - 3);
    row_of[at(w)].assign(msb.rbegin(), msb.rend());
  }
  std::vector<std::vector<ValueId>> hot;
  std::vector<ValueId> q;
  for (int s = 0; s < B; ++s) {
    const ValueId keep = row[at(B + s)], in_block = row[at(2 * B + s)];
    values_.keep.push_back(keep);
    values_.slot.push_back(npu::detail::integer_value(p, Lin{{{values_.count_in, 1.0f}, {in_block, 1.0f}}}, "keep.slot"));
    Lin t = d;  // d + j = d + slot - count_in, 0 .. 14
    t.terms.push_back({values_.slot.back(), 1.0f});
    t.terms.push_back({values_.count_in, -1.0f});
    Lin wrap = t;  // [d + j >= 8]
    wrap.terms.push_back({compiler::kOne, -7.0f});
    const ValueId wrapped = npu::attn_int_positive(p, wrap, "keep.wrap");
    Lin head = t;  // (d + j) mod 8, or past the heads when not kept
    head.terms.push_back({wrapped, -8.0f});
    head.terms.push_back({compiler::kOne, 8.0f});
    head.terms.push_back({keep, -8.0f});
    hot.push_back(npu::one_hot(p, npu::detail::integer_value(p, head, "keep.head"), kToppHeads, "keep.hot"));
    Lin qs;  // q = 8 b + s from KEEP's block flags
    for (int b = 0; b < blocks_; ++b) qs.terms.push_back({keep_.block[at(b)], static_cast<float>(b * B + s)});
    q.push_back(npu::detail::integer_value(p, qs, "keep.q"));
  }
  std::vector<npu::FloatRamHead> heads;
  for (int h = 0; h < kToppHeads; ++h) {
    npu::FloatRamHead ram;
    ram.data = {p.value("kept.p"), p.value("kept.q")};
    std::vector<Neuron> pass;  // the one lane at head h passes its p and q
    Lin written{{{compiler::kOne, -1.0f}}};
    for (int s = 0; s < B; ++s) {
      const ValueId v = hot[at(s)][at(h)];
      written.terms.push_back({v, 1.0f});
      pass.push_back(Neuron{Lin{{{v, kGateOn}}}, Lin{{{row[at(s)], 1.0f / kGateOn}}}, {{ram.data[0], 1.0f}}});
      pass.push_back(Neuron{Lin{{{v, kGateOn}}}, Lin{{{q[at(s)], 1.0f / kGateOn}}}, {{ram.data[1], 1.0f}}});
    }
    p.mlp("kept.pass", std::move(pass));
    Lin dh = d;  // [h < d]: the head's slot wrapped into the next row
    dh.terms.push_back({compiler::kOne, static_cast<float>(-h)});
    const ValueId next = npu::attn_int_positive(p, dh, "kept.next");
    Lin room = base;  // [base + next < kToppSlots / 8], as 16 - base - next >= 1
    for (compiler::Term& term : room.terms) term.weight = -term.weight;
    room.terms.push_back({next, -1.0f});
    room.terms.push_back({compiler::kOne, static_cast<float>(slot_rows())});
    written.terms.push_back({npu::attn_int_positive(p, room, "kept.room"), 1.0f});
    ram.write_flag = npu::detail::bit_value(p, written, "kept.write");  // a lane here and room
    for (int j = 0; j < kept_row_bits; ++j)
      ram.key_bits.push_back(npu::select(p, next, row_of[1][at(j)], row_of[0][at(j)], "kept.row"));
    ram.wipe_flag = keep_wipe_;  // KEEP.0 empties every row (rows are write-once)
    ram.write_enable = keep_.on;
    ram.query_bits = slot_row_;
    ram.read_flag = kept_read_;
    ram.out = p.values("kept.out", 2);
    values_.kept_p.push_back(ram.out[0]);
    values_.kept_q.push_back(ram.out[1]);
    heads.push_back(std::move(ram));
  }
  compiler::enable_constants(p, first, keep_.on);
  as.gate_clears(first, p.ops().size(), keep_.on);
  // A second copy (the same writes) that RANK reads at its slot block's row: a head
  // reads one row per cycle, RANK needs two (its row block's and its slot block's).
  std::vector<npu::FloatRamHead> copies = heads;
  std::vector<ValueId> col_p;
  for (npu::FloatRamHead& h : copies) {
    h.query_bits = rank_col_;
    h.read_flag = rank_on_;
    h.out = p.values("kept.col_out", 2);
    col_p.push_back(h.out[0]);
  }
  heads.insert(heads.end(), copies.begin(), copies.end());
  npu::float_ram(p, npu::FloatRamWindow{kToppLowBinade}, heads, keep_.on, "kept RAM");
  // SLOT.r reads the kept RAM's row r (slots 8 r .. 8 r + 7) and every block's count
  // (n0, which RANK's masks and the n0 = 0 / n0 > kToppSlots refusals need) for the
  // test; until RANK reads them, a sink op does (a probe needs a reader that does not
  // write the value).
  const size_t first_n0 = p.ops().size();
  values_.n0 = npu::detail::integer_value(p, count_in, "slot.n0");
  compiler::enable_constants(p, first_n0, kept_read_);
  std::vector<ValueId> read = values_.kept_p;
  read.insert(read.end(), values_.kept_q.begin(), values_.kept_q.end());
  read.push_back(values_.n0);
  const ValueId sink = p.value("kept.sink");
  std::vector<Neuron> sink_ns;
  for (ValueId v : read) sink_ns.push_back(Neuron{Lin{{{slot_on_, kGateOn}}}, Lin{{{v, 1.0f / kGateOn}}}, {{sink, 1.0f}}});
  p.mlp("kept.sink", std::move(sink_ns));
  as.discard({sink}, slot_on_, "kept.sink_unread");
  // The refusals: nothing kept (run.c reads probindex[-1]) or more than kToppSlots (past
  // RANK's slots). SLOT's last cycle branches on [1 <= n0 <= kToppSlots] to RANK.0.0,
  // else to REFUSE (which names DONE: the machine emits no story token).
  {
    const size_t first_ok = p.ops().size();
    const ValueId n0 = as.gated(std::vector<ValueId>{values_.n0}, {slot_last_}, "slot.n0_last")[0];
    const ValueId some = npu::attn_int_positive(p, Lin{{{n0, 1.0f}}}, "slot.some");
    const ValueId fits = npu::attn_int_positive(
        p, Lin{{{n0, -1.0f}, {compiler::kOne, static_cast<float>(npu::kToppSlots + 1)}}}, "slot.fits");
    const ValueId ok = npu::attn_int_positive(p, Lin{{{some, 1.0f}, {fits, 1.0f}, {compiler::kOne, -1.0f}}}, "slot.ok");
    compiler::enable_constants(p, first_ok, slot_last_);  // idle (every cycle but SLOT's last): ok = +-0
    as.gate_clears(first_ok, p.ops().size(), slot_last_);
    as.branch(ok);
  }

  // RANK.i.j: the kept RAM's row block i (slots 8i ..) against its slot block j
  // (npu::topp_rank_block, 8 x 8, rows and slots >= n0 masked): partial ranks, which
  // cannot be carried from j to j + 1 at the same layers, so each pair writes them to
  // the partial RAM (head j, row i) and RANKSUM.i sums the 16 heads' row i.
  const size_t first_rank = p.ops().size();
  Lin row_base, slot_base;
  for (size_t j = 0; j < slot_row_.size(); ++j) {
    row_base.terms.push_back({slot_row_[j], static_cast<float>(kToppHeads << j)});
    slot_base.terms.push_back({rank_col_[j], static_cast<float>(kToppHeads << j)});
  }
  const ValueId base_v = npu::detail::integer_value(p, row_base, "rank.base");
  const ValueId slot_base_v = npu::detail::integer_value(p, slot_base, "rank.slot_base");
  const std::vector<ValueId> rank_in = p.values("rank.in", kToppHeads);  // never written: +0
  // The kept RAM's row block and n0 through RANK's flag: SLOT and RANKSUM read them too (the
  // idle contract: an idle unit's operands are +-0).
  const std::vector<ValueId> row_p = as.gated(values_.kept_p, {rank_on_}, "rank.row_p");
  const ValueId rank_n0 = as.gated(std::vector<ValueId>{values_.n0}, {rank_on_}, "rank.n0")[0];
  const npu::ToppRankBlock rb = npu::topp_rank_block(p, row_p, base_v, col_p, slot_base_v, rank_n0, rank_in, rank_on_);
  // Only the block pairs below n0 run: RANK.i.j goes on to RANK.i.(j + 1) while slot
  // block j + 1 holds a kept slot (8 (j + 1) < n0), else to RNEXT.i, which goes on to
  // RANK.(i + 1).0 while 8 (i + 1) < n0, else to RANKSUM.0.
  as.branch(npu::attn_int_positive(p, Lin{{{rank_n0, 1.0f}, {slot_base_v, -1.0f}, {compiler::kOne, -8.0f}}}, "rank.more"));
  compiler::enable_constants(p, first_rank, rank_on_);
  as.gate_clears(first_rank, p.ops().size(), rank_on_);
  {
    const size_t first_next = p.ops().size();
    // n0 and the row block's base 8 i (its own: RANK's base_v reads RANK's flag)
    const std::vector<ValueId> g = as.gated(std::vector<ValueId>{values_.n0}, {rnext_on_}, "rnext.n0");
    Lin more{{{g[0], 1.0f}, {compiler::kOne, -8.0f}}};
    for (const compiler::Term& t : row_base.terms) more.terms.push_back({t.value, -t.weight});
    as.branch(npu::attn_int_positive(p, more, "rnext.more"));
    compiler::enable_constants(p, first_next, rnext_on_);
    as.gate_clears(first_next, p.ops().size(), rnext_on_);
  }
  std::vector<npu::FloatRamHead> parts;
  std::vector<std::vector<ValueId>> part_out;
  {
    std::vector<npu::FloatRamHead> one(1);
    one[0].data = rb.rank;
    const auto neg = npu::float_ram_negations(p, one, rank_on_, "partial rank RAM");
    for (int j = 0; j < slot_rows(); ++j) {
      npu::FloatRamHead h;
      h.data = rb.rank;
      h.negated = neg[0];
      h.key_bits = rank_row_;  // not slot_row_: RANKSUM sets those (the kept RAM's row) with this RAM's writes off
      h.write_flag = rank_part_[at(j)];
      h.wipe_flag = rank_wipe_[at(j)];
      h.write_enable = rank_on_;
      h.query_bits = rsum_row_;
      h.read_flag = rsum_on_;
      h.out = p.values("rank.part_out", kToppHeads);
      part_out.push_back(h.out);
      parts.push_back(std::move(h));
    }
    npu::float_ram(p, npu::FloatRamWindow{kToppLowBinade}, parts, rank_on_, "partial rank RAM");
  }
  // RANKSUM.i: rank = the sum of row i's partial ranks (exact integers) over the heads j
  // with 8 j < n0: RANK.i.j ran (and RANK.0.j wiped head j) only for those, the others
  // hold an earlier position's ranks. RANKSUM.i reads the kept RAM's row i (p, q) and n0
  // again (through its flag, as RANK's) for the sorted RAM below.
  const size_t first_rsum = p.ops().size();
  const Entries entry = gated_entries(as, values_.kept_p, values_.kept_q, values_.n0, rsum_on_, "sorted.entry");
  const ValueId sorted_n0 = entry.n0;
  std::vector<ValueId> ran;  // [8 j < n0]
  for (int j = 0; j < slot_rows(); ++j)
    ran.push_back(npu::attn_int_positive(p, Lin{{{sorted_n0, 1.0f}, {compiler::kOne, static_cast<float>(-kToppHeads * j)}}}, "rsum.ran"));
  for (int s = 0; s < kToppHeads; ++s) {
    values_.rank.push_back(p.value("rsum.rank"));
    std::vector<Neuron> ns;
    for (size_t j = 0; j < part_out.size(); ++j)
      ns.push_back(Neuron{Lin{{{ran[j], kGateOn}}}, Lin{{{part_out[j][at(s)], 1.0f / kGateOn}}}, {{values_.rank.back(), 1.0f}}});
    p.mlp("rsum.rank", std::move(ns));
  }
  compiler::enable_constants(p, first_rsum, rsum_on_);
  as.gate_clears(first_rsum, p.ops().size(), rsum_on_);
  // The sorted RAM: rank k at head (lane s, k mod 8), row k / 8, where s is the lane of
  // the kept slot with rank k (its slot mod 8). Lane s writes only its own 8 heads, one
  // per cycle (distinct ranks), and a block of ranks 8b .. 8b + 7 reads row b of every
  // head: rank 8b + t is the sum over s of head (s, t) (one written, the rest +0 after
  // RANKSUM.0's wipe). RANKSUM.i reads the kept RAM's row i (p, q) and n0 again for this.
  const size_t first_sorted = p.ops().size();
  Lin rsum_base;
  for (size_t j = 0; j < slot_row_.size(); ++j) rsum_base.terms.push_back({slot_row_[j], static_cast<float>(kToppHeads << j)});
  std::vector<npu::FloatRamHead> sorted;
  for (int s = 0; s < kToppHeads; ++s) {
    // valid = [8i + s < n0]: ranks of slots past n0 are 0 and must not write
    Lin valid{{{sorted_n0, 1.0f}, {compiler::kOne, static_cast<float>(-s)}}};
    for (const compiler::Term& t : rsum_base.terms) valid.terms.push_back({t.value, -t.weight});
    const ValueId ok = npu::attn_int_positive(p, valid, "sorted.valid");
    const std::vector<ValueId> msb = npu::int_to_bits(p, values_.rank[at(s)], bits_for(npu::kToppSlots));
    const std::vector<ValueId> lsb(msb.rbegin(), msb.rend());
    Lin residue{{{compiler::kOne, 8.0f}, {ok, -8.0f}}};  // rank mod 8, past the heads when not valid
    for (int j = 0; j < 3; ++j) residue.terms.push_back({lsb[at(j)], static_cast<float>(1 << j)});
    const std::vector<ValueId> residue_hot =
        npu::one_hot(p, npu::detail::integer_value(p, residue, "sorted.residue"), kToppHeads, "sorted.hot");
    for (int t = 0; t < kToppHeads; ++t) {
      npu::FloatRamHead h;
      h.data = {entry.p[at(s)], entry.q[at(s)]};
      h.key_bits.assign(lsb.begin() + 3, lsb.end());
      h.write_flag = residue_hot[at(t)];
      h.wipe_flag = sorted_wipe_;
      h.write_enable = rsum_on_;
      h.query_bits = sorted_row_;
      h.read_flag = sorted_on_;
      h.out = p.values("sorted.out", 2);
      sorted.push_back(std::move(h));
    }
  }
  compiler::enable_constants(p, first_sorted, rsum_on_);
  as.gate_clears(first_sorted, p.ops().size(), rsum_on_);
  npu::float_ram(p, npu::FloatRamWindow{kToppLowBinade}, sorted, rsum_on_, "sorted RAM");
  // SORTED.b: ranks 8b .. 8b + 7 (p, q), for the test (NUCLEUS's and PICK's reads, to come).
  const size_t first_read = p.ops().size();
  for (int t = 0; t < kToppHeads; ++t) {
    const ValueId sp = p.value("sorted.p"), sq = p.value("sorted.q");
    std::vector<Neuron> ns;
    for (int s = 0; s < kToppHeads; ++s) {
      const npu::FloatRamHead& h = sorted[at(s * kToppHeads + t)];
      ns.push_back(Neuron{Lin{{{sorted_on_, kGateOn}}}, Lin{{{h.out[0], 1.0f / kGateOn}}}, {{sp, 1.0f}}});
      ns.push_back(Neuron{Lin{{{sorted_on_, kGateOn}}}, Lin{{{h.out[1], 1.0f / kGateOn}}}, {{sq, 1.0f}}});
    }
    p.mlp("sorted.gather", std::move(ns));
    values_.sorted_p.push_back(sp);
    values_.sorted_q.push_back(sq);
  }
  as.gate_clears(first_read, p.ops().size(), sorted_on_);
  std::vector<ValueId> sorted_read = values_.sorted_p;
  sorted_read.insert(sorted_read.end(), values_.sorted_q.begin(), values_.sorted_q.end());
  const ValueId sorted_sink = p.value("sorted.sink");
  std::vector<Neuron> sorted_ns;
  for (ValueId v : sorted_read)
    sorted_ns.push_back(Neuron{Lin{{{sorted_on_, kGateOn}}}, Lin{{{v, 1.0f / kGateOn}}}, {{sorted_sink, 1.0f}}});
  p.mlp("sorted.sink", std::move(sorted_ns));

  // NUCLEUS on SORTED.b: npu::topp_nucleus_block over ranks 8b .. 8b + 7. Its state
  // (cum, crossed, count, selected) cannot go from SORTED.b to SORTED.(b + 1) at the same
  // layers, so each block has its own instance, below the one before: instance b writes
  // its state into state RAM b, instance b + 1 reads it (the depth law's stack).
  npu::ToppNucleusState state{p.value("nucleus.cum0"), p.value("nucleus.crossed0"), p.value("nucleus.count0"),
                              p.value("nucleus.selected0")};  // never written: +0
  // PICK.b reads instance b's running sums (and the one before its block) and the ranks'
  // token indices back from the pick RAM (a head per block, written on SORTED.b) into
  // its lanes: cum_in, cum 8b .. 8b + 7, q 8b .. 8b + 7.
  const std::vector<ValueId> lanes = p.values("pick.lane", 1 + 2 * kToppHeads);
  for (int b = 0; b < slot_rows(); ++b) {
    const ValueId on = nucleus_block_[at(b)];
    const size_t first_b = p.ops().size();
    const Entries in = gated_entries(as, values_.sorted_p, values_.sorted_q, values_.n0, on, "nucleus.in");
    const ValueId cum_in = state.cum;
    const size_t first_const = p.ops().size();
    const ValueId topp_b = p.value("nucleus.topp");
    npu::const_acc(p, topp_b, o.topp, "nucleus.topp");
    const ValueId base_b = npu::detail::integer_value(p, Lin{{{compiler::kOne, static_cast<float>(b * kToppHeads)}}}, "nucleus.base");
    compiler::enable_constants(p, first_const, on);
    const npu::ToppNucleusBlock nb = npu::topp_nucleus_block(p, in.p, base_b, in.n0, topp_b, state, on);
    values_.cum.insert(values_.cum.end(), nb.cum.begin(), nb.cum.end());
    as.gate_clears(first_b, p.ops().size(), on);
    {
      std::vector<ValueId> data = {cum_in};
      data.insert(data.end(), nb.cum.begin(), nb.cum.end());
      data.insert(data.end(), in.q.begin(), in.q.end());
      const npu::FloatRamHead h = one_row_head(p, data, {}, on, pick_block_[at(b)], "pick.out");
      npu::float_ram(p, npu::FloatRamWindow{kToppLowBinade}, {h}, on, "pick RAM " + std::to_string(b));
      std::vector<Neuron> ns;
      for (size_t t = 0; t < lanes.size(); ++t)
        ns.push_back(Neuron{Lin{{{pick_on_, kGateOn}}}, Lin{{{h.out[t], 1.0f / kGateOn}}}, {{lanes[t], 1.0f}}});
      p.mlp("pick.lane", std::move(ns));
    }
    if (b + 1 < slot_rows()) {
      const std::vector<ValueId> data = {nb.out.cum, nb.out.crossed, nb.out.count, nb.out.selected};
      const npu::FloatRamHead h = one_row_head(p, data, {}, on, nucleus_block_[at(b + 1)], "nucleus.state");
      npu::float_ram(p, npu::FloatRamWindow{kToppLowBinade}, {h}, on, "nucleus state RAM " + std::to_string(b));
      state = {h.out[0], h.out[1], h.out[2], h.out[3]};
    } else {
      values_.last_idx = nb.out.count;
      values_.cumulative_prob = nb.out.selected;
    }
  }
  as.gate_clears_of(lanes, pick_on_);

  // R on SORTED.15, below NUCLEUS's last instance: r = fl(coin * cumulative_prob) (the
  // coin read on this cycle), r and last_idx into one-row RAMs that every PICK cycle reads.
  ValueId r_out = 0, last_out = 0;
  {
    const ValueId on = nucleus_block_.back();
    const size_t first_r = p.ops().size();
    const ValueId c = as.gated(std::vector<ValueId>{coin}, {on}, "topp.coin")[0];
    values_.r = npu::topp_r(p, values_.cumulative_prob, c, on);
    as.gate_clears(first_r, p.ops().size(), on);
    // r = coin * cumulative_prob: 0 or coin >= 2^-24 times cumulative_prob >= the largest
    // p >= (the softmax's sum, 1 - 2^-14 or more) / 512 > 2^-10, and below 2: the window
    // [2^-35, 2^2) (a RAM holds 37 binades)
    r_out = one_row_ram(p, values_.r, on, pick_on_, -35, "pick.r", "r RAM");
    last_out = one_row_ram(p, values_.last_idx, on, pick_on_, kToppLowBinade, "pick.last_idx", "last_idx RAM");
  }
  // PICK.b: npu::topp_pick_block over ranks 8b .. 8b + 7 (one instance for every block:
  // the rank before the block's own lt is recomputed from cum_in, so no state crosses
  // from block to block); each block's token (the index at its one-hot, 0 when the pick
  // is in another block) into the token RAM (a head per block), summed on PICK.15.
  {
    const size_t first_pick = p.ops().size();
    Lin pick_base;
    for (int b = 1; b < slot_rows(); ++b) pick_base.terms.push_back({pick_block_[at(b)], static_cast<float>(kToppHeads * b)});
    const ValueId pick_base_v = npu::detail::integer_value(p, pick_base, "pick.base");
    const ValueId before = npu::greater(p, lanes[0], r_out);  // r < cum of rank 8b - 1 (rank -1: cum +0, never)
    const ValueId crossed_in = npu::attn_int_positive(
        p, Lin{{{before, 1024.0f}, {pick_base_v, 1.0f}, {last_out, -1.0f}}}, "pick.crossed_in");  // or 8b - 1 >= last_idx
    const std::vector<ValueId> cum(lanes.begin() + 1, lanes.begin() + 1 + kToppHeads);
    const std::vector<ValueId> index(lanes.begin() + 1 + kToppHeads, lanes.end());
    const npu::ToppPickBlock pb =
        npu::topp_pick_block(p, cum, index, pick_base_v, last_out, r_out, crossed_in, p.value("pick.token0"), pick_on_);
    compiler::enable_constants(p, first_pick, pick_on_);
    as.gate_clears(first_pick, p.ops().size(), pick_on_);
    as.discard(pb.onehot, pick_on_, "pick.unused_onehot");
    const std::vector<ValueId> writes(pick_block_.begin(), pick_block_.end() - 1);
    const std::vector<ValueId> tokens = per_block_ram(p, pb.token, writes, std::vector<ValueId>(writes.size(), final_on_),
                                                      pick_on_, kToppLowBinade, "pick.token_out", "token RAM");
    const size_t first_token = p.ops().size();
    Lin sum{{{as.gated(std::vector<ValueId>{pb.token}, {final_on_}, "pick.own")[0], 1.0f}}};
    for (ValueId t : tokens) sum.terms.push_back({t, 1.0f});
    token_ = npu::detail::integer_value(p, sum, "pick.token");
    compiler::enable_constants(p, first_token, final_on_);
    as.gate_clears(first_token, p.ops().size(), final_on_);
    values_.pick = token_;
    values_.pick_cum_in = lanes[0];
    values_.pick_part = pb.token;
  }
  as.discard(sorted_read, sorted_on_, "sorted.unread");
  as.discard({sorted_sink}, sorted_on_, "sorted.sink_unread");
  as.discard(read, kept_read_, "kept.unread");  // after the last reader of n0 (NUCLEUS)
}

void SamplePart::define_topp() {
  for (int b = 0; b < blocks_; ++b) {
    MicroOp k = as_.step(b + 1 < blocks_ ? keep_name(b + 1) : slot_name(0));
    with_block(k, keep_, b, false);  // reads the keep RAM's row b
    for (int c = 0; c < b; ++c) k.sets.push_back({keep_before_[at(c)], 1.0f});
    if (b == 0) k.sets.push_back({keep_wipe_, 1.0f});
    as_.define(keep_name(b), std::move(k));
  }
  const int R = slot_rows();
  auto row_bits = [](MicroOp& k, const std::vector<ValueId>& bits, int r) {
    for (size_t t = 0; t < bits.size(); ++t)
      if ((r >> t) & 1) k.sets.push_back({bits[t], 1.0f});
  };
  auto reads_n0 = [&](MicroOp& k) {  // the kept RAM (row bits slot_row_) and every block's count: n0
    k.sets.push_back({kept_read_, 1.0f});
    for (ValueId before : keep_before_) k.sets.push_back({before, 1.0f});
  };
  for (int r = 0; r < R; ++r) {
    // SLOT's last cycle refuses n0 = 0 and n0 > kToppSlots (build_topp)
    MicroOp k = r + 1 < R ? as_.step(slot_name(r + 1)) : as_.branch_step(rank_name(0, 0), "REFUSE");
    k.sets.push_back({slot_on_, 1.0f});
    if (r + 1 == R) k.sets.push_back({slot_last_, 1.0f});
    reads_n0(k);
    row_bits(k, slot_row_, r);
    as_.define(slot_name(r), std::move(k));
  }
  as_.define("REFUSE", as_.step("DONE"));
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < R; ++j) {
      // on to block pair (i, j + 1) while slot block j + 1 is below n0, else RNEXT.i
      MicroOp k = j + 1 < R ? as_.branch_step(rank_name(i, j + 1), rnext_name(i)) : as_.step(rnext_name(i));
      k.sets.push_back({rank_on_, 1.0f});
      reads_n0(k);
      row_bits(k, slot_row_, i);
      row_bits(k, rank_row_, i);
      row_bits(k, rank_col_, j);
      k.sets.push_back({rank_part_[at(j)], 1.0f});
      if (i == 0) k.sets.push_back({rank_wipe_[at(j)], 1.0f});
      as_.define(rank_name(i, j), std::move(k));
    }
    // on to row block i + 1 while it is below n0, else RANKSUM.0
    MicroOp k = i + 1 < R ? as_.branch_step(rank_name(i + 1, 0), rsum_name(0)) : as_.step(rsum_name(0));
    k.sets.push_back({rnext_on_, 1.0f});
    reads_n0(k);
    row_bits(k, slot_row_, i);
    as_.define(rnext_name(i), std::move(k));
  }
  for (int i = 0; i < R; ++i) {
    MicroOp k = as_.step(i + 1 < R ? rsum_name(i + 1) : sorted_name(0));
    k.sets.push_back({rsum_on_, 1.0f});
    reads_n0(k);  // and row i's (p, q)
    row_bits(k, rsum_row_, i);
    row_bits(k, slot_row_, i);
    if (i == 0) k.sets.push_back({sorted_wipe_, 1.0f});
    as_.define(rsum_name(i), std::move(k));
  }
  for (int b = 0; b < R; ++b) {
    MicroOp k = as_.step(b + 1 < R ? sorted_name(b + 1) : pick_name(0));
    k.sets.push_back({sorted_on_, 1.0f});
    k.sets.push_back({nucleus_block_[at(b)], 1.0f});
    reads_n0(k);  // NUCLEUS's n0
    row_bits(k, sorted_row_, b);
    if (b + 1 == R && !coin_.rng) k.sets.push_back({coin_.read, 1.0f});  // R's coin
    as_.define(sorted_name(b), std::move(k));
  }
  for (int b = 0; b < R; ++b) {
    MicroOp k;
    if (b + 1 < R) k = as_.step(pick_name(b + 1));
    else k.timing = SuccessorTiming::Computed;  // the story token
    k.sets.push_back({pick_on_, 1.0f});
    k.sets.push_back({pick_block_[at(b)], 1.0f});
    as_.define(pick_name(b), std::move(k));
  }
}

}  // namespace qpu::machine
