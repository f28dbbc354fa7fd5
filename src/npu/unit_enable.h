#pragma once
// The enable value of a looped-machine unit (docs/npu-units.md): the sum of its one-hot
// flags, exactly 1 when one flag is on and exactly 0 when the unit is idle. One neuron:
// gate 128 * sum(f), up sum(f) / 128, so silu(128) * (1/128) = 1 and silu(0) * 0 = 0
// (the sums are of 0/1 values with at most one 1: exact in any order). It reads no
// constant, so it is idle-zero by itself; compiler::enable_constants then turns every
// constant of the unit's later ops into this value.
#include <vector>

#include "compiler/ir.h"

namespace qpu::npu {

inline compiler::ValueId flags_enable(compiler::Program& p, const std::vector<compiler::ValueId>& flags,
                                      const char* label = "unit.enable") {
  compiler::Lin gate, up;
  for (compiler::ValueId f : flags) {
    gate.terms.push_back({f, 128.0f});
    up.terms.push_back({f, 1.0f / 128.0f});
  }
  const compiler::ValueId e = p.value(label);
  p.mlp(label, {compiler::Neuron{gate, up, {{e, 1.0f}}}});
  return e;
}

}  // namespace qpu::npu
