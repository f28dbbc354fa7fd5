#pragma once
// The reference of the engine's conv kernels in tests: torch_causal_conv1d_update + silu,
// exactly as GatedDeltaNet's scalar loop writes it (numerics::silu: the formula's bits on
// every float, Numerics.SiluShortcutsGiveTheFormulaBits).
#include <cstdint>
#include <vector>

#include "engine/numerics.h"

namespace qpu::engine::testing {

// Per channel c: out[c] = silu(sum_t w[c][t] past[t] + w[c][taps - 1] in[c]) in that order,
// then the history shifts by one and takes in[c].
inline void conv_reference(const std::vector<float>& weight, int64_t taps, std::vector<float>& state,
                           const std::vector<float>& in, std::vector<float>& out, int64_t channels) {
  const int64_t history = taps - 1;
  for (int64_t c = 0; c < channels; ++c) {
    const auto uc = static_cast<size_t>(c);
    float* past = state.data() + c * history;
    const float* wc = weight.data() + c * taps;
    float acc = 0.0f;
    for (int64_t t = 0; t < history; ++t) acc = acc + wc[t] * past[t];
    acc = acc + wc[history] * in[uc];
    for (int64_t t = 0; t + 1 < history; ++t) past[t] = past[t + 1];
    if (history > 0) past[history - 1] = in[uc];
    out[uc] = numerics::silu(acc);
  }
}

}  // namespace qpu::engine::testing
