#include "npu/unit_greedy_head.h"

#include <string>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/neurons.h"
#include "npu/primitives.h"

namespace qpu::npu {

using compiler::Neuron;
using compiler::Program;
using compiler::Term;
using compiler::ValueId;
using namespace detail;

namespace {

// Copy neuron of column j: h = silu(128) * x_j / 128 = x_j exactly, so the down term of
// row i is fl(wcls[i][j] * x_j), C's product. `dst[i]` receives it (zero weights are
// left out: C's product is then +-0, and adding it changes nothing, as in C).
Neuron column_neuron(ValueId xj, std::span<const float> wcls, int vocab, size_t dim, size_t j,
                     const std::vector<ValueId>& dst) {
  Neuron n{lin({{kOne, kOn}}), lin({{xj, 1.0f / kOn}}), {}};
  for (int i = 0; i < vocab; ++i) {
    const float w = wcls[static_cast<size_t>(i) * dim + j];
    if (w != 0.0f) n.down.push_back(Term{dst[static_cast<size_t>(i)], w});
  }
  return n;
}

}  // namespace

std::vector<ValueId> classifier_fused(Program& p, const std::vector<ValueId>& x, std::span<const float> wcls, int vocab) {
  const size_t n = x.size();
  if (vocab <= 0 || wcls.size() != static_cast<size_t>(vocab) * n)
    fail("classifier_fused: {} weights for a {} x {} classifier", wcls.size(), vocab, n);
  const auto rows = static_cast<size_t>(vocab);
  if (n == 0) return p.values("head.logit", vocab);

  // Which products live in their own values (the others come straight from their column
  // neuron inside the chain), in the chain's order; see the file comment of the header.
  std::vector<bool> held(n, false);
  held[0] = true;
  for (size_t j = 1; j < n;) {
    const size_t left = n - j;
    if (left >= 3) {
      held[j] = held[j + 2] = true;
      j += 3;
    } else if (left == 2) {
      held[j + 1] = true;
      j += 2;
    } else {
      j += 1;
    }
  }
  std::vector<std::vector<ValueId>> prod(n);  // [j][i]
  std::vector<Neuron> products;
  for (size_t j = 0; j < n; ++j) {
    if (!held[j]) continue;
    for (size_t i = 0; i < rows; ++i) prod[j].push_back(p.value("head.p" + std::to_string(i) + "." + std::to_string(j)));
    Neuron c = column_neuron(x[j], wcls, vocab, n, j, prod[j]);
    if (!c.down.empty()) products.push_back(std::move(c));
  }
  if (!products.empty()) p.mlp("head.products", std::move(products));

  std::vector<ValueId> acc = prod[0];
  for (size_t j = 1; j < n;) {
    const size_t left = n - j;
    std::vector<Neuron> step;
    if (left >= 3) {
      // fl(fl(fl(acc + p_j) + p_{j+1}) + p_{j+2}) into p_{j+2}'s value.
      for (size_t i = 0; i < rows; ++i)
        step.push_back(Neuron{lin({{kOne, kOn}}), lin({{acc[i], 1.0f / kOn}, {prod[j][i], 1.0f / kOn}}), {{prod[j + 2][i], 1.0f}}});
      step.push_back(column_neuron(x[j + 1], wcls, vocab, n, j + 1, prod[j + 2]));
      acc = prod[j + 2];
      j += 3;
    } else if (left == 2) {
      // fl(fl(acc + p_j) + p_{j+1}): down sum, then the residual add onto p_{j+1}.
      for (size_t i = 0; i < rows; ++i) step.push_back(copy_neuron(prod[j + 1][i], acc[i]));
      step.push_back(column_neuron(x[j], wcls, vocab, n, j, prod[j + 1]));
      acc = prod[j + 1];
      j += 2;
    } else {
      // fl(acc + p_j): the residual add onto acc.
      step.push_back(column_neuron(x[j], wcls, vocab, n, j, acc));
      j += 1;
    }
    if (step.back().down.empty()) step.pop_back();  // an all-zero column adds nothing
    if (!step.empty()) p.mlp("head.sum", std::move(step));
  }
  return acc;
}

GreedyHead greedy_head(Program& p, const std::vector<ValueId>& x, std::span<const float> wcls, int vocab, ValueId enable) {
  const size_t first = p.ops().size();
  GreedyHead h;
  h.logits = classifier_fused(p, x, wcls, vocab);
  const ArgMax best = argmax(p, h.logits);
  h.token = best.index;
  h.max = best.max;
  // One-hot of the index: [idx == c] = ramp(idx - c + 1) - 2 ramp(idx - c) + ramp(idx - c - 1)
  // with ramp(k) = silu(128 k) / 128 = max(k, 0) for integers (silu(<= -128) = -0); the
  // down sum is of small integers, exact in any order.
  std::vector<Neuron> hot;
  for (int c = 0; c < vocab; ++c) {
    h.onehot.push_back(p.value("head.onehot" + std::to_string(c)));
    const auto cf = static_cast<float>(c);
    for (const auto& [k, down] : {std::pair{1.0f, 1.0f}, std::pair{0.0f, -2.0f}, std::pair{-1.0f, 1.0f}})
      hot.push_back(Neuron{lin({{best.index, kOn}, {kOne, kOn * (k - cf)}}), lin({{kOne, 1.0f / kOn}}), {{h.onehot.back(), down}}});
  }
  p.mlp("head.onehot", std::move(hot));
  if (enable != kOne) compiler::enable_constants(p, first, enable);
  return h;
}

}  // namespace qpu::npu
