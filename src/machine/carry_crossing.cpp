#include "machine/carry_crossing.h"

#include <cmath>
#include <vector>

#include "compiler/enable.h"
#include "npu/primitives.h"

namespace qpu::machine {

using compiler::kOne;
using compiler::Lin;
using compiler::Neuron;
using compiler::ValueId;

namespace {

constexpr float kBound = 0x1p-30f;                // |x| >= this: the high float
constexpr float kBelow = 0x1p-30f - 0x1p-54f;     // T = pred(2^-30)
constexpr float kGateScale = 0x1p62f;             // 2^62 2^-54 = 2^8: past silu's bounds
constexpr float kYScale = 0x1p-64f;               // y in [2^-56, 2^34): the value window
constexpr float kFlagScale = 0x1p65f;             // 2^65 2^-56 = 2^9: 128 - 512 = -384
constexpr float kHighScale = 0x1p-17f, kLowScale = 0x1p31f;
constexpr float kOn = 128.0f;                     // silu(128) = 128 exactly

}  // namespace

CarryParts carry_split(compiler::Program& p, ValueId x, ValueId enable, const std::string& label) {
  CarryParts r;
  r.first_op = p.ops().size();
  const ValueId y = p.value(label + ".tier_y"), low_tier = p.value(label + ".low_tier");
  r.high = p.value(label + ".high");
  r.low = p.value(label + ".low");
  {
    std::vector<Neuron> ns;
    for (float sign : {1.0f, -1.0f})
      ns.push_back(Neuron{Lin{{{x, sign * kGateScale}, {kOne, -kGateScale * kBelow}}}, Lin{{{kOne, kYScale}}}, {{y, 1.0f}}});
    p.mlp(label + " tier test", std::move(ns));
  }
  p.mlp(label + " tier flag",
        {Neuron{Lin{{{kOne, kOn}, {y, -kFlagScale}}}, Lin{{{kOne, 1.0f / kOn}}}, {{low_tier, 1.0f}}}});
  p.mlp(label + " tiers", {Neuron{Lin{{{low_tier, kOn}}}, Lin{{{x, kLowScale / kOn}}}, {{r.low, 1.0f}}},
                           Neuron{Lin{{{kOne, kOn}, {low_tier, -kOn}}}, Lin{{{x, kHighScale / kOn}}}, {{r.high, 1.0f}}}});
  compiler::enable_constants(p, r.first_op, enable);
  return r;
}

OneFloatCarry carry_split_one(compiler::Program& p, ValueId x, ValueId enable, const std::string& label) {
  const CarryParts parts = carry_split(p, x, enable, label);
  // The low float is +-0 or |low| in [2^-47, 2): below = [low > 0] + [low < 0].
  const ValueId zero = p.value(label + ".zero");  // never written: +0
  const ValueId pos = npu::greater(p, parts.low, zero, {-47, 1}), neg = npu::greater(p, zero, parts.low, {-47, 1});
  OneFloatCarry r{parts.high, p.value(label + ".below")};
  p.mlp(label + ".below", {Neuron{Lin{{{pos, kOn}}}, Lin{{{pos, 1.0f / kOn}}}, {{r.below, 1.0f}}},
                           Neuron{Lin{{{neg, kOn}}}, Lin{{{neg, 1.0f / kOn}}}, {{r.below, 1.0f}}}});
  return r;
}

ValueId carry_join(compiler::Program& p, ValueId high, ValueId low, ValueId enable, const std::string& label) {
  const ValueId x = p.value(label);
  const Lin on{{{enable, kOn}}};
  p.mlp(label + " join", {Neuron{on, Lin{{{high, 1.0f / (kHighScale * kOn)}}}, {{x, 1.0f}}},
                          Neuron{on, Lin{{{low, 1.0f / (kLowScale * kOn)}}}, {{x, 1.0f}}}});
  return x;
}

float carry_high_reference(float x) { return std::fabs(x) >= kBound ? 0.0f + x * kHighScale : 0.0f; }
float carry_low_reference(float x) { return std::fabs(x) >= kBound ? 0.0f : 0.0f + x * kLowScale; }
float carry_join_reference(float high, float low) { return 0.0f + (high / kHighScale + low / kLowScale); }

bool carry_crossing_holds(float x) { return x == 0.0f || (std::fabs(x) >= 0x1p-78f && std::fabs(x) < 0x1p36f); }

}  // namespace qpu::machine
