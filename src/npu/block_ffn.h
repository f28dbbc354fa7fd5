#pragma once
// The nested model's FFN half-layer as one idle-safe chain of units (docs/npu-units.md,
// "FFN block"): run.c's
//
//   rmsnorm(xb, x, w->rms_ffn_weight + l*dim, dim);
//   matmul(hb, xb, w1[l], dim, hidden_dim);  matmul(hb2, xb, w3[l], dim, hidden_dim);
//   for i: val = hb[i]; val *= (1.0f / (1.0f + expf(-val))); val *= hb2[i]; hb[i] = val;
//   matmul(xb, hb, w2[l], hidden_dim, dim);
//   for i: x[i] += xb[i];
//
// for the layer l whose one-hot flag is 1, bit for bit. The chain: rmsnorm_unit with the
// n_layers rms_ffn vectors (one per flag) -> one matvec_unit on stack_rows(w1[l], w3[l])
// per layer (hb in lanes [0, hidden), hb2 in [hidden, 2 hidden): every row is its own C
// loop, so stacking only adds lanes sharing xb) -> swiglu_lanes on all hidden lanes ->
// matvec_unit on w2[l] -> the residual add, one MLP sublayer: per i two copy neurons
// (x[i] and xb[i]) into a fresh value, whose down sum is C's one rounding of x[i] + xb[i]
// (the residual add onto +0 is exact).
//
// Idle: every unit turns its constants into its enable (compiler::enable_constants):
// rmsnorm and the matvecs their own flags_enable (the sum of the layer flags), SwiGLU
// and the residual add the rmsnorm's enable. With every flag 0 and x = 0 the whole
// block writes only +-0 (each unit's contract applied in order: its operands are the
// previous unit's +-0 outputs).
//
// Windows: those of the units (unit_rmsnorm.h, unit_matvec.h, unit_swiglu.h); the
// residual add needs x, xb and fl(x + xb) 0 or in the value window [2^-78, 2^36].
// stories260K (docs/trace-ranges.md) is inside all of them.
#include <cstddef>
#include <vector>

#include "compiler/ir.h"
#include "npu/unit_matvec.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::npu {

struct FfnBlock {
  std::vector<compiler::ValueId> x_out;   // dim values: run.c's x after the FFN
  compiler::ValueId enable = 0;           // the rmsnorm's enable: sum of the layer flags
  // The intermediate vectors (for tests; dead once the next unit has read them).
  std::vector<compiler::ValueId> xb;      // rmsnorm output (dim)
  std::vector<compiler::ValueId> hb, hb2; // w1 xb, w3 xb (hidden_dim each)
  std::vector<compiler::ValueId> prod;    // silu(hb) * hb2 (hidden_dim)
  std::vector<compiler::ValueId> w2_out;  // w2 prod (dim)
  size_t first_op = 0;                    // the block's first op
};

// Appends the block. x: dim values; layer_flags: n_layers one-hot values. Dimensions come
// from the checkpoint's header. Throws qpu::Error on a size mismatch. It is
// ffn_chunk_block over all hidden_dim lanes followed by ffn_out_block's w2 and residual
// add (the add's enable being the rmsnorm's, as above).
FfnBlock ffn_block(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint,
                   const std::vector<compiler::ValueId>& x, const std::vector<compiler::ValueId>& layer_flags);

// The FFN split for the width budget (docs/npu-machine.md, "M2 ... The width budget"):
// the whole block does not fit one host cycle of a Qwen3.5 config (H, I <= 1,024), so
// the machine runs it as SWIGLU(l, chunk) micro-ops, each rmsnorm(x) -> the rows of w1
// and w3 for its lanes only (row_block) -> swiglu on those lanes, then one W2 micro-op
// over all hidden_dim products. Run one after the other they compute ffn_block's x_out
// bit for bit: every lane is its own C loop, and rmsnorm(x) is the same in every chunk.
struct FfnChunk {
  std::vector<compiler::ValueId> prod;     // lanes values: silu(hb[i]) * hb2[i], i in the chunk
  compiler::ValueId enable = 0;            // the rmsnorm's enable: sum of the layer flags
  std::vector<compiler::ValueId> xb;       // rmsnorm output (dim)
  std::vector<compiler::ValueId> hb, hb2;  // the chunk's rows of w1 xb, w3 xb (lanes each)
  size_t first_op = 0;
};
// Lanes [first_lane, first_lane + lanes) of hidden_dim. Idle (flags 0, x = 0): writes
// only +-0. Throws qpu::Error on a size mismatch or lanes outside [0, hidden_dim).
FfnChunk ffn_chunk_block(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint,
                         const std::vector<compiler::ValueId>& x, const std::vector<compiler::ValueId>& layer_flags,
                         int first_lane, int lanes);

// The SWIGLU(l, c) micro-op as ONE unit for every layer l and chunk c: the machine
// runs all n_layers x chunks micro-ops through the same weights, the token's flags
// choosing which. The chunk flags select the matvec's matrix (l, c): rows
// [c lanes, c lanes + lanes) of w1[l] stacked over the same rows of w3[l] (hb in lanes
// [0, lanes), hb2 in [lanes, 2 lanes)); the layer flags select the rmsnorm's rms_ffn[l]
// as in ffn_chunk_block. The last chunk's rows past hidden_dim are zero rows: its padded
// lanes get hb = hb2 = +-0 (no column neuron writes them) and their prod is +0 as the
// residual stream reads it (C's silu(0) * 0, the SwiGLU unit's window includes hb = +-0).
//
// Contract on the flags (not checkable at compile time): a live micro-op sets layer flag
// l AND chunk flag l * chunks + c; idle, every flag is 0. Each is one-hot.
//
// Width (stories260K, plan_dim_reuse under the v1 budget, tests/block_ffn_test): the
// n_layers x chunks flags are interface inputs, live through the whole program beside
// the SwiGLU lanes, so the unit is ffn_chunk_block's width plus the flags: 7 lanes (125
// flags) hidden 1,152 with 18 rails, over H <= 1,024; 6 lanes (145 flags) 1,024 with 16
// rails, inside. The intermediate size is the fixed chunk's (1,016 / 918).
struct FfnChunkUnit {
  std::vector<compiler::ValueId> prod;     // lanes values: lane k = hidden index c * lanes + k
  compiler::ValueId enable = 0;            // the rmsnorm's enable: sum of the layer flags
  std::vector<compiler::ValueId> xb;       // rmsnorm output (dim)
  std::vector<compiler::ValueId> hb, hb2;  // the selected chunk's rows of w1 xb, w3 xb (lanes each)
  size_t first_op = 0;
  int chunks = 0;                          // ceil(hidden_dim / lanes)
};
// x: dim values; layer_flags: n_layers one-hot; chunk_flags: n_layers * chunks one-hot,
// index l * chunks + c. Idle (every flag 0, x = 0): writes only +-0. Throws qpu::Error on
// a size mismatch or lanes outside [1, hidden_dim].
FfnChunkUnit ffn_chunk_unit(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint,
                            const std::vector<compiler::ValueId>& x, const std::vector<compiler::ValueId>& layer_flags,
                            const std::vector<compiler::ValueId>& chunk_flags, int lanes,
                            const MatvecOptions& options = {});

struct FfnOut {
  std::vector<compiler::ValueId> x_out;   // dim values: run.c's x after the FFN
  std::vector<compiler::ValueId> w2_out;  // w2 prod (dim)
  compiler::ValueId enable = 0;           // the w2 matvec's enable: sum of the layer flags
  size_t first_op = 0;
};
// x: dim values (the block's input, as given to the chunks); prod: the hidden_dim
// products of all chunks in lane order. Idle: writes only +-0 (the residual add's
// enable is the matvec's). Throws qpu::Error on a size mismatch.
FfnOut ffn_out_block(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint,
                     const std::vector<compiler::ValueId>& x, const std::vector<compiler::ValueId>& prod,
                     const std::vector<compiler::ValueId>& layer_flags);

// The attention half-layer's output, the same unit with wo: run.c's
//   matmul(xb2, xb, w->wo + l*dim*dim, dim, dim);  for i: x[i] += xb2[i];
// for the layer whose flag is 1 (xb: the attention's output, dim values). Idle (flags 0,
// xb = 0, x = 0): writes only +-0. Throws qpu::Error on a size mismatch.
FfnOut attention_out_block(compiler::Program& p, const reference::Llama2Checkpoint& checkpoint,
                           const std::vector<compiler::ValueId>& x, const std::vector<compiler::ValueId>& xb,
                           const std::vector<compiler::ValueId>& layer_flags);

}  // namespace qpu::npu
