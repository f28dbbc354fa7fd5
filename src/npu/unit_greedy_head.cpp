#include "npu/unit_greedy_head.h"

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

void add_dead_clear_enables(const GreedyHead& h, compiler::DeadClearOptions& options) {
  for (ValueId v = h.first_value; v < h.end_value; ++v) options.enable_of[v] = h.unit_enable;
}

}  // namespace qpu::npu
