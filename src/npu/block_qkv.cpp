#include "npu/block_qkv.h"

#include <string>
#include <vector>

#include "common/error.h"
#include "npu/unit_rmsnorm.h"
#include "npu/unit_rope.h"

namespace qpu::npu {

using compiler::ValueId;

QkvBlock qkv_block(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint, const std::vector<ValueId>& x,
                   const std::vector<ValueId>& layer_flags, ValueId pos, const MatvecOptions& options, int row_blocks) {
  const auto& cfg = checkpoint.config();
  if (x.size() != static_cast<size_t>(cfg.dim)) fail("qkv_block: {} x values for a checkpoint of dim {}", x.size(), cfg.dim);
  if (layer_flags.size() != static_cast<size_t>(cfg.n_layers))
    fail("qkv_block: {} layer flags for a checkpoint of {} layers", layer_flags.size(), cfg.n_layers);
  if (pos < 0 || pos >= p.num_values()) fail("qkv_block: position value {} is not a value of the program", pos);
  const int dim = cfg.dim, kv_dim = cfg.kv_dim(), rows = dim + 2 * kv_dim;
  if (row_blocks < 1 || row_blocks > rows)
    fail("qkv_block: {} row blocks for {} stacked rows of wq||wk||wv (1 to {})", row_blocks, rows, rows);
  const auto udim = static_cast<size_t>(dim);

  QkvBlock b;
  b.first_op = p.ops().size();
  auto own = [&](ValueId first, ValueId enable) {
    b.owned.push_back({first, static_cast<ValueId>(p.num_values()), enable});
  };

  // xb = rmsnorm(x, rms_att[l]): one weight vector per layer flag.
  ValueId first = static_cast<ValueId>(p.num_values());
  const auto rms = checkpoint.weights().rms_att;
  std::vector<std::vector<float>> weights;
  for (size_t l = 0; l < layer_flags.size(); ++l)
    weights.emplace_back(rms.begin() + static_cast<std::ptrdiff_t>(l * udim),
                         rms.begin() + static_cast<std::ptrdiff_t>((l + 1) * udim));
  const RmsnormUnit norm = rmsnorm_unit(p, weights, x, layer_flags);
  b.enable = norm.enable;
  b.xb = norm.out;
  own(first, b.enable);

  // wq||wk||wv in row blocks one below the other (block_qkv.h).
  std::vector<NestedMatrix> stacks;
  for (int l = 0; l < cfg.n_layers; ++l)
    stacks.push_back(stack_rows("wq|wk|wv", {llama2_matrix(checkpoint, "wq", l), llama2_matrix(checkpoint, "wk", l),
                                             llama2_matrix(checkpoint, "wv", l)}));
  std::vector<ValueId> y;  // the stacked lanes, in row order
  compiler::OpRange previous;  // the ops of the block before
  for (int blk = 0; blk < row_blocks; ++blk) {
    const int lo = rows * blk / row_blocks, hi = rows * (blk + 1) / row_blocks;
    std::vector<NestedMatrix> parts;
    for (const NestedMatrix& s : stacks) parts.push_back(row_blocks == 1 ? s : row_block(s, lo, hi - lo));
    first = static_cast<ValueId>(p.num_values());
    const compiler::OpRange ops{p.ops().size(), 0};
    const MatvecUnit mv = matvec_unit(p, parts, b.xb, layer_flags, options);
    const compiler::OpRange block{ops.begin, p.ops().size()};
    if (blk > 0) p.order(previous, block);  // block b + 1 strictly after block b (block_qkv.h)
    previous = block;
    own(first, mv.enable);
    y.insert(y.end(), mv.y.begin(), mv.y.end());
  }
  b.q_raw.assign(y.begin(), y.begin() + dim);
  b.k_raw.assign(y.begin() + dim, y.begin() + dim + kv_dim);
  b.v.assign(y.begin() + dim + kv_dim, y.end());

  // RoPE at pos, its constants through the block's enable. Idle, whatever pos holds:
  // every ramp of its position lookup has the up enable / 128 (table_lookup.h, the
  // constant turned into the enable), so pos only reaches gates and the ramps are +-0.
  first = static_cast<ValueId>(p.num_values());
  const RopeUnit rope = rope_unit(p, cfg, b.enable, pos, b.q_raw, b.k_raw);
  own(first, b.enable);
  b.q = rope.q;
  b.k = rope.k;
  return b;
}

void add_dead_clear_enables(const QkvBlock& b, compiler::DeadClearOptions& options) {
  for (const QkvBlock::Owned& o : b.owned)
    for (ValueId v = o.first; v < o.end; ++v) options.enable_of[v] = o.enable;
}

}  // namespace qpu::npu
