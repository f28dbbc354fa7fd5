#include "npu/unit_attention.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>

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
  const ValueId tie_up = greater(p, v, constant_value(p, 0x1.fffffep-1f, "attn.c1"));
  const ValueId tie_dn = greater(p, constant_value(p, -0x1.fffffep-1f, "attn.c2"), v);
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
                            ValueId running_max, const std::vector<ValueId>& invalid) {
  if (keys.empty()) fail("attn_score_block: no key rows");
  if (!invalid.empty() && invalid.size() != keys.size())
    fail("attn_score_block: {} invalid bits for {} key rows", invalid.size(), keys.size());
  const float c = std::sqrt(static_cast<float>(q.size()));  // run.c: sqrtf(head_size)
  ScoreBlock b;
  for (const auto& k : keys) {
    if (k.size() != q.size()) fail("attn_score_block: a key row has {} values, q has {}", k.size(), q.size());
    b.scaled.push_back(divide_const(p, dot_var_fused(p, q, k), c));
  }
  // The max over the block (and the running max). Scores are never -0 (0.0f + x is +0
  // for x = -0), so the tree gives run.c's left-to-right scan.
  std::vector<ValueId> level;
  if (running_max != kNoMax) level.push_back(running_max);
  level.push_back(b.scaled[0]);
  for (size_t r = 1; r < b.scaled.size(); ++r)
    level.push_back(invalid.empty() ? b.scaled[r] : select(p, invalid[r], b.scaled[0], b.scaled[r], "attn.masked"));
  b.max = attn_max_tree(p, std::move(level));
  return b;
}

ValueId attn_max_tree(Program& p, std::vector<ValueId> level) {
  if (level.empty()) fail("attn_max_tree: no values");
  while (level.size() > 1) {
    std::vector<ValueId> next;
    for (size_t i = 0; i + 1 < level.size(); i += 2)
      next.push_back(select(p, greater(p, level[i + 1], level[i]), level[i + 1], level[i], "attn.max"));
    if (level.size() % 2) next.push_back(level.back());
    level = std::move(next);
  }
  return level[0];
}

ValueId attn_int_positive(Program& p, const Lin& d, const char* label) { return step(p, d, 1.0f, label); }

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
// partials (optional): the running sum after every term j, in the tier of position j
// (the sign is the tier), one value per term. The step's last term writes it in place
// (d); the others get side values fed by extra down terms of the same neurons: the
// first sum of a step is the up form's one rounding (one live neuron, down 1), the
// second the same two-term down sum as d's (d's weights, except that a conversion
// belonging to the step's third term is not applied: that term is not added yet).
ValueId switched_chain(Program& p, ValueId acc, const std::vector<ValueId>& q, const std::vector<Lin>& flag,
                       std::vector<ValueId>* partials = nullptr) {
  const float k = kConv, u = 1.0f / kOn;
  // A neuron of the step with down `w` into d, plus (when partials are wanted) its terms
  // into the side values: {value, weight} pairs, weight 0 = no term.
  auto neuron = [&](Lin gate, Lin up, ValueId d, float w, std::initializer_list<std::pair<ValueId, float>> side) {
    Neuron n = gated_copy(std::move(gate), std::move(up), d, w);
    if (partials)
      for (const auto& [v, sw] : side)
        if (sw != 0.0f) n.down.push_back({v, sw});
    return n;
  };
  size_t j = 0;
  while (j < q.size()) {
    const size_t left = q.size() - j;
    if (left >= 3) {
      const Lin &F1 = flag[j], &F2 = flag[j + 1], &F3 = flag[j + 2];
      const ValueId d = q[j + 2];
      const ValueId s1 = partials ? p.value("attn.cdf1") : d, s2 = partials ? p.value("attn.cdf2") : d;
      p.mlp("attn.sum3", {neuron(gate_none({&F1, &F2, &F3}), lin({{acc, u}, {q[j], u}}), d, 1.0f, {{s1, 1.0f}, {s2, 1.0f}}),
                          neuron(scaled_form(F1, kOn), lin({{acc, k * u}, {q[j], u}}), d, 1.0f, {{s1, 1.0f}, {s2, 1.0f}}),
                          neuron(scaled_form(F2, kOn), lin({{acc, u}, {q[j], u}}), d, k, {{s1, 1.0f}, {s2, k}}),
                          neuron(scaled_form(F3, kOn), lin({{acc, u}, {q[j], u}}), d, k, {{s1, 1.0f}, {s2, 1.0f}}),
                          neuron(gate_none({&F3}), lin({{q[j + 1], u}}), d, 1.0f, {{s2, 1.0f}}),
                          neuron(scaled_form(F3, kOn), lin({{q[j + 1], u}}), d, k, {{s2, 1.0f}})});
      if (partials) partials->insert(partials->end(), {s1, s2, d});
      acc = d;
      j += 3;
    } else if (left == 2) {
      const Lin &F1 = flag[j], &F2 = flag[j + 1];
      const ValueId d = q[j + 1];
      const ValueId s1 = partials ? p.value("attn.cdf1") : d;
      p.mlp("attn.sum2", {neuron(gate_none({&F1, &F2}), lin({{acc, u}}), d, 1.0f, {{s1, 1.0f}}),
                          neuron(scaled_form(F1, kOn), lin({{acc, u}}), d, k, {{s1, k}}),
                          neuron(scaled_form(F2, kOn), lin({{acc, u}}), d, k, {{s1, 1.0f}}),
                          neuron(gate_none({&F2}), lin({{q[j], u}}), d, 1.0f, {{s1, 1.0f}}),
                          neuron(scaled_form(F2, kOn), lin({{q[j], u}}), d, k, {{s1, 1.0f}})});
      if (partials) partials->insert(partials->end(), {s1, d});
      acc = d;
      j += 2;
    } else {
      const Lin& F1 = flag[j];
      const ValueId d = q[j];
      p.mlp("attn.sum1", {gated_copy(gate_none({&F1}), lin({{acc, u}}), d, 1.0f),
                          gated_copy(scaled_form(F1, kOn), lin({{acc, u}}), d, k)});
      if (partials) partials->push_back(d);
      acc = d;
      j += 1;
    }
  }
  return acc;
}

}  // namespace

ValueId attn_sum_block(Program& p, const std::vector<ValueId>& mant, const std::vector<ValueId>& exponent, ValueId acc_in) {
  if (mant.empty() || mant.size() != exponent.size()) fail("attn_sum_block: {} mants, {} exponents", mant.size(), exponent.size());
  return attn_sum_row(p, mant.size(), [&](size_t t) { return std::pair{mant[t], exponent[t]}; }, acc_in);
}

ValueId attn_sum_row(Program& p, size_t positions, const std::function<std::pair<ValueId, ValueId>(size_t)>& exp_at,
                     ValueId acc_in, const std::function<void(size_t, ValueId)>& partial) {
  if (positions == 0) fail("attn_sum_row: no positions");
  // expf_parts' exponents E for results in [2^-149, 1] lie in [-151, 0]. The terms need
  // mant 2^E in a tier's scale; E + 152 = 8 a + b (a in [0, 19], b in [0, 7]) splits the
  // power into two small one-hots instead of one over 152 exponents: y = mant 2^b (one
  // live neuron of 8; y in [2^-23, 2^9)), then y 2^(8 a - 125) (high: mant 2^(E + 27)) or
  // -y 2^(8 a - 81) (low: -mant 2^(E + 71)), one live neuron of the levels. Power-of-two
  // scalings of mant, so exact. High levels from a = 6 (E >= -104: lower exps are flushed,
  // C absorbs them); low levels up to a = 11 (E <= -57; the low tier holds only E < -60).
  constexpr int kLevels = 20, kHighLevel = 6, kLowLevel = 11;
  // The positions are handled three at a time, one chain step each (three C additions per
  // sublayer); a group's own work (its terms and tier bits, ~8 sublayers) is ordered after
  // the chain step kLookahead groups earlier, so that on a long row only that many groups'
  // working values are live at once, instead of every position's beside the first step.
  constexpr size_t kLookahead = 6;
  const ValueId zero = p.value("attn.zero");
  // upto_t = [t >= t*]: the acc came in high (acc > 0) or some hi_t' with t' <= t.
  const ValueId seen = greater(p, acc_in, zero);
  ValueId upto_before = seen;  // upto of the position before the group (upto_(-1) = seen)
  ValueId acc = acc_in;
  std::vector<size_t> step_op;
  for (size_t first = 0; first < positions; first += 3) {
    const size_t group = first / 3, end = std::min(first + 3, positions);
    const size_t logic_begin = p.ops().size();
    std::vector<std::vector<ValueId>> level_at_least;  // [t - first][j - 1] = [E >= -152 + 8 j], j = 1..19
    std::vector<ValueId> y, hi;
    std::vector<ValueId> mant, exponent;  // indexed by t - first
    for (size_t t = first; t < end; ++t) {
      const auto [m, e] = exp_at(t);
      mant.push_back(m);
      exponent.push_back(e);
    }
    for (size_t u = 0; u < mant.size(); ++u) {
      std::vector<ValueId> te;
      std::vector<Neuron> n;
      for (int j = 1; j < kLevels; ++j) {
        te.push_back(p.value("attn.level"));
        step_neurons(n, te.back(), lin({{exponent[u], 1.0f}}), static_cast<float>(-152 + 8 * j));
      }
      // hi_t: a nonzero exp >= 0.97 * 2^-60 (mant = 0 comes with exponent 0 off the main path).
      const ValueId tier = p.value("attn.tier");
      step_neurons(n, tier, lin({{exponent[u], 1.0f}}), static_cast<float>(kSumTierExp));
      p.mlp("attn.level", std::move(n));
      const ValueId nz = greater(p, mant[u], zero);
      hi.push_back(bit_and(p, lin({{tier, 1.0f}}), lin({{nz, 1.0f}})));
      // b = E + 152 - 8 a, a = the levels reached; its steps and y = mant 2^b.
      Lin b = lin({{exponent[u], 1.0f}, {compiler::kOne, 152.0f}});
      for (ValueId v : te) b.terms.push_back({v, -8.0f});
      std::vector<ValueId> tb;
      std::vector<Neuron> bn;
      for (int i = 1; i < 8; ++i) {
        tb.push_back(p.value("attn.low_bits"));
        step_neurons(bn, tb.back(), b, static_cast<float>(i));
      }
      p.mlp("attn.low_bits", std::move(bn));
      const ValueId yt = p.value("attn.y");
      std::vector<Neuron> yn;
      for (int i = 0; i < 8; ++i) {
        const Lin is_i = lin({{i == 0 ? compiler::kOne : tb[static_cast<size_t>(i - 1)], 1.0f}});
        const Lin on = i + 1 < 8 ? plus(is_i, lin({{tb[static_cast<size_t>(i)], -1.0f}})) : is_i;
        yn.push_back(Neuron{gate128(on), lin({{mant[u], std::ldexp(1.0f, i) / kOn}}), {{yt, 1.0f}}});
      }
      p.mlp("attn.y", std::move(yn));
      y.push_back(yt);
      level_at_least.push_back(std::move(te));
    }
    // The group's upto values: [upto before it + its hi's so far >= 1].
    std::vector<ValueId> upto;
    {
      std::vector<Neuron> n;
      Lin count = lin({{upto_before, 1.0f}});
      for (ValueId h : hi) {
        count.terms.push_back({h, 1.0f});
        upto.push_back(p.value("attn.upto"));
        step_neurons(n, upto.back(), count, 1.0f);
      }
      p.mlp("attn.upto", std::move(n));
    }
    // flag_t = [t == t*] = upto_t - upto_(t-1), and the terms, each in its tier (one live
    // neuron: the level's one-hot and the tier bit).
    std::vector<Lin> flag;
    std::vector<ValueId> x;
    for (size_t i = 0; i < upto.size(); ++i) {
      flag.push_back(lin({{upto[i], 1.0f}, {i == 0 ? upto_before : upto[i - 1], -1.0f}}));
      const auto& te = level_at_least[i];
      auto level_is = [&](int j) {  // [a == j] = [E >= -152 + 8 j] - [E >= -152 + 8 (j + 1)]
        Lin l = lin({{j == 0 ? compiler::kOne : te[static_cast<size_t>(j - 1)], 1.0f}});
        if (j + 1 < kLevels) l.terms.push_back({te[static_cast<size_t>(j)], -1.0f});
        return l;
      };
      const ValueId v = p.value("attn.term");
      std::vector<Neuron> n;
      for (int j = 0; j < kLevels; ++j) {
        if (j >= kHighLevel)
          n.push_back(Neuron{gate128(plus(level_is(j), lin({{upto[i], 1.0f}, {compiler::kOne, -1.0f}}))),
                             lin({{y[i], std::ldexp(1.0f, 8 * j - 125) / kOn}}), {{v, 1.0f}}});
        if (j <= kLowLevel)
          n.push_back(Neuron{gate128(plus(level_is(j), lin({{upto[i], -1.0f}}))),
                             lin({{y[i], -std::ldexp(1.0f, 8 * j - 81) / kOn}}), {{v, 1.0f}}});
      }
      p.mlp("attn.term", std::move(n));
      x.push_back(v);
    }
    if (group >= kLookahead)
      p.order(compiler::OpRange{step_op[group - kLookahead], step_op[group - kLookahead] + 1},
              compiler::OpRange{logic_begin, p.ops().size()});
    std::vector<ValueId> partials;
    acc = switched_chain(p, acc, x, flag, partial ? &partials : nullptr);  // one step: the group's C additions
    step_op.push_back(p.ops().size() - 1);
    for (size_t i = 0; i < partials.size(); ++i) partial(first + i, partials[i]);
    upto_before = upto.back();
  }
  return acc;
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

void attn_wsum_lane_step(WsumLane& lane, float prob, float v) {
  // The fast path scales each probability into the tier once, p' = pm 2^(exponent + 26)
  // (one gated neuron per exponent), and flushes p < 2^-80: then, with |v| in [2^-24, 2^5)
  // or 0 (the traced v: binades -24..4), every kept product fl(p' v) = fl(p v) 2^26 is a
  // normal C product >= 2^-104, inside the tier [2^-104, 2^10] (value window at scale 2^26).
  if (prob == 0.0f) return;  // C adds +-0: no change either
  if (prob < kWsumFlushP) {  // flushed (its product counted as nonzero: conservative)
    if (lane.xb == 0.0f) lane.pending = true;
    else if (std::fabs(lane.xb) < kWsumSafe) lane.unsafe = true;
    return;
  }
  lane.xb += prob * v;  // run.c: xb[i] += a * v[i]
  if (lane.pending && std::fabs(lane.xb) < kWsumSafe) lane.unsafe = true;
  lane.pending = false;
  if (lane.xb != 0.0f && std::fabs(lane.xb) < kWsumTiny) lane.unsafe = true;  // left the tier by cancellation
}

WeightedSumModel attn_weighted_sum_fast_model(const float* prob, const float* v, int rows, int v_stride) {
  WsumLane lane;
  for (int t = 0; t < rows; ++t) attn_wsum_lane_step(lane, prob[t], v[t * v_stride]);
  return {lane.xb, lane.unsafe || lane.pending};
}

namespace {

// Per row of a weighted-sum block: p' = p 2^26 (0 for p < 2^-80) and the kept bit
// kept = [p >= 2^-80] as a 0/1 form (keep AND exponent in the one-hot's range).
struct WsumRows {
  std::vector<ValueId> pp;
  std::vector<Lin> kept_parts;  // keep + any: kept iff the form is 2
};

WsumRows wsum_rows(Program& p, const std::vector<ValueId>& pm, const std::vector<ValueId>& exponent) {
  constexpr int kEmin = -80, kEmax = 2;  // p = pm 2^E >= 2^-80 needs E >= -80 - 2 (pm < 4); p <= 1
  WsumRows r;
  for (size_t t = 0; t < pm.size(); ++t) {
    const OneHot h = one_hot(p, exponent[t], kEmin - 2, kEmax, "attn.wte");
    // keep = [pm >= 2^(-80 - E)]: pm 2^20 > pred(threshold) 2^20, the threshold selected by
    // E's one-hot. The 2^20 keeps the difference (a multiple of 2^-58) in greater's window.
    // (Below the one-hot's range thr is 0 and keep is [pm > 0]: `any` masks it.)
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
    r.pp.push_back(v1);
    r.kept_parts.push_back(plus(lin({{keep, 1.0f}}), h.any()));
  }
  return r;
}

void check_wsum_shapes(const std::vector<ValueId>& pm, const std::vector<ValueId>& exponent,
                       const std::vector<std::vector<ValueId>>& v, const std::vector<ValueId>& xb_in) {
  if (pm.empty() || pm.size() != exponent.size() || pm.size() != v.size())
    fail("attn_wsum_block: {} pm, {} exponents, {} v rows", pm.size(), exponent.size(), v.size());
  for (size_t t = 0; t < v.size(); ++t)
    if (v[t].size() != xb_in.size()) fail("attn_wsum_block: v row {} has {} values, xb has {}", t, v[t].size(), xb_in.size());
}

// |x| into a fresh value: gates +-x 2^64 (silu's identity or zero window for |x| >= 2^-57),
// up 1, down 2^-64: one live term, exact for |x| >= 2^-57; for smaller |x| the result is
// within [-2^-65, |x|] (silu between -0.28 and its argument), which the callers tolerate.
ValueId abs_value(Program& p, ValueId x, const char* label) {
  const ValueId r = p.value(label);
  p.mlp(label, {Neuron{lin({{x, detail::kS}}), lin({{compiler::kOne, 1.0f}}), {{r, 1.0f / detail::kS}}},
                Neuron{lin({{x, -detail::kS}}), lin({{compiler::kOne, 1.0f}}), {{r, 1.0f / detail::kS}}}});
  return r;
}

}  // namespace

std::vector<ValueId> attn_wsum_block(Program& p, const std::vector<ValueId>& pm, const std::vector<ValueId>& exponent,
                                     const std::vector<std::vector<ValueId>>& v, const std::vector<ValueId>& xb_in) {
  check_wsum_shapes(pm, exponent, v, xb_in);
  const WsumRows rows = wsum_rows(p, pm, exponent);
  std::vector<ValueId> out;
  for (size_t i = 0; i < xb_in.size(); ++i) {
    std::vector<ValueId> terms{xb_in[i]};
    std::vector<Neuron> n;
    for (size_t t = 0; t < pm.size(); ++t) {
      terms.push_back(p.value("attn.prod"));
      detail::mul_neurons(n, terms.back(), rows.pp[t], v[t][i]);  // fl(p' v) = fl(p v) 2^26: one rounding
    }
    p.mlp("attn.prod", std::move(n));
    // xb_in is read, not written: the chain's first addition lands in the first product's value.
    out.push_back(sum_chain_fused(p, terms));
  }
  return out;
}

WsumChecked attn_wsum_row(Program& p, size_t blocks, size_t dims, const std::function<WsumRowBlock(size_t)>& block_at,
                          const WsumChecked& start) {
  if (blocks == 0 || dims == 0) fail("attn_wsum_row: {} blocks of {} dims", blocks, dims);
  constexpr size_t kLookahead = 1;
  WsumChecked state = start;
  for (auto [part, label] : {std::pair{&state.xb, "attn.wxb0"}, std::pair{&state.unsafe, "attn.wunsafe0"},
                             std::pair{&state.pending, "attn.wpending0"}}) {
    if (part->empty()) *part = p.values(label, static_cast<int>(dims));  // never written: +0
    if (part->size() != dims) fail("attn_wsum_row: a start of {} values for {} dims", part->size(), dims);
  }
  std::vector<compiler::OpRange> units;
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = p.ops().size();
    const WsumRowBlock in = block_at(b);
    if (b >= kLookahead && p.ops().size() > begin)
      p.order(units[b - kLookahead], compiler::OpRange{begin, p.ops().size()});
    const size_t unit_begin = p.ops().size();
    state = attn_wsum_block_checked(p, in.pm, in.exponent, in.v, state.xb, state.unsafe, state.pending);
    units.push_back({unit_begin, p.ops().size()});
  }
  return state;
}

WsumChecked attn_wsum_block_checked(Program& p, const std::vector<ValueId>& pm, const std::vector<ValueId>& exponent,
                                    const std::vector<std::vector<ValueId>>& v, const std::vector<ValueId>& xb_in,
                                    const std::vector<ValueId>& unsafe_in, const std::vector<ValueId>& pending_in) {
  check_wsum_shapes(pm, exponent, v, xb_in);
  if (unsafe_in.size() != xb_in.size() || pending_in.size() != xb_in.size())
    fail("attn_wsum_block_checked: {} xb, {} unsafe, {} pending", xb_in.size(), unsafe_in.size(), pending_in.size());
  const size_t rows_n = pm.size();
  const WsumRows rows = wsum_rows(p, pm, exponent);
  const ValueId zero = p.value("attn.zero");
  // Per row: kept_t = [p >= 2^-80], nzp_t = [p != 0] (pm is 0 or >= 2^-54), and the
  // flushed-and-nonzero bit f_t = nzp_t - kept_t (kept implies nonzero).
  std::vector<ValueId> kept, nzp;
  for (size_t t = 0; t < rows_n; ++t) {
    kept.push_back(step(p, rows.kept_parts[t], 2.0f, "attn.kept"));
    nzp.push_back(greater(p, pm[t], zero, {-54, 2}));  // d = pm: 0 or in [2^-54, 4) (attn_probability)
  }
  // Thresholds at the chain's scale: |xb| < 2^-40 is |S| < 2^-14; |xb| < 2^-104 is
  // |V| < 2^-28 with V = S 2^50 (defined below).
  const ValueId c_safe = constant_value(p, kWsumSafe * kWsumScale, "attn.csafe");
  const ValueId c_tiny = constant_value(p, kWsumTiny * kWsumScale * 0x1p50f, "attn.ctiny");
  WsumChecked out;
  for (size_t i = 0; i < xb_in.size(); ++i) {
    // Products, twice: the fused chain overwrites some of its operands with partial sums,
    // and the checks below read every product and every partial sum.
    std::vector<ValueId> terms{xb_in[i]}, prod;
    std::vector<Neuron> n;
    for (size_t t = 0; t < rows_n; ++t) {
      terms.push_back(p.value("attn.prod"));
      prod.push_back(p.value("attn.prod2"));
      detail::mul_neurons(n, terms.back(), rows.pp[t], v[t][i]);
      n[n.size() - 2].down.push_back({prod.back(), 1.0f / detail::kS});
      n[n.size() - 1].down.push_back({prod.back(), 1.0f / detail::kS});
    }
    p.mlp("attn.prod", std::move(n));
    const ValueId xb = sum_chain_fused(p, terms);
    // Every partial sum S_t (S_-1 = xb_in): the fused chain materialises every third one
    // (S_2, S_5, ... in the values of terms), the others are recomputed alongside, each
    // one C addition (fl(S_(t-1) + P_t): the same rounding as the chain's).
    std::vector<ValueId> S(rows_n + 1);  // S[t + 1] = S_t
    S[0] = xb_in[i];
    for (size_t t = 0; t < rows_n; ++t) {
      const bool in_chain = (t % 3 == 2) || t + 1 == rows_n;  // sum_chain_fused's groups of 3, the tail
      S[t + 1] = in_chain ? terms[t + 1] : add(p, S[t], prod[t], "attn.wpart");
    }
    // Per partial sum: small = [|S| < 2^-14] (exact for any S: |S| near the threshold is
    // a float with ulp >= 2^-38, and a tiny or out-of-window S gives |d| ~ 2^-14);
    // V = small ? S 2^50 : 0 computed from the operands S_(t-1) + P_t (one rounding, the
    // chain's), so it is exact when the operands are in the window even if S itself has
    // left it; S is a multiple of 2^-101, so V is 0 or in [2^-51, 2^36]: nz = [V != 0]
    // and tiny = [|V| < 2^-28] are in greater's window.
    // Narrower windows (4 scales each, not 5): small's d = 2^-14 - |S| is a multiple of
    // 2^-38 for |S| >= 2^-15 and above 2^-15 otherwise; nz's d = |V| and tiny's
    // d = 2^-28 - |V| are multiples of 2^-51 (V is); all are at most 2^36 (the value window).
    std::vector<ValueId> small, nz, tiny;
    for (size_t j = 0; j <= rows_n; ++j) {
      small.push_back(greater(p, c_safe, abs_value(p, S[j], "attn.wabs"), {-38, 36}));
      const ValueId V = p.value("attn.wV");
      Lin up = j == 0 ? lin({{S[0], 0x1p50f / kOn}}) : lin({{S[j - 1], 0x1p50f / kOn}, {prod[j - 1], 0x1p50f / kOn}});
      p.mlp("attn.wV", {Neuron{lin({{small.back(), kOn}}), std::move(up), {{V, 1.0f}}}});
      const ValueId aV = abs_value(p, V, "attn.wabsV");
      nz.push_back(greater(p, aV, zero, {-51, 36}));
      tiny.push_back(greater(p, c_tiny, aV, {-51, 36}));
    }
    // zero_j = small_j - nz_j (S_j == 0); pending after row t: the last flushed-nonzero
    // row (or the incoming pending, at weight 1) comes after the last kept row, which
    // X_t = pending_in + sum_(r <= t) 2^(r+1) (f_r - kept_r) >= 1 says (the highest set
    // row decides), and S_t == 0 (unchanged since that flushed row).
    std::vector<ValueId> pend{pending_in[i]};  // pend[t + 1]: after row t
    {
      std::vector<Neuron> nn;
      Lin X = lin({{pending_in[i], 1.0f}});
      for (size_t t = 0; t < rows_n; ++t) {
        const float w = std::ldexp(1.0f, static_cast<int>(t) + 1);
        X.terms.push_back({nzp[t], w});
        X.terms.push_back({kept[t], -2.0f * w});
        const ValueId pv = p.value("attn.wpend");
        step_neurons(nn, pv, plus(X, lin({{small[t + 1], 1024.0f}, {nz[t + 1], -1024.0f}})), 1025.0f);
        pend.push_back(pv);
      }
      p.mlp("attn.wpend", std::move(nn));
    }
    // The unsafe terms of row t: u1 = f_t AND nz_(t-1) (a flushed nonzero product meets
    // 0 < |xb| < 2^-40); u2 = kept_t AND pending_(t-1) AND small_t; tl = kept_t AND nz_t
    // AND tiny_t (0 < |xb| < 2^-104 after an addition).
    Lin any = lin({{unsafe_in[i], 1.0f}});
    {
      std::vector<Neuron> nn;
      for (size_t t = 0; t < rows_n; ++t) {
        const ValueId u1 = p.value("attn.wu"), u2 = p.value("attn.wu"), tl = p.value("attn.wu");
        step_neurons(nn, u1, lin({{nzp[t], 1.0f}, {kept[t], -1.0f}, {nz[t], 1.0f}}), 2.0f);
        step_neurons(nn, u2, lin({{kept[t], 1.0f}, {pend[t], 1.0f}, {small[t + 1], 1.0f}}), 3.0f);
        step_neurons(nn, tl, lin({{kept[t], 1.0f}, {nz[t + 1], 1.0f}, {tiny[t + 1], 1.0f}}), 3.0f);
        for (ValueId u : {u1, u2, tl}) any.terms.push_back({u, 1.0f});
      }
      p.mlp("attn.wu", std::move(nn));
    }
    out.xb.push_back(xb);
    out.unsafe.push_back(step(p, any, 1.0f, "attn.wunsafe"));
    out.pending.push_back(pend.back());
  }
  return out;
}

void attn_wsum_block_reference(const float* prob, const float* v, int rows, int dims, float* xb) {
  for (int t = 0; t < rows; ++t) {
    if (prob[t] < kWsumFlushP) continue;  // flushed
    for (int i = 0; i < dims; ++i) xb[i] += prob[t] * v[t * dims + i];  // run.c: xb[i] += a * v[i]
  }
}

void attn_two_tier_encode(float x, float* hi, float* lo, float* big) {
  const float m = std::fabs(x);
  *hi = m >= kWsumTiny ? x * kWsumScale : 0.0f;
  *lo = m <= kWsumLowMax ? x * kWsumLowScale : 0.0f;
  *big = m > kWsumLowMax ? 1.0f : 0.0f;
}

ValueId attn_wsum_carry(Program& p, ValueId xb, ValueId pending, ValueId enable) {
  const ValueId c = p.value("attn.wcarry");
  p.mlp("attn.wcarry", {Neuron{lin({{enable, kOn}}), lin({{xb, 1.0f / kOn}}), {{c, 1.0f}}},
                        Neuron{lin({{pending, kOn}}), lin({{pending, kWsumPendingMark / kOn}}), {{c, 1.0f}}}});
  return c;
}

WsumCarried attn_wsum_uncarry(Program& p, ValueId c, ValueId enable) {
  // d = c - 2^32: the mark gives 2^32, every other c (|c| < 2^31) |d| in (2^31, 2^33).
  WsumCarried r;
  r.pending = greater(p, c, constant_value(p, kWsumPendingMark / 2, "attn.whalf_mark"), {30, 34});
  r.xb = p.value("attn.wxb");
  p.mlp("attn.wuncarry", {Neuron{lin({{enable, kOn}}), lin({{c, 1.0f / kOn}}), {{r.xb, 1.0f}}},
                          Neuron{lin({{r.pending, kOn}}), lin({{r.pending, -kWsumPendingMark / kOn}}), {{r.xb, 1.0f}}}});
  return r;
}

TwoTier attn_two_tier_rejoin(Program& p, ValueId hi, ValueId lo) {
  // d = |hi| - 2^-10: hi is an exact float (x 2^26), so near the bound (|hi| >= 2^-11) its
  // ulp is >= 2^-34 and d is 0 or |d| >= 2^-34; below 2^-11 |d| > 2^-11 (abs_value's
  // inexact range, |hi| < 2^-57, is far below); |hi| <= 2^35.
  const ValueId big = greater(p, abs_value(p, hi, "wsl.rejoin_abs"),
                              constant_value(p, kWsumLowMax * kWsumScale, "wsl.rejoin_bound"), {-34, 36});
  return TwoTier{hi, lo, big};
}

TwoTier attn_two_tier_add(Program& p, const TwoTier& a, const TwoTier& b) {
  // Both candidates at once. Low: both operands are at most 2^-36, so both lo are exact,
  // the sum is at most 2^-35 (2^36 scaled), C's subnormal sums are exact and so are the
  // scaled ones (multiples of 2^-78 below 2^-55 have < 24 bits), and at and above 2^-126 both
  // round to 24 bits alike. High (some operand above 2^-36, so its hi is exact): with the
  // other operand's hi exact too it is C's addition, and the sum is 0 or >= 2^-104 (a
  // nonzero sum below 2^-104 is a multiple of the smaller operand's ulp, so both operands
  // would be below 2^-80); with the other below 2^-104 (hi = 0) C absorbs it (the big
  // operand's ulp is >= 2^-59).
  const ValueId cL = add(p, a.lo, b.lo, "wsl.cL"), cH = add(p, a.hi, b.hi, "wsl.cH");
  const ValueId useL = step(p, lin({{a.big, -1.0f}, {b.big, -1.0f}}), 0.0f, "wsl.useL");  // neither big
  // The result's tier bits from its candidate: |cL| > 2^35 (|r| > 2^-36), |cL| < 2^-33
  // (|r| < 2^-104), |cH| > 2^-10 (|r| > 2^-36). Near each threshold the candidate is a
  // float with ulp >= 2^-57, elsewhere the difference is large: greater's window. |c| is
  // exact above 2^-57 and harmlessly inexact below (far from every threshold).
  const ValueId aL = abs_value(p, cL, "wsl.absL"), aH = abs_value(p, cH, "wsl.absH");
  const ValueId gLl = greater(p, aL, constant_value(p, kWsumLowMax * kWsumLowScale, "wsl.c1"));
  const ValueId gLh = greater(p, constant_value(p, kWsumTiny * kWsumLowScale, "wsl.c2"), aL);
  const ValueId gHl = greater(p, aH, constant_value(p, kWsumLowMax * kWsumScale, "wsl.c3"));
  // One live term per output: gates 128 (useL, bit) combinations that are 128, 0 or <= -128.
  const float u = 1.0f / kOn, up45 = 0x1p45f / kOn, dn45 = 0x1p-45f / kOn;
  const Lin low_small = lin({{useL, kOn}, {gLl, -kOn}});                         // useL and not big
  const Lin high_small = lin({{compiler::kOne, kOn}, {useL, -kOn}, {gHl, -kOn}});  // high and not big
  TwoTier r{p.value("wsl.hi"), p.value("wsl.lo"), p.value("wsl.big")};
  p.mlp("wsl.out",
        {Neuron{low_small, lin({{cL, u}}), {{r.lo, 1.0f}}},
         Neuron{high_small, lin({{cH, up45}}), {{r.lo, 1.0f}}},
         Neuron{lin({{useL, kOn}, {gLh, -kOn}}), lin({{cL, dn45}}), {{r.hi, 1.0f}}},
         Neuron{lin({{compiler::kOne, kOn}, {useL, -kOn}}), lin({{cH, u}}), {{r.hi, 1.0f}}},
         Neuron{lin({{useL, kOn}, {gLl, kOn}, {compiler::kOne, -kOn}}), lin({{compiler::kOne, u}}), {{r.big, 1.0f}}},
         Neuron{lin({{useL, -kOn}, {gHl, kOn}}), lin({{compiler::kOne, u}}), {{r.big, 1.0f}}}});
  return r;
}

std::vector<TwoTier> attn_two_tier_products(Program& p, ValueId pm, ValueId exponent, const std::vector<ValueId>& v) {
  // Three ranges of p, one live per row:
  //  R1 p >= 2^-80: p' = p 2^26 >= 2^-54, P = fl(p' v) 2^-26, a normal product >= 2^-104;
  //  R2 2^-102 <= p < 2^-80: p 2^71 in [2^-31, 2^-9), P = fl(v p 2^71) 2^-71, normal (|v| >= 2^-24);
  //  R3 p < 2^-102: p 2^110 in [2^-39, 2^8); C may round P on the 2^-149 grid (2^-39 here).
  constexpr int kEmin = -151, kEmax = 2;
  const OneHot h = one_hot(p, exponent, kEmin, kEmax, "wsp.te");
  const ValueId pm20 = p.value("wsp.pm20");
  scale_acc(p, pm20, pm, 0x1p20f, "wsp.pm20");
  // [p >= 2^-b] = [pm 2^20 > pred(2^(-b - E)) 2^20]: the threshold is 0 where pm > 0 decides
  // (and the constant would leave the window), 2^30 where pm < 4 can never reach it.
  auto at_least = [&](int b, const char* label) {
    const ValueId thr = selected_constant(p, h, [b](int i) {
      const int e = -b - i + 20;
      return e < -34 ? 0.0f : e > 22 ? 0x1p30f : std::ldexp(0x1.fffffep-1f, e);
    }, label);
    return greater(p, pm20, thr);
  };
  const ValueId k80 = at_least(80, "wsp.t80"), k102 = at_least(102, "wsp.t102");
  // p' = p 2^k for the exponents a range can have (pm in [2^-54, 4)): R1 E in [-82, 2],
  // R2 [-104, -27], R3 [-151, -49]; one live neuron (gate: E's one-hot AND the range).
  auto scaled = [&](int k, int lo, int hi, const Lin& in_range, const char* label) {
    const ValueId r = p.value(label);
    std::vector<Neuron> n;
    for (int i = lo; i <= hi; ++i)
      n.push_back(Neuron{gate128(plus(h.at(i), in_range)), lin({{pm, std::ldexp(1.0f, i + k) / kOn}}), {{r, 1.0f}}});
    p.mlp(label, std::move(n));
    return r;
  };
  const ValueId p26 = scaled(26, -82, 2, lin({{k80, 1.0f}, {compiler::kOne, -1.0f}}), "wsp.p26");
  const ValueId p71 = scaled(71, -104, -27, lin({{k102, 1.0f}, {k80, -1.0f}, {compiler::kOne, -1.0f}}), "wsp.p71");
  const ValueId p110 = scaled(110, -151, -49, lin({{k102, -1.0f}}), "wsp.p110");
  const ValueId zero = p.value("wsp.zero");
  const ValueId c16 = constant_value(p, 0x1p-16f, "wsp.c16"), c10 = constant_value(p, 0x1p-10f, "wsp.c10");
  const ValueId c33 = constant_value(p, 0x1p-33f, "wsp.c33");
  const ValueId cmid_hi = constant_value(p, 0x1.fffffep-1f, "wsp.cmid1"), cmid_lo = constant_value(p, -0x1.fffffep-1f, "wsp.cmid2");
  const ValueId negT = constant_value(p, -0x1p-16f, "wsp.negT");
  constexpr float kG = 0x1p-39f;  // C's subnormal grid 2^-149 at scale 2^110
  constexpr float kR = 0x1p40f;   // Dekker's error term carried times 2^40 (in the window)
  const Split ps = split12(p, p110);
  // greater's windows below (d = 0 or |d| in [2^lo, 2^hi]), from the contract: p is a float
  // in [0, 1], so p110 is 0 or in [2^-39, 2^8) (R3 live: p >= 2^-149), p26 <= 2^26, p71 <
  // 2^-9; v is 0 or |v| in [2^-24, 2^5). Hence q is 0 or |q| in [2^-63, 2^13] (a multiple
  // of 2^-86), |q26| <= 2^31, |q71| < 2^-4, and every |d| < 2^-57 of abs_value's inexact
  // range is far from its threshold (so d is that threshold, nearly).
  constexpr GreaterWindow kSignQ{-63, 13};    // d = q
  constexpr GreaterWindow kSmallQ{-40, 13};   // d = 2^-16 - |q|: |q| >= 2^-17 has ulp >= 2^-40
  constexpr GreaterWindow kTie{-46, 36};      // d = +-(m - (1 - 2^-24)), m a multiple of 2^-46
  constexpr GreaterWindow kRes{-69, 0};       // d = +-res, see below
  constexpr GreaterWindow kBig{-34, 31};      // d = |q26| - 2^-10: |q26| >= 2^-11 has ulp >= 2^-34
  constexpr GreaterWindow kTiny{-57, -4};     // d = 2^-33 - |lo23|: |lo23| >= 2^-34 has ulp >= 2^-57
  std::vector<TwoTier> out;
  for (ValueId vi : v) {
    // The products, one rounding each (R1: p' on P3's gate side, R2/R3: v on it, |v| >= 2^-24).
    const ValueId q26 = p.value("wsp.q26"), q71 = p.value("wsp.q71"), q = p.value("wsp.q110");
    {
      std::vector<Neuron> n;
      detail::mul_neurons(n, q26, p26, vi);
      detail::mul_neurons(n, q71, vi, p71);
      detail::mul_neurons(n, q, vi, p110);
      p.mlp("wsp.prod", std::move(n));
    }
    // R3: u = RN(q, 2^-39) by P5 on T = +-2^-16 (q + T stays in one binade of ulp 2^-39 for
    // |q| < 2^-16, i.e. C products below 2^-126; larger ones are normal: q itself).
    const ValueId sq = greater(p, q, zero, kSignQ);
    const ValueId T = p.value("wsp.T");
    p.mlp("wsp.T", {copy_neuron(T, negT), Neuron{lin({{sq, kOn}}), lin({{compiler::kOne, 0x1p-15f / kOn}}), {{T, 1.0f}}}});
    const ValueId uu = sub(p, add(p, q, T, "wsp.t1"), T, "wsp.u");
    // Rounding q instead of the exact product differs only where q sits on a midpoint of the
    // grid (2^-39 >= 2 ulp(q) there): m = (q - u) / 2^-40 is then +-1, and |m| <= 1 - 2^-23
    // otherwise (q - u is a multiple of ulp(q) >= 2^-63).
    // For greater (kTie): q, T = +-2^-16 and so t1, u and d are multiples of 2^-86, m of
    // 2^-46 and so is m -+ (1 - 2^-24); |d| <= 2^-10 (roundings at |t1| < 2^14), |m| <= 2^30.
    const ValueId d = sub(p, q, uu, "wsp.d");
    const ValueId m = p.value("wsp.m");
    scale_acc(p, m, d, 0x1p40f, "wsp.m");
    const ValueId tie_up = greater(p, m, cmid_hi, kTie), tie_dn = greater(p, cmid_lo, m, kTie);
    // The sign of the exact residual p110 v - q (Dekker: 12-bit halves, every step exact),
    // computed only where q is small (v gated to 0 elsewhere, so every term stays in the window).
    const ValueId small = greater(p, c16, abs_value(p, q, "wsp.absq"), kSmallQ);
    const ValueId vg = p.value("wsp.vg"), qg = p.value("wsp.qg");
    p.mlp("wsp.gate", {Neuron{lin({{small, kOn}}), lin({{vi, 1.0f / kOn}}), {{vg, 1.0f}}},
                       Neuron{lin({{small, kOn}}), lin({{q, 1.0f / kOn}}), {{qg, 1.0f}}}});
    const Split vs = split12(p, vg);
    const ValueId res = p.value("wsp.res");
    {
      std::vector<Neuron> n;
      detail::mul_neurons(n, res, vs.hi, ps.hi, kR);  // ph vh - q: a two-term sum, exact
      n.push_back(copy_neuron(res, qg, -kR));
      p.mlp("wsp.res", std::move(n));
    }
    for (auto [g, u] : {std::pair{vs.lo, ps.hi}, std::pair{vs.hi, ps.lo}, std::pair{vs.lo, ps.lo}}) {
      std::vector<Neuron> n;
      detail::mul_neurons(n, res, g, u, kR);
      p.mlp("wsp.res", std::move(n));
    }
    // kRes: res = 2^40 (p110 v - q) exactly where small (else 0): p110 v is a multiple of
    // ulp(p110) ulp(v) >= 2^-62 2^-47, q of 2^-86, so res is a multiple of 2^-69; |p110 v - q|
    // <= ulp(q) / 2 <= 2^-41 (|q| < 2^-16), so |res| <= 1/2.
    const ValueId up = bit_and(p, lin({{tie_up, 1.0f}}), lin({{greater(p, res, zero, kRes), 1.0f}}));
    const ValueId dn = bit_and(p, lin({{tie_dn, 1.0f}}), lin({{greater(p, zero, res, kRes), 1.0f}}));
    const ValueId uc = p.value("wsp.uc");  // RN(p110 v, 2^-39): u moved by one grid step on a broken tie
    p.mlp("wsp.uc", {copy_neuron(uc, uu), Neuron{lin({{up, kOn}}), lin({{compiler::kOne, kG / kOn}}), {{uc, 1.0f}}},
                     Neuron{lin({{dn, kOn}}), lin({{compiler::kOne, -kG / kOn}}), {{uc, 1.0f}}}});
    // lo of R2 / R3 (one of the two is 0): q71, or the R3 product at scale 2^71.
    const ValueId lo23 = p.value("wsp.lo23");
    p.mlp("wsp.lo23", {copy_neuron(lo23, q71), Neuron{lin({{small, kOn}}), lin({{uc, 0x1p-39f / kOn}}), {{lo23, 1.0f}}},
                       Neuron{lin({{small, -kOn}, {compiler::kOne, kOn}}), lin({{q, 0x1p-39f / kOn}}), {{lo23, 1.0f}}}});
    // The tier bits: R1 big = [|q26| > 2^-10]; R2/R3 hi valid = [|lo23| >= 2^-33].
    // kTiny: lo23 is q71 (|q71| < 2^-4) or 2^-39 uc / 2^-39 q (<= 2^-26), so |d| < 2^-4.
    const ValueId big = greater(p, abs_value(p, q26, "wsp.abs26"), c10, kBig);
    const ValueId tiny = greater(p, c33, abs_value(p, lo23, "wsp.abs23"), kTiny);
    TwoTier r{p.value("wsp.hi"), p.value("wsp.lo"), big};
    const float u1 = 1.0f / kOn;
    p.mlp("wsp.out", {copy_neuron(r.hi, q26),
                      Neuron{lin({{compiler::kOne, kOn}, {tiny, -kOn}}), lin({{lo23, 0x1p-45f * u1}}), {{r.hi, 1.0f}}},
                      copy_neuron(r.lo, lo23),
                      Neuron{lin({{compiler::kOne, kOn}, {big, -kOn}}), lin({{q26, 0x1p45f * u1}}), {{r.lo, 1.0f}}}});
    out.push_back(r);
  }
  return out;
}

std::vector<std::vector<TwoTier>> attn_wsum_slow_products(Program& p, const std::vector<ValueId>& pm,
                                                           const std::vector<ValueId>& exponent,
                                                           const std::vector<std::vector<ValueId>>& v) {
  if (pm.empty() || pm.size() != exponent.size() || pm.size() != v.size())
    fail("attn_wsum_slow_block: {} pm, {} exponents, {} v rows", pm.size(), exponent.size(), v.size());
  std::vector<std::vector<TwoTier>> prod;  // [row][dim]: all products in parallel, off the chain
  for (size_t t = 0; t < pm.size(); ++t) {
    if (v[t].size() != v[0].size()) fail("attn_wsum_slow_block: v row {} has {} values, row 0 {}", t, v[t].size(), v[0].size());
    prod.push_back(attn_two_tier_products(p, pm[t], exponent[t], v[t]));
  }
  return prod;
}

std::vector<TwoTier> attn_wsum_slow_chain(Program& p, const std::vector<std::vector<TwoTier>>& products,
                                          const std::vector<TwoTier>& xb_in) {
  for (size_t t = 0; t < products.size(); ++t)
    if (products[t].size() != xb_in.size())
      fail("attn_wsum_slow_block: v row {} has {} values, xb has {}", t, products[t].size(), xb_in.size());
  std::vector<TwoTier> out;
  for (size_t i = 0; i < xb_in.size(); ++i) {
    TwoTier acc = xb_in[i];
    for (const auto& row : products) acc = attn_two_tier_add(p, acc, row[i]);  // run.c: xb[i] += a * v[i]
    out.push_back(acc);
  }
  return out;
}

std::vector<TwoTier> attn_wsum_slow_block(Program& p, const std::vector<ValueId>& pm, const std::vector<ValueId>& exponent,
                                          const std::vector<std::vector<ValueId>>& v, const std::vector<TwoTier>& xb_in) {
  if (!v.empty() && v[0].size() != xb_in.size())
    fail("attn_wsum_slow_block: v row 0 has {} values, xb has {}", v[0].size(), xb_in.size());
  return attn_wsum_slow_chain(p, attn_wsum_slow_products(p, pm, exponent, v), xb_in);
}

}  // namespace qpu::npu
