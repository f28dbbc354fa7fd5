#include "machine/sample_part.h"

#include <algorithm>
#include <array>
#include <string>

#include "common/error.h"
#include "compiler/enable.h"
#include "compiler/gdn_layout.h"
#include "machine/sample_ram.h"
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

using namespace sample_ram;

std::string SamplePart::temp_name(int b) { return "TEMP." + std::to_string(b); }
std::string SamplePart::exp_name(int b) { return "EXP." + std::to_string(b); }
std::string SamplePart::prob_name(int b) { return "PROB." + std::to_string(b); }
std::string SamplePart::keep_name(int b) { return "KEEP." + std::to_string(b); }
std::string SamplePart::slot_name(int r) { return "SLOT." + std::to_string(r); }
std::string SamplePart::rank_name(int i, int j) { return "RANK." + std::to_string(i) + "." + std::to_string(j); }
std::string SamplePart::rsum_name(int i) { return "RANKSUM." + std::to_string(i); }  // RSUM: the attention's read-backs
std::string SamplePart::sorted_name(int b) { return "SORTED." + std::to_string(b); }
std::string SamplePart::rnext_name(int i) { return "RNEXT." + std::to_string(i); }
std::string SamplePart::pick_name(int b) { return "PICK." + std::to_string(b); }

// A banked RAM: head g holds blocks [rows_ g, rows_ g + rows_), block b at row b mod
// rows_; written by stage w (its group flag and row bits; head g wiped at its row 0),
// read by stage r. `negated`: the data's negations when made already (empty: the RAM
// makes them). Returns the heads' out values (one head reads at a time).
std::vector<std::vector<ValueId>> SamplePart::banked(const std::vector<ValueId>& data, const std::vector<ValueId>& negated,
                                                   const Stage& w, const Stage& r, int low_binade,
                                                   const std::string& out_label, const std::string& label) const {
  compiler::Program& p = as_.program();
  std::vector<npu::FloatRamHead> heads;
  std::vector<std::vector<ValueId>> outs;
  for (int g = 0; g < groups_; ++g) {
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
}

int SamplePart::slot_rows() { return npu::kToppSlots / kToppHeads; }

bool SamplePart::topp_fits(float topp, int n) {
  return n >= 2 && topp >= 0x1p-40f && topp < 1.0f && (1.0f - topp) / static_cast<float>(n - 1) >= npu::kToppCutoffMin;
}

int SamplePart::block_for(int n, bool topp) {
  if (n < 1) fail("sample part: a vocabulary of {}", n);
  if (topp) return kToppHeads;
  int b = 8;
  while (n % b != 0) --b;
  return b;
}

std::vector<std::string> SamplePart::stream(int blocks, bool topp, int kept) {
  std::vector<std::string> s;
  for (int b = 0; b < blocks; ++b) s.push_back(temp_name(b));
  s.push_back("MAX");
  for (int b = 0; b < blocks; ++b) s.push_back(exp_name(b));
  s.push_back("SUM");
  for (int b = 0; b < blocks; ++b) s.push_back(prob_name(b));
  if (!topp) {
    s.push_back("CDF");
    return s;
  }
  const int R = slot_rows();
  for (int b = 0; b < blocks; ++b) s.push_back(keep_name(b));
  for (int r = 0; r < R; ++r) s.push_back(slot_name(r));
  if (kept < 1 || kept > npu::kToppSlots) {
    s.push_back("REFUSE");
    return s;
  }
  const int m = (kept + kToppHeads - 1) / kToppHeads;  // the slot blocks below n0
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < m; ++j) s.push_back(rank_name(i, j));
    s.push_back(rnext_name(i));
  }
  for (int i = 0; i < R; ++i) s.push_back(rsum_name(i));
  for (int b = 0; b < R; ++b) s.push_back(sorted_name(b));
  for (int b = 0; b < R; ++b) s.push_back(pick_name(b));
  return s;
}

std::vector<std::string> SamplePart::names(const reference::Llama2Config& cfg, const SampleOptions& o) {
  if (o.block < 1 || cfg.vocab_size % o.block != 0)
    fail("sample part: blocks of {} logits do not divide the vocabulary of {}", o.block, cfg.vocab_size);
  // every stage's micro-ops: a sampled position's stream with n0 = kToppSlots (all RANK
  // block pairs), and REFUSE
  std::vector<std::string> n = stream(cfg.vocab_size / o.block, o.topp_on(), npu::kToppSlots);
  if (o.topp_on()) n.push_back("REFUSE");
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
  groups_ = (blocks_ + rows_ - 1) / rows_;
  const int groups = groups_, row_bits = bits_for(rows_);
  for (auto [s, prefix] : {std::pair{&temp_, "temp"}, std::pair{&exp_, "sexp"}, std::pair{&prob_, "sprob"}}) {
    s->on = as.input(std::string(prefix) + ".on");
    s->block = as.inputs(std::string(prefix) + ".block", blocks_);
    s->group = as.inputs(std::string(prefix) + ".group", groups);
    s->row = as.inputs(std::string(prefix) + ".row", row_bits);
  }
  temp_.wipe = as.inputs("temp.wipe", groups);
  exp_.wipe = as.inputs("sexp.wipe", groups);
  if (topp_) {
    if (!topp_fits(o.topp, vocab_))
      fail("sample part: top-p {} outside the units' windows for a vocabulary of {} (cutoff (1 - topp) / {} below 2^-24, "
           "or topp below 2^-40)", o.topp, vocab_, vocab_ - 1);
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
    slot_last_ = as.input("slot.last");
    rnext_on_ = as.input("rnext.on");
    pick_on_ = as.input("pick.on");
    pick_block_ = as.inputs("pick.block", slot_rows());
  }
  max_on_ = as.input("smax.on");
  sum_on_ = as.input("ssum.on");
  cdf_on_ = topp_ ? compiler::kNever : as.input("cdf.on");
  final_on_ = topp_ ? pick_block_.back() : cdf_on_;
  compiler::Program& p = as.program();
  const int B = block_;


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
    cdf_coin = one_row_ram(p, values_.coin, max_on_, topp_ ? nucleus_block_.back() : cdf_on_, -25, "rng.coin_out", "coin RAM");  // 0 or k 2^-24, k < 2^24
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
    build_topp(o, pe, zero, cdf_coin);
    stages_.end = p.ops().size();
    return;  // top-p's PICK chooses the token: no CDF
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
  p.mlp("story.index", {Neuron{Lin{{{pick, kGateOn}, {final_on_, kGateOn}}},
                               Lin{{{index, 1.0f / kGateOn}, {token_, 1.0f / kGateOn}}}, {{chosen, 1.0f}}},
                        Neuron{Lin{{{pick, kGateOn}, {final_on_, kGateOn}}},
                               Lin{{{pick, 1.0f / kGateOn}, {final_on_, 1.0f / kGateOn}}}, {{enable, 1.0f}}}});
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
  if (topp_) define_topp();
  MicroOp m = as_.step(exp_name(0));
  m.sets = {{max_on_, 1.0f}};
  for (ValueId r : coin_.reads) m.sets.push_back({r, 1.0f});
  as_.define("MAX", std::move(m));
  MicroOp s = as_.step(prob_name(0));
  s.sets = {{sum_on_, 1.0f}};
  as_.define("SUM", std::move(s));
  if (topp_) return;  // PICK.15 names the story token (define_topp)
  MicroOp c;
  c.sets = {{cdf_on_, 1.0f}};
  if (!coin_.rng) c.sets.push_back({coin_.read, 1.0f});
  c.timing = SuccessorTiming::Computed;
  as_.define("CDF", std::move(c));
}

}  // namespace qpu::machine
