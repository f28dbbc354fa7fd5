#pragma once
// The looped machine's matvec unit (docs/npu-units.md): y = M x for one of several
// nested matrices M of the same row length n, chosen by one-hot flags, with run.c's
// exact float operations: y[i] = (((0 + w[i][0] x[0]) + w[i][1] x[1]) + ...) left to
// right (reference::matmul).
//
// Weights live in down columns, not one neuron per weight (docs/journal/npu-machine-design-study.md §3.2):
// column j of matrix M is ONE neuron, gate 128 * flag_M, up x_j / 128, so its output is
// x_j exactly when M is selected and +-0 otherwise; its down column holds M[:, j], so
// product value P[i] receives fl(M[i][j] * x_j) as the only live term of its down sum
// (one rounding, as C commits the product before adding it; the other matrices' column
// j neurons contribute +-0). A product is never a term of a sum with another live term,
// so a host whose matmuls fuse multiply-adds (FMA) computes it the same way.
//
// The additions follow npu::sum_chain_fused (fused_dot.h): three of C's additions per
// MLP sublayer, fl(fl(fl(acc + q1) + q2) + q3) into q3's value. Products are written
// one sublayer before they are added, into three rotating sets of three values per
// lane; every value is cleared (an exact -v onto v) in the sublayer that reads it for
// the last time, so the set can be written again two sublayers later. Per lane that is
// 10 values instead of n. Lanes i >= rows of the selected matrix stay +0.
//
// Cost, n = row length, D = max rows, M matrices (counted by tests/unit_matvec_test):
// MLP sublayers 1 + ceil((n - 1)/3) (the enable neuron shares the first);
// neurons = nonzero columns over all matrices (~ M n) + ~4 D per chain sublayer + 1;
// values = 10 D + 1 besides x and the flags.
//
// Width (MatvecOptions::max_op_neurons, docs/npu-units.md "Width"): a chain step's
// additions are one op of up to 4 D neurons (1,376 for w1||w3, 2,048 for the
// classifier), more than a sublayer of the width budget holds (1,024). With a limit the
// lanes are split into equal groups of at most max_op_neurons / 4 lanes and each step
// emits one add op per group. Each lane's values are written by its own group's op only,
// so the groups obey ir.h's rule (no shared destination in a sublayer) wherever the
// scheduler puts them; the step's column op stays one op writing every lane (3 M
// neurons: it fits anywhere). Every value gets the same terms, in the same order, as
// without groups: the same floats. At the default scheduler limit the length is
// unchanged; under a 1,024 limit a unit with 4 D + 3 M > 1,024 needs more than one
// sublayer per step (measured in tests/unit_matvec_test, MatvecWidth).
#include <string>
#include <vector>

#include "compiler/ir.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::npu {

// A matrix of the nested model, row-major as run.c stores it: w[i * cols + j].
struct NestedMatrix {
  std::string name;
  int rows = 0, cols = 0;
  std::vector<float> w;
};

// The rows of several matrices one after the other: one unit call computes them at
// once when they share x (wq/wk/wv; w1/w3). Row i of the stack is computed exactly as
// row i of its part (every row is its own C loop). Throws when the parts' cols differ.
NestedMatrix stack_rows(std::string name, const std::vector<NestedMatrix>& parts);

// A weight matrix of a llama2.c checkpoint: "wq", "wk", "wv", "wo", "w1", "w2", "w3"
// of layer `layer`, or "wcls" (layer ignored). Throws for an unknown name or layer.
NestedMatrix llama2_matrix(const reference::Llama2Checkpoint& checkpoint, const std::string& name, int layer);

// Rows [first, first + count) of m (a classifier block).
NestedMatrix row_block(const NestedMatrix& m, int first, int count);

struct MatvecOptions {
  // 0: one add op per chain step (every lane), as before. > 0 (>= 4): no add op above
  // this many neurons. Column ops (3 M neurons, M = matrices) are not split.
  int max_op_neurons = 0;
};

// max_op_neurons for the width budget's 1,024 neurons per sublayer (docs/npu-machine.md):
// small groups (32 lanes) let the scheduler fill each sublayer to ~1,024; measured on
// stories260K, 128 gives w1||w3 64 sublayers and wcls 90 (floors ~60 and ~86), while
// 512 gives 66 / 104 and 1,024 (groups of 256 lanes, which leave no room beside them)
// 86 / 122.
inline constexpr int kBudgetMaxOpNeurons = 128;

struct MatvecUnit {
  std::vector<compiler::ValueId> y;  // max rows lanes
  compiler::ValueId enable = 0;      // the sum of the flags
  size_t first_op = 0;               // the unit's ops after the enable neuron
};

// Appends the unit. Every matrix has x.size() columns; flags[m] selects matrices[m].
// Window: x_j = 0 or in the value window, every product and partial sum 0 or in
// [2^-78, 2^36] (docs/npu.md); |w| >= 2^-126 or w = 0.
MatvecUnit matvec_unit(compiler::Program& p, const std::vector<NestedMatrix>& matrices,
                       const std::vector<compiler::ValueId>& x, const std::vector<compiler::ValueId>& flags,
                       const MatvecOptions& options = {});

// run.c's matmul for one matrix: out[i] for i < rows.
std::vector<float> matvec_reference(const NestedMatrix& m, const float* x);

}  // namespace qpu::npu
