#include "npu/fused_dot.h"

#include "common/error.h"
#include "npu/neurons.h"

namespace qpu::npu {

using compiler::Neuron;
using compiler::Program;
using compiler::ValueId;
using namespace detail;

namespace {

// silu(128) * (a + b)/128 == fl(a + b): two live terms in the up form.
Neuron sum2_neuron(ValueId dst, ValueId a, ValueId b) {
  return Neuron{lin({{kOne, kOn}}), lin({{a, 1.0f / kOn}, {b, 1.0f / kOn}}), {{dst, 1.0f}}};
}

}  // namespace

ValueId sum_chain_fused(Program& p, const std::vector<ValueId>& q) {
  if (q.empty()) return p.value("dot.zero");
  // C: val = 0 + p0 == p0 (a -0 product is held as +0, and 0 + -0 == +0 in C too).
  ValueId acc = q[0];
  size_t j = 1;
  while (j < q.size()) {
    const size_t left = q.size() - j;
    if (left >= 3) {
      // fl(fl(fl(acc + q1) + q2) + q3) into q3's value.
      p.mlp("dot.add3", {sum2_neuron(q[j + 2], acc, q[j]), copy_neuron(q[j + 2], q[j + 1])});
      acc = q[j + 2];
      j += 3;
    } else if (left == 2) {
      // fl(fl(acc + q1) + q2): the down sum acc + q1 is one rounding, the residual add onto q2 the other.
      p.mlp("dot.add2", {copy_neuron(q[j + 1], acc), copy_neuron(q[j + 1], q[j])});
      acc = q[j + 1];
      j += 2;
    } else {
      // fl(acc + q1): the residual add onto q1.
      p.mlp("dot.add1", {copy_neuron(q[j], acc)});
      acc = q[j];
      j += 1;
    }
  }
  return acc;
}

ValueId dot_const_fused(Program& p, const std::vector<float>& w, const std::vector<ValueId>& x) {
  if (w.size() != x.size()) fail("dot_const_fused: {} weights for {} inputs", w.size(), x.size());
  std::vector<ValueId> prods;
  std::vector<Neuron> neurons;
  for (size_t j = 0; j < x.size(); ++j) {
    prods.push_back(p.value("dot.p" + std::to_string(j)));
    neurons.push_back(copy_neuron(prods.back(), x[j], w[j]));  // fl(w_j * x_j): one rounding
  }
  if (!neurons.empty()) p.mlp("dot.products", std::move(neurons));
  return sum_chain_fused(p, prods);
}

ValueId dot_var_fused(Program& p, const std::vector<ValueId>& w, const std::vector<ValueId>& x) {
  if (w.size() != x.size()) fail("dot_var_fused: {} weights for {} inputs", w.size(), x.size());
  std::vector<ValueId> prods;
  std::vector<Neuron> neurons;
  for (size_t j = 0; j < x.size(); ++j) {
    prods.push_back(p.value("dot.p" + std::to_string(j)));
    mul_neurons(neurons, prods.back(), w[j], x[j]);
  }
  if (!neurons.empty()) p.mlp("dot.products", std::move(neurons));
  return sum_chain_fused(p, prods);
}

}  // namespace qpu::npu
