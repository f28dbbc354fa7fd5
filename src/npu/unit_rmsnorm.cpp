#include "npu/unit_rmsnorm.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/fused_dot.h"
#include "npu/neurons.h"
#include "npu/unit_enable.h"

namespace qpu::npu {

using compiler::Neuron;
using compiler::Program;
using compiler::ValueId;
using compiler::kOne;
using detail::kOn;
using detail::lin;
using detail::mul_neurons;

RmsnormUnit rmsnorm_unit(Program& p, const std::vector<std::vector<float>>& weights, const std::vector<ValueId>& x,
                         const std::vector<ValueId>& flags, const RmsnormWindows& windows) {
  const size_t n = x.size();
  if (n == 0) fail("rmsnorm_unit: empty x");
  if (weights.empty() || weights.size() != flags.size())
    fail("rmsnorm_unit: {} weight vectors for {} flags", weights.size(), flags.size());
  for (size_t s = 0; s < weights.size(); ++s) {
    if (weights[s].size() != n) fail("rmsnorm_unit: weight vector {} has {} floats, x has {}", s, weights[s].size(), n);
    for (float w : weights[s])
      if (!std::isfinite(w) || (w != 0.0f && std::fabs(w) < 0x1p-119f))
        fail("rmsnorm_unit: weight vector {} has weight {} (must be finite, 0 or >= 2^-119)", s, w);
  }
  RmsnormUnit u;
  u.enable = flags_enable(p, flags, "rms.enable");
  u.first_op = p.ops().size();

  std::vector<ValueId> sq;
  {
    std::vector<Neuron> neurons;
    for (size_t j = 0; j < n; ++j) {
      sq.push_back(p.value("rms.sq" + std::to_string(j)));
      mul_neurons(neurons, sq.back(), x[j], x[j]);  // fl(x_j * x_j)
    }
    p.mlp("rms.sq", std::move(neurons));
  }
  const ValueId ss = sum_chain_fused(p, sq);
  const float nf = static_cast<float>(n);  // C: ss /= size (int -> float)
  const ValueId eps = p.value("rms.eps");
  if ((n & (n - 1)) == 0) {
    // ss / n is exact (a power of two): fl(ss/n + 1e-5f) is the up form's one rounding.
    p.mlp("rms.mean_eps", {Neuron{lin({{kOne, kOn}}), lin({{ss, 1.0f / (nf * kOn)}, {kOne, 1e-5f / kOn}}), {{eps, 1.0f}}}});
  } else {
    const ValueId mean = divide_const(p, ss, nf);
    p.mlp("rms.eps", {Neuron{lin({{kOne, kOn}}), lin({{mean, 1.0f / kOn}, {kOne, 1e-5f / kOn}}), {{eps, 1.0f}}}});
  }
  const ValueId root = sqrt_rn(p, eps, windows.sqrt);
  u.inv = divide(p, u.enable, root, windows.divisor);  // 1.0f / sqrtf(ss): the dividend is exactly 1
  std::vector<ValueId> t;
  {
    std::vector<Neuron> neurons;
    for (size_t j = 0; j < n; ++j) {
      t.push_back(p.value("rms.scaled" + std::to_string(j)));
      mul_neurons(neurons, t.back(), u.inv, x[j]);  // fl(ss * x_j); gate |inv| in [2^-6, 2^9]
    }
    p.mlp("rms.scaled", std::move(neurons));
  }
  {
    std::vector<Neuron> neurons;
    for (size_t j = 0; j < n; ++j) {
      u.out.push_back(p.value("rms.out" + std::to_string(j)));
      for (size_t s = 0; s < weights.size(); ++s) {
        const float w = weights[s][j];
        if (w == 0.0f) continue;  // C's w * t = +-0 arrives as +0: the value stays +0
        neurons.push_back(Neuron{lin({{flags[s], kOn}}), lin({{t[j], w / kOn}}), {{u.out.back(), 1.0f}}});
      }
    }
    if (neurons.empty()) neurons.push_back(Neuron{lin({{flags[0], kOn}}), lin({{t[0], 0.0f}}), {{u.out[0], 0.0f}}});
    p.mlp("rms.out", std::move(neurons));
  }
  compiler::enable_constants(p, u.first_op, u.enable);
  return u;
}

}  // namespace qpu::npu
