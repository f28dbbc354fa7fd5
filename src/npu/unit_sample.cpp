#include "npu/unit_sample.h"

#include <math.h>  // glibc's expf by its C name, as reference/run_c_ops.cpp

#include <cmath>
#include <string>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/expf.h"
#include "npu/neurons.h"
#include "npu/unit_gate.h"

namespace qpu::npu {

using compiler::Lin;
using compiler::Neuron;
using compiler::kOne;
using detail::kOn;

using detail::bit_value;
using detail::gate_unit;
using detail::integer_value;

ValueId sample_temperature_reciprocal(Program& p, ValueId temperature, ValueId enable) {
  const size_t first = p.ops().size();
  const ValueId y = reciprocal(p, temperature, kSampleTemperatureWindow);
  gate_unit(p, first, enable);
  return y;
}

SampleScaleBlock sample_scale_block(Program& p, const std::vector<ValueId>& logits, ValueId temperature, ValueId recip,
                                    ValueId running_max, ValueId enable) {
  if (logits.empty()) fail("sample_scale_block: no logits");
  const size_t first = p.ops().size();
  SampleScaleBlock b;
  for (ValueId x : logits) b.scaled.push_back(divide_by(p, x, temperature, recip));  // run.c: logits[q] /= temperature
  // run.c's softmax max (strict >, from x[0]): its value is order-free (no NaN, no -0:
  // fl(x / t) of a logit that is never -0), so the tree equals the scan.
  std::vector<ValueId> level;
  if (running_max != kNoMax) level.push_back(running_max);
  level.insert(level.end(), b.scaled.begin(), b.scaled.end());
  b.max = attn_max_tree(p, std::move(level));
  gate_unit(p, first, enable);
  return b;
}

ValueId sample_max_tree(Program& p, const std::vector<ValueId>& block_maxima, ValueId enable) {
  const size_t first = p.ops().size();
  const ValueId m = attn_max_tree(p, block_maxima);
  gate_unit(p, first, enable);
  return m;
}

SampleExpBlock sample_exp_block(Program& p, const std::vector<ValueId>& scaled, ValueId max, ValueId enable) {
  if (scaled.empty()) fail("sample_exp_block: no scaled logits");
  const size_t first = p.ops().size();
  SampleExpBlock b;
  for (ValueId x : scaled) {
    const ExpfResult e = expf_parts(p, sub(p, x, max, "sample.shift"));  // run.c: expf(x[i] - max_val)
    b.mant.push_back(e.mant);
    b.exponent.push_back(e.exponent);
  }
  gate_unit(p, first, enable);
  return b;
}

ExpSumBlock sample_exp_sum_block(Program& p, const std::vector<ValueId>& scaled, ValueId max, ValueId acc_in,
                                 ValueId enable) {
  const size_t first = p.ops().size();
  ExpSumBlock b = attn_exp_sum_block(p, scaled, max, acc_in);
  gate_unit(p, first, enable);
  return b;
}

std::vector<ValueId> sample_prob_block(Program& p, const std::vector<ValueId>& mant, const std::vector<ValueId>& exponent,
                                       ValueId acc, ValueId enable) {
  if (mant.empty() || mant.size() != exponent.size())
    fail("sample_prob_block: {} mants, {} exponents", mant.size(), exponent.size());
  const size_t first = p.ops().size();
  const ValueId sum = attn_sum_from_acc(p, acc);
  const ValueId recip = attn_sum_reciprocal(p, sum);
  std::vector<ValueId> pm;
  for (size_t r = 0; r < mant.size(); ++r) pm.push_back(attn_probability(p, mant[r], exponent[r], sum, recip));
  gate_unit(p, first, enable);
  return pm;
}

SampleCdf sample_cdf_row(Program& p, size_t positions, const std::function<std::pair<ValueId, ValueId>(size_t)>& prob_at,
                         ValueId coin, const SampleCdfState& in, bool final_row, ValueId enable) {
  if (positions == 0) fail("sample_cdf_row: no positions");
  // Why attn_sum_row's chain is C's `cdf += p_q` here too: its terms are (pm, exponent)
  // with pm 2^exponent == C's float p_q (attn_probability), exponent in [-151, 0] as for
  // the exps, pm = 0 or in [2^-54, 4) (wider below than an exp's mant, so a term y = pm 2^b
  // stays >= 2^-54: in the window). Low tier: p_q <= e_q < 2^-59, the same bounds as for
  // the exps. High tier: it starts at a p with exponent >= -60, p >= 0.97 2^-60 / 2^10, so
  // every high cdf is >= 2^-70.1 (ulp >= 2^-94). A term below 2^-105 (scaled by 2^27 it
  // lies under the window and is read inexactly) and the flushed exponents < -104
  // (p < 2^-103) are both far under half an ulp of such a cdf: C absorbs them, and so
  // does the chain: their inexact reads stay below 2^-77 at scale 2^27, where half an ulp
  // of the scaled cdf is >= 2^-68.
  const size_t first = p.ops().size();
  SampleCdf out;
  const ValueId zero = p.value("cdf.zero");  // never written: +0
  // The coin against a tier-encoded cdf: a high cdf (acc = cdf 2^27 > 0) crosses iff
  // acc > coin 2^27 (exact scaling; acc >= 2^-43 and coin 2^27 is 0 or >= 8, so a
  // nonzero difference is >= 2^-43 or a multiple of 2^-21: greater's window). A low cdf
  // (acc = -cdf 2^71 <= 0: cdf < 2^-50) crosses iff coin = 0 and cdf > 0 (a nonzero coin
  // is >= 2^-24), and cdf > 0 iff some p_q so far is nonzero (`seen`: an exact count of
  // [pm > 0], pm being 0 or >= 2^-54): [acc < 0] itself is outside greater's window.
  const ValueId coin27 = p.value("cdf.coin27");
  scale_acc(p, coin27, coin, kSumHighScale, "cdf.coin27");
  const ValueId coin_pos = greater(p, coin, zero);
  std::vector<ValueId> nz(positions);
  auto prob = [&](size_t t) {
    const auto pair = prob_at(t);
    nz[t] = greater(p, pair.first, zero);
    return pair;
  };
  ValueId seen_before = in.seen, lt_prev = in.crossed;  // before the current group / position
  Lin group_nz;                                          // the group's nz up to the position
  Lin group_count;                                       // the group's sum of (1 - lt)
  ValueId count = p.value("cdf.count");
  bool first_count = true;
  auto partial = [&](size_t t, ValueId cdf) {
    if (t % 3 == 0) group_nz = Lin{{{seen_before, 1.0f}}};
    group_nz.terms.push_back({nz[t], 1.0f});
    const ValueId seen = attn_int_positive(p, group_nz, "cdf.seen");  // [seen before + nz so far >= 1]
    const ValueId above = greater(p, cdf, coin27);                    // high tier: coin < cdf
    // lt = [2 above + seen - coin_pos >= 1]: above (implies seen) decides for a nonzero
    // coin; seen alone for coin 0.
    const ValueId lt = attn_int_positive(p, Lin{{{above, 2.0f}, {seen, 1.0f}, {coin_pos, -1.0f}}}, "cdf.lt");
    // One-hot: the first crossing; run.c's fallback n - 1 when nothing crossed.
    const bool fallback = final_row && t + 1 == positions;
    out.onehot.push_back(fallback ? bit_value(p, Lin{{{kOne, 1.0f}, {lt_prev, -1.0f}}}, "cdf.onehot")
                                  : bit_value(p, Lin{{{lt, 1.0f}, {lt_prev, -1.0f}}}, "cdf.onehot"));
    group_count.terms.push_back({kOne, 1.0f});
    group_count.terms.push_back({lt, -1.0f});
    if (t % 3 == 2 || t + 1 == positions) {  // the group's count: one exact integer add
      if (first_count) group_count.terms.push_back({in.count, 1.0f});
      first_count = false;
      Lin up;
      for (const compiler::Term& term : group_count.terms) up.terms.push_back({term.value, term.weight / kOn});
      p.mlp("cdf.count", {Neuron{Lin{{{kOne, kOn}}}, std::move(up), {{count, 1.0f}}}});
      group_count = Lin{};
      seen_before = seen;
    }
    out.cdf.push_back(cdf);
    out.lt.push_back(lt);
    lt_prev = lt;
    out.out.seen = seen;
  };
  out.out.acc = attn_sum_row(p, positions, prob, in.acc, partial);  // run.c: cdf += p_q, q in order
  out.out.crossed = out.lt.back();
  out.out.count = count;
  if (final_row)  // first crossing = positions with coin >= cdf; none crossed: count - 1 = n - 1
    out.token = integer_value(p, Lin{{{count, 1.0f}, {out.out.crossed, 1.0f}, {kOne, -1.0f}}}, "cdf.token");
  gate_unit(p, first, enable);
  return out;
}

SampleCdf sample_cdf_block(Program& p, const std::vector<ValueId>& pm, const std::vector<ValueId>& exponent,
                           ValueId coin, const SampleCdfState& in, bool final_row, ValueId enable) {
  if (pm.empty() || pm.size() != exponent.size())
    fail("sample_cdf_block: {} probabilities, {} exponents", pm.size(), exponent.size());
  return sample_cdf_row(p, pm.size(), [&](size_t t) { return std::pair{pm[t], exponent[t]}; }, coin, in, final_row,
                        enable);
}

SampleTrace sample_reference(std::span<const float> logits, float temperature, float coin) {
  const size_t n = logits.size();
  if (n == 0) fail("sample_reference: no logits");
  SampleTrace s;
  for (float x : logits) s.scaled.push_back(x / temperature);  // logits[q] /= temperature
  s.max = s.scaled[0];                                          // softmax: max with strict >
  for (size_t q = 1; q < n; ++q)
    if (s.scaled[q] > s.max) s.max = s.scaled[q];
  for (float x : s.scaled) {
    s.e.push_back(expf(x - s.max));  // run.c: x[i] = expf(x[i] - max_val)
    s.sum += s.e.back();
  }
  for (float e : s.e) s.prob.push_back(e / s.sum);
  float cdf = 0.0f;  // sample_mult
  s.index = static_cast<int>(n) - 1;
  bool found = false;
  for (size_t q = 0; q < n; ++q) {
    cdf += s.prob[q];
    s.cdf.push_back(cdf);
    s.lt.push_back(coin < cdf ? 1 : 0);
    if (!found && coin < cdf) {
      s.index = static_cast<int>(q);
      found = true;
    }
  }
  return s;
}

SampleCdfReference sample_cdf_block_reference(const float* pm, const float* exponent, int rows, float coin,
                                              float acc_in, float seen_in, float crossed_in, float count_in,
                                              bool final_row) {
  SampleCdfReference r;
  bool high = false;
  float cdf = attn_sum_decode(acc_in, &high);
  bool seen = seen_in != 0.0f;
  float lt_prev = crossed_in, count = count_in;
  for (int t = 0; t < rows; ++t) {
    if (pm[t] > 0.0f && exponent[t] >= static_cast<float>(kSumTierExp)) high = true;
    const float prob = std::ldexp(pm[t], static_cast<int>(exponent[t]));  // C's float p_q (exact)
    cdf += prob;                                                           // run.c: cdf += probabilities[i]
    seen = seen || prob > 0.0f;
    r.cdf_encoded.push_back(attn_sum_encode(cdf, high));
    const float lt = coin < cdf ? 1.0f : 0.0f;  // run.c: if (coin < cdf) return i
    r.lt.push_back(lt);
    r.onehot.push_back(final_row && t + 1 == rows ? 1.0f - lt_prev : lt - lt_prev);
    count += 1.0f - lt;
    lt_prev = lt;
  }
  r.acc = r.cdf_encoded.back();
  r.seen = seen ? 1.0f : 0.0f;
  r.crossed = lt_prev;
  r.count = count;
  r.token = count + lt_prev - 1.0f;
  return r;
}

}  // namespace qpu::npu
