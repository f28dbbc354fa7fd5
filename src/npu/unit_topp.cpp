#include "npu/unit_topp.h"

#include <cmath>

#include "common/error.h"
#include "npu/divide.h"
#include "npu/neurons.h"
#include "npu/unit_attention.h"
#include "npu/unit_gate.h"

namespace qpu::npu {

using compiler::Lin;
using compiler::Neuron;
using compiler::kOne;
using detail::bit_value;
using detail::gate_unit;
using detail::integer_value;
using detail::kOn;

namespace {

// dst = the one term of `terms` (bit_k, x_k) whose 0/1 form bit_k is 1 (each gate 128 bit_k:
// silu passes x_k exactly or gives +-0; at most one is live, so the down sum is exact).
// Forms, not values: a one-hot bit lt_k - lt_(k-1) costs no sublayer of its own.
void one_of(Program& p, ValueId dst, const std::vector<std::pair<Lin, ValueId>>& terms, const char* label) {
  std::vector<Neuron> ns;
  for (const auto& [bit, x] : terms) {
    Lin gate;
    for (const compiler::Term& t : bit.terms) gate.terms.push_back({t.value, t.weight * kOn});
    ns.push_back(Neuron{std::move(gate), Lin{{{x, 1.0f / kOn}}}, {{dst, 1.0f}}});
  }
  p.mlp(label, std::move(ns));
}

Lin step_form(ValueId lt, ValueId prev) { return Lin{{{lt, 1.0f}, {prev, -1.0f}}}; }

}  // namespace

ValueId topp_cutoff(Program& p, ValueId topp, int n, ValueId enable) {
  if (n < 2) fail("topp_cutoff: n {} < 2", n);
  const size_t first = p.ops().size();
  const ValueId one = p.value("topp.one");
  const_acc(p, one, 1.0f, "topp.one");
  const ValueId rest = sub(p, one, topp, "topp.rest");                 // C: 1.0f - topp
  const ValueId cutoff = divide_const(p, rest, static_cast<float>(n - 1));  // C: / (n - 1), int -> float
  gate_unit(p, first, enable);
  return cutoff;
}

ToppKeepBlock topp_keep_block(Program& p, const std::vector<ValueId>& pm, const std::vector<ValueId>& exponent,
                              ValueId cutoff, ValueId count_in, ValueId enable) {
  if (pm.empty() || pm.size() != exponent.size())
    fail("topp_keep_block: {} pms, {} exponents", pm.size(), exponent.size());
  const size_t first = p.ops().size();
  ToppKeepBlock b;
  Lin count{{{count_in, 1.0f}}};
  for (size_t r = 0; r < pm.size(); ++r) {
    // p = pm 2^exponent as a plain float: ge_k = [exponent >= k]; the neuron of k passes
    // pm 2^k when ge_k - ge_(k+1) = 1 (exponent == k). Exponents below kToppExpMin give 0:
    // there p < 4 2^(kToppExpMin - 1) = 2^-24 <= cutoff, never kept.
    std::vector<ValueId> ge;
    for (int k = kToppExpMin; k <= 0; ++k)
      ge.push_back(attn_int_positive(p, Lin{{{exponent[r], 1.0f}, {kOne, static_cast<float>(1 - k)}}}, "keep.ge"));
    const ValueId prob = p.value("keep.prob");
    std::vector<Neuron> ns;
    for (int k = kToppExpMin; k <= 0; ++k) {
      const size_t i = static_cast<size_t>(k - kToppExpMin);
      Lin gate{{{ge[i], kOn}}};
      if (k < 0) gate.terms.push_back({ge[i + 1], -kOn});
      ns.push_back(Neuron{std::move(gate), Lin{{{pm[r], std::ldexp(1.0f, k) / kOn}}}, {{prob, 1.0f}}});
    }
    p.mlp("keep.prob", std::move(ns));
    const ValueId below = greater(p, cutoff, prob);  // run.c keeps p >= cutoff
    b.prob.push_back(prob);
    b.keep.push_back(bit_value(p, Lin{{{kOne, 1.0f}, {below, -1.0f}}}, "keep.keep"));
    b.slot.push_back(integer_value(p, count, "keep.slot"));  // the kept entries before r
    count.terms.push_back({kOne, 1.0f});
    count.terms.push_back({below, -1.0f});
  }
  b.count = integer_value(p, count, "keep.count");
  gate_unit(p, first, enable);
  return b;
}

ToppRankBlock topp_rank_block(Program& p, const std::vector<ValueId>& block, ValueId base,
                              const std::vector<ValueId>& slots, ValueId slot_base, ValueId n0,
                              const std::vector<ValueId>& rank_in, ValueId enable) {
  if (block.empty() || slots.empty() || rank_in.size() != block.size())
    fail("topp_rank_block: {} rows, {} slots, {} ranks in", block.size(), slots.size(), rank_in.size());
  const size_t first = p.ops().size();
  const int rows = static_cast<int>(block.size()), n = static_cast<int>(slots.size());
  // Slot order of i = base + r against j = slot_base + s depends only on o = s - r:
  // before[o] = [i > j] = [base - slot_base - o >= 1], after[o] = [j > i].
  std::vector<ValueId> before, after;
  for (int o = -(rows - 1); o < n; ++o) {
    before.push_back(attn_int_positive(
        p, Lin{{{base, 1.0f}, {slot_base, -1.0f}, {kOne, static_cast<float>(-o)}}}, "rank.before"));
    after.push_back(attn_int_positive(
        p, Lin{{{base, -1.0f}, {slot_base, 1.0f}, {kOne, static_cast<float>(o)}}}, "rank.after"));
  }
  std::vector<ValueId> valid_slot;  // [j < n0]
  for (int s = 0; s < n; ++s)
    valid_slot.push_back(
        attn_int_positive(p, Lin{{{n0, 1.0f}, {slot_base, -1.0f}, {kOne, static_cast<float>(-s)}}}, "rank.valid"));
  ToppRankBlock b;
  for (int r = 0; r < rows; ++r) {
    const ValueId pi = block[static_cast<size_t>(r)];
    const ValueId valid = attn_int_positive(p, Lin{{{n0, 1.0f}, {base, -1.0f}, {kOne, static_cast<float>(-r)}}}, "rank.valid");
    Lin rank{{{rank_in[static_cast<size_t>(r)], 1.0f}}};
    for (int s = 0; s < n; ++s) {
      const ValueId pj = slots[static_cast<size_t>(s)];
      const ValueId above = greater(p, pj, pi);  // p_j > p_i
      const ValueId under = greater(p, pi, pj);  // p_i > p_j
      const size_t o = static_cast<size_t>(s - r + rows - 1);
      // j counts iff j is before i with p_j >= p_i, or after it with p_j > p_i, and both are
      // valid: d = 2 before - 2 under + after + above - 1 is >= 1 exactly then (before,
      // after not both 1; above, under not both 1; j = i gives -1), less 4 per invalid one.
      const Lin d{{{before[o], 2.0f},
                   {under, -2.0f},
                   {after[o], 1.0f},
                   {above, 1.0f},
                   {valid_slot[static_cast<size_t>(s)], 4.0f},
                   {valid, 4.0f},
                   {kOne, -9.0f}}};
      rank.terms.push_back({attn_int_positive(p, d, "rank.pair"), 1.0f});
    }
    b.rank.push_back(integer_value(p, rank, "rank.rank"));
    b.valid.push_back(valid);
  }
  gate_unit(p, first, enable);
  return b;
}

ToppNucleusBlock topp_nucleus_block(Program& p, const std::vector<ValueId>& sorted, ValueId base, ValueId n0,
                                    ValueId topp, const ToppNucleusState& in, ValueId enable) {
  if (sorted.empty()) fail("topp_nucleus_block: no rows");
  const size_t first = p.ops().size();
  ToppNucleusBlock b;
  ValueId cum = in.cum, prev = in.crossed;
  Lin count{{{in.count, 1.0f}}};
  std::vector<std::pair<Lin, ValueId>> pick{{Lin{{{kOne, 1.0f}}}, in.selected}};
  for (size_t k = 0; k < sorted.size(); ++k) {
    cum = add(p, cum, sorted[k], "nucleus.cum");  // run.c: cumulative_prob += probindex[i].prob
    const ValueId over = greater(p, cum, topp);   // run.c: if (cumulative_prob > topp) break
    // lt = [over or base + k >= n0 - 1]: run.c's last_idx = n0 - 1 when nothing crosses.
    const ValueId lt = attn_int_positive(
        p, Lin{{{over, 1024.0f}, {base, 1.0f}, {n0, -1.0f}, {kOne, static_cast<float>(k) + 2.0f}}}, "nucleus.lt");
    b.cum.push_back(cum);
    b.lt.push_back(lt);
    b.onehot.push_back(bit_value(p, step_form(lt, prev), "nucleus.onehot"));
    pick.push_back({step_form(lt, prev), cum});
    count.terms.push_back({kOne, 1.0f});
    count.terms.push_back({lt, -1.0f});
    prev = lt;
  }
  b.out.cum = cum;
  b.out.crossed = prev;
  b.out.count = integer_value(p, count, "nucleus.count");
  b.out.selected = p.value("nucleus.selected");
  // in.selected when already crossed (then no step here is 1), else the cum at the step.
  one_of(p, b.out.selected, pick, "nucleus.selected");
  gate_unit(p, first, enable);
  return b;
}

ValueId topp_r(Program& p, ValueId cumulative, ValueId coin, ValueId enable) {
  const size_t first = p.ops().size();
  const ValueId r = p.value("topp.r");
  mul_acc(p, r, cumulative, coin, "topp.r");  // run.c: float r = coin * cumulative_prob
  gate_unit(p, first, enable);
  return r;
}

ToppPickBlock topp_pick_block(Program& p, const std::vector<ValueId>& cum, const std::vector<ValueId>& index,
                              ValueId base, ValueId last_idx, ValueId r, ValueId crossed_in, ValueId token_in,
                              ValueId enable) {
  if (cum.empty() || cum.size() != index.size()) fail("topp_pick_block: {} sums, {} indices", cum.size(), index.size());
  const size_t first = p.ops().size();
  ToppPickBlock b;
  ValueId prev = crossed_in;
  std::vector<std::pair<Lin, ValueId>> pick{{Lin{{{kOne, 1.0f}}}, token_in}};
  for (size_t k = 0; k < cum.size(); ++k) {
    const ValueId crossed = greater(p, cum[k], r);  // run.c: if (r < cdf) return probindex[i].index
    // lt = [r < cdf or base + k >= last_idx]: run.c's fallback probindex[last_idx].
    const ValueId lt = attn_int_positive(
        p, Lin{{{crossed, 1024.0f}, {base, 1.0f}, {last_idx, -1.0f}, {kOne, static_cast<float>(k) + 1.0f}}}, "pick.lt");
    b.lt.push_back(lt);
    b.onehot.push_back(bit_value(p, step_form(lt, prev), "pick.onehot"));
    pick.push_back({step_form(lt, prev), index[k]});
    prev = lt;
  }
  b.crossed = prev;
  b.token = p.value("pick.token");
  one_of(p, b.token, pick, "pick.token");
  gate_unit(p, first, enable);
  return b;
}

}  // namespace qpu::npu
