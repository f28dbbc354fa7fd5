#include "npu/unit_attention.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "npu/divide.h"
#include "npu/expf.h"
#include "npu/expf_model.h"
#include "npu/fused_dot.h"
#include "npu/neurons.h"

namespace qpu::npu {

using compiler::Lin;
using compiler::Neuron;
using compiler::Term;
using detail::const_neuron;
using detail::copy_neuron;
using detail::kOn;
using detail::lin;

namespace {

// [L >= t] for an integer form L: (silu(128 (L - t + 1)) - silu(128 (L - t))) / 128; both
// gates are 0, <= -128 or >= 128, where silu is exact (P6). Same as expf.cpp's.
void step_neurons(std::vector<Neuron>& out, ValueId dst, const Lin& L, float t) {
  Lin g1, g2;
  for (const Term& term : L.terms) {
    g1.terms.push_back({term.value, term.weight * kOn});
    g2.terms.push_back({term.value, term.weight * kOn});
  }
  g1.terms.push_back({compiler::kOne, kOn * (1.0f - t)});
  g2.terms.push_back({compiler::kOne, -kOn * t});
  out.push_back(Neuron{std::move(g1), lin({{compiler::kOne, 1.0f / kOn}}), {{dst, 1.0f}}});
  out.push_back(Neuron{std::move(g2), lin({{compiler::kOne, 1.0f / kOn}}), {{dst, -1.0f}}});
}

ValueId step(Program& p, const Lin& L, float t, const char* label) {
  const ValueId v = p.value(label);
  std::vector<Neuron> n;
  step_neurons(n, v, L, t);
  p.mlp(label, std::move(n));
  return v;
}

Lin plus(Lin a, const Lin& b) {
  a.terms.insert(a.terms.end(), b.terms.begin(), b.terms.end());
  return a;
}

// a AND b for bit forms: [a + b >= 2].
ValueId bit_and(Program& p, const Lin& a, const Lin& b) { return step(p, plus(a, b), 2.0f, "attn.and"); }

Lin gate128(Lin L) {
  for (Term& t : L.terms) t.weight *= kOn;
  return L;
}

ValueId constant(Program& p, float c, const char* label) {
  const ValueId v = p.value(label);
  p.mlp(label, {const_neuron(v, c)});
  return v;
}

// The one-hot of an integer value over [lo, hi]: te[i - lo] = [x >= i] for i in
// [lo, hi + 1] (one sublayer of steps); onehot(i) = te_i - te_(i+1) as a form.
struct OneHot {
  int lo = 0, hi = 0;
  std::vector<ValueId> te;
  Lin at(int i) const {
    return lin({{te[static_cast<size_t>(i - lo)], 1.0f}, {te[static_cast<size_t>(i + 1 - lo)], -1.0f}});
  }
  Lin any() const {  // [lo <= x <= hi]
    return lin({{te.front(), 1.0f}, {te.back(), -1.0f}});
  }
  ValueId at_least_above() const { return te.back(); }  // [x >= hi + 1]
};

OneHot one_hot(Program& p, ValueId x, int lo, int hi, const char* label) {
  OneHot h;
  h.lo = lo;
  h.hi = hi;
  std::vector<Neuron> n;
  for (int i = lo; i <= hi + 1; ++i) {
    const ValueId v = p.value(label);
    h.te.push_back(v);
    step_neurons(n, v, lin({{x, 1.0f}}), static_cast<float>(i));
  }
  p.mlp(label, std::move(n));
  return h;
}

// sum over i of onehot(i) * c(i), one live term (gate 128 or 0).
template <class F>
ValueId selected_constant(Program& p, const OneHot& h, F c, const char* label) {
  const ValueId v = p.value(label);
  std::vector<Neuron> n;
  for (int i = h.lo; i <= h.hi; ++i) n.push_back(Neuron{gate128(h.at(i)), lin({{compiler::kOne, c(i) / kOn}}), {{v, 1.0f}}});
  p.mlp(label, std::move(n));
  return v;
}

}  // namespace

ValueId attn_sum_reciprocal(Program& p, ValueId sum) { return reciprocal(p, sum, DivWindow{0, 10}); }

ValueId attn_probability(Program& p, ValueId mant, ValueId exponent, ValueId sum, ValueId recip) {
  // 1. q1 = fl(mant / sum) (correctly rounded) and the exact residual R = (mant - q1 sum) 2^24,
  //    whose sign says on which side of q1 the true quotient Q = mant / sum lies.
  const ValueId q1 = divide_by(p, mant, sum, recip);
  const ValueId R = scaled_residual(p, mant, q1, sum);
  // 2. The exponent's one-hot over the range where e / sum can be subnormal. For exponent i,
  //    the result is subnormal iff Q < T_i = 2^(-126 - i), and then C rounds Q at the grid
  //    G_i = 2^(-149 - i) = T_i 2^-23.
  const OneHot h = one_hot(p, exponent, kProbExpMin, kProbExpSub, "attn.te");
  const ValueId C = selected_constant(p, h, [](int i) { return std::ldexp(1.0f, -126 - i); }, "attn.T");
  const ValueId G = selected_constant(p, h, [](int i) { return std::ldexp(1.0f, -149 - i); }, "attn.G");
  const ValueId Tp = selected_constant(p, h, [](int i) { return std::ldexp(0x1.fffffep-1f, -126 - i); }, "attn.Tp");
  // 3. u = RN(q1, G) by P5 with the constant T = 2^23 G (q1 in [0, T): q1 + T in [T, 2T),
  //    whose ulp is G; T / G even, so ties go to even as C's do); d = q1 - u exactly.
  const ValueId t = add(p, q1, C, "attn.t");
  const ValueId u = sub(p, t, C, "attn.u");
  const ValueId d = sub(p, q1, u, "attn.d");
  // v = d / (G/2): +-1 exactly when q1 sits on a midpoint of the G grid (the only place
  // where rounding q1 instead of Q can differ: G >= 2 ulp(q1), so every G-midpoint is a
  // float of q1's grid, and RN24 is monotone).
  const ValueId v = p.value("attn.v");
  {
    std::vector<Neuron> n;
    for (int i = h.lo; i <= h.hi; ++i)
      n.push_back(Neuron{gate128(h.at(i)), lin({{d, std::ldexp(1.0f, 150 + i) / kOn}}), {{v, 1.0f}}});
    p.mlp("attn.v", std::move(n));
  }
  const ValueId zero = p.value("attn.zero");
  // |v| < 1 implies |v| <= 1 - 2^-24 (v near 1 needs q1 >= G/4, so ulp(q1) >= 2^-25 G).
  const ValueId tie_up = greater(p, v, constant(p, 0x1.fffffep-1f, "attn.c1"));
  const ValueId tie_dn = greater(p, constant(p, -0x1.fffffep-1f, "attn.c2"), v);
  const ValueId rpos = greater(p, R, zero), rneg = greater(p, zero, R);
  const ValueId up = bit_and(p, lin({{tie_up, 1.0f}}), lin({{rpos, 1.0f}}));
  const ValueId dn = bit_and(p, lin({{tie_dn, 1.0f}}), lin({{rneg, 1.0f}}));
  const ValueId uc = p.value("attn.uc");  // RN(Q, G): u moved by one G on a broken tie
  p.mlp("attn.uc", {copy_neuron(uc, u), Neuron{lin({{up, kOn}}), lin({{G, 1.0f / kOn}}), {{uc, 1.0f}}},
                    Neuron{lin({{dn, kOn}}), lin({{G, -1.0f / kOn}}), {{uc, 1.0f}}}});
  // 4. Normal result iff exponent > kProbExpSub, or exponent in range and q1 >= T (then
  //    Q >= T too... and q1 * 2^exponent >= 2^-126 is C's quotient: a power-of-two scaling
  //    of a correctly rounded normal quotient). q1 < T implies Q < T (RN is monotone).
  const ValueId big = greater(p, q1, Tp);
  const ValueId nin = bit_and(p, h.any(), lin({{big, 1.0f}}));
  const Lin normal = lin({{h.at_least_above(), 1.0f}, {nin, 1.0f}});
  Lin not_normal = lin({{compiler::kOne, kOn}});
  for (const Term& tt : normal.terms) not_normal.terms.push_back({tt.value, -kOn * tt.weight});
  const ValueId pm = p.value("attn.pm");
  p.mlp("attn.pm", {Neuron{gate128(normal), lin({{q1, 1.0f / kOn}}), {{pm, 1.0f}}},
                    Neuron{std::move(not_normal), lin({{uc, 1.0f / kOn}}), {{pm, 1.0f}}}});
  return pm;
}

float attn_probability_reference(float mant, int exponent, float sum) {
  const float e = std::ldexp(mant, exponent);  // exact: the contract says e is a float
  const float prob = e / sum;                  // C's att[i] /= sum
  return std::ldexp(prob, -exponent);          // exact: a power-of-two scaling of a float
}

ScoreBlock attn_score_block(Program& p, const std::vector<ValueId>& q, const std::vector<std::vector<ValueId>>& keys,
                            ValueId running_max) {
  if (keys.empty()) fail("attn_score_block: no key rows");
  const float c = std::sqrt(static_cast<float>(q.size()));  // run.c: sqrtf(head_size)
  ScoreBlock b;
  for (const auto& k : keys) {
    if (k.size() != q.size()) fail("attn_score_block: a key row has {} values, q has {}", k.size(), q.size());
    b.scaled.push_back(divide_const(p, dot_var_fused(p, q, k), c));
  }
  // The max over the block (and the running max): with strict > the max's value is the
  // same in any order (no NaN; scores are never -0: 0.0f + x is +0 for x = -0), so a
  // pairwise tree of greater + select gives run.c's left-to-right scan.
  std::vector<ValueId> level;
  if (running_max != kNoMax) level.push_back(running_max);
  level.insert(level.end(), b.scaled.begin(), b.scaled.end());
  while (level.size() > 1) {
    std::vector<ValueId> next;
    for (size_t i = 0; i + 1 < level.size(); i += 2)
      next.push_back(select(p, greater(p, level[i + 1], level[i]), level[i + 1], level[i], "attn.max"));
    if (level.size() % 2) next.push_back(level.back());
    level = std::move(next);
  }
  b.max = level[0];
  return b;
}

float attn_score_block_reference(const float* q, const float* keys, int rows, int head_size, bool has_max,
                                 float running_max, float* scaled) {
  for (int r = 0; r < rows; ++r) {
    float score = 0.0f;
    for (int i = 0; i < head_size; ++i) score += q[i] * keys[r * head_size + i];
    score /= std::sqrt(static_cast<float>(head_size));
    scaled[r] = score;
  }
  float m = has_max ? running_max : scaled[0];
  for (int r = 0; r < rows; ++r)
    if (scaled[r] > m) m = scaled[r];
  return m;
}

namespace {

constexpr float kConv = -0x1p-44f;  // low tier (-sum 2^71) -> high tier (sum 2^27)

Lin scaled_form(const Lin& L, float w) {
  Lin r;
  for (const Term& t : L.terms) r.terms.push_back({t.value, t.weight * w});
  return r;
}

// 128 (1 - sum of the flags) as a gate form: 128 when no flag is set.
Lin gate_none(std::initializer_list<const Lin*> flags) {
  Lin g = lin({{compiler::kOne, kOn}});
  for (const Lin* f : flags) g = plus(std::move(g), scaled_form(*f, -kOn));
  return g;
}

Neuron gated_copy(Lin gate, Lin up, ValueId dst, float down) { return Neuron{std::move(gate), std::move(up), {{dst, down}}}; }

// sum_chain_fused's chain (three C additions per sublayer) with the tier switch: flag[j]
// (a 0/1 form, at most one set) says that term j is the first high-tier term, so the
// running value must be converted (times kConv) just before term j is added. The
// conversion is an exact power-of-two scaling folded into the up or down weights of the
// neuron that carries the running value; only one neuron of each group is live.
ValueId switched_chain(Program& p, ValueId acc, const std::vector<ValueId>& q, const std::vector<Lin>& flag) {
  const float k = kConv, u = 1.0f / kOn;
  size_t j = 0;
  while (j < q.size()) {
    const size_t left = q.size() - j;
    if (left >= 3) {
      const Lin &F1 = flag[j], &F2 = flag[j + 1], &F3 = flag[j + 2];
      const ValueId d = q[j + 2];
      p.mlp("attn.sum3", {gated_copy(gate_none({&F1, &F2, &F3}), lin({{acc, u}, {q[j], u}}), d, 1.0f),
                          gated_copy(scaled_form(F1, kOn), lin({{acc, k * u}, {q[j], u}}), d, 1.0f),
                          gated_copy(scaled_form(F2, kOn), lin({{acc, u}, {q[j], u}}), d, k),
                          gated_copy(scaled_form(F3, kOn), lin({{acc, u}, {q[j], u}}), d, k),
                          gated_copy(gate_none({&F3}), lin({{q[j + 1], u}}), d, 1.0f),
                          gated_copy(scaled_form(F3, kOn), lin({{q[j + 1], u}}), d, k)});
      acc = d;
      j += 3;
    } else if (left == 2) {
      const Lin &F1 = flag[j], &F2 = flag[j + 1];
      const ValueId d = q[j + 1];
      p.mlp("attn.sum2", {gated_copy(gate_none({&F1, &F2}), lin({{acc, u}}), d, 1.0f),
                          gated_copy(scaled_form(F1, kOn), lin({{acc, u}}), d, k),
                          gated_copy(scaled_form(F2, kOn), lin({{acc, u}}), d, k),
                          gated_copy(gate_none({&F2}), lin({{q[j], u}}), d, 1.0f),
                          gated_copy(scaled_form(F2, kOn), lin({{q[j], u}}), d, k)});
      acc = d;
      j += 2;
    } else {
      const Lin& F1 = flag[j];
      const ValueId d = q[j];
      p.mlp("attn.sum1", {gated_copy(gate_none({&F1}), lin({{acc, u}}), d, 1.0f),
                          gated_copy(scaled_form(F1, kOn), lin({{acc, u}}), d, k)});
      acc = d;
      j += 1;
    }
  }
  return acc;
}

}  // namespace

ValueId attn_sum_block(Program& p, const std::vector<ValueId>& mant, const std::vector<ValueId>& exponent, ValueId acc_in) {
  if (mant.empty() || mant.size() != exponent.size()) fail("attn_sum_block: {} mants, {} exponents", mant.size(), exponent.size());
  constexpr int kEmin = -151, kEmax = 0;  // expf_parts' exponents for results in [2^-149, 1]
  constexpr int kHighMin = -104;          // high-tier terms kept: e >= 0.97 * 2^-104
  const ValueId zero = p.value("attn.zero");
  std::vector<OneHot> eh;
  std::vector<ValueId> hi;
  for (size_t t = 0; t < mant.size(); ++t) {
    eh.push_back(one_hot(p, exponent[t], kEmin, kEmax, "attn.ete"));
    // hi_t: a nonzero exp >= 0.97 * 2^-60 (mant = 0 comes with exponent 0 off the main path).
    const ValueId nz = greater(p, mant[t], zero);
    hi.push_back(bit_and(p, lin({{eh.back().te[static_cast<size_t>(kSumTierExp - kEmin)], 1.0f}}), lin({{nz, 1.0f}})));
  }
  // upto_t = [t >= t*]: the acc came in high (acc > 0) or some hi_t' with t' <= t.
  const ValueId seen = greater(p, acc_in, zero);
  std::vector<ValueId> upto;
  {
    std::vector<Neuron> n;
    Lin count = lin({{seen, 1.0f}});
    for (ValueId h : hi) {
      count.terms.push_back({h, 1.0f});
      const ValueId v = p.value("attn.upto");
      step_neurons(n, v, count, 1.0f);
      upto.push_back(v);
    }
    p.mlp("attn.upto", std::move(n));
  }
  // flag_t = [t == t*] = upto_t - upto_(t-1) (upto_(-1) = seen).
  std::vector<Lin> flag;
  for (size_t t = 0; t < upto.size(); ++t)
    flag.push_back(lin({{upto[t], 1.0f}, {t == 0 ? seen : upto[t - 1], -1.0f}}));
  // The terms, each in its tier: high: mant 2^(E + 27) (0 below exponent kHighMin: absorbed);
  // low: -mant 2^(E + 71). One live neuron (the one-hot of E and the tier bit).
  std::vector<ValueId> x;
  for (size_t t = 0; t < mant.size(); ++t) {
    const ValueId v = p.value("attn.term");
    std::vector<Neuron> n;
    for (int i = kEmin; i <= kEmax; ++i) {
      if (i >= kHighMin)
        n.push_back(Neuron{gate128(plus(eh[t].at(i), lin({{upto[t], 1.0f}, {compiler::kOne, -1.0f}}))),
                           lin({{mant[t], std::ldexp(1.0f, i + 27) / kOn}}), {{v, 1.0f}}});
      if (i < kSumTierExp)
        n.push_back(Neuron{gate128(plus(eh[t].at(i), lin({{upto[t], -1.0f}}))),
                           lin({{mant[t], -std::ldexp(1.0f, i + 71) / kOn}}), {{v, 1.0f}}});
    }
    p.mlp("attn.term", std::move(n));
    x.push_back(v);
  }
  return switched_chain(p, acc_in, x, flag);
}

ExpSumBlock attn_exp_sum_block(Program& p, const std::vector<ValueId>& scaled, ValueId max, ValueId acc_in) {
  ExpSumBlock b;
  for (ValueId s : scaled) {
    const ExpfResult e = expf_parts(p, sub(p, s, max, "attn.shift"));  // run.c: expf(x[i] - max_val)
    b.mant.push_back(e.mant);
    b.exponent.push_back(e.exponent);
  }
  b.acc = attn_sum_block(p, b.mant, b.exponent, acc_in);
  return b;
}

ValueId attn_sum_from_acc(Program& p, ValueId acc) {
  const ValueId s = p.value("attn.sum");
  scale_acc(p, s, acc, 1.0f / kSumHighScale, "attn.sum");
  return s;
}

float attn_sum_encode(float sum, bool high) {
  return high ? sum * kSumHighScale : -(sum * kSumLowScale);
}

float attn_sum_decode(float acc, bool* high) {
  *high = acc > 0.0f;
  return *high ? acc / kSumHighScale : -acc / kSumLowScale;
}

float attn_sum_block_reference(const float* mant, const float* exponent, int rows, float acc_in) {
  bool high = false;
  float sum = attn_sum_decode(acc_in, &high);
  for (int t = 0; t < rows; ++t) {
    if (mant[t] > 0.0f && exponent[t] >= static_cast<float>(kSumTierExp)) high = true;
    sum += std::ldexp(mant[t], static_cast<int>(exponent[t]));  // run.c: sum += x[i]
  }
  return attn_sum_encode(sum, high);
}

float attn_exp_sum_block_reference(const float* scaled, int rows, float max, float acc_in, float* mant,
                                   float* exponent) {
  for (int t = 0; t < rows; ++t) {
    const ExpfParts e = expf_reference_parts(scaled[t] - max);  // run.c: expf(x[i] - max_val)
    mant[t] = e.mant;
    exponent[t] = static_cast<float>(e.exponent);
  }
  return attn_sum_block_reference(mant, exponent, rows, acc_in);
}

WeightedSumModel attn_weighted_sum_fast_model(const float* prob, const float* v, int rows, int v_stride) {
  // The fast path scales each probability into the tier once, p' = pm 2^(exponent + 26)
  // (one gated neuron per exponent), and flushes p < 2^-80: then, with |v| in [2^-24, 2^5)
  // or 0 (the traced v: binades -24..4), every kept product fl(p' v) = fl(p v) 2^26 is a
  // normal C product >= 2^-104, inside the tier [2^-104, 2^10] (value window at scale 2^26).
  constexpr float kFlushP = 0x1p-80f;
  constexpr float kTiny = 0x1p-104f;  // partial sums below this leave the tier
  constexpr float kSafe = 0x1p-40f;   // |xb| >= this absorbs any sum of <= 512 flushed products (< 2^-66)
  WeightedSumModel m;
  bool pending = false;  // C holds a nonzero xb (sum of flushed products) that the fast path holds as 0
  for (int t = 0; t < rows; ++t) {
    const float prod = prob[t] * v[t * v_stride];  // run.c: a * v[i]
    if (prob[t] < kFlushP) {                       // flushed
      if (prod == 0.0f) continue;                  // C adds +-0: no change either
      if (m.xb == 0.0f) pending = true;
      else if (std::fabs(m.xb) < kSafe) m.unsafe = true;
      continue;
    }
    m.xb += prod;  // run.c: xb[i] += a * v[i]
    if (pending && std::fabs(m.xb) < kSafe) m.unsafe = true;
    pending = false;
    if (m.xb != 0.0f && std::fabs(m.xb) < kTiny) m.unsafe = true;  // left the tier by cancellation
  }
  if (pending) m.unsafe = true;
  return m;
}

std::vector<ValueId> attn_wsum_block(Program& p, const std::vector<ValueId>& pm, const std::vector<ValueId>& exponent,
                                     const std::vector<std::vector<ValueId>>& v, const std::vector<ValueId>& xb_in) {
  if (pm.size() != exponent.size() || pm.size() != v.size()) fail("attn_wsum_block: {} pm, {} exponents, {} v rows", pm.size(), exponent.size(), v.size());
  constexpr int kEmin = -80, kEmax = 2;  // p = pm 2^E >= 2^-80 needs E >= -80 - 2 (pm < 4); p <= 1
  std::vector<ValueId> pp;               // p' = p 2^26, or 0 for p < 2^-80
  for (size_t t = 0; t < pm.size(); ++t) {
    const OneHot h = one_hot(p, exponent[t], kEmin - 2, kEmax, "attn.wte");
    // keep = [pm >= 2^(-80 - E)]: pm 2^20 > pred(threshold) 2^20, the threshold selected by
    // E's one-hot. The 2^20 keeps the difference (a multiple of 2^-58) in greater's window.
    const ValueId thr = selected_constant(p, h, [](int i) { return std::ldexp(0x1.fffffep-1f, -60 - i); }, "attn.wthr");
    const ValueId pm20 = p.value("attn.pm20");
    scale_acc(p, pm20, pm[t], 0x1p20f, "attn.pm20");
    const ValueId keep = greater(p, pm20, thr);
    const ValueId v1 = p.value("attn.pprime");
    std::vector<Neuron> n;
    for (int i = h.lo; i <= h.hi; ++i)
      n.push_back(Neuron{gate128(plus(h.at(i), lin({{keep, 1.0f}, {compiler::kOne, -1.0f}}))),
                         lin({{pm[t], std::ldexp(1.0f, i + 26) / kOn}}), {{v1, 1.0f}}});
    p.mlp("attn.pprime", std::move(n));
    pp.push_back(v1);
  }
  std::vector<ValueId> out;
  for (size_t i = 0; i < xb_in.size(); ++i) {
    std::vector<ValueId> terms{xb_in[i]};
    std::vector<Neuron> n;
    for (size_t t = 0; t < pm.size(); ++t) {
      if (v[t].size() != xb_in.size()) fail("attn_wsum_block: v row {} has {} values, xb has {}", t, v[t].size(), xb_in.size());
      terms.push_back(p.value("attn.prod"));
      detail::mul_neurons(n, terms.back(), pp[t], v[t][i]);  // fl(p' v) = fl(p v) 2^26: one rounding
    }
    p.mlp("attn.prod", std::move(n));
    // xb_in is read, not written: the chain's first addition lands in the first product's value.
    out.push_back(sum_chain_fused(p, terms));
  }
  return out;
}

void attn_wsum_block_reference(const float* prob, const float* v, int rows, int dims, float* xb) {
  for (int t = 0; t < rows; ++t) {
    if (prob[t] < 0x1p-80f) continue;  // flushed
    for (int i = 0; i < dims; ++i) xb[i] += prob[t] * v[t * dims + i];  // run.c: xb[i] += a * v[i]
  }
}

}  // namespace qpu::npu
