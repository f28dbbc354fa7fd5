#include "npu/block_ffn.h"

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/neurons.h"
#include "npu/unit_matvec.h"
#include "npu/unit_rmsnorm.h"
#include "npu/unit_swiglu.h"

namespace qpu::npu {

using compiler::Neuron;
using compiler::ValueId;

FfnBlock ffn_block(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint, const std::vector<ValueId>& x,
                   const std::vector<ValueId>& layer_flags) {
  const auto& cfg = checkpoint.config();
  const auto dim = static_cast<size_t>(cfg.dim);
  const auto hidden = static_cast<size_t>(cfg.hidden_dim);
  if (x.size() != dim) fail("ffn_block: {} x values for a checkpoint of dim {}", x.size(), dim);
  if (layer_flags.size() != static_cast<size_t>(cfg.n_layers))
    fail("ffn_block: {} layer flags for a checkpoint of {} layers", layer_flags.size(), cfg.n_layers);

  FfnBlock b;
  b.first_op = p.ops().size();

  // xb = rmsnorm(x, rms_ffn[l]): one weight vector per layer flag.
  const auto rms = checkpoint.weights().rms_ffn;
  std::vector<std::vector<float>> weights;
  for (size_t l = 0; l < layer_flags.size(); ++l)
    weights.emplace_back(rms.begin() + static_cast<std::ptrdiff_t>(l * dim),
                         rms.begin() + static_cast<std::ptrdiff_t>((l + 1) * dim));
  const RmsnormUnit norm = rmsnorm_unit(p, weights, x, layer_flags);
  b.enable = norm.enable;
  b.xb = norm.out;

  // hb = w1 xb and hb2 = w3 xb in one unit: lanes [0, hidden) and [hidden, 2 hidden).
  std::vector<NestedMatrix> w13, w2;
  for (int l = 0; l < cfg.n_layers; ++l) {
    w13.push_back(stack_rows("w1|w3", {llama2_matrix(checkpoint, "w1", l), llama2_matrix(checkpoint, "w3", l)}));
    w2.push_back(llama2_matrix(checkpoint, "w2", l));
  }
  const MatvecUnit up = matvec_unit(p, w13, b.xb, layer_flags);
  b.hb.assign(up.y.begin(), up.y.begin() + static_cast<std::ptrdiff_t>(hidden));
  b.hb2.assign(up.y.begin() + static_cast<std::ptrdiff_t>(hidden), up.y.begin() + static_cast<std::ptrdiff_t>(2 * hidden));

  // hb[i] = silu(hb[i]) * hb2[i] on every lane.
  for (const SwigluResult& r : swiglu_lanes(p, b.hb, b.hb2, b.enable)) b.prod.push_back(r.out);

  // xb = w2 hb.
  b.w2_out = matvec_unit(p, w2, b.prod, layer_flags).y;

  // x[i] += xb[i]: two copy neurons per i into a fresh value; their down sum is C's one
  // rounding (every other term of it is +-0), the add onto the fresh +0 value is exact.
  const size_t first_add = p.ops().size();
  b.x_out = p.values("ffn.x_out", static_cast<int>(dim));
  std::vector<Neuron> adds;
  for (size_t i = 0; i < dim; ++i) {
    adds.push_back(detail::copy_neuron(b.x_out[i], x[i]));
    adds.push_back(detail::copy_neuron(b.x_out[i], b.w2_out[i]));
  }
  p.mlp("ffn.residual", std::move(adds));
  // The copy neurons' only constants are their gates (128): idle, their ups are +-0 and
  // they write +-0 anyway, but through the enable an idle block reads no rail at all.
  compiler::enable_constants(p, first_add, b.enable);
  return b;
}

}  // namespace qpu::npu
