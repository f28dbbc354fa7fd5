#include "npu/block_ffn.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/neurons.h"
#include "npu/unit_matvec.h"
#include "npu/unit_rmsnorm.h"
#include "npu/unit_swiglu.h"

namespace qpu::npu {

using compiler::Neuron;
using compiler::ValueId;

namespace {

void check_sizes(const char* who, const reference::Llama2Config& cfg, const std::vector<ValueId>& x,
                 const std::vector<ValueId>& layer_flags) {
  if (x.size() != static_cast<size_t>(cfg.dim)) fail("{}: {} x values for a checkpoint of dim {}", who, x.size(), cfg.dim);
  if (layer_flags.size() != static_cast<size_t>(cfg.n_layers))
    fail("{}: {} layer flags for a checkpoint of {} layers", who, layer_flags.size(), cfg.n_layers);
}

// matrix[l] prod (w2, or wo for the attention's output), then x[i] += xb[i]. `enable`:
// the residual add's enable (kOne: the matvec's).
FfnOut append_out(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint, const char* matrix,
                  const std::vector<ValueId>& x, const std::vector<ValueId>& prod,
                  const std::vector<ValueId>& layer_flags, ValueId enable) {
  const auto& cfg = checkpoint.config();
  const auto dim = static_cast<size_t>(cfg.dim);
  FfnOut o;
  o.first_op = p.ops().size();
  std::vector<NestedMatrix> w;
  for (int l = 0; l < cfg.n_layers; ++l) w.push_back(llama2_matrix(checkpoint, matrix, l));
  const MatvecUnit down = matvec_unit(p, w, prod, layer_flags);
  o.w2_out = down.y;
  o.enable = enable == compiler::kOne ? down.enable : enable;

  // x[i] += xb[i]: two copy neurons per i into a fresh value; their down sum is C's one
  // rounding (every other term of it is +-0), the add onto the fresh +0 value is exact.
  const size_t first_add = p.ops().size();
  o.x_out = p.values("ffn.x_out", static_cast<int>(dim));
  std::vector<Neuron> adds;
  for (size_t i = 0; i < dim; ++i) {
    adds.push_back(detail::copy_neuron(o.x_out[i], x[i]));
    adds.push_back(detail::copy_neuron(o.x_out[i], o.w2_out[i]));
  }
  p.mlp("ffn.residual", std::move(adds));
  // The copy neurons' only constants are their gates (128): idle, their ups are +-0 and
  // they write +-0 anyway, but through the enable an idle block reads no rail at all.
  compiler::enable_constants(p, first_add, o.enable);
  return o;
}

// rmsnorm(x, rms_ffn[l]) -> the matvec on `w13` (matrix m selected by flags[m]: lanes
// rows of w1 stacked over the same rows of w3) -> swiglu on the lanes. Shared by the
// fixed chunk (one matrix per layer) and the chunk unit (one per layer and chunk).
FfnChunk append_chunk(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint, const std::vector<ValueId>& x,
                      const std::vector<ValueId>& layer_flags, const std::vector<NestedMatrix>& w13,
                      const std::vector<ValueId>& w13_flags, int lanes, const MatvecOptions& options) {
  const auto dim = static_cast<size_t>(checkpoint.config().dim);
  const auto n = static_cast<size_t>(lanes);
  FfnChunk c;
  c.first_op = p.ops().size();
  // xb = rmsnorm(x, rms_ffn[l]): one weight vector per layer flag.
  const auto rms = checkpoint.weights().rms_ffn;
  std::vector<std::vector<float>> weights;
  for (size_t l = 0; l < layer_flags.size(); ++l)
    weights.emplace_back(rms.begin() + static_cast<std::ptrdiff_t>(l * dim),
                         rms.begin() + static_cast<std::ptrdiff_t>((l + 1) * dim));
  const RmsnormUnit norm = rmsnorm_unit(p, weights, x, layer_flags);
  c.enable = norm.enable;
  c.xb = norm.out;

  // The chunk's rows of w1 xb and w3 xb in one unit: lanes [0, n) and [n, 2 n).
  const MatvecUnit up = matvec_unit(p, w13, c.xb, w13_flags, options);
  c.hb.assign(up.y.begin(), up.y.begin() + static_cast<std::ptrdiff_t>(n));
  c.hb2.assign(up.y.begin() + static_cast<std::ptrdiff_t>(n), up.y.begin() + static_cast<std::ptrdiff_t>(2 * n));

  // prod[i] = silu(hb[i]) * hb2[i] on every lane of the chunk.
  for (const SwigluResult& r : swiglu_lanes(p, c.hb, c.hb2, c.enable)) c.prod.push_back(r.out);
  return c;
}

// Rows [first, first + count) of m, the rows past m.rows zero (the last chunk's padding:
// matvec_unit writes no term for a zero weight, so those lanes stay +-0).
NestedMatrix padded_rows(const NestedMatrix& m, int first, int count) {
  const int real = std::min(count, m.rows - first);
  NestedMatrix b = row_block(m, first, real);
  b.rows = count;
  b.w.resize(static_cast<size_t>(count) * static_cast<size_t>(m.cols), 0.0f);
  return b;
}

}  // namespace

FfnChunk ffn_chunk_block(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint, const std::vector<ValueId>& x,
                         const std::vector<ValueId>& layer_flags, int first_lane, int lanes) {
  const auto& cfg = checkpoint.config();
  check_sizes("ffn_chunk_block", cfg, x, layer_flags);
  if (first_lane < 0 || lanes < 1 || first_lane > cfg.hidden_dim - lanes)
    fail("ffn_chunk_block: lanes [{}, {} + {}) outside hidden_dim {}", first_lane, first_lane, lanes, cfg.hidden_dim);
  std::vector<NestedMatrix> w13;
  for (int l = 0; l < cfg.n_layers; ++l)
    w13.push_back(stack_rows("w1|w3", {row_block(llama2_matrix(checkpoint, "w1", l), first_lane, lanes),
                                       row_block(llama2_matrix(checkpoint, "w3", l), first_lane, lanes)}));
  return append_chunk(p, checkpoint, x, layer_flags, w13, layer_flags, lanes, {});
}

FfnChunkUnit ffn_chunk_unit(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint, const std::vector<ValueId>& x,
                            const std::vector<ValueId>& layer_flags, const std::vector<ValueId>& chunk_flags, int lanes,
                            const MatvecOptions& options) {
  const auto& cfg = checkpoint.config();
  check_sizes("ffn_chunk_unit", cfg, x, layer_flags);
  if (lanes < 1 || lanes > cfg.hidden_dim)
    fail("ffn_chunk_unit: {} lanes outside [1, hidden_dim {}]", lanes, cfg.hidden_dim);
  const int chunks = (cfg.hidden_dim + lanes - 1) / lanes;
  if (chunk_flags.size() != static_cast<size_t>(cfg.n_layers) * static_cast<size_t>(chunks))
    fail("ffn_chunk_unit: {} chunk flags for {} layers x {} chunks of {} lanes (hidden_dim {})", chunk_flags.size(),
         cfg.n_layers, chunks, lanes, cfg.hidden_dim);
  // Matrix l * chunks + c, in the order of the chunk flags.
  std::vector<NestedMatrix> w13;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const NestedMatrix w1 = llama2_matrix(checkpoint, "w1", l), w3 = llama2_matrix(checkpoint, "w3", l);
    for (int c = 0; c < chunks; ++c)
      w13.push_back(stack_rows("w1|w3[" + std::to_string(l) + "][" + std::to_string(c) + "]",
                               {padded_rows(w1, c * lanes, lanes), padded_rows(w3, c * lanes, lanes)}));
  }
  FfnChunk c = append_chunk(p, checkpoint, x, layer_flags, w13, chunk_flags, lanes, options);
  FfnChunkUnit u;
  u.prod = std::move(c.prod);
  u.enable = c.enable;
  u.xb = std::move(c.xb);
  u.hb = std::move(c.hb);
  u.hb2 = std::move(c.hb2);
  u.first_op = c.first_op;
  u.chunks = chunks;
  return u;
}

FfnOut ffn_out_block(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint, const std::vector<ValueId>& x,
                     const std::vector<ValueId>& prod, const std::vector<ValueId>& layer_flags) {
  const auto& cfg = checkpoint.config();
  check_sizes("ffn_out_block", cfg, x, layer_flags);
  if (prod.size() != static_cast<size_t>(cfg.hidden_dim))
    fail("ffn_out_block: {} products for a checkpoint of hidden_dim {}", prod.size(), cfg.hidden_dim);
  return append_out(p, checkpoint, "w2", x, prod, layer_flags, compiler::kOne);
}

FfnOut attention_out_block(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint,
                           const std::vector<ValueId>& x, const std::vector<ValueId>& xb,
                           const std::vector<ValueId>& layer_flags) {
  const auto& cfg = checkpoint.config();
  check_sizes("attention_out_block", cfg, x, layer_flags);
  if (xb.size() != static_cast<size_t>(cfg.dim))
    fail("attention_out_block: {} xb values for a checkpoint of dim {}", xb.size(), cfg.dim);
  return append_out(p, checkpoint, "wo", x, xb, layer_flags, compiler::kOne);
}

FfnBlock ffn_block(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint, const std::vector<ValueId>& x,
                   const std::vector<ValueId>& layer_flags) {
  check_sizes("ffn_block", checkpoint.config(), x, layer_flags);
  FfnBlock b;
  b.first_op = p.ops().size();
  FfnChunk all = ffn_chunk_block(p, checkpoint, x, layer_flags, 0, checkpoint.config().hidden_dim);
  b.enable = all.enable;
  b.xb = std::move(all.xb);
  b.hb = std::move(all.hb);
  b.hb2 = std::move(all.hb2);
  b.prod = std::move(all.prod);
  FfnOut out = append_out(p, checkpoint, "w2", x, b.prod, layer_flags, b.enable);
  b.w2_out = std::move(out.w2_out);
  b.x_out = std::move(out.x_out);
  return b;
}

}  // namespace qpu::npu
