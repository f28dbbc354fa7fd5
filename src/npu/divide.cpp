#include "npu/divide.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "npu/neurons.h"

namespace qpu::npu {

using compiler::Neuron;
using detail::const_neuron;
using detail::copy_neuron;
using detail::kOn;
using detail::lin;
using detail::mul_neurons;
using compiler::kOne;

namespace {

constexpr float kR = 0x1p24f;  // residuals are carried times 2^24 (window: see divide.h)

}  // namespace

ValueId scaled_residual(Program& p, ValueId a, ValueId q, ValueId b) {
  // Dekker: q*b = ph + plo exactly, with ph = fl(q*b) and
  // plo = (((qh*bh - ph) + qh*bl) + ql*bh) + ql*bl, every step exact (12-bit halves).
  // Everything carries the factor 2^24 (exact power-of-two down weights).
  const ValueId ph = p.value("res.ph");
  {
    std::vector<Neuron> n;
    mul_neurons(n, ph, b, q, kR);
    p.mlp("res.ph", std::move(n));
  }
  const Split qs = split12(p, q), bs = split12(p, b);
  const ValueId t = p.value("res.plo");
  {
    std::vector<Neuron> n;
    mul_neurons(n, t, bs.hi, qs.hi, kR);  // qh*bh - ph: a two-term sum, exact (Sterbenz)
    n.push_back(copy_neuron(t, ph, -1.0f));
    p.mlp("res.plo", std::move(n));
  }
  for (auto [g, u] : {std::pair{bs.lo, qs.hi}, std::pair{bs.hi, qs.lo}, std::pair{bs.lo, qs.lo}}) {
    std::vector<Neuron> n;
    mul_neurons(n, t, g, u, kR);
    p.mlp("res.plo", std::move(n));
  }
  // u = a - ph: exact (Sterbenz: q*b is within a few ulps of a).
  const ValueId u = p.value("res.u");
  p.mlp("res.u", {copy_neuron(u, a, kR), copy_neuron(u, ph, -1.0f)});
  return sub(p, u, t, "res.r");  // one rounding of the exact a - q*b (exact if representable)
}

namespace {

// f1 = fl(f0 + fl(y r0 scale)): the one-step correction that makes a result within a few
// ulps faithful (r0 is the residual carried times 2^24; scale folds that and any constant).
ValueId faithful(Program& p, ValueId f0, ValueId y, ValueId r0, float scale, const std::string& label) {
  const ValueId f1 = p.value(label);
  std::vector<Neuron> n;
  mul_neurons(n, f1, y, r0, scale);
  n.push_back(copy_neuron(f1, f0));
  p.mlp(label, std::move(n));
  return f1;
}

// Rump's neighbours of a float f: away from zero A = fl(f + fl(phi f)), toward zero
// T = fl(f - fl(phi f)), phi = 2^-24 (1 + 2^-23), and the exact steps dA = A - f,
// dT = T - f (Sterbenz).
struct Neighbours {
  ValueId away, toward, d_away, d_toward;
};
Neighbours neighbours(Program& p, ValueId f, const std::string& prefix) {
  const ValueId g = p.value(prefix + ".g");
  scale_acc(p, g, f, 0x1.000002p-24f, (prefix + ".g").c_str());
  const ValueId A = add(p, f, g, (prefix + ".away").c_str()), T = sub(p, f, g, (prefix + ".toward").c_str());
  return {A, T, sub(p, A, f, (prefix + ".dA").c_str()), sub(p, T, f, (prefix + ".dT").c_str())};
}

// t_j = [x > pred(2^j)] for x in [2^lo, 2^hi) (positive), lo < j < hi, with greater's
// window narrowed to what d = fl(x - pred(2^j)) can be. pred(2^j) = 2^j - 2^(j-24) is a
// multiple of 2^(j-24); x >= 2^(j-1) is too (its ulp is >= 2^(j-24)), so d is 0 or
// |d| >= 2^(j-24); x < 2^(j-1) gives |d| > 2^(j-2). And |d| < max(x, pred(2^j)) < 2^hi.
// So d is 0 or |d| in [2^(j-24), 2^(hi-1) (2 - 2^-23)]: 2 or 3 scales instead of 5.
ValueId binade_bit(Program& p, ValueId x, int j, int hi) {
  return greater(p, x, constant_value(p, std::nextafter(std::ldexp(1.0f, j), 0.0f)), {j - 24, hi - 1});
}

}  // namespace

ValueId reciprocal(Program& p, ValueId b, const DivWindow& w) {
  if (w.bmin < -12 || w.bmax > 12 || w.bmin >= w.bmax) fail("divide: divisor window [2^{}, 2^{}) unsupported", w.bmin, w.bmax);
  // 1. Binade of b: t_j = [b > pred(2^j)] = [b >= 2^j]; the one-hot j has
  //    t_j - t_(j+1) = 1. Initial reciprocal y0 = 2^-j (24/17 - 8/17 m), m = b 2^-j in
  //    [1, 2): |1 - b y0| <= 1/17. Only the active binade's two neurons are nonzero.
  std::vector<ValueId> t;  // t[j - bmin], with t[0] = 1 (b >= 2^bmin by contract)
  t.push_back(kOne);
  for (int j = w.bmin + 1; j < w.bmax; ++j)
    t.push_back(binade_bit(p, b, j, w.bmax));
  const ValueId y0 = p.value("div.y0");
  std::vector<Neuron> est;
  for (int j = w.bmin; j < w.bmax; ++j) {
    const auto i = static_cast<size_t>(j - w.bmin);
    compiler::Lin gate = lin({{t[i], kOn}});
    if (j + 1 < w.bmax) gate.terms.push_back({t[i + 1], -kOn});
    est.push_back(Neuron{gate, lin({{kOne, static_cast<float>(24.0 / 17.0 * std::ldexp(1.0, -j)) / kOn}}), {{y0, 1.0f}}});
    est.push_back(Neuron{gate, lin({{b, static_cast<float>(-8.0 / 17.0 * std::ldexp(1.0, -2 * j)) / kOn}}), {{y0, 1.0f}}});
  }
  p.mlp("div.y0", std::move(est));
  // 2. Three Newton steps y <- y (2 - b y): |1 - b y| <= 17^-8 + fp32 roundings ~ 2^-22.
  ValueId y = y0;
  for (int it = 0; it < 3; ++it) {
    const ValueId f = p.value("div.f");
    std::vector<Neuron> n;
    mul_neurons(n, f, b, y, -1.0f);  // fl(2 - fl(b y)): two live terms, one rounding
    n.push_back(const_neuron(f, 2.0f));
    p.mlp("div.f", std::move(n));
    const ValueId yn = p.value("div.y");
    mul_acc(p, yn, y, f, "div.y");
    y = yn;
  }
  return y;
}

ValueId divide_by(Program& p, ValueId a, ValueId b, ValueId y) {
  // 3. q0 = fl(a y) is within a few ulps; q1 = fl(q0 + fl(r0 y)) with r0 = fl(a - q0 b)
  //    (exact product, one rounding) is within 0.5 ulp + 2^-20 ulp of a/b: faithful.
  const ValueId q0 = p.value("div.q0");
  mul_acc(p, q0, y, a, "div.q0");
  const ValueId r0 = scaled_residual(p, a, q0, b);
  const ValueId q1 = faithful(p, q0, y, r0, 1.0f / kR, "div.q1");
  // 4. r = a - q1 b exactly (q1 faithful); the neighbours of q1 by Rump's rule.
  const ValueId r = scaled_residual(p, a, q1, b);
  const auto [A, T, dA, dT] = neighbours(p, q1, "div");
  // 5. D = 2r - b (N - q1) for N in {A, T}: sign-exact (one rounding of an exact value;
  //    never 0: a quotient is never a midpoint). a/b is past the midpoint toward A iff
  //    D_A has q1's sign, past the midpoint toward T iff D_T has the opposite sign.
  auto side = [&](ValueId d, const char* label) {
    const ValueId D = p.value(label);
    std::vector<Neuron> n;
    n.push_back(copy_neuron(D, r, 2.0f));
    mul_neurons(n, D, b, d, -kR);
    p.mlp(label, std::move(n));
    return D;
  };
  const ValueId DA = side(dA, "div.DA"), DT = side(dT, "div.DT");
  const ValueId zero = p.value("div.zero");
  const ValueId sq = greater(p, q1, zero);
  const ValueId xA = bit_xor(p, greater(p, DA, zero), sq);  // 0: take A
  const ValueId xT = bit_xor(p, greater(p, DT, zero), sq);  // 1: take T
  // 6. One live term: A if xA = 0, T if xT = 1, else q1 (xA = 1, xT = 0). For a = 0
  //    everything is 0 and A = 0 is taken.
  const ValueId res = p.value("div");
  p.mlp("div.pick", {Neuron{lin({{kOne, kOn}, {xA, -kOn}}), lin({{A, 1.0f / kOn}}), {{res, 1.0f}}},
                     Neuron{lin({{xT, kOn}}), lin({{T, 1.0f / kOn}}), {{res, 1.0f}}},
                     Neuron{lin({{xA, kOn}, {xT, -kOn}}), lin({{q1, 1.0f / kOn}}), {{res, 1.0f}}}});
  return res;
}

ValueId divide(Program& p, ValueId a, ValueId b, const DivWindow& w) {
  return divide_by(p, a, b, reciprocal(p, b, w));
}

std::vector<ValueId> divide_shared(Program& p, const std::vector<ValueId>& a, ValueId b, const DivWindow& w) {
  const ValueId y = reciprocal(p, b, w);
  std::vector<ValueId> q;
  for (ValueId ai : a) q.push_back(divide_by(p, ai, b, y));
  return q;
}

ValueId divide_const(Program& p, ValueId a, float c) {
  if (!(c >= 0x1p-12f && c < 0x1p12f)) fail("divide_const: divisor {} outside [2^-12, 2^12)", c);
  // y = fl(1/c) has |1 - c y| <= 2^-24, better than the Newton steps deliver.
  return divide_by(p, a, constant_value(p, c), constant_value(p, 1.0f / c));
}

ValueId sqrt_rn(Program& p, ValueId x, const SqrtWindow& w) {
  if (w.xmin < -18 || w.xmax > 12 || w.xmin >= w.xmax) fail("sqrt: window [2^{}, 2^{}) unsupported", w.xmin, w.xmax);
  // 1. Binade j of x (as in divide); y0 = alpha_j - beta_j x approximates 1/sqrt(x) within
  //    2% (the chord of m^-1/2 on [1, 2], shifted by half its gap: c0 - c1 m).
  std::vector<ValueId> t;
  t.push_back(kOne);
  for (int j = w.xmin + 1; j < w.xmax; ++j)
    t.push_back(binade_bit(p, x, j, w.xmax));
  const double c1 = 1.0 - std::sqrt(0.5), gap = 1.0 - c1 * (std::cbrt(1.0 / (4.0 * c1 * c1)) - 1.0) - 1.0 / std::sqrt(std::cbrt(1.0 / (4.0 * c1 * c1)));
  const double c0 = 1.0 + c1 - gap / 2.0;
  const ValueId y0 = p.value("sqrt.y0");
  std::vector<Neuron> est;
  for (int j = w.xmin; j < w.xmax; ++j) {
    const auto i = static_cast<size_t>(j - w.xmin);
    compiler::Lin gate = lin({{t[i], kOn}});
    if (j + 1 < w.xmax) gate.terms.push_back({t[i + 1], -kOn});
    est.push_back(Neuron{gate, lin({{kOne, static_cast<float>(c0 * std::pow(2.0, -0.5 * j)) / kOn}}), {{y0, 1.0f}}});
    est.push_back(Neuron{gate, lin({{x, static_cast<float>(-c1 * std::pow(2.0, -1.5 * j)) / kOn}}), {{y0, 1.0f}}});
  }
  p.mlp("sqrt.y0", std::move(est));
  // 2. Three Newton steps y <- y (1.5 - 0.5 x y^2): error 0.02 -> 6e-4 -> 6e-7 -> fp32 roundings.
  ValueId y = y0;
  for (int it = 0; it < 3; ++it) {
    const ValueId e = p.value("sqrt.e"), f = p.value("sqrt.f"), g = p.value("sqrt.g"), yn = p.value("sqrt.y");
    mul_acc(p, e, y, x, "sqrt.e");
    mul_acc(p, f, y, e, "sqrt.f");
    p.mlp("sqrt.g", {copy_neuron(g, f, -0.5f), const_neuron(g, 1.5f)});
    mul_acc(p, yn, g, y, "sqrt.y");
    y = yn;
  }
  // 3. s0 = fl(x y) within a few ulps; s1 = fl(s0 + fl(r0 y / 2)) with r0 = fl(x - s0^2)
  //    (exact square, one rounding) is faithful.
  const ValueId s0 = p.value("sqrt.s0");
  mul_acc(p, s0, y, x, "sqrt.s0");
  const ValueId r0 = scaled_residual(p, x, s0, s0);
  const ValueId s1 = faithful(p, s0, y, r0, 0.5f / kR, "sqrt.s1");
  // 4. r = x - s1^2 exactly; neighbours A = succ(s1), T = pred(s1) (Rump), d = N - s1.
  //    In units of 2^(2e-46) (e = s1's exponent), r - s1 d is an integer K and the
  //    midpoint test x > (s1 + d/2)^2 is K > d^2/4 with 0 < d^2/4 < 1 unit: so A wins
  //    iff fl(r - s1 dA) > 0 and T wins iff fl(r - s1 dT) <= 0 (signs are exact).
  const ValueId r = scaled_residual(p, x, s1, s1);
  const auto [A, T, dA, dT] = neighbours(p, s1, "sqrt");
  auto side = [&](ValueId d, const char* label) {
    const ValueId D = p.value(label);
    std::vector<Neuron> n;
    n.push_back(copy_neuron(D, r));
    mul_neurons(n, D, s1, d, -kR);
    p.mlp(label, std::move(n));
    return D;
  };
  const ValueId zero = p.value("sqrt.zero");
  const ValueId pA = greater(p, side(dA, "sqrt.DA"), zero), pT = greater(p, side(dT, "sqrt.DT"), zero);
  const ValueId res = p.value("sqrt");
  p.mlp("sqrt.pick", {Neuron{lin({{pA, kOn}}), lin({{A, 1.0f / kOn}}), {{res, 1.0f}}},
                      Neuron{lin({{kOne, kOn}, {pT, -kOn}}), lin({{T, 1.0f / kOn}}), {{res, 1.0f}}},
                      Neuron{lin({{pT, kOn}, {pA, -kOn}}), lin({{s1, 1.0f / kOn}}), {{res, 1.0f}}}});
  return res;
}

}  // namespace qpu::npu
