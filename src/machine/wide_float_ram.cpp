#include "machine/wide_float_ram.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/float_ram.h"

namespace qpu::machine {

using compiler::kOne;
using compiler::Lin;
using compiler::Neuron;
using compiler::ValueId;

namespace {

constexpr float kGateScale = 0x1p44f;  // 2^44 * (one ulp of binade -13, 2^-36) = 2^8: past silu's -0 bound
constexpr float kYScale = 0x1p-30f;    // y = silu(gate) 2^-30: [2^-21, 2^34], inside the value window
constexpr float kOn = 128.0f;          // silu(128) = 128 exactly

}  // namespace

bool wide_float_ram_holds(float x) {
  return x == 0.0f || (std::fabs(x) >= 0x1p-47f && std::fabs(x) < 0x1p20f);
}

WideFloatRam wide_float_ram(compiler::Program& p, const std::vector<ValueId>& x, ValueId enable, ValueId store,
                            ValueId read, int per_row, const std::string& label) {
  if (x.empty()) fail("wide float ram '{}': no floats", label);
  if (per_row < 1) fail("wide float ram '{}': {} floats per row", label, per_row);
  const int n = static_cast<int>(x.size());
  WideFloatRam r;
  r.first_op = p.ops().size();
  const std::vector<ValueId> y = p.values(label + ".tier_y", n);
  const std::vector<ValueId> low = p.values(label + ".low_tier", n);
  std::vector<ValueId> lo = p.values(label + ".lo", n), nlo = p.values(label + ".nlo", n);
  std::vector<ValueId> hi = p.values(label + ".hi", n), nhi = p.values(label + ".nhi", n);
  const auto at = [](int i) { return static_cast<size_t>(i); };
  {
    // y > 0 exactly when |x| > 2^-12 (the header's derivation).
    std::vector<Neuron> ns;
    for (int i = 0; i < n; ++i)
      for (float sign : {1.0f, -1.0f})
        ns.push_back(Neuron{Lin{{{x[at(i)], sign * kGateScale}, {kOne, -kGateScale * WideFloatRam::kTierBound}}},
                            Lin{{{kOne, kYScale}}}, {{y[at(i)], 1.0f}}});
    p.mlp(label + " tier test", std::move(ns));
  }
  {
    // low = 1 when y = 0, else the gate is <= 128 - 2^30 2^-21 = -384: silu -0.
    std::vector<Neuron> ns;
    for (int i = 0; i < n; ++i)
      ns.push_back(Neuron{Lin{{{kOne, kOn}, {y[at(i)], -1.0f / kYScale}}}, Lin{{{kOne, 1.0f / kOn}}}, {{low[at(i)], 1.0f}}});
    p.mlp(label + " tier flag", std::move(ns));
  }
  {
    // x (or -x) through a gate of exactly 128 or 0: x / 128 is exact for |x| >= 2^-47.
    std::vector<Neuron> ns;
    for (int i = 0; i < n; ++i) {
      const Lin to_low{{{low[at(i)], kOn}}}, to_high{{{kOne, kOn}, {low[at(i)], -kOn}}};
      ns.push_back(Neuron{to_low, Lin{{{x[at(i)], 1.0f / kOn}}}, {{lo[at(i)], 1.0f}}});
      ns.push_back(Neuron{to_low, Lin{{{x[at(i)], -1.0f / kOn}}}, {{nlo[at(i)], 1.0f}}});
      ns.push_back(Neuron{to_high, Lin{{{x[at(i)], 1.0f / kOn}}}, {{hi[at(i)], 1.0f}}});
      ns.push_back(Neuron{to_high, Lin{{{x[at(i)], -1.0f / kOn}}}, {{nhi[at(i)], 1.0f}}});
    }
    p.mlp(label + " tiers", std::move(ns));
  }
  compiler::enable_constants(p, r.first_op, enable);
  r.tiers_end = p.ops().size();

  r.out = p.values(label + ".out", n);
  // One float_ram per tier, both reading into `out`: one of the two adds the float, the
  // other +0.
  auto tier = [&](const std::vector<ValueId>& data, const std::vector<ValueId>& negated, int low_binade,
                  const char* name) {
    std::vector<npu::FloatRamHead> heads;
    for (int first = 0; first < n; first += per_row) {
      const int count = std::min(per_row, n - first);
      npu::FloatRamHead h;
      h.data.assign(data.begin() + first, data.begin() + first + count);
      h.negated.assign(negated.begin() + first, negated.begin() + first + count);
      h.out.assign(r.out.begin() + first, r.out.begin() + first + count);
      h.write_flag = h.wipe_flag = store;
      h.read_flag = read;
      heads.push_back(std::move(h));
    }
    npu::float_ram(p, npu::FloatRamWindow{low_binade}, heads, enable, label + " " + name);
  };
  tier(hi, nhi, WideFloatRam::kHighLowBinade, "high tier");
  tier(lo, nlo, WideFloatRam::kLowLowBinade, "low tier");
  return r;
}

}  // namespace qpu::machine
