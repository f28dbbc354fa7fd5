#include "npu/unit_swiglu.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/divide.h"
#include "npu/expf.h"
#include "npu/neurons.h"
#include "npu/primitives.h"

namespace qpu::npu {

using compiler::Neuron;
using compiler::Program;
using compiler::ValueId;
using namespace detail;

namespace {

// Exponents of expf's split result the unit tells apart. e <= -26: t < 2^-24, so
// fl(1 + t) == 1. e >= 26: 2^-e is below half an ulp of mant (>= 0.5), so
// fl(2^-e + mant) == mant. e > 62 only for hb < -43, outside the window.
constexpr int kELow = -25;
constexpr int kEFlat = 26;
constexpr int kEHigh = 62;

// h = silu(128 (e - c) + 128 k) / 128 for integer e: k + e - c when that is >= 1, +-0
// when it is <= 0 (silu(0) = 0, silu(<= -128) = -0), exactly.
Neuron ramp(ValueId dst, ValueId e, float c, float k, float down) {
  return Neuron{lin({{e, kOn}, {kOne, kOn * (k - c)}}), lin({{kOne, 1.0f / kOn}}), {{dst, down}}};
}

// [e == c]: ramp(+1) - 2 ramp(0) + ramp(-1) (small integers: exact in any order).
void hat(std::vector<Neuron>& out, ValueId dst, ValueId e, int c) {
  const auto cf = static_cast<float>(c);
  out.push_back(ramp(dst, e, cf, 1.0f, 1.0f));
  out.push_back(ramp(dst, e, cf, 0.0f, -2.0f));
  out.push_back(ramp(dst, e, cf, -1.0f, 1.0f));
}

// [e <= c]: ramp of (c + 1 - e) minus ramp of (c - e).
void at_most(std::vector<Neuron>& out, ValueId dst, ValueId e, int c) {
  const auto cf = static_cast<float>(c);
  out.push_back(Neuron{lin({{e, -kOn}, {kOne, kOn * (cf + 1.0f)}}), lin({{kOne, 1.0f / kOn}}), {{dst, 1.0f}}});
  out.push_back(Neuron{lin({{e, -kOn}, {kOne, kOn * cf}}), lin({{kOne, 1.0f / kOn}}), {{dst, -1.0f}}});
}

// [e >= c]: ramp of (e - c + 1) minus ramp of (e - c).
void at_least(std::vector<Neuron>& out, ValueId dst, ValueId e, int c) {
  const auto cf = static_cast<float>(c);
  out.push_back(ramp(dst, e, cf, 1.0f, 1.0f));
  out.push_back(ramp(dst, e, cf, 0.0f, -1.0f));
}

SwigluResult build_swiglu(Program& p, ValueId val, ValueId hb2) {
  // t = expf(-val) = mant * 2^e (or overflow).
  const ValueId neg = p.value("swiglu.neg");
  scale_acc(p, neg, val, -1.0f, "swiglu.neg");
  const ExpfResult t = expf_parts(p, neg);

  // One-hot of e over [kELow, kEHigh] plus the buckets e < kELow, e <= 0, e >= kEFlat.
  std::vector<Neuron> sel;
  std::vector<ValueId> onehot;
  for (int c = kELow; c <= kEHigh; ++c) {
    onehot.push_back(p.value("swiglu.e" + std::to_string(c)));
    hat(sel, onehot.back(), t.exponent, c);
  }
  const ValueId below = p.value("swiglu.e_below"), nonpos = p.value("swiglu.e_nonpos"),
                flat = p.value("swiglu.e_flat");
  at_most(sel, below, t.exponent, kELow - 1);
  at_most(sel, nonpos, t.exponent, 0);
  at_least(sel, flat, t.exponent, kEFlat);
  p.mlp("swiglu.exponent", std::move(sel));
  auto is = [&](int c) { return onehot[static_cast<size_t>(c - kELow)]; };

  // d' = fl(1 + t) * 2^-s, s = max(e, 0): one live neuron, whose up form is a two-term
  // sum (one rounding) of exact power-of-two multiples of 1 and mant:
  //   e <= 0: fl(1 + mant 2^e);  e >= 1: fl(2^-e + mant) = fl(1 + t) 2^-e.
  // Overflow (mant = e = 0) gives d' = 1; the zero comes from the val scaling below.
  const ValueId dp = p.value("swiglu.d");
  std::vector<Neuron> den;
  den.push_back(Neuron{lin({{below, kOn}}), lin({{kOne, 1.0f / kOn}}), {{dp, 1.0f}}});
  for (int c = kELow; c < kEFlat; ++c) {
    const float one = c <= 0 ? 1.0f : std::ldexp(1.0f, -c), m = c <= 0 ? std::ldexp(1.0f, c) : 1.0f;
    den.push_back(Neuron{lin({{is(c), kOn}}), lin({{kOne, one / kOn}, {t.mant, m / kOn}}), {{dp, 1.0f}}});
  }
  den.push_back(Neuron{lin({{flat, kOn}}), lin({{t.mant, 1.0f / kOn}}), {{dp, 1.0f}}});
  p.mlp("swiglu.denominator", std::move(den));

  // val * 2^-s (exact power-of-two scaling), 0 where expf overflowed: C's r is then
  // 1/inf = 0 and val * 0 a zero. Off the critical path (in parallel with d').
  const ValueId vs = p.value("swiglu.val_scaled");
  std::vector<Neuron> scale;
  scale.push_back(Neuron{lin({{nonpos, kOn}, {t.overflow, -kOn}}), lin({{val, 1.0f / kOn}}), {{vs, 1.0f}}});
  for (int c = 1; c <= kEHigh; ++c)
    scale.push_back(Neuron{lin({{is(c), kOn}}), lin({{val, std::ldexp(1.0f, -c) / kOn}}), {{vs, 1.0f}}});
  p.mlp("swiglu.val_scale", std::move(scale));

  // r' = fl(1 / d') = r * 2^s; d' in [0.5, 4): mant is in [0.98, 2.06] on expf's main path.
  const ValueId one = p.value("swiglu.one");
  const_acc(p, one, 1.0f, "swiglu.one");
  const ValueId r = divide(p, one, dp, DivWindow{-1, 2});

  // silu = fl(val * r) = fl((val 2^-s) * r'), then fl(silu * hb2). Gates: r' >= 1/4 and
  // silu (|silu| >= 2^-57 in the window).
  SwigluResult res{p.value("swiglu.silu"), p.value("swiglu.out")};
  mul_acc(p, res.silu, r, vs, "swiglu.silu");
  mul_acc(p, res.out, res.silu, hb2, "swiglu.out");
  return res;
}

}  // namespace

SwigluResult swiglu(Program& p, ValueId hb, ValueId hb2, ValueId enable) {
  const size_t first = p.ops().size();
  const SwigluResult r = build_swiglu(p, hb, hb2);
  if (enable != kOne) compiler::enable_constants(p, first, enable);
  return r;
}

std::vector<SwigluResult> swiglu_lanes(Program& p, const std::vector<ValueId>& hb, const std::vector<ValueId>& hb2,
                                       ValueId enable) {
  if (hb.size() != hb2.size()) fail("swiglu_lanes: {} hb values for {} hb2 values", hb.size(), hb2.size());
  std::vector<SwigluResult> out;
  for (size_t i = 0; i < hb.size(); ++i) out.push_back(swiglu(p, hb[i], hb2[i], enable));
  return out;
}

}  // namespace qpu::npu
