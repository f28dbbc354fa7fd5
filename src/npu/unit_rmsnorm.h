#pragma once
// The looped machine's rmsnorm unit (docs/npu-units.md): run.c's
//   ss = 0; for j: ss += x[j] * x[j]; ss /= n; ss += 1e-5f; ss = 1.0f / sqrtf(ss);
//   o[j] = w[j] * (ss * x[j])
// for one of S weight vectors (stories260K: rms_att[0..4], rms_ffn[0..4], rms_final),
// chosen by one-hot flags, every float operation exactly C's:
//  * squares x_j * x_j: P3 pairs (mul), one sublayer;
//  * the sum: sum_chain_fused (three C additions per sublayer);
//  * ss / n + 1e-5f: one neuron when n is a power of two (ss / n is exact, so the up
//    form's two-term sum ss/n + 1e-5 is C's one rounding), else divide_const then the add;
//  * sqrtf: sqrt_rn; 1.0f / r: divide with the enable value (exactly 1) as dividend;
//  * ss * x[j]: P3 pairs; w[j] * (...): one neuron per (vector s, j), gate 128 * flag_s,
//    up t_j * w_s[j] / 128: the one live term of o_j's down sum is fl(w_s[j] * t_j).
// Windows (docs/trace-ranges.md: att/ffn/final rms records of 33,557 positions):
// sqrt input in [2^-17, 2^12) — the lower end holds for every input (ss/n + 1e-5 >=
// 1e-5 > 2^-17), the upper one for rms(x) < 64 (measured: at most 6.66, binade 2);
// the divisor sqrtf(...) in [2^-9, 2^6) follows; squares and products in the value window
// (measured squares down to 2^-48, x down to 2^-24).
#include <vector>

#include "compiler/ir.h"
#include "npu/divide.h"

namespace qpu::npu {

struct RmsnormWindows {
  SqrtWindow sqrt{-17, 12};
  DivWindow divisor{-9, 6};
};

struct RmsnormUnit {
  std::vector<compiler::ValueId> out;  // n values
  compiler::ValueId enable = 0;
  compiler::ValueId inv = 0;           // 1.0f / sqrtf(ss/n + 1e-5f) (for tests)
  size_t first_op = 0;
};

// weights[s] has x.size() floats (each 0 or normal); flags[s] selects weights[s].
RmsnormUnit rmsnorm_unit(compiler::Program& p, const std::vector<std::vector<float>>& weights,
                         const std::vector<compiler::ValueId>& x, const std::vector<compiler::ValueId>& flags,
                         const RmsnormWindows& windows = {});

}  // namespace qpu::npu
