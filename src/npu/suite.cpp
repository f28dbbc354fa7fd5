#include "npu/suite.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/float_bits.h"
#include "npu/divide.h"
#include "npu/expf.h"
#include "npu/expf_model.h"
#include "npu/fused_dot.h"
#include "npu/primitives.h"

namespace qpu::npu {

using compiler::Program;
using compiler::ValueId;

namespace {

// Sign, exponent uniform in [emin, emax], 23 random mantissa bits.
float rand_float(std::mt19937_64& rng, int emin, int emax) {
  const int e = emin + static_cast<int>(rng() % static_cast<uint64_t>(emax - emin + 1));
  const float m = 1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f;
  const float x = std::ldexp(m, e);
  return (rng() & 1) ? -x : x;
}

// C's result as the NPU delivers it: through a residual add onto +0.
float delivered(float x) { return 0.0f + x; }

constexpr int kDot = 8;

std::vector<float> fixed_weights() {
  std::mt19937_64 rng(42);
  std::vector<float> w;
  for (int j = 0; j < kDot; ++j) w.push_back(rand_float(rng, -12, 3));
  return w;
}

PrimitiveSpec mul_spec() {
  PrimitiveSpec s;
  s.name = "mul";
  s.inputs = 2;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    const ValueId r = p.value("mul.r");
    mul_acc(p, r, in[0], in[1]);
    return std::vector<ValueId>{r};
  };
  s.reference = [](const float* in, float* out) { out[0] = in[0] * in[1]; };
  // Operands and product inside the value window (the product stays in the residual,
  // where later norms see it); a in the gate window |a| >= 2^-57.
  s.random_case = [](std::mt19937_64& rng, float* in) {
    do {
      in[0] = rand_float(rng, -57, 35);
      in[1] = rand_float(rng, -78, 35);
    } while (std::fabs(static_cast<double>(in[0]) * static_cast<double>(in[1])) < 0x1p-78 ||
             std::fabs(static_cast<double>(in[0]) * static_cast<double>(in[1])) > 0x1p36);
    if ((rng() & 63) == 0) in[rng() & 1] = (rng() & 1) ? 0.0f : -0.0f;
  };
  s.edge_cases = {{0.0f, 0.0f},      {-0.0f, 0.0f},      {0.0f, -3.5f},        {-0.0f, -3.5f},
                  {0x1p-57f, 1.0f},  {-0x1p-57f, 0x1p-21f}, {0x1p-57f, 0x1.000002p-21f}, {0x1p35f, 0x1.fffffep0f},
                  {1.0f, 1.0f},      {-1.0f, 1.0f},      {0x1.fffffep35f, 0x1p-78f}, {3.0f, 0x1.555556p-2f},
                  {0x1.000002p0f, 0x1.000002p0f}, {0x1.fffffep0f, 0x1.fffffep0f}, {-7.0f, -0x1p-78f}, {0x1p-57f, 0x1p-21f}};
  return s;
}

PrimitiveSpec add_spec() {
  PrimitiveSpec s;
  s.name = "add";
  s.inputs = 2;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) { return std::vector<ValueId>{add(p, in[0], in[1])}; };
  s.reference = [](const float* in, float* out) { out[0] = in[0] + in[1]; };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    in[0] = rand_float(rng, -78, 35);
    switch (rng() % 4) {
      case 0: in[1] = rand_float(rng, -78, 35); break;
      case 1: in[1] = rand_float(rng, std::max(-78, std::ilogb(in[0]) - 26), std::min(35, std::ilogb(in[0]) + 1)); break;
      case 2: in[1] = -in[0] * (1.0f + static_cast<float>(rng() % 64) * 0x1p-23f); break;  // cancellation
      default: in[1] = (rng() & 1) ? -in[0] : 0.0f; break;
    }
    if (std::fabs(in[1]) < 0x1p-78f || std::fabs(in[1]) > 0x1p35f) in[1] = 0.0f;
  };
  s.edge_cases = {{0.0f, 0.0f},       {-0.0f, -0.0f},      {-0.0f, 0.0f},        {1.0f, -1.0f},
                  {0x1p-78f, 0x1p-78f}, {0x1p-78f, -0x1.000002p-78f}, {0x1.fffffep35f, 0x1.fffffep35f},
                  {1.0f, 0x1p-24f},   {1.0f, 0x1.000002p-24f}, {0x1.000002p0f, 0x1p-24f}, {16777216.0f, 1.0f},
                  {0x1p35f, 0x1p-78f}, {-0x1p35f, 0x1p-78f}};
  return s;
}

PrimitiveSpec dot_const_spec() {
  PrimitiveSpec s;
  s.name = "dot_const";
  s.inputs = kDot;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    return std::vector<ValueId>{dot_const(p, fixed_weights(), in)};
  };
  s.reference = [](const float* in, float* out) {
    static const std::vector<float> w = fixed_weights();
    float val = 0.0f;
    for (int j = 0; j < kDot; ++j) val += w[static_cast<size_t>(j)] * in[j];
    out[0] = val;
  };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    const int e = -40 + static_cast<int>(rng() % 60);
    for (int j = 0; j < kDot; ++j) in[j] = (rng() % 16) ? rand_float(rng, e - 8, e) : 0.0f;
  };
  std::vector<float> zeros(kDot, 0.0f), ones(kDot, 1.0f), big(kDot, 0x1.fffffep25f), small(kDot, -0x1p-60f);
  s.edge_cases = {zeros, ones, big, small};
  return s;
}

PrimitiveSpec dot_var_spec() {
  PrimitiveSpec s;
  s.name = "dot_var";
  s.inputs = 2 * kDot;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    std::vector<ValueId> w(in.begin(), in.begin() + kDot), x(in.begin() + kDot, in.end());
    return std::vector<ValueId>{dot_var(p, w, x)};
  };
  s.reference = [](const float* in, float* out) {
    float val = 0.0f;
    for (int j = 0; j < kDot; ++j) val += in[j] * in[kDot + j];
    out[0] = val;
  };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    for (int j = 0; j < kDot; ++j) {
      in[j] = (rng() % 16) ? rand_float(rng, -20, 10) : 0.0f;
      in[kDot + j] = rand_float(rng, -20, 10);
    }
  };
  std::vector<float> z(2 * kDot, 0.0f), o(2 * kDot, 1.0f);
  s.edge_cases = {z, o};
  return s;
}

// The fused loop (three C additions per sublayer, npu/fused_dot.h) over stories260K's
// row length. Products and partial sums are read again, so they stay in the value
// window: |w x| >= 2^-55 (every nonzero partial sum is then a multiple of an ulp
// >= 2^-78) and sums < 2^36.
constexpr int kFusedDot = 64;

std::vector<float> fixed_weights64() {
  std::mt19937_64 rng(4242);
  std::vector<float> w;
  for (int j = 0; j < kFusedDot; ++j) w.push_back(rand_float(rng, -12, 3));
  return w;
}

// Ties and cancellations that only left-to-right order gets right: 1 + 2^-24 + 2^-24 + ...
// stays 1 in C (each add is a tie to even), any other grouping gives more.
std::vector<std::vector<float>> fused_dot_var_edges() {
  std::vector<std::vector<float>> e;
  std::vector<float> v(2 * kFusedDot, 0.0f);
  for (int j = 0; j < kFusedDot; ++j) v[static_cast<size_t>(j)] = 1.0f;
  auto with_x = [&](auto f) {
    std::vector<float> c = v;
    for (int j = 0; j < kFusedDot; ++j) c[static_cast<size_t>(kFusedDot + j)] = f(j);
    e.push_back(c);
  };
  with_x([](int j) { return j == 0 ? 1.0f : 0x1p-24f; });
  with_x([](int j) { return j == 0 ? 1.0f : (j % 2 ? 0x1p-24f : 0x1.8p-24f); });
  with_x([](int j) { return j % 2 ? -0x1p20f : 0x1p20f + 1.0f; });
  with_x([](int j) { return j == kFusedDot - 1 ? 0x1p-40f : (j % 2 ? -0x1.fffffep30f : 0x1.fffffep30f); });
  with_x([](int) { return 0.0f; });
  with_x([](int j) { return j % 3 ? -0.0f : 0.0f; });
  with_x([](int j) { return static_cast<float>(j) * 0.1f; });
  return e;
}

PrimitiveSpec dot_fused_const_spec() {
  PrimitiveSpec s;
  s.name = "dot_fused_const";
  s.inputs = kFusedDot;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    return std::vector<ValueId>{dot_const_fused(p, fixed_weights64(), in)};
  };
  s.reference = [](const float* in, float* out) {
    static const std::vector<float> w = fixed_weights64();
    float val = 0.0f;
    for (int j = 0; j < kFusedDot; ++j) val += w[static_cast<size_t>(j)] * in[j];
    out[0] = val;
  };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    const bool spread = rng() & 1;  // each x in its own binade, or all within 8 binades
    const int e = -35 + static_cast<int>(rng() % 55);
    for (int j = 0; j < kFusedDot; ++j)
      in[j] = (rng() % 16) ? (spread ? rand_float(rng, -35, 19) : rand_float(rng, std::max(-35, e - 8), e)) : 0.0f;
  };
  std::vector<float> zeros(kFusedDot, 0.0f), ones(kFusedDot, 1.0f), big(kFusedDot, 0x1.fffffep19f),
      small(kFusedDot, -0x1p-35f), alt(kFusedDot, 0.0f);
  for (int j = 0; j < kFusedDot; ++j) alt[static_cast<size_t>(j)] = (j % 2) ? -0x1p10f : 0x1.000002p10f;
  s.edge_cases = {zeros, ones, big, small, alt};
  return s;
}

PrimitiveSpec dot_fused_var_spec() {
  PrimitiveSpec s;
  s.name = "dot_fused_var";
  s.inputs = 2 * kFusedDot;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    std::vector<ValueId> w(in.begin(), in.begin() + kFusedDot), x(in.begin() + kFusedDot, in.end());
    return std::vector<ValueId>{dot_var_fused(p, w, x)};
  };
  s.reference = [](const float* in, float* out) {
    float val = 0.0f;
    for (int j = 0; j < kFusedDot; ++j) val += in[j] * in[kFusedDot + j];
    out[0] = val;
  };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    for (int j = 0; j < kFusedDot; ++j) {
      in[j] = (rng() % 16) ? rand_float(rng, -20, 10) : 0.0f;
      in[kFusedDot + j] = rand_float(rng, -20, 10);
    }
  };
  s.edge_cases = fused_dot_var_edges();
  return s;
}

PrimitiveSpec round_spec() {
  PrimitiveSpec s;
  s.name = "round_to_int";
  s.inputs = 1;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) { return std::vector<ValueId>{round_to_int(p, in[0])}; };
  s.reference = [](const float* in, float* out) { out[0] = std::nearbyint(in[0]); };  // default mode: half to even
  s.random_case = [](std::mt19937_64& rng, float* in) {
    in[0] = (rng() & 3) ? rand_float(rng, -78, 21)
                        : static_cast<float>(static_cast<int64_t>(rng() % (1 << 23)) - (1 << 22)) * 0.5f;  // ties
  };
  s.edge_cases = {{0.0f}, {-0.0f}, {0.5f}, {1.5f}, {2.5f}, {-0.5f}, {-1.5f}, {0x1.fffffcp21f}, {-0x1.fffffcp21f},
                  {4194303.5f}, {-4194303.5f}, {0x1p-78f}, {0.49999997f}, {-0.50000006f}};
  return s;
}

PrimitiveSpec split_spec() {
  PrimitiveSpec s;
  s.name = "split12";
  s.inputs = 1;
  s.outputs = 2;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    const Split sp = split12(p, in[0]);
    return std::vector<ValueId>{sp.hi, sp.lo};
  };
  s.reference = [](const float* in, float* out) {
    const float c = in[0] * 4097.0f, d = c - in[0];
    out[0] = c - d;
    out[1] = in[0] - out[0];
  };
  s.random_case = [](std::mt19937_64& rng, float* in) { in[0] = rand_float(rng, -60, 23); };
  s.edge_cases = {{0.0f}, {1.0f}, {0x1.fffffep23f}, {-0x1.fffffep23f}, {0x1p-60f}, {0x1.000802p0f}, {0x1.0007fep0f}};
  return s;
}

PrimitiveSpec bits_spec() {
  PrimitiveSpec s;
  s.name = "int_to_bits";
  s.inputs = 1;
  s.outputs = 12;
  s.build = [](Program& p, const std::vector<ValueId>& in) { return int_to_bits(p, in[0], 12); };
  s.reference = [](const float* in, float* out) {
    const auto v = static_cast<uint32_t>(in[0]);
    for (int j = 0; j < 12; ++j) out[j] = static_cast<float>((v >> (11 - j)) & 1u);
  };
  s.random_case = [](std::mt19937_64& rng, float* in) { in[0] = static_cast<float>(rng() % 4096); };
  s.edge_cases = {{0.0f}, {1.0f}, {2048.0f}, {2047.0f}, {4095.0f}};
  return s;
}

PrimitiveSpec max_spec() {
  PrimitiveSpec s;
  s.name = "max_step";
  s.inputs = 2;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) { return std::vector<ValueId>{max_step(p, in[0], in[1])}; };
  s.reference = [](const float* in, float* out) {
    float m = in[0];
    if (in[1] > m) m = in[1];
    out[0] = m;
  };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    in[0] = rand_float(rng, -47, 34);  // a one-ulp step then stays >= 2^-70
    switch (rng() % 4) {
      case 0: in[1] = rand_float(rng, -60, 34); break;
      case 1: in[1] = in[0]; break;  // tie
      case 2: in[1] = std::nextafter(in[0], (rng() & 1) ? 1e30f : -1e30f); break;
      default: in[1] = -in[0]; break;
    }
  };
  s.edge_cases = {{0.0f, 0.0f}, {1.0f, 1.0f}, {-1.0f, -1.0f}, {1.0f, 0x1.000002p0f}, {0x1.000002p0f, 1.0f},
                  {0x1p34f, 0x1.000002p34f}, {0x1p-47f, 0x1.000002p-47f}, {0x1.000002p-47f, 0x1p-47f}, {0.0f, 0x1p-70f}, {0x1p-70f, 0.0f},
                  {-0x1p-70f, 0.0f}, {0.0f, -0x1p-70f}, {0x1p35f, -0x1p35f}, {-0x1p35f, 0x1p35f}};
  return s;
}

// greater on a caller's window: d = fl(a - b) is 0 or |d| in [2^lo, 2^hi (2 - 2^-23)]
// (capped at 2^36, the value window; a and b stay in it too).
PrimitiveSpec greater_spec(GreaterWindow w) {
  PrimitiveSpec s;
  s.name = greater_spec_name(w);
  s.inputs = 2;
  s.outputs = 1;
  s.build = [w](Program& p, const std::vector<ValueId>& in) { return std::vector<ValueId>{greater(p, in[0], in[1], w)}; };
  s.reference = [](const float* in, float* out) { out[0] = in[0] > in[1] ? 1.0f : 0.0f; };
  const float top = std::min(std::ldexp(0x1.fffffep0f, w.hi), 0x1p36f), bottom = std::ldexp(1.0f, w.lo);
  auto in_value_window = [](float x) { return x == 0.0f || (std::fabs(x) >= 0x1p-78f && std::fabs(x) <= 0x1p36f); };
  s.random_case = [w, top, bottom, in_value_window](std::mt19937_64& rng, float* in) {
    const int dhi = std::max(w.lo, std::min(w.hi, 35)), bhi = dhi;
    for (;;) {
      float a = 0.0f, b = 0.0f;
      switch (rng() % 5) {
        case 0: a = rand_float(rng, w.lo, dhi); break;  // against 0, either side
        case 1: b = rand_float(rng, w.lo, dhi); break;
        case 2: a = b = rand_float(rng, std::max(w.lo, -78), bhi); break;  // tie
        case 3:  // one ulp apart, where an ulp is in the window
          if (w.lo + 23 > 35) continue;
          b = rand_float(rng, w.lo + 23, std::min(w.hi + 23, 35));
          a = std::nextafter(b, (rng() & 1) ? 1e30f : -1e30f);
          break;
        default:  // a general pair: b anywhere the window reaches, d random in it
          b = rand_float(rng, std::max(w.lo, -78), bhi);
          a = b + rand_float(rng, w.lo, dhi);
          break;
      }
      if ((rng() & 1) != 0) std::swap(a, b);
      const float d = a - b;
      if (!in_value_window(a) || !in_value_window(b)) continue;
      if (d != 0.0f && (std::fabs(d) < bottom || std::fabs(d) > top)) continue;
      in[0] = a;
      in[1] = b;
      return;
    }
  };
  // The window's edges as d, both signs, against 0 and as a difference of two values; ties.
  s.edge_cases = {{0.0f, 0.0f}, {bottom, 0.0f}, {0.0f, bottom}, {-bottom, 0.0f}, {0.0f, -bottom}, {top, 0.0f}, {0.0f, top},
                  {-top, 0.0f}, {0.0f, -top}, {top / 2, -top / 2}, {-top / 2, top / 2}, {bottom, bottom}, {top, top}, {-top, -top}};
  if (w.lo + 23 <= 35) {
    const float x = std::ldexp(1.0f, w.lo + 23);  // ulp 2^lo above it
    s.edge_cases.push_back({std::nextafter(x, 1e30f), x});
    s.edge_cases.push_back({x, std::nextafter(x, 1e30f)});
  }
  return s;
}

PrimitiveSpec argmax_spec() {
  PrimitiveSpec s;
  s.name = "argmax";
  s.inputs = 8;
  s.outputs = 2;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    const ArgMax a = argmax(p, in);
    return std::vector<ValueId>{a.max, a.index};
  };
  s.reference = [](const float* in, float* out) {  // run.c sample_argmax
    int best = 0;
    float m = in[0];
    for (int i = 1; i < 8; ++i)
      if (in[i] > m) {
        m = in[i];
        best = i;
      }
    out[0] = m;
    out[1] = static_cast<float>(best);
  };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    const int mode = static_cast<int>(rng() % 3);
    for (int i = 0; i < 8; ++i) in[i] = rand_float(rng, -20, 5);
    if (mode == 1)  // ties at random places
      for (int i = 0; i < 8; ++i) in[i] = in[rng() % 8];
    if (mode == 2)  // near-ties
      for (int i = 1; i < 8; ++i) in[i] = std::nextafter(in[0], (rng() & 1) ? 1e30f : -1e30f);
  };
  s.edge_cases = {std::vector<float>(8, 0.0f), std::vector<float>(8, -3.0f), {1, 2, 3, 4, 5, 6, 7, 7},
                  {7, 7, 1, 2, 3, 4, 5, 6}, {-1, -1, -1, -1, -1, -1, -1, 0x1p-70f}};
  return s;
}

// run.c's random_u32 / random_f32 on a 64-bit state, the C side of the xorshift check.
struct CStep {
  uint64_t state;
  uint32_t u32;
  float coin;
};
CStep c_xorshift(uint64_t s) {
  s ^= s >> 12;
  s ^= s << 25;
  s ^= s >> 27;
  const auto u32 = static_cast<uint32_t>((s * 0x2545F4914F6CDD1DULL) >> 32);
  return {s, u32, static_cast<float>(u32 >> 8) / 16777216.0f};
}

std::vector<float> state_bits(uint64_t s) {
  std::vector<float> b(64);
  for (int i = 0; i < 64; ++i) b[static_cast<size_t>(i)] = static_cast<float>((s >> i) & 1u);
  return b;
}

PrimitiveSpec xorshift_spec() {
  PrimitiveSpec s;
  s.name = "xorshift";
  s.inputs = 64;
  s.outputs = 67;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    const XorShiftStep x = xorshift64star(p, in);
    std::vector<ValueId> out = x.state;
    out.insert(out.end(), {x.u32_lo, x.u32_hi, x.coin});
    return out;
  };
  s.reference = [](const float* in, float* out) {
    uint64_t st = 0;
    for (int i = 0; i < 64; ++i)
      if (in[i] != 0.0f) st |= uint64_t{1} << i;
    const CStep c = c_xorshift(st);
    for (int i = 0; i < 64; ++i) out[i] = static_cast<float>((c.state >> i) & 1u);
    out[64] = static_cast<float>(c.u32 & 0xffffu);
    out[65] = static_cast<float>(c.u32 >> 16);
    out[66] = c.coin;
  };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    uint64_t st = rng();
    if ((rng() & 15) == 0) st &= rng();  // sparse states
    if ((rng() & 15) == 0) st |= rng();  // dense states
    const auto b = state_bits(st);
    std::copy(b.begin(), b.end(), in);
  };
  // Zero (a fixed point), all ones, single bits at the shift edges, run.c's seeds, and
  // states whose product carries ripple through every byte.
  for (uint64_t st : std::initializer_list<uint64_t>{uint64_t{0}, ~uint64_t{0}, uint64_t{1}, uint64_t{1} << 63, uint64_t{1} << 11, uint64_t{1} << 12,
                      uint64_t{1} << 38, uint64_t{1} << 39, uint64_t{42}, uint64_t{7}, 0xffffffff00000000ULL,
                      0x00000000ffffffffULL, 0x8000000000000001ULL, 0xAAAAAAAAAAAAAAAAULL, 0x5555555555555555ULL})
    s.edge_cases.push_back(state_bits(st));
  return s;
}

// A dividend for the division specs: exact quotients q*b and their neighbours, +-b,
// +-0, or random, all inside the window a = 0 or |a| in [2^-40, 2^12] (divide.h).
float random_dividend(std::mt19937_64& rng, float b) {
  float a = 0.0f;
  switch (rng() % 8) {
    case 0: {
      const float q = rand_float(rng, -20, 8);
      a = q * b;
      if (std::fabs(a) < 0x1p-40f || std::fabs(a) > 0x1p12f) a = q;
      if (rng() & 1) a = std::nextafter(a, (rng() & 1) ? 1e30f : -1e30f);
      break;
    }
    case 1: a = (rng() & 1) ? b : -b; break;
    case 2: a = (rng() & 1) ? 0.0f : -0.0f; break;
    default: a = rand_float(rng, -40, 11); break;
  }
  if (std::fabs(a) > 0x1p12f || (a != 0.0f && std::fabs(a) < 0x1p-40f)) a = 1.0f;
  return a;
}

PrimitiveSpec divide_spec() {
  PrimitiveSpec s;
  s.name = "divide";
  s.inputs = 2;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) { return std::vector<ValueId>{divide(p, in[0], in[1])}; };
  s.reference = [](const float* in, float* out) { out[0] = in[0] / in[1]; };
  // b in [2^-12, 2^12), a = 0 or |a| in [2^-40, 2^12] (divide.h).
  s.random_case = [](std::mt19937_64& rng, float* in) {
    in[1] = std::fabs(rand_float(rng, -12, 11));
    in[0] = random_dividend(rng, in[1]);
  };
  s.short_divisor = 4;
  const float r8 = std::sqrt(8.0f);
  s.edge_cases = {{0.0f, 1.0f}, {-0.0f, 3.0f}, {1.0f, 1.0f}, {-1.0f, 1.0f}, {1.0f, 3.0f}, {2.0f, 3.0f},
                  {1.0f, 0x1p-12f}, {0x1p12f, 0x1p-12f}, {0x1p-40f, 0x1.fffffep11f}, {-0x1p-40f, 0x1.fffffep11f},
                  {0x1p12f, 0x1.fffffep11f}, {0x1.fffffep11f, 0x1p-12f}, {1.0f, r8}, {-5.5f, r8}, {0.125f, 0.1f},
                  {1.0f, 0x1.000002p0f}, {0x1.fffffep0f, 0x1.000002p0f}, {1.0f, 0x1.fffffep0f}, {0x1p-40f, 0x1.000002p0f},
                  {7.0f, 7.0f}, {0x1.000002p0f, 0x1.fffffep-1f}, {1.0f, 1.1f}, {0.3f, 512.0f}, {1.0f, 17.0f}};
  return s;
}

// run.c's `score / sqrtf(head_size)` for stories260K (head_size 8): a constant divisor.
PrimitiveSpec divide_const_spec() {
  PrimitiveSpec s;
  s.name = "divide_const";
  s.inputs = 1;
  s.outputs = 1;
  static const float c = std::sqrt(8.0f);
  s.build = [](Program& p, const std::vector<ValueId>& in) { return std::vector<ValueId>{divide_const(p, in[0], c)}; };
  s.reference = [](const float* in, float* out) { out[0] = in[0] / c; };
  s.random_case = [](std::mt19937_64& rng, float* in) { in[0] = random_dividend(rng, c); };
  s.short_divisor = 4;
  s.edge_cases = {{0.0f}, {-0.0f}, {c}, {-c}, {1.0f}, {0x1p-40f}, {-0x1p-40f}, {0x1p12f}, {0x1.fffffep11f},
                  {std::nextafter(c, 0.0f)}, {std::nextafter(c, 9.0f)}, {8.0f}, {c * 3.0f}};
  return s;
}

// Softmax's `x[i] /= sum`: four dividends per divisor, one shared reciprocal.
constexpr int kShared = 4;
PrimitiveSpec divide_shared_spec() {
  PrimitiveSpec s;
  s.name = "divide_shared";
  s.inputs = 1 + kShared;
  s.outputs = kShared;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    return divide_shared(p, std::vector<ValueId>(in.begin() + 1, in.end()), in[0]);
  };
  s.reference = [](const float* in, float* out) {
    for (int i = 0; i < kShared; ++i) out[i] = in[1 + i] / in[0];
  };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    in[0] = std::fabs(rand_float(rng, -12, 11));
    for (int i = 0; i < kShared; ++i) in[1 + i] = random_dividend(rng, in[0]);
  };
  s.short_divisor = 4;
  s.edge_cases = {{1.0f, 0.0f, -0.0f, 1.0f, -1.0f}, {3.0f, 1.0f, 2.0f, 3.0f, 0x1p-40f},
                  {0x1p-12f, 1.0f, 0x1p-40f, -0x1p-12f, 0.5f}, {0x1.fffffep11f, 0x1p12f, 0x1p-40f, 1.0f, -7.0f},
                  {512.0f, 0.3f, 1.0f, 0x1p-40f, 511.0f}};
  return s;
}

PrimitiveSpec sqrt_spec() {
  PrimitiveSpec s;
  s.name = "sqrt";
  s.inputs = 1;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) { return std::vector<ValueId>{sqrt_rn(p, in[0])}; };
  s.reference = [](const float* in, float* out) { out[0] = std::sqrt(in[0]); };
  // x in [2^-18, 2^12) (divide.h); a quarter are squares of floats or their neighbours.
  s.random_case = [](std::mt19937_64& rng, float* in) {
    in[0] = std::fabs(rand_float(rng, -18, 11));
    if ((rng() & 3) == 0) {
      const float r = std::fabs(rand_float(rng, -9, 5));
      in[0] = r * r;
      if (rng() & 1) in[0] = std::nextafter(in[0], (rng() & 1) ? 1e30f : 0.0f);
      if (in[0] < 0x1p-18f) in[0] = 0x1p-18f;
    }
  };
  s.short_divisor = 4;
  s.edge_cases = {{0x1p-18f}, {0x1.fffffep11f}, {1.0f}, {2.0f}, {4.0f}, {0x1.fffffep-1f}, {0x1.000002p0f}, {3.0f},
                  {1e-5f}, {0.5f}, {64.0f}, {8.0f}, {0x1.fffffep1f}, {0x1.000002p2f}, {100.0f}, {0x1p-17f}};
  return s;
}

// glibc's expf as (mant, exponent, overflow): expf(x) == mant * 2^exponent (expf.h).
PrimitiveSpec expf_spec() {
  PrimitiveSpec s;
  s.name = "expf";
  s.inputs = 1;
  s.outputs = 3;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    const ExpfResult r = expf_parts(p, in[0]);
    return std::vector<ValueId>{r.mant, r.exponent, r.overflow};
  };
  s.reference = [](const float* in, float* out) {
    const ExpfParts r = expf_reference_parts(in[0]);
    out[0] = r.mant;
    out[1] = static_cast<float>(r.exponent);
    out[2] = r.overflow ? 1.0f : 0.0f;
  };
  // Every float the residual can hold: softmax inputs (<= 0), SiLU inputs (any sign), the
  // subnormal-result range, tiny |x| (expf = 1), beyond the thresholds, and the
  // decomposition's exception inputs and their neighbours.
  s.random_case = [](std::mt19937_64& rng, float* in) {
    switch (rng() % 8) {
      case 0: in[0] = -static_cast<float>(rng() % 104000000) * 1e-6f; break;
      case 1: in[0] = -87.3f - static_cast<float>(rng() % 16700000) * 1e-6f; break;
      case 2: in[0] = rand_float(rng, -78, 35); break;
      case 3: {
        const auto& ex = expf_detail::exceptions();
        in[0] = ex.empty() ? 0.0f : ex[rng() % ex.size()].x;
        for (int i = static_cast<int>(rng() % 5); i > 2; --i) in[0] = std::nextafter(in[0], (rng() & 1) ? 1e30f : -1e30f);
        break;
      }
      default: in[0] = -104.0f + static_cast<float>(rng() % 193000000) * 1e-6f; break;
    }
    if (rng() % 4 == 0) in[0] += static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0x1p-20f;
  };
  s.short_divisor = 5;
  const float over = expf_detail::kOverflowAbove, under = expf_detail::kUnderflowBelow, sub1 = -0x1.9d1d9ep+6f;
  for (float x : {0.0f, -0.0f, 0x1p-78f, -0x1p-78f, 0x1p-26f, -0x1p-26f, 0x1p-25f, -0x1p-25f, 0x1p-24f, 0x1.000002p-24f,
                  -0x1p-24f, 1.0f, -1.0f, 0.5f, 88.0f, -88.0f, 89.0f, -104.0f, -87.33654f, -87.336555f, -100.0f, -103.0f,
                  over, std::nextafter(over, 0.0f), std::nextafter(over, 1e30f), under, std::nextafter(under, 0.0f),
                  std::nextafter(under, -1e30f), sub1, std::nextafter(sub1, 0.0f), std::nextafter(sub1, -1e30f),
                  0x1.04845ep+5f, -0x1.f8cbb2p+5f, 0x1p35f, -0x1p35f, 0x1.62e43p+6f})
    s.edge_cases.push_back({x});
  for (const auto& ex : expf_detail::exceptions()) s.edge_cases.push_back({ex.x});
  return s;
}

// greater against constants on constant_window(c): [x > c] and [c > x] for each of up to
// 16 constants (expf's thresholds and tie bounds, the ends of constant_window's range, 3
// of expf's exceptions), x anywhere in the value window and a few ulps around each c.
std::vector<float> greater_constants() {
  std::vector<float> c = {1.0f, 0x1.fffffep-1f, -0x1.fffffep-1f, 0x1.fffffep0f, expf_detail::kOverflowAbove,
                          expf_detail::kUnderflowBelow, 0x1p-46f, -0x1p-46f, 0x1.fffffep11f, -0x1.fffffep11f,
                          0x1.8p-30f, -3.0f, 0x1p-8f};
  const auto& ex = expf_detail::exceptions();
  for (size_t i = 0; i < ex.size() && c.size() < 16; i += std::max<size_t>(1, ex.size() / 3)) c.push_back(ex[i].x);
  return c;
}

PrimitiveSpec greater_const_spec() {
  PrimitiveSpec s;
  s.name = "greater_const";
  const std::vector<float> cs = greater_constants();
  s.inputs = 1;
  s.outputs = static_cast<int>(2 * cs.size());
  s.build = [cs](Program& p, const std::vector<ValueId>& in) {
    std::vector<ValueId> out;
    for (float c : cs) {
      const ValueId cv = constant_value(p, c, "gtc.c");
      out.push_back(greater(p, in[0], cv, constant_window(c)));
      out.push_back(greater(p, cv, in[0], constant_window(c)));
    }
    return out;
  };
  s.reference = [cs](const float* in, float* out) {
    for (size_t i = 0; i < cs.size(); ++i) {
      out[2 * i] = in[0] > cs[i] ? 1.0f : 0.0f;
      out[2 * i + 1] = cs[i] > in[0] ? 1.0f : 0.0f;
    }
  };
  s.random_case = [cs](std::mt19937_64& rng, float* in) {
    if (rng() % 2 == 0) {
      in[0] = rng() % 16 == 0 ? 0.0f : rand_float(rng, -78, 35);
      return;
    }
    float x = cs[rng() % cs.size()];  // at a constant, or a few ulps away
    for (int k = static_cast<int>(rng() % 4); k > 0; --k) x = std::nextafter(x, (rng() & 1) ? 1e30f : -1e30f);
    in[0] = x;
  };
  const float top = 0x1p36f;  // the value window's top
  s.edge_cases = {{0.0f}, {-0.0f}, {top}, {-top}, {0x1p-78f}, {-0x1p-78f}};
  for (float c : cs) s.edge_cases.push_back({c}), s.edge_cases.push_back({-c});
  return s;
}

}  // namespace

std::vector<PrimitiveSpec> all_primitives() {
  std::vector<PrimitiveSpec> all{mul_spec(), add_spec(), dot_const_spec(), dot_var_spec(), dot_fused_const_spec(), dot_fused_var_spec(), round_spec(),
          split_spec(), bits_spec(), max_spec(), argmax_spec(), xorshift_spec(), divide_spec(), divide_const_spec(), divide_shared_spec(), sqrt_spec(),
          expf_spec()};
  for (GreaterWindow w : greater_suite_windows()) all.push_back(greater_spec(w));
  all.push_back(greater_const_spec());
  return all;
}

std::vector<GreaterWindow> greater_suite_windows() {
  // The default; the call sites' windows (unit_attention.cpp, and divide.cpp's binade bits
  // at their widest and narrowest: j = -11 and 11 below 2^12, sqrt's j = -17); one scale at
  // the bottom and at the top.
  return {{-70, 36}, {-63, 13}, {-40, 13}, {-46, 36}, {-69, 0}, {-34, 31}, {-57, -4}, {-54, 2}, {-38, 36},
          {-51, 36}, {-35, 11}, {-13, 11}, {-41, 11}, {-70, -48}, {14, 36}};
}

std::vector<std::string> greater_spec_names() {
  std::vector<std::string> names;
  for (GreaterWindow w : greater_suite_windows()) names.push_back(greater_spec_name(w));
  names.push_back("greater_const");
  return names;
}

std::string greater_spec_name(GreaterWindow w) { return "greater_" + std::to_string(w.lo) + "_" + std::to_string(w.hi); }

int64_t lanes_for(const PrimitiveSpec& spec, int64_t max_hidden) {
  Program p;
  const auto in = p.values("in", spec.inputs);
  spec.build(p, in);
  const int64_t per_lane = p.num_values();
  return std::max<int64_t>(1, (max_hidden * 63 / 64) / per_lane);
}

Batch build_batch(const PrimitiveSpec& spec, int64_t lanes, int64_t rows, const std::vector<float>& inputs) {
  Program p;
  compiler::Interface io;
  std::vector<std::vector<ValueId>> outs;
  for (int64_t l = 0; l < lanes; ++l) {
    const auto in = p.values("in" + std::to_string(l), spec.inputs);
    io.inputs.insert(io.inputs.end(), in.begin(), in.end());
    outs.push_back(spec.build(p, in));
    io.outputs.insert(io.outputs.end(), outs.back().begin(), outs.back().end());
  }
  io.vocab_size = std::max<int64_t>(rows, static_cast<int64_t>(io.outputs.size()));
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * io.inputs.size(), 0.0f);
  std::copy(inputs.begin(), inputs.end(), io.input_rows.begin());
  Batch b;
  b.lanes = lanes;
  b.compiled = compiler::compile(p, io);
  for (ValueId v : io.outputs) b.output_dims.push_back(b.compiled.allocation.dim(v));
  return b;
}

SuiteResult run_primitive(const PrimitiveSpec& spec, const HostFactory& host, const SuiteOptions& options) {
  SuiteResult r;
  r.name = spec.name;
  const int64_t lanes = lanes_for(spec, options.max_hidden);
  std::mt19937_64 rng(options.seed ^ std::hash<std::string>{}(spec.name));
  const auto n_in = static_cast<size_t>(spec.inputs), n_out = static_cast<size_t>(spec.outputs);
  // All cases: edge cases first, then random ones.
  std::vector<float> cases;
  for (const auto& e : spec.edge_cases) {
    if (e.size() != n_in) fail("primitive {}: an edge case has {} inputs, expected {}", spec.name, e.size(), n_in);
    cases.insert(cases.end(), e.begin(), e.end());
  }
  std::vector<float> one(n_in);
  for (int64_t i = 0; i < options.cases; ++i) {
    spec.random_case(rng, one.data());
    cases.insert(cases.end(), one.begin(), one.end());
  }
  const int64_t total = static_cast<int64_t>(cases.size() / n_in);
  const int64_t per_batch = lanes * options.rows;
  std::vector<float> expect(n_out), hidden;
  for (int64_t first = 0; first < total; first += per_batch) {
    const int64_t count = std::min(per_batch, total - first);
    std::vector<float> inputs(cases.begin() + static_cast<std::ptrdiff_t>(first * static_cast<int64_t>(n_in)),
                              cases.begin() + static_cast<std::ptrdiff_t>((first + count) * static_cast<int64_t>(n_in)));
    const Batch b = build_batch(spec, lanes, options.rows, inputs);
    if (first == 0) {
      r.layers = b.compiled.weights.config.num_hidden_layers;
      r.sublayers = b.compiled.schedule.num_sublayers;
      r.values_per_lane = (b.compiled.allocation.hidden_size - static_cast<int64_t>(b.compiled.allocation.rail_dims.size())) / lanes;
      int64_t neurons = 0;
      for (int64_t n : b.compiled.allocation.neurons_per_layer) neurons += n;
      r.neurons_per_lane = neurons / lanes;
    }
    const Forward fwd = host(b.compiled.weights);
    hidden.assign(static_cast<size_t>(b.compiled.weights.config.hidden_size), 0.0f);
    const int64_t rows = (count + lanes - 1) / lanes;
    for (int64_t row = 0; row < rows; ++row) {
      fwd(row, hidden);
      for (int64_t l = 0; l < lanes; ++l) {
        const int64_t c = row * lanes + l;
        if (c >= count) break;
        const float* in = &inputs[static_cast<size_t>(c) * n_in];
        spec.reference(in, expect.data());
        ++r.cases;
        bool ok = true;
        for (size_t o = 0; o < n_out; ++o) {
          const float got = hidden[static_cast<size_t>(b.output_dims[static_cast<size_t>(l) * n_out + o])];
          if (float_bits(got) != float_bits(delivered(expect[o]))) ok = false;
        }
        if (!ok) {
          if (r.mismatches == 0) {
            std::string d = spec.name + "(";
            for (size_t i = 0; i < n_in; ++i) d += (i ? ", " : "") + describe_float(in[i]);
            d += ") expected";
            for (size_t o = 0; o < n_out; ++o) d += " " + describe_float(delivered(expect[o]));
            d += " got";
            for (size_t o = 0; o < n_out; ++o)
              d += " " + describe_float(hidden[static_cast<size_t>(b.output_dims[static_cast<size_t>(l) * n_out + o])]);
            r.first_mismatch = d;
          }
          ++r.mismatches;
        }
      }
    }
  }
  return r;
}

}  // namespace qpu::npu
