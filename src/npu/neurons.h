#pragma once
// Neuron builders shared by the primitives (internal to src/npu). Each returns neurons
// whose outputs are exact in silu's windows (docs/npu.md): a gate of exactly 128 is
// silu's identity, a gate <= -104 gives -0.
#include <initializer_list>
#include <vector>

#include "compiler/ir.h"

namespace qpu::npu::detail {

using compiler::Lin;
using compiler::Neuron;
using compiler::Term;
using compiler::ValueId;
using compiler::kOne;

inline constexpr float kS = 0x1p64f;    // P3's gate scale
inline constexpr float kOn = 128.0f;    // a gate value where silu(g) == g exactly

inline Lin lin(std::initializer_list<Term> t) { return Lin{std::vector<Term>(t)}; }

// silu(128) * (w * a / 128) == fl(w * a), times `down` into dst.
inline Neuron copy_neuron(ValueId dst, ValueId a, float w = 1.0f, float down = 1.0f) {
  return Neuron{lin({{kOne, kOn}}), lin({{a, w / kOn}}), {{dst, down}}};
}

// The constant c into dst.
inline Neuron const_neuron(ValueId dst, float c) {
  return Neuron{lin({{kOne, kOn}}), lin({{kOne, c / kOn}}), {{dst, 1.0f}}};
}

// P3's pair: one live term fl(g * u) * scale into dst (scale a power of two), the other
// +-0. Window: |g| >= 2^-57, fl(g*u) normal.
inline void mul_neurons(std::vector<Neuron>& out, ValueId dst, ValueId g, ValueId u, float scale = 1.0f) {
  out.push_back(Neuron{lin({{g, kS}}), lin({{u, 1.0f}}), {{dst, scale / kS}}});
  out.push_back(Neuron{lin({{g, -kS}}), lin({{u, -1.0f}}), {{dst, scale / kS}}});
}

}  // namespace qpu::npu::detail
