#include "npu/unit_greedy_head.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/neurons.h"
#include "npu/primitives.h"
#include "npu/unit_matvec.h"

namespace qpu::npu {

using compiler::Neuron;
using compiler::Program;
using compiler::ValueId;
using namespace detail;

GreedyHead greedy_head(Program& p, const std::vector<ValueId>& x, std::span<const float> wcls, int vocab, ValueId enable) {
  const size_t dim = x.size();
  if (vocab <= 0 || dim == 0 || wcls.size() != static_cast<size_t>(vocab) * dim)
    fail("greedy_head: {} weights for a {} x {} classifier", wcls.size(), vocab, dim);
  GreedyHead h;
  h.first_value = static_cast<ValueId>(p.num_values());
  // The classifier is the matvec unit with one matrix whose flag is the head's enable:
  // its column neurons output x_j when enable = 1 and +-0 when 0, and it turns its own
  // constants into that enable (unit_matvec.h). Its lanes are exactly the vocab rows.
  const NestedMatrix m{"wcls", vocab, static_cast<int>(dim), std::vector<float>(wcls.begin(), wcls.end())};
  const MatvecUnit classifier = matvec_unit(p, {m}, x, {enable});
  h.logits = classifier.y;
  h.unit_enable = classifier.enable;
  const size_t first = p.ops().size();
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
  h.end_value = static_cast<ValueId>(p.num_values());
  return h;
}

namespace {

// [index == c] for c < vocab, each = ramp(idx - c + 1) - 2 ramp(idx - c) + ramp(idx - c - 1)
// with ramp(k) = silu(128 k) / 128 = max(k, 0) for integers (silu(<= -128) = -0); the
// down sum is of small integers, exact in any order. Ops of at most max_neurons neurons.
std::vector<ValueId> onehot_of(Program& p, ValueId index, int vocab, size_t max_neurons) {
  std::vector<ValueId> onehot;
  std::vector<Neuron> hot;
  for (int c = 0; c < vocab; ++c) {
    if (hot.size() + 3 > max_neurons) p.mlp("head.onehot", std::exchange(hot, {}));
    onehot.push_back(p.value("head.onehot" + std::to_string(c)));
    const auto cf = static_cast<float>(c);
    for (const auto& [k, down] : {std::pair{1.0f, 1.0f}, std::pair{0.0f, -2.0f}, std::pair{-1.0f, 1.0f}})
      hot.push_back(Neuron{lin({{index, kOn}, {kOne, kOn * (k - cf)}}), lin({{kOne, 1.0f / kOn}}), {{onehot.back(), down}}});
  }
  p.mlp("head.onehot", std::move(hot));
  return onehot;
}

}  // namespace

GreedyHead greedy_head_blocks(Program& p, const std::vector<ValueId>& x, std::span<const float> wcls, int vocab,
                              ValueId enable, const GreedyBlockOptions& o) {
  const size_t dim = x.size();
  if (vocab <= 0 || dim == 0 || wcls.size() != static_cast<size_t>(vocab) * dim)
    fail("greedy_head_blocks: {} weights for a {} x {} classifier", wcls.size(), vocab, dim);
  if (o.block_rows < 1) fail("greedy_head_blocks: {} rows per block", o.block_rows);
  if (o.max_op_neurons < 3) fail("greedy_head_blocks: one-hot ops of {} neurons hold no token", o.max_op_neurons);
  GreedyHead h;
  h.first_value = static_cast<ValueId>(p.num_values());
  const NestedMatrix all{"wcls", vocab, static_cast<int>(dim), std::vector<float>(wcls.begin(), wcls.end())};
  ValueId best_max = 0, best_index = 0;
  compiler::OpRange previous;
  for (int first = 0; first < vocab; first += o.block_rows) {
    const int rows = std::min(o.block_rows, vocab - first);
    const size_t begin = p.ops().size();
    GreedyHead::BlockValues bv;
    bv.first = static_cast<ValueId>(p.num_values());
    const MatvecUnit classifier = matvec_unit(p, {row_block(all, first, rows)}, x, {enable}, o.matvec);
    h.logits.insert(h.logits.end(), classifier.y.begin(), classifier.y.end());
    bv.enable = classifier.enable;
    if (first == 0) h.unit_enable = classifier.enable;
    const size_t argmax_first = p.ops().size();
    const ArgMax block = argmax(p, classifier.y);
    if (first == 0) {
      best_max = block.max;
      best_index = block.index;
    } else {
      // run.c's loop over the rows after the running ones: strictly greater wins. The
      // block's index is local: its global form idx + first is the select's up form
      // (small integers over 128: exact).
      const ValueId bit = greater(p, block.max, best_max);
      const ValueId m = p.value("head.max"), idx = p.value("head.index");
      const float f = static_cast<float>(first);
      p.mlp("head.combine",
            {Neuron{lin({{bit, kOn}}), lin({{block.max, 1.0f / kOn}}), {{m, 1.0f}}},
             Neuron{lin({{bit, -kOn}, {kOne, kOn}}), lin({{best_max, 1.0f / kOn}}), {{m, 1.0f}}},
             Neuron{lin({{bit, kOn}}), lin({{block.index, 1.0f / kOn}, {kOne, f / kOn}}), {{idx, 1.0f}}},
             Neuron{lin({{bit, -kOn}, {kOne, kOn}}), lin({{best_index, 1.0f / kOn}}), {{idx, 1.0f}}}});
      best_max = m;
      best_index = idx;
    }
    if (enable != kOne) compiler::enable_constants(p, argmax_first, enable);
    bv.end = static_cast<ValueId>(p.num_values());
    h.blocks.push_back(bv);
    const compiler::OpRange range{begin, p.ops().size()};
    if (first > 0) p.order(previous, range);
    previous = range;
  }
  h.token = best_index;
  h.max = best_max;
  const size_t first_hot = p.ops().size();
  h.onehot = onehot_of(p, best_index, vocab, static_cast<size_t>(o.max_op_neurons));
  if (enable != kOne) compiler::enable_constants(p, first_hot, enable);
  h.end_value = static_cast<ValueId>(p.num_values());
  return h;
}

void add_dead_clear_enables(const GreedyHead& h, compiler::DeadClearOptions& options) {
  for (ValueId v = h.first_value; v < h.end_value; ++v) options.enable_of[v] = h.unit_enable;
  for (const auto& b : h.blocks)
    for (ValueId v = b.first; v < b.end; ++v) options.enable_of[v] = b.enable;
}

}  // namespace qpu::npu
