#include "npu/expf.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "npu/expf_model.h"
#include "npu/neurons.h"

namespace qpu::npu {

using compiler::Lin;
using compiler::Neuron;
using compiler::Term;
using compiler::kOne;
using detail::const_neuron;
using detail::copy_neuron;
using detail::kOn;
using detail::lin;
using detail::mul_neurons;
using namespace expf_detail;

namespace {

constexpr float kBias = 0x1p21f;       // keeps every floor's argument >= 0
constexpr float kCarryBias = 0x1p12f;  // kBias / 512: q = carry + 2^12

// A value holding the integer (or dyadic) linear form L: one neuron, gate 128, up L/128
// (exact when every partial sum of L is exact: the callers' integer bounds).
ValueId form_value(Program& p, const Lin& L, const char* label) {
  const ValueId v = p.value(label);
  Lin up;
  for (const Term& t : L.terms) up.terms.push_back({t.value, t.weight / kOn});
  p.mlp(label, {Neuron{lin({{kOne, kOn}}), std::move(up), {{v, 1.0f}}}});
  return v;
}

// [L >= 1] for an integer form L >= 0... generally (silu(128 (L - t + 1)) - silu(128 (L - t))) / 128
// = [L >= t] for integer L: both gates are 0, <= -128 or >= 128 (P6).
void step_neurons(std::vector<Neuron>& out, ValueId dst, const Lin& L, float t) {
  Lin g1, g2;
  for (const Term& term : L.terms) {
    g1.terms.push_back({term.value, term.weight * kOn});
    g2.terms.push_back({term.value, term.weight * kOn});
  }
  g1.terms.push_back({kOne, kOn * (1.0f - t)});
  g2.terms.push_back({kOne, -kOn * t});
  out.push_back(Neuron{std::move(g1), lin({{kOne, 1.0f / kOn}}), {{dst, 1.0f}}});
  out.push_back(Neuron{std::move(g2), lin({{kOne, 1.0f / kOn}}), {{dst, -1.0f}}});
}

ValueId step(Program& p, const Lin& L, float t, const char* label) {
  const ValueId v = p.value(label);
  std::vector<Neuron> n;
  step_neurons(n, v, L, t);
  p.mlp(label, std::move(n));
  return v;
}

// a AND b for bit forms (values exactly 0/1): [a + b >= 2].
ValueId bit_and(Program& p, const Lin& a, const Lin& b) {
  Lin s = a;
  s.terms.insert(s.terms.end(), b.terms.begin(), b.terms.end());
  return step(p, s, 2.0f, "expf.and");
}

Lin plus(Lin a, const Lin& b) {
  a.terms.insert(a.terms.end(), b.terms.begin(), b.terms.end());
  return a;
}

// Carry normalisation of base-512 columns c = lo..hi (expf_model.cpp's normalize):
// T_c = col_c + carry, q_c = floor((T_c + 2^21) / 512) (floor_div_pow2, F = col_c +
// q_(c+1) + 2^21 - 2^12), digit_c = F - 512 q_c in [0, 512), digit_lo = col_lo + q_(lo+1) - 2^12.
// A ripple: 2 sublayers per column, then all digits in one more sublayer. Digits above
// `read_hi` are not formed (their carries are): no op reads them, and an unread value
// would hold its residual dim to the end of the program (compiler/clear_dead.h).
std::vector<ValueId> normalize(Program& p, const std::vector<Lin>& col, int lo, int hi, int read_hi) {
  std::vector<ValueId> digit(col.size(), kOne);
  std::vector<Lin> F(col.size());
  ValueId q_prev = kOne;
  for (int c = hi; c > lo; --c) {
    Lin f = col[static_cast<size_t>(c)];
    if (q_prev == kOne) {
      f.terms.push_back({kOne, kBias});
    } else {
      f.terms.push_back({q_prev, 1.0f});
      f.terms.push_back({kOne, kBias - kCarryBias});
    }
    const ValueId q = floor_div_pow2(p, f, kDigitBits, "expf.carry");
    f.terms.push_back({q, -static_cast<float>(kRadix)});
    F[static_cast<size_t>(c)] = std::move(f);
    q_prev = q;
  }
  for (int c = std::min(hi, read_hi); c > lo; --c)
    digit[static_cast<size_t>(c)] = form_value(p, F[static_cast<size_t>(c)], "expf.digit");
  Lin top = col[static_cast<size_t>(lo)];
  if (q_prev != kOne) {
    top.terms.push_back({q_prev, 1.0f});
    top.terms.push_back({kOne, -kCarryBias});
  }
  digit[static_cast<size_t>(lo)] = form_value(p, top, "expf.top");
  return digit;
}

}  // namespace

ExpfResult expf_parts(Program& p, ValueId x) {
  // 1. Special cases and the clamp: xc = x on glibc's main path, else 0.
  const ValueId over = greater(p, x, constant_value(p, kOverflowAbove, "expf.const"), constant_window(kOverflowAbove));
  const ValueId under = greater(p, constant_value(p, kUnderflowBelow, "expf.const"), x, constant_window(kUnderflowBelow));
  // Exceptions (docs/npu-expf.md): eq_i = [x >= x_i] - [x > x_i].
  const auto& exc = exceptions();
  std::vector<Lin> eq;
  for (const Exception& ex : exc) {
    const float below = std::nextafter(ex.x, -INFINITY);
    const ValueId ge = greater(p, x, constant_value(p, below, "expf.const"), constant_window(below));
    const ValueId gt = greater(p, x, constant_value(p, ex.x, "expf.const"), constant_window(ex.x));
    eq.push_back(lin({{ge, 1.0f}, {gt, -1.0f}}));
  }
  const ValueId xc = p.value("expf.xc");
  p.mlp("expf.clamp", {Neuron{lin({{kOne, kOn}, {over, -kOn}, {under, -kOn}}), lin({{x, 1.0f / kOn}}), {{xc, 1.0f}}}});

  // 2. Balanced base-512 digits of xc by P5 rounding on the grids 2^(-9a):
  //    D_a = fl(r + C) - C, r <- r - D_a (exact); n_a = D_a 2^(9a).
  std::vector<ValueId> D(kXDigits);
  ValueId r = xc;
  for (int a = 0; a < kXDigits; ++a) {
    const float C = std::ldexp(1.5f, 23 - kDigitBits * a);
    const ValueId t = p.value("expf.xdigit");
    p.mlp("expf.xround", {copy_neuron(t, r), const_neuron(t, C)});
    const_acc(p, t, -C, "expf.xunshift");
    D[static_cast<size_t>(a)] = t;
    if (a + 1 < kXDigits) r = sub(p, r, t, "expf.xrest");
  }

  // 3. P = InvLn2N * xc: column c = sum over a + b = c of m_b n_a (constant weights).
  const std::vector<int64_t> m = const_digits(inv_ln2n(), 6);
  std::vector<Lin> pcol(kPCols);
  for (int a = 0; a < kXDigits; ++a)
    for (int b = 0; b < 7; ++b)
      if (m[static_cast<size_t>(b)] != 0)
        pcol[static_cast<size_t>(a + b)].terms.push_back(
            {D[static_cast<size_t>(a)], static_cast<float>(m[static_cast<size_t>(b)]) * std::ldexp(1.0f, kDigitBits * a)});
  const std::vector<ValueId> pd = normalize(p, pcol, 0, kPCols - 1, kRDigits);  // k and r's digits
  // k = pd0 + h, h = [pd1 >= 256]; r digits rho_1 = pd1 - 512 h, rho_c = pd_c.
  const ValueId h = step(p, lin({{pd[1], 1.0f}}), 256.0f, "expf.h");
  std::vector<ValueId> rho(kRDigits + 1, kOne);
  rho[1] = form_value(p, lin({{pd[1], 1.0f}, {h, -static_cast<float>(kRadix)}}), "expf.rho1");
  for (int c = 2; c <= kRDigits; ++c) rho[static_cast<size_t>(c)] = pd[static_cast<size_t>(c)];

  // 4. qe = floor((k + 8192) / 32) = e + 256, j = k + 8192 - 32 qe; one-hot of j by steps.
  const Lin kform = lin({{pd[0], 1.0f}, {h, 1.0f}, {kOne, 8192.0f}});
  const ValueId qe = floor_div_pow2(p, kform, 5, "expf.qe");
  const ValueId j = form_value(p, plus(kform, lin({{qe, -32.0f}})), "expf.j");
  std::vector<ValueId> tj(33, kOne);  // tj[i] = [j >= i]; tj[0] = 1 (kOne), tj[32] unused
  {
    std::vector<Neuron> n;
    for (int i = 1; i < 32; ++i) {
      tj[static_cast<size_t>(i)] = p.value("expf.tj");
      step_neurons(n, tj[static_cast<size_t>(i)], lin({{j, 1.0f}}), static_cast<float>(i));
    }
    p.mlp("expf.tj", std::move(n));
  }
  auto onehot_j = [&](int i) {  // 128 * [j == i] as a gate
    Lin g = lin({{tj[static_cast<size_t>(i)], kOn}});
    if (i < 31) g.terms.push_back({tj[static_cast<size_t>(i + 1)], -kOn});
    return g;
  };

  // 5. r^2 (digit products summed per column) and w = C1 + C0 r, both normalised.
  std::vector<ValueId> s, w;
  {
    std::vector<Lin> col(kCols);
    std::vector<Neuron> n;
    for (int c = 2; c < kCols; ++c) {
      const ValueId v = p.value("expf.r2col");
      for (int a = 1; a <= kRDigits; ++a) {
        const int b = c - a;
        if (b < a || b > kRDigits) continue;
        mul_neurons(n, v, rho[static_cast<size_t>(a)], rho[static_cast<size_t>(b)], a == b ? 1.0f : 2.0f);
      }
      col[static_cast<size_t>(c)] = lin({{v, 1.0f}});
    }
    p.mlp("expf.r2", std::move(n));
    s = normalize(p, col, 1, kCols - 1, kCols - 3);  // step 6 reads s_a for a <= kCols - 3
  }
  {
    const std::vector<int64_t> c0 = const_digits(poly_c(0), 9), c1 = const_digits(poly_c(1), 8);
    std::vector<Lin> col(kCols);
    for (int c = 2; c <= 8; ++c)
      if (c1[static_cast<size_t>(c)] != 0) col[static_cast<size_t>(c)].terms.push_back({kOne, static_cast<float>(c1[static_cast<size_t>(c)])});
    for (int a = 1; a <= kRDigits; ++a)
      for (int b = 3; b <= 9; ++b)
        if (a + b < kCols && c0[static_cast<size_t>(b)] != 0)
          col[static_cast<size_t>(a + b)].terms.push_back({rho[static_cast<size_t>(a)], static_cast<float>(c0[static_cast<size_t>(b)])});
    w = normalize(p, col, 2, kCols - 1, kCols - 2);  // ... and w_b for b <= kCols - 2
  }

  // 6. y = 1 + C2 r + r^2 w.
  std::vector<ValueId> y;
  {
    const std::vector<int64_t> c2 = const_digits(poly_c(2), 7);
    std::vector<Lin> col(kCols);
    col[0].terms.push_back({kOne, 1.0f});
    std::vector<Neuron> n;
    for (int c = 3; c < kCols; ++c) {
      const ValueId v = p.value("expf.ycol");
      for (int a = 1; a <= 10; ++a) {
        const int b = c - a;
        if (b < 2 || b > 10) continue;
        mul_neurons(n, v, s[static_cast<size_t>(a)], w[static_cast<size_t>(b)]);
      }
      col[static_cast<size_t>(c)].terms.push_back({v, 1.0f});
    }
    p.mlp("expf.y", std::move(n));
    for (int a = 1; a <= kRDigits; ++a)
      for (int b = 1; b <= 7; ++b)
        if (a + b < kCols && c2[static_cast<size_t>(b)] != 0)
          col[static_cast<size_t>(a + b)].terms.push_back({rho[static_cast<size_t>(a)], static_cast<float>(c2[static_cast<size_t>(b)])});
    y = normalize(p, col, 0, kCols - 1, kCols - 1);
  }

  // 7. Z = y * T[j]: per column, 32 neurons gated by the one-hot j (one live term).
  std::vector<ValueId> z;
  {
    std::vector<std::vector<int64_t>> T;
    for (int i = 0; i < 32; ++i) T.push_back(const_digits(table(i), 6));
    std::vector<Lin> col(kCols);
    std::vector<Neuron> n;
    for (int c = 0; c < kCols; ++c) {
      const ValueId v = p.value("expf.zcol");
      for (int i = 0; i < 32; ++i) {
        Lin up;
        for (int b = 0; b <= 6 && b <= c; ++b)
          if (T[static_cast<size_t>(i)][static_cast<size_t>(b)] != 0)
            up.terms.push_back({y[static_cast<size_t>(c - b)], static_cast<float>(T[static_cast<size_t>(i)][static_cast<size_t>(b)]) / kOn});
        if (!up.terms.empty()) n.push_back(Neuron{onehot_j(i), std::move(up), {{v, 1.0f}}});
      }
      col[static_cast<size_t>(c)] = lin({{v, 1.0f}});
    }
    p.mlp("expf.z", std::move(n));
    z = normalize(p, col, 0, kCols - 1, kCols - 1);
  }

  // 8. Final rounding. A + B = Z truncated with a sticky bit; S = fl(A + B) = RN24(Z),
  //    E = (A + B) - S exactly (Fast2Sum).
  const ValueId sticky = step(p, lin({{z[5], 1.0f}, {z[6], 1.0f}, {z[7], 1.0f}, {z[8], 1.0f}, {z[9], 1.0f}, {z[10], 1.0f}}), 1.0f,
                              "expf.sticky");
  const ValueId A = form_value(p, lin({{z[0], 1.0f}, {z[1], 0x1p-9f}, {z[2], 0x1p-18f}}), "expf.A");
  const ValueId B = form_value(p, lin({{z[3], 0x1p-27f}, {z[4], 0x1p-36f}, {sticky, 0x1p-37f}}), "expf.B");
  const ValueId S = add(p, A, B, "expf.S");
  const ValueId delta = sub(p, S, A, "expf.delta");
  const ValueId E = sub(p, B, delta, "expf.E");
  // te_i = [e >= i] for i in [-150, -125] (steps on qe = e + 256); the one-hot of e in
  // [-150, -126] selects the subnormal grid G = 2^(-149 - e).
  constexpr int kEmin = -150, kEsub = -126;
  std::vector<ValueId> te(static_cast<size_t>(kEsub - kEmin + 2));
  {
    std::vector<Neuron> n;
    for (int i = kEmin; i <= kEsub + 1; ++i) {
      const ValueId v = p.value("expf.te");
      te[static_cast<size_t>(i - kEmin)] = v;
      step_neurons(n, v, lin({{qe, 1.0f}}), static_cast<float>(i + 256));
    }
    p.mlp("expf.te", std::move(n));
  }
  auto onehot_e = [&](int i) {  // [e == i] as a form
    return lin({{te[static_cast<size_t>(i - kEmin)], 1.0f}, {te[static_cast<size_t>(i + 1 - kEmin)], -1.0f}});
  };
  auto gate128 = [](Lin L) {
    for (Term& t : L.terms) t.weight *= kOn;
    return L;
  };
  // Selected constants: C = 2^23 G (P5 at grid G, S >= 0), G itself.
  const ValueId C = p.value("expf.C"), G = p.value("expf.G");
  {
    std::vector<Neuron> n;
    for (int i = kEmin; i <= kEsub; ++i) {
      n.push_back(Neuron{gate128(onehot_e(i)), lin({{kOne, std::ldexp(1.0f, -126 - i) / kOn}}), {{C, 1.0f}}});
      n.push_back(Neuron{gate128(onehot_e(i)), lin({{kOne, std::ldexp(1.0f, -149 - i) / kOn}}), {{G, 1.0f}}});
    }
    p.mlp("expf.grid", std::move(n));
  }
  const ValueId t = add(p, S, C, "expf.t");
  const ValueId u = sub(p, t, C, "expf.u");    // RN(S, G)
  const ValueId d = sub(p, S, u, "expf.d");    // exact
  const ValueId v = p.value("expf.v");         // d / (G/2): +-1 on a tie
  {
    std::vector<Neuron> n;
    for (int i = kEmin; i <= kEsub; ++i)
      n.push_back(Neuron{gate128(onehot_e(i)), lin({{d, std::ldexp(1.0f, 150 + i) / kOn}}), {{v, 1.0f}}});
    p.mlp("expf.v", std::move(n));
  }
  const ValueId zero = p.value("expf.zero");
  // Against constants: windows from the constants alone (constant_window: any float v, S).
  const ValueId tie_up = greater(p, v, constant_value(p, 0x1.fffffep-1f, "expf.const"), constant_window(0x1.fffffep-1f));
  const ValueId tie_dn = greater(p, constant_value(p, -0x1.fffffep-1f, "expf.const"), v, constant_window(-0x1.fffffep-1f));
  const ValueId epos = greater(p, E, zero), eneg = greater(p, zero, E);
  const ValueId s1 = greater(p, S, constant_value(p, 0x1.fffffep-1f, "expf.const"), constant_window(0x1.fffffep-1f));
  const ValueId s2 = greater(p, S, constant_value(p, 0x1.fffffep0f, "expf.const"), constant_window(0x1.fffffep0f));
  const ValueId up = bit_and(p, lin({{tie_up, 1.0f}}), lin({{epos, 1.0f}}));
  const ValueId dn = bit_and(p, lin({{tie_dn, 1.0f}}), lin({{eneg, 1.0f}}));
  const ValueId n126 = bit_and(p, onehot_e(-126), lin({{s1, 1.0f}}));
  const ValueId n127 = bit_and(p, onehot_e(-127), lin({{s2, 1.0f}}));
  const ValueId uc = p.value("expf.usub");  // u corrected on ties by the sign of E
  p.mlp("expf.usub", {copy_neuron(uc, u), Neuron{lin({{up, kOn}}), lin({{G, 1.0f / kOn}}), {{uc, 1.0f}}},
                      Neuron{lin({{dn, kOn}}), lin({{G, -1.0f / kOn}}), {{uc, 1.0f}}}});
  // normal = [e >= -125] + [e == -126][S >= 1] + [e == -127][S >= 2] (exclusive bits).
  const Lin normal = lin({{te[static_cast<size_t>(kEsub + 1 - kEmin)], 1.0f}, {n126, 1.0f}, {n127, 1.0f}});
  Lin not_normal = lin({{kOne, kOn}});
  for (const Term& tt : normal.terms) not_normal.terms.push_back({tt.value, -kOn * tt.weight});
  const ValueId F = p.value("expf.F");
  p.mlp("expf.F", {Neuron{gate128(normal), lin({{S, 1.0f / kOn}}), {{F, 1.0f}}},
                   Neuron{std::move(not_normal), lin({{uc, 1.0f / kOn}}), {{F, 1.0f}}}});

  // 9. Outputs: mant = F on the main path (0 outside it), or libm's value for an exception.
  ExpfResult res;
  res.mant = p.value("expf.mant");
  {
    Lin keep = lin({{kOne, kOn}, {over, -kOn}, {under, -kOn}});
    std::vector<Neuron> n;
    for (size_t i = 0; i < exc.size(); ++i) {
      for (const Term& tt : eq[i].terms) keep.terms.push_back({tt.value, -kOn * tt.weight});
      n.push_back(Neuron{gate128(eq[i]), lin({{kOne, exc[i].mant / kOn}}), {{res.mant, 1.0f}}});
    }
    n.push_back(Neuron{std::move(keep), lin({{F, 1.0f / kOn}}), {{res.mant, 1.0f}}});
    p.mlp("expf.mant", std::move(n));
  }
  res.exponent = form_value(p, lin({{qe, 1.0f}, {kOne, -256.0f}}), "expf.exponent");
  res.overflow = over;
  return res;
}

}  // namespace qpu::npu
