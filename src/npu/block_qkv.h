#pragma once
// The nested model's QKV micro-op (docs/npu-machine.md, M2: QKV(l)) as one idle-safe
// chain of units (docs/npu-units.md, "QKV block"): run.c's
//
//   rmsnorm(xb, x, w->rms_att_weight + l*dim, dim);
//   matmul(q, xb, wq[l], dim, dim); matmul(k, xb, wk[l], dim, kv_dim); matmul(v, xb, wv[l], dim, kv_dim);
//   for (i = 0; i < dim; i += 2) { head_dim = i % head_size; freq = 1.0f / powf(10000.0f, head_dim / (float)head_size);
//     val = pos * freq; fcr = cosf(val); fci = sinf(val); rotn = i < kv_dim ? 2 : 1; ... rotate q (and k) ... }
//
// for the layer l whose one-hot flag is 1, bit for bit. The chain: rmsnorm_unit with the
// n_layers rms_att vectors -> wq||wk||wv (stack_rows: q in lanes [0, dim), k in
// [dim, dim + kv_dim), v after them) as `row_blocks` matvec units one below the other
// -> rope_unit on q and k at the position.
//
// Row blocks (the width budget, docs/npu-machine.md "M2 ... The width budget": H <=
// 1,024 live values): a matvec unit holds 10 values per lane while it runs, so all 128
// stacked lanes of stories260K at once need 1,280 dims. Block b computes rows
// [R b / B, R (b + 1) / B) of the stack (row_block; every row is its own C loop, so the
// rows are the same floats); block b + 1 starts only after block b has ended, so its
// rotating values can take the dims block b's have freed (with add_dead_clear_enables).
// The order is an ordering edge (compiler::Program::order over the two blocks' ops), not
// arithmetic: no float changes, the scheduler places block b + 1 after block b's last step.
//
// The position: pos is an exact integer in [0, seq_len) when the block runs; RoPE reads
// it with the block's enable (the rmsnorm's: the sum of the layer flags), so the block
// needs no separate RoPE enable. **Idle = every layer flag 0 and x = 0, whatever pos
// holds** (any |pos| < 2^100, so that the ramp gates 128 (pos - m) stay finite; tested
// with 0, 1, 300, 511 and 4,096) -> every value the block owns receives only +-0: pos
// only ever reaches gates, those of RoPE's position ramps (table_lookup.h), whose up is
// the constant 1/128 turned into enable / 128 = +-0.
// (rope_unit's own contract names pos = 0; the block's test pins the stronger property,
// so the POS register need not be cleared on cycles that do not run QKV.) Every unit
// turns its constants into an enable (compiler::enable_constants): rmsnorm and each
// matvec their own flags_enable (the sum of their flags), RoPE the rmsnorm's.
//
// Windows: those of the units (unit_rmsnorm.h, unit_matvec.h, unit_rope.h); stories260K
// (docs/trace-ranges.md) is inside all of them.
#include <cstddef>
#include <vector>

#include "compiler/clear_dead.h"
#include "compiler/ir.h"
#include "npu/unit_matvec.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::npu {

// The row blocks of the width budget, measured in tests/block_qkv_test.cpp
// (QkvBlock.CompiledShapeFitsTheWidthBudget, docs/npu-units.md "QKV block";
// stories260K, 128 stacked rows, plan_dim_reuse with add_dead_clear_enables under
// {1,024 neurons per MLP sublayer, sink}): 1 block 125 host layers and hidden 1,344
// (over the budget), 2 blocks 148 and 832, 3 blocks 171 and 704, 4 blocks 193 and 704
// (then RoPE's position one-hot, not the matvec, is the widest point). Two is the
// fewest that fit. The matvec's lane groups (kBudgetMaxOpNeurons) change no number here:
// a block's widest add op is 4 x 64 neurons.
inline constexpr int kQkvRowBlocks = 2;

struct QkvBlock {
  std::vector<compiler::ValueId> q, k, v;  // dim, kv_dim, kv_dim: run.c's q and k AFTER RoPE, v
  compiler::ValueId enable = 0;            // the rmsnorm's enable: the sum of the layer flags
  std::vector<compiler::ValueId> xb;       // rmsnorm output (dim)
  // For tests: q and k before RoPE (the matvecs' lanes).
  std::vector<compiler::ValueId> q_raw, k_raw;
  // The values the block created, in ranges [first, end), each with the enable that
  // gates its clears (add_dead_clear_enables).
  struct Owned {
    compiler::ValueId first = 0, end = 0, enable = 0;
  };
  std::vector<Owned> owned;
  size_t first_op = 0;  // the block's first op
};

// Appends the block. x: dim values; layer_flags: n_layers one-hot values; pos: the
// position (an exact integer in [0, seq_len) when a flag is 1, any |pos| < 2^100 when
// idle). Dimensions come from the checkpoint's header. `options` goes to every matvec
// unit (kBudgetMaxOpNeurons for the width budget); row_blocks in [1, dim + 2 kv_dim].
// Throws qpu::Error on a size mismatch or a bad row_blocks.
QkvBlock qkv_block(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint,
                   const std::vector<compiler::ValueId>& x, const std::vector<compiler::ValueId>& layer_flags,
                   compiler::ValueId pos, const MatvecOptions& options = {}, int row_blocks = kQkvRowBlocks);

// Dim reuse for a program holding the block (compiler/clear_dead.h): maps every value
// the block created to the enable of the unit that wrote it (a matvec's own enable for
// its values, so that its rotating values' self-clears, gated by that enable, end their
// lives; the rmsnorm's enable for the rest). The promises hold: every enable is a
// flags_enable (exactly 1 or 0), and when it is 0 the block is idle and every value it
// owns is +-0. Without the map a matvec's rotating values keep their dims to the end of
// the program, and the row blocks would not share dims.
void add_dead_clear_enables(const QkvBlock& b, compiler::DeadClearOptions& options);

}  // namespace qpu::npu
