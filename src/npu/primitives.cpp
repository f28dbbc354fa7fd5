#include "npu/primitives.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "npu/neurons.h"

namespace qpu::npu {

using compiler::Lin;
using compiler::Neuron;
using compiler::Term;
using compiler::kOne;
using detail::const_neuron;
using detail::copy_neuron;
using detail::kOn;
using detail::kS;
using detail::lin;

namespace {

constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
// greater's snap: y_s = fl(kSnap + t_s) rounds t_s to a multiple of 2^-7 and every
// t_s in [-0.0011, 2^-9] to exactly 0, so that no value it leaves is below the window.
constexpr float kSnap = 65536.0f;  // 2^16

}  // namespace

void mul_acc(Program& p, ValueId dst, ValueId a, ValueId b, const char* label) {
  // Gate +-a*S: one of the pair is in silu's identity window, the other in its zero
  // window; the live one computes fl(a*S * b) = S * fl(a*b), the down weight 1/S undoes S.
  p.mlp(label, {Neuron{lin({{a, kS}}), lin({{b, 1.0f}}), {{dst, 1.0f / kS}}},
                Neuron{lin({{a, -kS}}), lin({{b, -1.0f}}), {{dst, 1.0f / kS}}}});
}

void scale_acc(Program& p, ValueId dst, ValueId a, float w, const char* label) {
  p.mlp(label, {copy_neuron(dst, a, w)});
}

void const_acc(Program& p, ValueId dst, float c, const char* label) {
  p.mlp(label, {Neuron{lin({{kOne, kOn}}), lin({{kOne, c / kOn}}), {{dst, 1.0f}}}});
}

ValueId add(Program& p, ValueId a, ValueId b, const char* label) {
  const ValueId r = p.value(label);
  p.mlp(label, {copy_neuron(r, a), copy_neuron(r, b)});
  return r;
}

ValueId sub(Program& p, ValueId a, ValueId b, const char* label) {
  const ValueId r = p.value(label);
  p.mlp(label, {copy_neuron(r, a), copy_neuron(r, b, -1.0f)});
  return r;
}

ValueId dot_const(Program& p, const std::vector<float>& w, const std::vector<ValueId>& x) {
  const ValueId val = p.value("dot");
  for (size_t j = 0; j < x.size(); ++j) scale_acc(p, val, x[j], w[j], "dot.step");
  return val;
}

ValueId dot_var(Program& p, const std::vector<ValueId>& w, const std::vector<ValueId>& x) {
  const ValueId val = p.value("dot");
  for (size_t j = 0; j < x.size(); ++j) mul_acc(p, val, w[j], x[j], "dot.step");
  return val;
}

ValueId round_to_int(Program& p, ValueId x) {
  const ValueId t = p.value("round");
  // t = fl(x + C): the down projection's two-term sum is the one rounding.
  p.mlp("round.shift", {copy_neuron(t, x), Neuron{lin({{kOne, kOn}}), lin({{kOne, kRound / kOn}}), {{t, 1.0f}}}});
  const_acc(p, t, -kRound, "round.unshift");
  return t;
}

Split split12(Program& p, ValueId x) {
  const ValueId c = p.value("split.c");
  scale_acc(p, c, x, 4097.0f, "split.c");        // c = fl(x * (2^12 + 1))
  const ValueId d = sub(p, c, x, "split.d");      // d = fl(c - x)
  const ValueId hi = sub(p, c, d, "split.hi");    // hi = fl(c - d)
  const ValueId lo = sub(p, x, hi, "split.lo");   // lo = x - hi, exact
  return {hi, lo};
}

std::vector<ValueId> int_to_bits(Program& p, ValueId v, int n) {
  // rest = v (a working copy), then for j = n-1..0: b = step(rest >= 2^j); rest -= b 2^j.
  const ValueId rest = p.value("bits.rest");
  scale_acc(p, rest, v, 1.0f, "bits.copy");
  std::vector<ValueId> bits(static_cast<size_t>(n));
  constexpr float K = 128.0f;
  for (int j = n - 1; j >= 0; --j) {
    const float t = std::ldexp(1.0f, j);
    const ValueId b = p.value("bit" + std::to_string(j));
    // step(r >= t) = (silu(K(r - t + 1)) - silu(K(r - t))) / K for integer r: both gates
    // are 0, <= -K or >= K, where silu is exact.
    p.mlp("bits.step", {Neuron{lin({{rest, K}, {kOne, K * (1.0f - t)}}), lin({{kOne, 1.0f}}), {{b, 1.0f / K}, {rest, -t / K}}},
                        Neuron{lin({{rest, K}, {kOne, -K * t}}), lin({{kOne, 1.0f}}), {{b, -1.0f / K}, {rest, t / K}}}});
    bits[static_cast<size_t>(n - 1 - j)] = b;
  }
  return bits;
}

int greater_scales(GreaterWindow w) {
  // W_0 = 2^(9 - lo) enters the engine's gate scaled by 2^48 (the default norm exponent):
  // 2^(9 - lo + 48) <= 2^127 needs lo >= -70. Above 2^36 d itself leaves the value window.
  if (w.lo < -70 || w.hi > 36 || w.lo > w.hi)
    fail("greater: window [2^{}, 2^{}] not representable (need -70 <= lo <= hi <= 36)", w.lo, w.hi);
  return (w.hi + 1 - w.lo + 22) / 23;  // ceil((hi + 1 - lo) / 23), see greater
}

ValueId constant_value(Program& p, float c, const char* label) {
  const ValueId v = p.value(label);
  p.mlp(label, {const_neuron(v, c)});
  return v;
}

GreaterWindow constant_window(float c) {
  // |c| in [2^k, 2^(k+1)), so ulp(c) = 2^(k-23). If |x| >= |c| / 2 >= 2^(k-1), x is a
  // multiple of 2^(k-24) as c is, and so is x - c: d is 0 or |d| >= 2^(k-24) (a normal
  // float, so rounding keeps it). If |x| < |c| / 2, |x - c| > |c| / 2 >= 2^(k-1). Above:
  // |x - c| <= 2^36 (2 - 2^-23) + |c| < 2^37 - 2^12 for |c| < 2^12, which rounds to at
  // most 2^37 - 2^13, inside hi = 36's coverage (below 2^37). lo = k - 24 >= -70: k >= -46.
  const float a = std::fabs(c);
  if (!(a >= 0x1p-46f && a < 0x1p12f)) return {};
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1): k = e - 1
  return {e - 1 - 24, 36};
}

ValueId greater(Program& p, ValueId a, ValueId b, GreaterWindow window) {
  const int n = greater_scales(window);
  // 1. d = fl(a - b): sign-exact (d == 0 iff a == b), so only d matters from here. The
  //    same MLP preloads each scale's value y_s with kSnap (step 2 adds onto it).
  const ValueId d = p.value("gt.d");
  std::vector<Neuron> first{copy_neuron(d, a), copy_neuron(d, b, -1.0f)};
  std::vector<ValueId> ys;
  for (int s = 0; s < n; ++s) {
    ys.push_back(p.value("gt.y" + std::to_string(s)));
    first.push_back(const_neuron(ys.back(), kSnap));
  }
  p.mlp("gt.d", std::move(first));
  // 2. n scales W_s = 2^(9 - lo - 23 s) (the default window: 2^(79 - 23 s), s < 5). Scale s
  //    computes t_s = (silu(G) - silu(G - 256)) / 256 with G = d W_s: exactly 1 for G in
  //    [360, 2^32) (G - 256 is exact there), in [0, 2] for any other G > 0, 0 for G == 0,
  //    in [-0.0011, 0] for G < 0. Each t_s is a two-term down sum, so order-free.
  //    Coverage: scale s is exact for d in [360 2^(lo - 9 + 23 s), 2^(lo + 23 + 23 s)).
  //    Scale 0 starts below 2^lo (360 < 2^9); scale s + 1 starts at 360 2^(lo + 14 + 23 s)
  //    < 2^(lo + 23 + 23 s) (360 < 2^9), where scale s ends, so the n scales cover
  //    [2^lo, 2^(lo + 23 n)) without a gap, and lo + 23 n >= hi + 1 by the choice of n: the
  //    whole window up to 2^hi (2 - 2^-23) < 2^(hi + 1).
  //    The residual add snaps t_s: y_s = fl(kSnap + t_s), a multiple of 2^-7
  //    (kSnap's ulp above it), exactly kSnap for every t_s in [-0.0011, 2^-9] (half the
  //    ulp below kSnap is 2^-9) and kSnap + 1 for t_s = 1. Without the snap a t_s of d < 0
  //    can be as small as silu's tail (e.g. -2^-83): below the value window, so the
  //    dead-value clear of y_s would leave a residue in its dim (clear_dead.h).
  std::vector<Neuron> stage;
  for (int s = 0; s < n; ++s) {
    const float W = std::ldexp(1.0f, 9 - window.lo - 23 * s);
    stage.push_back(Neuron{lin({{d, W}}), lin({{kOne, 1.0f / 256.0f}}), {{ys[s], 1.0f}}});
    stage.push_back(Neuron{lin({{d, W}, {kOne, -256.0f}}), lin({{kOne, 1.0f / 256.0f}}), {{ys[s], -1.0f}}});
  }
  p.mlp("gt.scales", std::move(stage));
  // 3. y = sum of (y_s - kSnap): each up is the two-term sum fl(y_s/128 - kSnap/128), exact
  //    (Sterbenz), so each term is a multiple of 2^-7 in [0, 2] and their sum (<= 2n <= 10)
  //    is exact in any order: y == 0 when d <= 0 and y in [1, 10] when d > 0.
  const ValueId y = p.value("gt.y");
  std::vector<Neuron> sum;
  for (ValueId ys_i : ys)
    sum.push_back(Neuron{lin({{kOne, kOn}}), lin({{ys_i, 1.0f / kOn}, {kOne, -kSnap / kOn}}), {{y, 1.0f}}});
  p.mlp("gt.sum", std::move(sum));
  // 4. bit = (silu(512 y - 200) - silu(512 y - 328)) / 128: both gates <= -200 (silu -0)
  //    or >= 184 and exact (512 y <= 2^13 has ulp <= 2^-10), so the difference is 128.
  const ValueId bit = p.value("gt.bit");
  p.mlp("gt.bit", {Neuron{lin({{y, 512.0f}, {kOne, -200.0f}}), lin({{kOne, 1.0f / 128.0f}}), {{bit, 1.0f}}},
                   Neuron{lin({{y, 512.0f}, {kOne, -328.0f}}), lin({{kOne, 1.0f / 128.0f}}), {{bit, -1.0f}}}});
  return bit;
}

ValueId select(Program& p, ValueId bit, ValueId a, ValueId b, const char* label) {
  const ValueId r = p.value(label);
  // silu(128 bit) is exactly 128 or 0, so one neuron passes its value and the other +-0.
  p.mlp(label, {Neuron{lin({{bit, kOn}}), lin({{a, 1.0f / kOn}}), {{r, 1.0f}}},
                Neuron{lin({{bit, -kOn}, {kOne, kOn}}), lin({{b, 1.0f / kOn}}), {{r, 1.0f}}}});
  return r;
}

ValueId max_step(Program& p, ValueId m, ValueId x) {
  return select(p, greater(p, x, m), x, m, "max");
}

ArgMax argmax(Program& p, const std::vector<ValueId>& x) {
  // A node's index is one up term: the leaves' indices are the constants i (kOne terms,
  // exact: i/128 is), read by the first level's select neurons directly. Materialised
  // as values they would be written by constant-only ops, which the scheduler puts in
  // the program's first sublayer, live (one dim each) until the first level reads them.
  struct Node {
    ValueId max;
    Term index;
  };
  std::vector<Node> level;
  for (size_t i = 0; i < x.size(); ++i) level.push_back({x[i], Term{kOne, static_cast<float>(i)}});
  while (level.size() > 1) {
    std::vector<Node> next;
    for (size_t i = 0; i + 1 < level.size(); i += 2) {
      const Node l = level[i], r = level[i + 1];
      // The right one wins only if strictly greater: the first maximum wins, as in run.c.
      const ValueId bit = greater(p, r.max, l.max);
      const ValueId m = p.value("argmax.m"), idx = p.value("argmax.idx");
      std::vector<Neuron> sel{Neuron{lin({{bit, kOn}}), lin({{r.max, 1.0f / kOn}}), {{m, 1.0f}}},
                              Neuron{lin({{bit, -kOn}, {kOne, kOn}}), lin({{l.max, 1.0f / kOn}}), {{m, 1.0f}}},
                              Neuron{lin({{bit, kOn}}), lin({{r.index.value, r.index.weight / kOn}}), {{idx, 1.0f}}}};
      // The constant index 0 would only add +0.
      if (l.index.weight != 0.0f)
        sel.push_back(Neuron{lin({{bit, -kOn}, {kOne, kOn}}), lin({{l.index.value, l.index.weight / kOn}}), {{idx, 1.0f}}});
      p.mlp("argmax.select", std::move(sel));
      next.push_back({m, Term{idx, 1.0f}});
    }
    if (level.size() % 2) next.push_back(level.back());
    level = std::move(next);
  }
  // One input: its index is the constant 0, a value that is never written.
  return {level[0].max, level[0].index.value == kOne ? p.value("argmax.i0") : level[0].index.value};
}

ValueId floor_div_pow2(Program& p, const Lin& F, int m, const char* label) {
  // y = F/2^m - (2^m - 1)/2^(m+1) = floor(F/2^m) + delta with |delta| <= 1/2 - 2^-(m+1):
  // no ties, so fl(y + 1.5*2^23) = 1.5*2^23 + floor(F/2^m) (a two-term down sum), and
  // y is exact in the up projection (multiples of 2^-(m+8) below 2^24 units).
  const ValueId t = p.value(label);
  const float inv = std::ldexp(1.0f, -m) / kOn;
  Lin up;
  for (const Term& term : F.terms) up.terms.push_back({term.value, term.weight * inv});
  up.terms.push_back({kOne, -(std::ldexp(1.0f, m) - 1.0f) * std::ldexp(1.0f, -(m + 1)) / kOn});
  p.mlp(label, {Neuron{lin({{kOne, kOn}}), std::move(up), {{t, 1.0f}}},
                Neuron{lin({{kOne, kOn}}), lin({{kOne, kRound / kOn}}), {{t, 1.0f}}}});
  const_acc(p, t, -kRound, label);
  return t;
}

ValueId bit_xor(Program& p, ValueId a, ValueId b) {
  // s in {0, 1, 2}: gates 128 s in {0, 128, 256} and 128 (s - 1) in {-128, 0, 128}, all
  // where silu is exact (silu(-128) = -0), so the down sum is a sum of small integers.
  const ValueId r = p.value("xor");
  constexpr float K = 128.0f;
  p.mlp("xor", {Neuron{lin({{a, K}, {b, K}}), lin({{kOne, 1.0f / K}}), {{r, 1.0f}}},
                Neuron{lin({{a, K}, {b, K}, {kOne, -K}}), lin({{kOne, -2.0f / K}}), {{r, 1.0f}}}});
  return r;
}

XorShiftStep xorshift64star(Program& p, const std::vector<ValueId>& s0) {
  if (s0.size() != 64) fail("xorshift64star: state has {} bits, expected 64", s0.size());
  // Shifts are re-indexing; each xor is one sublayer for all bits in parallel. Bits that
  // xor with a shifted-in zero keep their value (no op).
  auto xor_shift = [&](const std::vector<ValueId>& s, int shift) {  // shift > 0: s ^ (s >> shift); < 0: s ^ (s << -shift)
    std::vector<ValueId> r = s;
    for (int i = 0; i < 64; ++i) {
      const int j = i + shift;
      if (j >= 0 && j < 64) r[static_cast<size_t>(i)] = bit_xor(p, s[static_cast<size_t>(i)], s[static_cast<size_t>(j)]);
    }
    return r;
  };
  XorShiftStep out;
  out.state = xor_shift(xor_shift(xor_shift(s0, 12), -25), 27);
  static_cast<XorShiftOutput&>(out) = xorshift_output(p, out.state);
  return out;
}

XorShiftOutput xorshift_output(Program& p, const std::vector<ValueId>& state) {
  if (state.size() != 64) fail("xorshift_output: state has {} bits, expected 64", state.size());
  XorShiftOutput out;
  // (s * M) mod 2^64 by byte columns: column c = sum over bits i of limb a = i/8 <= c of
  // s_i 2^(i mod 8) M_(c-a) (M_b = byte b of M): < 64 * 2^15, an exact integer form.
  constexpr uint64_t M = 0x2545F4914F6CDD1DULL;
  std::vector<Lin> column(8);
  for (int c = 0; c < 8; ++c)
    for (int i = 0; i < 8 * (c + 1); ++i) {
      const auto mb = static_cast<float>((M >> (8 * (c - i / 8))) & 0xffu);
      if (mb != 0.0f) column[static_cast<size_t>(c)].terms.push_back({state[static_cast<size_t>(i)], std::ldexp(mb, i % 8)});
    }
  // Ripple: T_c = C_c + q_(c-1), q_c = floor(T_c / 256), byte_c = T_c - 256 q_c.
  std::vector<ValueId> byte(8, kOne);
  ValueId carry = kOne;
  for (int c = 0; c < 8; ++c) {
    Lin T = column[static_cast<size_t>(c)];
    if (carry != kOne) T.terms.push_back({carry, 1.0f});
    const ValueId q = floor_div_pow2(p, T, 8, "xs.carry");
    if (c >= 4) {
      const ValueId b = p.value("xs.byte" + std::to_string(c));
      Lin bl = T;
      bl.terms.push_back({q, -256.0f});
      for (Term& t : bl.terms) t.weight /= kOn;
      p.mlp("xs.byte", {Neuron{lin({{kOne, kOn}}), std::move(bl), {{b, 1.0f}}}});
      byte[static_cast<size_t>(c)] = b;
    }
    carry = q;
  }
  auto combine = [&](const char* name, std::initializer_list<Term> terms) {
    const ValueId r = p.value(name);
    std::vector<Neuron> ns;
    for (const Term& t : terms) ns.push_back(copy_neuron(r, t.value, t.weight));
    p.mlp(name, std::move(ns));
    return r;
  };
  out.u32_lo = combine("xs.u32lo", {{byte[4], 1.0f}, {byte[5], 256.0f}});
  out.u32_hi = combine("xs.u32hi", {{byte[6], 1.0f}, {byte[7], 256.0f}});
  // (u32 >> 8) = byte5 + 2^8 byte6 + 2^16 byte7 < 2^24; times 2^-24 is exact.
  out.coin = combine("xs.coin", {{byte[5], 0x1p-24f}, {byte[6], 0x1p-16f}, {byte[7], 0x1p-8f}});
  return out;
}

}  // namespace qpu::npu
