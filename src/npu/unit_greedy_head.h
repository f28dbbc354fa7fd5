#pragma once
// The nested model's greedy head as one straight NPU program: run.c's classifier
// matmul (`logits[i] = 0; for j: logits[i] += wcls[i][j] * x[j]`, x = the final
// rmsnorm's output) followed by sample_argmax (strict >, so the first index of the
// maximum wins). docs/npu-units.md, "Greedy head".
//
// Classifier: npu::matvec_unit with wcls as its one matrix and the head's enable as its
// flag (unit_matvec.h): one column neuron per j delivers fl(wcls[i][j] x_j) into all
// rows, one sublayer before the chain adds it; three of C's additions per sublayer in
// C's order; the products rotate through three sets of three values per row, each
// cleared by the op that reads it last. So the head needs ~10 values per vocab row
// instead of one per stored product (~2 dim / 3 before): the widest point of a
// dim-reusing allocation (compiler::compile_reusing_dims with the options of
// add_dead_clear_enables) is the classifier's 10 * vocab values; the argmax tree needs
// fewer. 1 + ceil((dim - 1)/3) sublayers, as the previous form that stored products.
// Argmax: npu::argmax's pairwise tree (5 sublayers per level; the leaves' indices are
// constants, not values). One-hot: three ramp neurons per token reading the index
// (exact small integers).
//
// Window: x_j 0 or in the value window, every product fl(wcls[i][j] x_j) and every
// partial sum 0 or in [2^-78, 2^36] (they are read again), wcls entries 0 or normal;
// logits pairwise equal or differing by at least 2^-70 (argmax's compare window).
// stories260K: x = final_rms_out in [2^-24, 19.9], logits in [2^-23, 24.6]
// (docs/trace-ranges.md).
#include <span>
#include <vector>

#include "compiler/clear_dead.h"
#include "compiler/ir.h"
#include "npu/unit_matvec.h"

namespace qpu::npu {

struct GreedyHead {
  std::vector<compiler::ValueId> logits;  // [vocab], run.c's forward output
  std::vector<compiler::ValueId> onehot;  // [vocab], exactly 1 at the chosen token, 0 elsewhere
  compiler::ValueId token;                // the chosen token as an exact integer value
  compiler::ValueId max;                  // logits[token]
  compiler::ValueId unit_enable = 0;  // the classifier's enable value: exactly `enable`
  compiler::ValueId first_value = 0, end_value = 0;  // the values the head created
  // Row-block form (greedy_head_blocks): each block's values [first, end) and the enable
  // its classifier derived (exactly `enable`). Empty for greedy_head.
  struct BlockValues {
    compiler::ValueId first = 0, end = 0, enable = 0;
  };
  std::vector<BlockValues> blocks;
};

// wcls is [vocab][x.size()] row-major. `enable` as in swiglu(): exactly 1 when the head
// runs, 0 when idle (then every value the head owns receives only +-0). Throws for an
// empty x, a weight count other than vocab * x.size(), and weights matvec_unit refuses
// (not finite, subnormal).
GreedyHead greedy_head(compiler::Program& p, const std::vector<compiler::ValueId>& x, std::span<const float> wcls,
                       int vocab, compiler::ValueId enable = compiler::kOne);

// The same head in row blocks of the vocabulary laid one below the other, for the width
// budget (docs/npu-machine.md, "M2": H and I <= 1,024; the one-program head is ~4,800
// wide even sunk). Block b (rows [b R, b R + R), R = block_rows, the last one shorter)
// is the matvec unit on those rows and its own argmax tree; its (max, index) meets the
// running one as run.c's sample_argmax loop meets it: the block wins only with a
// strictly greater max (every earlier row has a smaller index, so the first maximum
// still wins). Each block's ops are ordered after the previous block's
// (Program::order), so only one block's ~10 R classifier values are live at a time.
// The one-hot of the final index is split into ops of at most `max_op_neurons` neurons
// (3 per token). logits holds every row's logit, as greedy_head's; unit_enable is block
// 0's enable and `blocks` lists every block's values for add_dead_clear_enables.
struct GreedyBlockOptions {
  int block_rows = 64;
  MatvecOptions matvec{};
  int max_op_neurons = 384;
};
GreedyHead greedy_head_blocks(compiler::Program& p, const std::vector<compiler::ValueId>& x,
                              std::span<const float> wcls, int vocab, compiler::ValueId enable,
                              const GreedyBlockOptions& options);

// Dim reuse for a program holding the head: maps every value the head created to
// unit_enable in options.enable_of (compiler/clear_dead.h). The promises hold: the
// enable is exactly 1 or 0 (flags_enable of one flag) and, when it is 0, every value of
// the head is +-0 (the idle contract). Then the matvec's own clears of its rotating
// values (gate 128 * enable, -v onto v) end their lives, which compile_reusing_dims
// without the map cannot see (the clear's gate reads the enable, not the constant):
// the rotating values would keep their dims through the whole argmax. The head's other
// clears read the enable too, so an idle head costs nothing there.
void add_dead_clear_enables(const GreedyHead& h, compiler::DeadClearOptions& options);

}  // namespace qpu::npu
