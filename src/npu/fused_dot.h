#pragma once
// The C loop `val = 0; for j: val += w[j]*x[j]` with THREE of C's additions per MLP
// sublayer instead of one (docs/journal/npu-machine-design-study.md §3.3). The chain of dependent additions
// is what sets the NPU's depth, so this cuts a 64-term dot product from 64 sublayers to
// 1 + 21.
//
// Sublayer 0 writes every product p_j = fl(w_j * x_j) into its own value (one rounding
// each, as C commits it before its add). Then each sublayer takes the running sum acc
// and the next three products q1, q2, q3 and commits fl(fl(fl(acc + q1) + q2) + q3):
//  * neuron A: gate 128 (silu's identity), up = (acc + q1)/128: an up form with two live
//    terms is one rounding, fl(acc + q1), in any summation order;
//  * neuron B: gate 128, up = q2/128: delivers q2 unchanged;
//  * both write into q3's value (which holds q3): the down sum h_A + h_B has two live
//    terms, one rounding; the residual add q3 + (...) is the third rounding. IEEE
//    addition is commutative, so each is exactly C's `val += ...`.
// With two products left, copies of acc and q1 go into q2's value (down sum + residual
// add: two roundings); with one left, a copy of acc goes into q1's value.
// Window: every product and every partial sum is read by a later sublayer, so each must
// be 0 or lie in the value window [2^-78, 2^36] (docs/npu.md).
#include <vector>

#include "compiler/ir.h"

namespace qpu::npu {

// Constant weights: products by one scale neuron each. 1 + ceil((n - 1)/3) sublayers.
compiler::ValueId dot_const_fused(compiler::Program& p, const std::vector<float>& w,
                                  const std::vector<compiler::ValueId>& x);
// Variable weights: products by P3's neuron pair. Same depth.
compiler::ValueId dot_var_fused(compiler::Program& p, const std::vector<compiler::ValueId>& w,
                                const std::vector<compiler::ValueId>& x);
// The addition chain alone over products already held in values (each holds +0 or
// exactly the C product). Returns the value holding C's sum (one of `products`, or a
// fresh +0 value when there are none). ceil((n - 1)/3) sublayers.
compiler::ValueId sum_chain_fused(compiler::Program& p, const std::vector<compiler::ValueId>& products);

}  // namespace qpu::npu
