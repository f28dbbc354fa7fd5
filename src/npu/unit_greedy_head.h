#pragma once
// The nested model's greedy head as one straight NPU program: run.c's classifier
// matmul (`logits[i] = 0; for j: logits[i] += wcls[i][j] * x[j]`, x = the final
// rmsnorm's output) followed by sample_argmax (strict >, so the first index of the
// maximum wins). docs/npu-units.md, "Greedy head".
//
// Classifier, the machine's way (docs/npu-machine.md §3.2/§3.3): one copy neuron per
// column j (gate 128, up x_j / 128, down column = wcls[:, j]) delivers fl(wcls[i][j] x_j)
// into every row at once. Products are materialised into their own values by such
// neurons in the first sublayer, except every third one, which the chain takes straight
// from its column neuron's down column: per row and sublayer, the row's neuron A
// (up = acc + p_{3s+1}: one rounding) and the column neuron of 3s+2 (one product term)
// meet in the down sum (second rounding) and the residual add onto the value holding
// p_{3s+3} is the third: C's three `+=` in C's order. 1 + ceil((dim - 1)/3) sublayers.
// Argmax: npu::argmax's pairwise tree (5 sublayers per level). One-hot: three ramp
// neurons per token reading the index (exact small integers).
//
// Window: every product fl(wcls[i][j] x_j) and every partial sum 0 or in the value
// window [2^-78, 2^36] (products are read again); logits pairwise equal or differing by
// at least 2^-70 (argmax's compare window). stories260K: x = final_rms_out in
// [2^-24, 19.9], logits in [2^-23, 24.6] (docs/trace-ranges.md).
#include <span>
#include <vector>

#include "compiler/ir.h"

namespace qpu::npu {

struct GreedyHead {
  std::vector<compiler::ValueId> logits;  // [vocab], run.c's forward output
  std::vector<compiler::ValueId> onehot;  // [vocab], exactly 1 at the chosen token, 0 elsewhere
  compiler::ValueId token;                // the chosen token as an exact integer value
  compiler::ValueId max;                  // logits[token]
};

// wcls is [vocab][x.size()] row-major. `enable` as in swiglu(): exactly 1 when the head
// runs, 0 when idle (then every value the head owns receives only +-0).
GreedyHead greedy_head(compiler::Program& p, const std::vector<compiler::ValueId>& x, std::span<const float> wcls,
                       int vocab, compiler::ValueId enable = compiler::kOne);

// The classifier part alone (the head's first 1 + ceil((dim - 1)/3) sublayers).
std::vector<compiler::ValueId> classifier_fused(compiler::Program& p, const std::vector<compiler::ValueId>& x,
                                                std::span<const float> wcls, int vocab);

}  // namespace qpu::npu
