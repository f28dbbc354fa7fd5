#pragma once
// Small builders shared by the sampler's units (unit_sample.cpp, unit_topp.cpp; internal
// to src/npu): the idle gating and exact integer / bit values from linear forms.
#include <utility>

#include "compiler/enable.h"
#include "compiler/ir.h"
#include "npu/neurons.h"

namespace qpu::npu::detail {

// The unit's constants become its enable (the idle contract); kOne: always on.
inline void gate_unit(compiler::Program& p, size_t first_op, ValueId enable) {
  if (enable != kOne) compiler::enable_constants(p, first_op, enable);
}

// A value equal to the integer form F (exact: small integers, any order): one neuron,
// gate 128 (the constant, so enable_constants turns it into the enable), up F / 128.
inline ValueId integer_value(compiler::Program& p, const Lin& F, const char* label) {
  const ValueId v = p.value(label);
  Lin up;
  for (const Term& t : F.terms) up.terms.push_back({t.value, t.weight / kOn});
  p.mlp(label, {Neuron{Lin{{{kOne, kOn}}}, std::move(up), {{v, 1.0f}}}});
  return v;
}

// A 0/1 value equal to the 0/1 form F: gate 128 F (0 or 128), up 1/128.
inline ValueId bit_value(compiler::Program& p, const Lin& F, const char* label) {
  const ValueId v = p.value(label);
  Lin gate;
  for (const Term& t : F.terms) gate.terms.push_back({t.value, t.weight * kOn});
  p.mlp(label, {Neuron{std::move(gate), Lin{{{kOne, 1.0f / kOn}}}, {{v, 1.0f}}}});
  return v;
}

}  // namespace qpu::npu::detail
