#include "machine/sample_part.h"

#include <algorithm>
#include <array>
#include <string>

#include "common/error.h"
#include "compiler/enable.h"
#include "compiler/gdn_layout.h"
#include "npu/float_ram.h"
#include "npu/primitives.h"
#include "npu/rng_draw.h"
#include "npu/table_lookup.h"
#include "npu/unit_attention.h"
#include "npu/unit_gate.h"
#include "npu/unit_sample.h"
#include "npu/unit_topp.h"

namespace qpu::machine {

using compiler::Lin;
using compiler::Neuron;
using compiler::ValueId;

namespace {

constexpr float kGateOn = 128.0f;  // silu(128) == 128: a gate of 128 flag passes a value exactly
// pm is 0 or in [2^-54, 4): wider than a RAM window, so the prob RAM stores pm itself when
// pm >= 2^-22 and pm 2^30 below (one of the two +-0), as the attention's prob RAM.
constexpr float kProbSplit = 0x1p-22f, kProbSmallScale = 0x1p30f;

size_t at(int i) { return static_cast<size_t>(i); }

// The kept RAM: slot c at head c mod kToppHeads, row c / kToppHeads, so a KEEP block's
// (at most 8) kept entries, whose slots are consecutive, go to distinct heads: each head
// takes at most one data-addressed write per cycle.
constexpr int kToppHeads = 8;
constexpr int kToppLowBinade = -25;  // kept p in [2^-24, 1], keep bits, slots and q in [0, 512]: [2^-25, 2^12)

int bits_for(int n) {
  int b = 0;
  while ((1 << b) < n) ++b;
  return b;
}

std::vector<ValueId> slice(const std::vector<ValueId>& v, int first, int count) {
  return {v.begin() + first, v.begin() + first + count};
}

// One head: its data (with negations made once for all heads of that data), written and
// wiped by `write`, read when `read`, into fresh out values.
npu::FloatRamHead one_row_head(compiler::Program& p, const std::vector<ValueId>& data,
                               const std::vector<ValueId>& negated, ValueId write, ValueId read,
                               const std::string& label) {
  npu::FloatRamHead h;
  h.data = data;
  h.negated = negated;
  h.write_flag = h.wipe_flag = write;
  h.read_flag = read;
  h.out = p.values(label, static_cast<int>(data.size()));
  return h;
}

// A one-row float RAM of one value (one_row_head, its own negation), `on` its enable too;
// returns the value it reads.
ValueId one_row_ram(compiler::Program& p, ValueId value, ValueId on, ValueId read, int low_binade,
                    const std::string& out_name, const std::string& label) {
  const npu::FloatRamHead h = one_row_head(p, {value}, {}, on, read, out_name);
  npu::float_ram(p, npu::FloatRamWindow{low_binade}, {h}, on, label);
  return h.out[0];
}

// A RAM of one value with a one-row head per block: head b written (and wiped) when
// writes[b], read when reads[b]; the negation made once. Returns the heads' reads.
std::vector<ValueId> per_block_ram(compiler::Program& p, ValueId value, const std::vector<ValueId>& writes,
                                   const std::vector<ValueId>& reads, ValueId enable, int low_binade,
                                   const std::string& out_name, const std::string& label) {
  std::vector<npu::FloatRamHead> one(1);
  one[0].data = {value};
  const auto neg = npu::float_ram_negations(p, one, enable, label);
  std::vector<npu::FloatRamHead> heads;
  std::vector<ValueId> outs;
  for (size_t b = 0; b < writes.size(); ++b) {
    heads.push_back(one_row_head(p, {value}, neg[0], writes[b], reads[b], out_name));
    outs.push_back(heads.back().out[0]);
  }
  npu::float_ram(p, npu::FloatRamWindow{low_binade}, heads, enable, label);
  return outs;
}
}  // namespace

std::string SamplePart::temp_name(int b) { return "TEMP." + std::to_string(b); }
std::string SamplePart::exp_name(int b) { return "EXP." + std::to_string(b); }
std::string SamplePart::prob_name(int b) { return "PROB." + std::to_string(b); }
std::string SamplePart::keep_name(int b) { return "KEEP." + std::to_string(b); }
std::string SamplePart::slot_name(int r) { return "SLOT." + std::to_string(r); }
std::string SamplePart::rank_name(int i, int j) { return "RANK." + std::to_string(i) + "." + std::to_string(j); }
std::string SamplePart::rsum_name(int i) { return "RSUM." + std::to_string(i); }
std::string SamplePart::sorted_name(int b) { return "SORTED." + std::to_string(b); }
int SamplePart::slot_rows() { return npu::kToppSlots / kToppHeads; }

std::vector<std::string> SamplePart::names(const reference::Llama2Config& cfg, const SampleOptions& o) {
  if (o.block < 1 || cfg.vocab_size % o.block != 0)
    fail("sample part: blocks of {} logits do not divide the vocabulary of {}", o.block, cfg.vocab_size);
  const int nb = cfg.vocab_size / o.block;
  std::vector<std::string> n;
  for (int b = 0; b < nb; ++b) n.push_back(temp_name(b));
  n.push_back("MAX");
  for (int b = 0; b < nb; ++b) n.push_back(exp_name(b));
  n.push_back("SUM");
  for (int b = 0; b < nb; ++b) n.push_back(prob_name(b));
  if (o.topp_on()) {
    for (int b = 0; b < nb; ++b) n.push_back(keep_name(b));
    for (int r = 0; r < slot_rows(); ++r) n.push_back(slot_name(r));
    for (int i = 0; i < slot_rows(); ++i)
      for (int j = 0; j < slot_rows(); ++j) n.push_back(rank_name(i, j));
    for (int i = 0; i < slot_rows(); ++i) n.push_back(rsum_name(i));
    for (int b = 0; b < slot_rows(); ++b) n.push_back(sorted_name(b));
  }
  n.push_back("CDF");
  return n;
}

SamplePart::SamplePart(Assembler& as, const reference::Llama2Config& cfg, const SampleOptions& o,
                       const std::vector<ValueId>& logits, ValueId logits_on, ValueId temperature,
                       ValueId temperature_read, const SampleCoin& coin)
    : as_(as), vocab_(cfg.vocab_size), block_(o.block), temperature_read_(temperature_read), coin_(coin),
      topp_(o.topp_on()) {
  if (coin.rng == (coin.value != compiler::kNever)) fail("sample part: the coin is a register or the RNG, not both or none");
  names(cfg, o);  // the block size's check
  if (logits.size() != at(vocab_)) fail("sample part: {} logits for a vocabulary of {}", logits.size(), vocab_);
  blocks_ = vocab_ / block_;
  const compiler::GdnLayout layout = compiler::GdnLayout::for_dims(as.options().key_dim, as.options().value_dim);
  if (npu::floats_per_row(layout) < 3 * block_)
    fail("sample part: a RAM row holds {} floats, a block's probabilities need {}", npu::floats_per_row(layout), 3 * block_);
  // Banked RAMs (written one block per cycle, read one block per cycle): rows_ blocks per
  // head, the row a block's address bits.
  rows_ = static_cast<int>(std::min<int64_t>(layout.rows(), blocks_));
  const int groups = (blocks_ + rows_ - 1) / rows_, row_bits = bits_for(rows_);
  for (auto [s, prefix] : {std::pair{&temp_, "temp"}, std::pair{&exp_, "sexp"}, std::pair{&prob_, "sprob"}}) {
    s->on = as.input(std::string(prefix) + ".on");
    s->block = as.inputs(std::string(prefix) + ".block", blocks_);
    s->group = as.inputs(std::string(prefix) + ".group", groups);
    s->row = as.inputs(std::string(prefix) + ".row", row_bits);
  }
  temp_.wipe = as.inputs("temp.wipe", groups);
  exp_.wipe = as.inputs("sexp.wipe", groups);
  if (topp_) {
    if (block_ != kToppHeads) fail("sample part: top-p needs blocks of {} (the kept RAM's heads), not {}", kToppHeads, block_);
    if (layout.rows() < slot_rows()) fail("sample part: the kept RAM needs {} rows, a head has {}", slot_rows(), layout.rows());
    keep_.on = as.input("keep.on");
    keep_.block = as.inputs("keep.block", blocks_);
    keep_.group = as.inputs("keep.group", groups);
    keep_.row = as.inputs("keep.row", row_bits);
    prob_.wipe = as.inputs("sprob.wipe", groups);  // PROB writes the keep RAM (banked)
    keep_before_ = as.inputs("keep.before", blocks_);
    keep_wipe_ = as.input("keep.wipe");
    slot_on_ = as.input("slot.on");
    slot_row_ = as.inputs("slot.row", bits_for(slot_rows()));
    kept_read_ = as.input("kept.read");
    rank_on_ = as.input("rank.on");
    rank_col_ = as.inputs("rank.col", bits_for(slot_rows()));
    rank_row_ = as.inputs("rank.row", bits_for(slot_rows()));
    rank_part_ = as.inputs("rank.part", slot_rows());
    rank_wipe_ = as.inputs("rank.wipe", slot_rows());
    rsum_on_ = as.input("rsum.on");
    rsum_row_ = as.inputs("rsum.row", bits_for(slot_rows()));
    sorted_wipe_ = as.input("sorted.wipe");
    sorted_on_ = as.input("sorted.on");
    sorted_row_ = as.inputs("sorted.row", bits_for(slot_rows()));
    nucleus_block_ = as.inputs("nucleus.block", slot_rows());
  }
  max_on_ = as.input("smax.on");
  sum_on_ = as.input("ssum.on");
  cdf_on_ = as.input("cdf.on");
  compiler::Program& p = as.program();
  const int B = block_;

  // A banked RAM: head g holds blocks [rows_ g, rows_ g + rows_), block b at row b mod
  // rows_; written by stage w (its group flag and row bits; head g wiped at its row 0),
  // read by stage r. `negated`: the data's negations when made already (empty: the RAM
  // makes them). Returns the heads' out values (one head reads at a time).
  auto banked = [&](const std::vector<ValueId>& data, const std::vector<ValueId>& negated, const Stage& w,
                    const Stage& r, int low_binade, const std::string& out_label, const std::string& label) {
    std::vector<npu::FloatRamHead> heads;
    std::vector<std::vector<ValueId>> outs;
    for (int g = 0; g < groups; ++g) {
      npu::FloatRamHead h;
      h.data = data;
      h.negated = negated;
      h.key_bits = w.row;
      h.write_flag = w.group[at(g)];
      h.wipe_flag = w.wipe[at(g)];
      h.write_enable = w.on;  // idle, the writer's group flags and row bits are +-0
      h.query_bits = r.row;
      h.read_flag = r.group[at(g)];
      h.out = p.values(out_label + std::to_string(g), static_cast<int>(data.size()));
      outs.push_back(h.out);
      heads.push_back(std::move(h));
    }
    npu::float_ram(p, npu::FloatRamWindow{low_binade}, heads, w.on, label);
    return outs;
  };

  // The logit RAM: a head per block, all written (and wiped) on the logits' cycle, block b
  // read by TEMP.b into TEMP's lanes x (one gather op per head: x += the head's out, gate
  // 128 TEMP's flag; the other heads read +0). Each head has its own negations and
  // gather, so the three sit right below the classifier rows of their block: the logits
  // need not stay live down to the last block, only x does.
  const std::vector<ValueId> x = p.values("temp.logit", B);
  for (int b = 0; b < blocks_; ++b) {
    const npu::FloatRamHead h = one_row_head(p, slice(logits, b * B, B), {}, logits_on, temp_.block[at(b)], "slogit.out");
    npu::float_ram(p, npu::FloatRamWindow{o.logit_low_binade}, {h}, logits_on, "sample logit RAM " + std::to_string(b));
    std::vector<Neuron> ns;
    for (int s = 0; s < B; ++s)
      ns.push_back(Neuron{Lin{{{temp_.on, kGateOn}}}, Lin{{{h.out[at(s)], 1.0f / kGateOn}}}, {{x[at(s)], 1.0f}}});
    p.mlp("temp.logit", std::move(ns));
  }
  as.gate_clears_of(x, temp_.on);

  // TEMP: run.c's logits[q] /= temperature for block b, and the block's max.
  const size_t first_scale = p.ops().size();
  stages_.begin = first_scale;
  // T through TEMP's flag: HEAD reads the register too (greedy or sampled).
  const ValueId temp_t = as.gated(std::vector<ValueId>{temperature}, std::vector<ValueId>{temp_.on}, "temp.t")[0];
  const ValueId recip = npu::sample_temperature_reciprocal(p, temp_t, temp_.on);
  const npu::SampleScaleBlock scaled = npu::sample_scale_block(p, x, temp_t, recip, npu::kNoMax, temp_.on);
  as.gate_clears(first_scale, p.ops().size(), temp_.on);
  values_.scaled = scaled.scaled;
  values_.block_max = scaled.max;
  const auto scaled_out = banked(scaled.scaled, {}, temp_, exp_, o.scaled_low_binade, "scaled RAM.out", "scaled RAM");
  const std::vector<ValueId> block_max = per_block_ram(p, scaled.max, temp_.block, std::vector<ValueId>(at(blocks_), max_on_),
                                                      temp_.on, o.scaled_low_binade, "sbmax.out", "block-max RAM");

  // MAX: softmax's max over the block maxima (value-wise order-free: the tree is the scan).
  const size_t first_max = p.ops().size();
  values_.max = npu::sample_max_tree(p, block_max, max_on_);
  as.gate_clears(first_max, p.ops().size(), max_on_);
  const ValueId max_out = one_row_ram(p, values_.max, max_on_, exp_.on, o.scaled_low_binade, "smax.out", "max RAM");
  // EXP: run.c's x[i] = expf(x[i] - max_val) for block b, as (mant, exponent).
  const size_t first_exp = p.ops().size();
  const std::vector<ValueId> sx = as.gated(scaled_out, {exp_.on}, "sexp.scaled");
  const npu::SampleExpBlock e = npu::sample_exp_block(p, sx, max_out, exp_.on);
  as.gate_clears(first_exp, p.ops().size(), exp_.on);
  values_.mant = e.mant;
  values_.exponent = e.exponent;
  std::vector<ValueId> exp_data = e.mant;
  exp_data.insert(exp_data.end(), e.exponent.begin(), e.exponent.end());
  std::vector<npu::FloatRamHead> exp_one(1);
  exp_one[0].data = exp_data;
  const std::vector<ValueId> exp_neg = npu::float_ram_negations(p, exp_one, exp_.on, "exp RAM")[0];
  // The exp row RAM (read by PROB one block per cycle): the same data, banked.
  const std::vector<std::vector<ValueId>> exp_rows =
      banked(exp_data, exp_neg, exp_, prob_, o.exp_low_binade, "sexp.row_out", "exp row RAM");

  // SUM: every exp in run.c's order (sum += x[i]), block b's head of the exp RAM (a head
  // per block, written by EXP.b) emitted where the chain first needs it.
  const size_t first_sum = p.ops().size();
  std::vector<std::vector<ValueId>> exp_out(at(blocks_));
  std::vector<size_t> exp_op(at(blocks_));
  auto exp_at = [&](size_t t) {
    const size_t b = t / at(B), s = t % at(B);
    if (exp_out[b].empty()) {
      exp_op[b] = p.ops().size();
      npu::FloatRamHead h = one_row_head(p, exp_data, exp_neg, exp_.block[b], sum_on_, "sexp.out" + std::to_string(b));
      exp_out[b] = h.out;
      npu::float_ram(p, npu::FloatRamWindow{o.exp_low_binade}, {h}, exp_.on, "exp RAM " + std::to_string(b));
    }
    const ValueId mant = p.value("ssum.mant"), exponent = p.value("ssum.exponent");
    p.mlp("ssum.pick", {Neuron{Lin{{{sum_on_, kGateOn}}}, Lin{{{exp_out[b][s], 1.0f / kGateOn}}}, {{mant, 1.0f}}},
                        Neuron{Lin{{{sum_on_, kGateOn}}}, Lin{{{exp_out[b][s + at(B)], 1.0f / kGateOn}}},
                               {{exponent, 1.0f}}}});
    return std::pair{mant, exponent};
  };
  const ValueId acc = npu::attn_sum_row(p, at(vocab_), exp_at, p.value("ssum.acc0"));
  values_.sum = npu::attn_sum_from_acc(p, acc);
  compiler::enable_constants(p, first_sum, sum_on_);
  as.gate_clears(first_sum, p.ops().size(), sum_on_);
  const compiler::OpRange sum_ops{first_sum, p.ops().size()};
  const ValueId sum_out = one_row_ram(p, values_.sum, sum_on_, prob_.on, o.sum_low_binade, "ssum.out", "sum RAM");

  // RNG (on MAX's cycle, built after SUM: see the order below): run.c's coin of this position, draw n = pos - plen +
  // draw_offset, into the coin RAM that CDF reads.
  ValueId cdf_coin = coin.value;
  if (coin.rng) {
    const size_t first_rng = p.ops().size();
    const ValueId draw = p.value("rng.n");  // an exact small integer (gate 128 MAX's flag)
    p.mlp("rng.n", {Neuron{Lin{{{max_on_, kGateOn}}},
                           Lin{{{coin.pos, 1.0f / kGateOn},
                                {coin.plen, -1.0f / kGateOn},
                                {max_on_, static_cast<float>(coin.draw_offset) / kGateOn}}},
                           {{draw, 1.0f}}}});
    values_.coin = npu::rng_draw(p, coin.seed_limbs, draw, coin.max_draws, max_on_).coin;
    as.gate_clears(first_rng, p.ops().size(), max_on_);
    // The draw's 38 sublayers beside the narrow stretch after the SUM chain (nothing else
    // pins them: they read only registers), not beside the classifier or the chains.
    p.order(sum_ops, compiler::OpRange{first_rng, p.ops().size()});
    cdf_coin = one_row_ram(p, values_.coin, max_on_, cdf_on_, -25, "rng.coin_out", "coin RAM");  // 0 or k 2^-24, k < 2^24
  }

  // PROB: run.c's x[i] /= sum for block b, as (pm, exponent) with pm 2^exponent == C's
  // quotient (npu::attn_probability, the sum's reciprocal once per cycle).
  const size_t first_prob = p.ops().size();
  const std::vector<ValueId> pe = as.gated(exp_rows, {prob_.on}, "sprob.exp");
  const ValueId recip_sum = npu::attn_sum_reciprocal(p, sum_out);
  const ValueId split = p.value("sprob.split");
  npu::const_acc(p, split, kProbSplit, "sprob.split");
  const ValueId zero = p.value("sprob.zero");  // never written: +0
  std::vector<ValueId> prob_data(at(3 * B));    // big[B], small[B], exponent[B]
  for (int s = 0; s < B; ++s) {
    const ValueId pm = npu::attn_probability(p, pe[at(s)], pe[at(B + s)], sum_out, recip_sum);
    values_.pm.push_back(pm);
    const ValueId small = npu::greater(p, split, pm);
    const ValueId pm_scaled = p.value("sprob.scaled");
    npu::scale_acc(p, pm_scaled, pm, kProbSmallScale, "sprob.scaled");
    prob_data[at(s)] = npu::select(p, small, zero, pm, "sprob.big");
    prob_data[at(B + s)] = npu::select(p, small, pm_scaled, zero, "sprob.small");
    prob_data[at(2 * B + s)] = pe[at(B + s)];
  }
  compiler::enable_constants(p, first_prob, prob_.on);
  as.gate_clears(first_prob, p.ops().size(), prob_.on);
  std::vector<npu::FloatRamHead> prob_one(1);
  prob_one[0].data = prob_data;
  const std::vector<ValueId> prob_neg = npu::float_ram_negations(p, prob_one, prob_.on, "prob RAM")[0];

  if (topp_) {
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

    // RANK.i.j: the kept RAM's row block i (slots 8i ..) against its slot block j
    // (npu::topp_rank_block, 8 x 8, rows and slots >= n0 masked): partial ranks, which
    // cannot be carried from j to j + 1 at the same layers, so each pair writes them to
    // the partial RAM (head j, row i) and RSUM.i sums the 16 heads' row i.
    const size_t first_rank = p.ops().size();
    Lin row_base, slot_base;
    for (size_t j = 0; j < slot_row_.size(); ++j) {
      row_base.terms.push_back({slot_row_[j], static_cast<float>(kToppHeads << j)});
      slot_base.terms.push_back({rank_col_[j], static_cast<float>(kToppHeads << j)});
    }
    const ValueId base_v = npu::detail::integer_value(p, row_base, "rank.base");
    const ValueId slot_base_v = npu::detail::integer_value(p, slot_base, "rank.slot_base");
    const std::vector<ValueId> rank_in = p.values("rank.in", kToppHeads);  // never written: +0
    // The kept RAM's row block and n0 through RANK's flag: SLOT and RSUM read them too (the
    // idle contract: an idle unit's operands are +-0).
    const std::vector<ValueId> row_p = as.gated(values_.kept_p, {rank_on_}, "rank.row_p");
    const ValueId rank_n0 = as.gated(std::vector<ValueId>{values_.n0}, {rank_on_}, "rank.n0")[0];
    const npu::ToppRankBlock rb = npu::topp_rank_block(p, row_p, base_v, col_p, slot_base_v, rank_n0, rank_in, rank_on_);
    compiler::enable_constants(p, first_rank, rank_on_);
    as.gate_clears(first_rank, p.ops().size(), rank_on_);
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
        h.key_bits = rank_row_;  // not slot_row_: RSUM sets those (the kept RAM's row) with this RAM's writes off
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
    // RSUM.i: rank = the sum of row i's partial ranks (exact integers).
    const size_t first_rsum = p.ops().size();
    for (int s = 0; s < kToppHeads; ++s) {
      Lin sum;
      for (const auto& out : part_out) sum.terms.push_back({out[at(s)], 1.0f});
      values_.rank.push_back(npu::detail::integer_value(p, sum, "rsum.rank"));
    }
    compiler::enable_constants(p, first_rsum, rsum_on_);
    as.gate_clears(first_rsum, p.ops().size(), rsum_on_);
    // The sorted RAM: rank k at head (lane s, k mod 8), row k / 8, where s is the lane of
    // the kept slot with rank k (its slot mod 8). Lane s writes only its own 8 heads, one
    // per cycle (distinct ranks), and a block of ranks 8b .. 8b + 7 reads row b of every
    // head: rank 8b + t is the sum over s of head (s, t) (one written, the rest +0 after
    // RSUM.0's wipe). RSUM.i reads the kept RAM's row i (p, q) and n0 again for this.
    const size_t first_sorted = p.ops().size();
    std::vector<ValueId> entry = values_.kept_p;  // through RSUM's flag (as RANK's)
    entry.insert(entry.end(), values_.kept_q.begin(), values_.kept_q.end());
    entry.push_back(values_.n0);
    entry = as.gated(entry, {rsum_on_}, "sorted.entry");
    const ValueId sorted_n0 = entry.back();
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
        h.data = {entry[at(s)], entry[at(kToppHeads + s)]};
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
    for (int b = 0; b < slot_rows(); ++b) {
      const ValueId on = nucleus_block_[at(b)];
      const size_t first_b = p.ops().size();
      std::vector<ValueId> in = values_.sorted_p;
      in.push_back(values_.n0);
      in = as.gated(in, {on}, "nucleus.in");
      const ValueId n0 = in.back();
      in.pop_back();
      const size_t first_const = p.ops().size();
      const ValueId topp_b = p.value("nucleus.topp");
      npu::const_acc(p, topp_b, o.topp, "nucleus.topp");
      const ValueId base_b = npu::detail::integer_value(p, Lin{{{compiler::kOne, static_cast<float>(b * kToppHeads)}}}, "nucleus.base");
      compiler::enable_constants(p, first_const, on);
      const npu::ToppNucleusBlock nb = npu::topp_nucleus_block(p, in, base_b, n0, topp_b, state, on);
      values_.cum.insert(values_.cum.end(), nb.cum.begin(), nb.cum.end());
      as.gate_clears(first_b, p.ops().size(), on);
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
    {  // until R and PICK read them
      const ValueId on = nucleus_block_.back();
      const ValueId nucleus_sink = p.value("nucleus.sink");
      p.mlp("nucleus.sink", {Neuron{Lin{{{on, kGateOn}}}, Lin{{{values_.last_idx, 1.0f / kGateOn}}}, {{nucleus_sink, 1.0f}}},
                             Neuron{Lin{{{on, kGateOn}}}, Lin{{{values_.cumulative_prob, 1.0f / kGateOn}}}, {{nucleus_sink, 1.0f}}}});
      as.discard({values_.last_idx, values_.cumulative_prob}, on, "nucleus.unread");
      as.discard({nucleus_sink}, on, "nucleus.sink_unread");
    }
    as.discard(sorted_read, sorted_on_, "sorted.unread");
    as.discard({sorted_sink}, sorted_on_, "sorted.sink_unread");
    as.discard(read, kept_read_, "kept.unread");  // after the last reader of n0 (NUCLEUS)
  }

  // CDF: sample_mult over every probability (C's cdf += p_q in index order) and the coin;
  // block b's head of the prob RAM emitted where the chain first needs it. The state
  // before index 0 is C's: cdf 0, nothing seen, nothing crossed, count 0.
  const size_t first_cdf = p.ops().size();
  std::vector<std::vector<ValueId>> prob_out(at(blocks_));
  auto prob_at = [&](size_t t) {
    const size_t b = t / at(B), s = t % at(B);
    if (prob_out[b].empty()) {
      npu::FloatRamHead h = one_row_head(p, prob_data, prob_neg, prob_.block[b], cdf_on_, "sprob.out" + std::to_string(b));
      prob_out[b] = h.out;
      npu::float_ram(p, npu::FloatRamWindow{o.prob_low_binade}, {h}, prob_.on, "prob RAM " + std::to_string(b));
    }
    const ValueId pm = p.value("cdf.pm"), exponent = p.value("cdf.exponent");
    const Lin gate{{{cdf_on_, kGateOn}}};
    p.mlp("cdf.pick", {Neuron{gate, Lin{{{prob_out[b][s], 1.0f / kGateOn}}}, {{pm, 1.0f}}},  // pm = big + small 2^-30
                       Neuron{gate, Lin{{{prob_out[b][at(B) + s], 1.0f / (kGateOn * kProbSmallScale)}}}, {{pm, 1.0f}}},
                       Neuron{gate, Lin{{{prob_out[b][at(2 * B) + s], 1.0f / kGateOn}}}, {{exponent, 1.0f}}}});
    return std::pair{pm, exponent};
  };
  const npu::SampleCdfState start{p.value("cdf.acc0"), p.value("cdf.seen0"), p.value("cdf.crossed0"),
                                  p.value("cdf.count0")};
  const npu::SampleCdf cdf = npu::sample_cdf_row(p, at(vocab_), prob_at, cdf_coin, start, true, cdf_on_);
  // The successor's one-hot comes from the sampled index (successor(): one one-hot of
  // HEAD's or CDF's index at the bottom): the row's own per-index one-hot would keep n
  // values live from the chain's first steps down to the successor, the index is one.
  token_ = cdf.token;
  // The row's own one-hot has no reader: cleared block by block (each op right after its
  // values, so they do not stay live down the chain).
  for (int b = 0; b < blocks_; ++b) as.discard(slice(cdf.onehot, b * B, B), cdf_on_, "cdf.unused_onehot");
  as.gate_clears(first_cdf, p.ops().size(), cdf_on_);
  values_.cdf = cdf.cdf;
  values_.lt = cdf.lt;
  stages_.end = p.ops().size();
}

std::vector<ValueId> SamplePart::successor(const std::vector<ValueId>& head_onehot, ValueId head_flag,
                                           ValueId temperature) {
  if (head_onehot.size() != at(vocab_)) fail("sample part: a head one-hot of {}, vocabulary {}", head_onehot.size(), vocab_);
  compiler::Program& p = as_.program();
  // sampled = [t > 0] on HEAD's cycle (t is 0 or in [2^-12, 2^12): greater's window).
  const size_t first = p.ops().size();
  const ValueId sampled = npu::greater(p, temperature, p.value("head.t_zero"));
  compiler::enable_constants(p, first, head_flag);
  as_.gate_clears(first, p.ops().size(), head_flag);
  // HEAD's choice goes down to the successor as an index, not as its one-hot (n values
  // live over every stage): pick = [HEAD and t = 0] and the chosen index when picked
  // (both +-0 otherwise). At the bottom one one-hot of HEAD's picked index or CDF's sampled
  // one (at most one of them nonzero; enable pick + CDF's flag), so only one set of n
  // values is ever live there.
  const ValueId pick = p.value("head.pick"), index = p.value("head.index");
  {
    const Lin greedy{{{head_flag, kGateOn}, {sampled, -kGateOn}}};  // 128 exactly when HEAD runs with t = 0
    Lin k_sum;
    for (size_t k = 0; k < at(vocab_); ++k) k_sum.terms.push_back({head_onehot[k], static_cast<float>(k) / kGateOn});
    p.mlp("head.index", {Neuron{greedy, Lin{{{head_flag, 1.0f / kGateOn}}}, {{pick, 1.0f}}},
                         Neuron{greedy, std::move(k_sum), {{index, 1.0f}}}});
    as_.gate_own_clears({pick});
    as_.gate_clears_of({index}, pick);
  }
  const size_t first_hot = p.ops().size();
  const ValueId chosen = p.value("story.index"), enable = p.value("story.on");
  p.mlp("story.index", {Neuron{Lin{{{pick, kGateOn}, {cdf_on_, kGateOn}}},
                               Lin{{{index, 1.0f / kGateOn}, {token_, 1.0f / kGateOn}}}, {{chosen, 1.0f}}},
                        Neuron{Lin{{{pick, kGateOn}, {cdf_on_, kGateOn}}},
                               Lin{{{pick, 1.0f / kGateOn}, {cdf_on_, 1.0f / kGateOn}}}, {{enable, 1.0f}}}});
  as_.gate_own_clears({enable});
  as_.gate_clears_of({chosen}, enable);
  const size_t first_one_hot = p.ops().size();
  values_.onehot = npu::one_hot(p, chosen, vocab_, "story.hot");
  compiler::enable_constants(p, first_one_hot, enable);
  as_.gate_clears(first_one_hot, p.ops().size(), enable);
  p.order(stages_, compiler::OpRange{first_hot, p.ops().size()});  // at the bottom, after CDF's index
  std::vector<ValueId> hot = values_.onehot;
  hot.push_back(p.value("story.temp0"));  // TEMP.0: sampled, copied
  p.mlp("story.temp0", {Neuron{Lin{{{sampled, kGateOn}}}, Lin{{{sampled, 1.0f / kGateOn}}}, {{hot.back(), 1.0f}}}});
  as_.gate_own_clears({hot.back()});  // exactly 0 or 1
  return hot;
}

void SamplePart::with_block(MicroOp& op, const Stage& s, int b, bool wipes) const {
  op.sets.push_back({s.on, 1.0f});
  op.sets.push_back({s.block[at(b)], 1.0f});
  op.sets.push_back({s.group[at(b / rows_)], 1.0f});
  for (size_t j = 0; j < s.row.size(); ++j)
    if (((b % rows_) >> j) & 1) op.sets.push_back({s.row[j], 1.0f});
  if (wipes && b % rows_ == 0) op.sets.push_back({s.wipe[at(b / rows_)], 1.0f});
}

void SamplePart::define() {
  for (int b = 0; b < blocks_; ++b) {
    MicroOp t = as_.step(b + 1 < blocks_ ? temp_name(b + 1) : std::string("MAX"));
    with_block(t, temp_, b, true);  // writes the scaled RAM's row b
    t.sets.push_back({temperature_read_, 1.0f});
    as_.define(temp_name(b), std::move(t));
    MicroOp e = as_.step(b + 1 < blocks_ ? exp_name(b + 1) : std::string("SUM"));
    with_block(e, exp_, b, true);  // reads the scaled RAM's row b, writes the exp row RAM's
    as_.define(exp_name(b), std::move(e));
    MicroOp q = as_.step(b + 1 < blocks_ ? prob_name(b + 1) : topp_ ? keep_name(0) : std::string("CDF"));
    with_block(q, prob_, b, topp_);  // reads the exp row RAM's row b (with top-p writes the keep RAM's)
    as_.define(prob_name(b), std::move(q));
  }
  for (int b = 0; topp_ && b < blocks_; ++b) {
    MicroOp k = as_.step(b + 1 < blocks_ ? keep_name(b + 1) : slot_name(0));
    with_block(k, keep_, b, false);  // reads the keep RAM's row b
    for (int c = 0; c < b; ++c) k.sets.push_back({keep_before_[at(c)], 1.0f});
    if (b == 0) k.sets.push_back({keep_wipe_, 1.0f});
    as_.define(keep_name(b), std::move(k));
  }
  for (int r = 0; topp_ && r < slot_rows(); ++r) {
    MicroOp k = as_.step(r + 1 < slot_rows() ? slot_name(r + 1) : rank_name(0, 0));
    k.sets.push_back({slot_on_, 1.0f});
    k.sets.push_back({kept_read_, 1.0f});
    for (ValueId before : keep_before_) k.sets.push_back({before, 1.0f});  // every count: n0
    for (size_t j = 0; j < slot_row_.size(); ++j)
      if ((r >> j) & 1) k.sets.push_back({slot_row_[j], 1.0f});
    as_.define(slot_name(r), std::move(k));
  }
  const int R = slot_rows();
  for (int i = 0; topp_ && i < R; ++i)
    for (int j = 0; j < R; ++j) {
      MicroOp k = as_.step(j + 1 < R ? rank_name(i, j + 1) : i + 1 < R ? rank_name(i + 1, 0) : rsum_name(0));
      k.sets.push_back({rank_on_, 1.0f});
      k.sets.push_back({kept_read_, 1.0f});
      for (ValueId before : keep_before_) k.sets.push_back({before, 1.0f});  // n0
      for (size_t t = 0; t < slot_row_.size(); ++t) {
        if ((i >> t) & 1) k.sets.push_back({slot_row_[t], 1.0f}), k.sets.push_back({rank_row_[t], 1.0f});
        if ((j >> t) & 1) k.sets.push_back({rank_col_[t], 1.0f});
      }
      k.sets.push_back({rank_part_[at(j)], 1.0f});
      if (i == 0) k.sets.push_back({rank_wipe_[at(j)], 1.0f});
      as_.define(rank_name(i, j), std::move(k));
    }
  for (int i = 0; topp_ && i < R; ++i) {
    MicroOp k = as_.step(i + 1 < R ? rsum_name(i + 1) : sorted_name(0));
    k.sets.push_back({rsum_on_, 1.0f});
    k.sets.push_back({kept_read_, 1.0f});  // row i's (p, q) and n0
    for (ValueId before : keep_before_) k.sets.push_back({before, 1.0f});
    for (size_t t = 0; t < rsum_row_.size(); ++t)
      if ((i >> t) & 1) k.sets.push_back({rsum_row_[t], 1.0f}), k.sets.push_back({slot_row_[t], 1.0f});
    if (i == 0) k.sets.push_back({sorted_wipe_, 1.0f});
    as_.define(rsum_name(i), std::move(k));
  }
  for (int b = 0; topp_ && b < R; ++b) {
    MicroOp k = as_.step(b + 1 < R ? sorted_name(b + 1) : std::string("CDF"));
    k.sets.push_back({sorted_on_, 1.0f});
    k.sets.push_back({nucleus_block_[at(b)], 1.0f});
    k.sets.push_back({kept_read_, 1.0f});  // n0 (NUCLEUS)
    for (ValueId before : keep_before_) k.sets.push_back({before, 1.0f});
    for (size_t t = 0; t < sorted_row_.size(); ++t)
      if ((b >> t) & 1) k.sets.push_back({sorted_row_[t], 1.0f});
    as_.define(sorted_name(b), std::move(k));
  }
  MicroOp m = as_.step(exp_name(0));
  m.sets = {{max_on_, 1.0f}};
  for (ValueId r : coin_.reads) m.sets.push_back({r, 1.0f});
  as_.define("MAX", std::move(m));
  MicroOp s = as_.step(prob_name(0));
  s.sets = {{sum_on_, 1.0f}};
  as_.define("SUM", std::move(s));
  MicroOp c;
  c.sets = {{cdf_on_, 1.0f}};
  if (!coin_.rng) c.sets.push_back({coin_.read, 1.0f});
  c.timing = SuccessorTiming::Computed;
  as_.define("CDF", std::move(c));
}

}  // namespace qpu::machine
