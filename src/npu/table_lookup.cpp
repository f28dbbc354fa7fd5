#include "npu/table_lookup.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/neurons.h"

namespace qpu::npu {

using compiler::Neuron;
using compiler::Program;
using compiler::ValueId;
using compiler::kOne;
using detail::kOn;
using detail::lin;

void one_hot_into(Program& p, ValueId index, const std::vector<ValueId>& hot, const std::string& label) {
  const int rows = static_cast<int>(hot.size());
  if (rows < 1 || rows > (1 << 16)) fail("{}: a one-hot of {} rows (must be in [1, 65536])", label, rows);
  // Per chunk of rows [a, b) the ramps r_m for m = a-1..b, each feeding H_(m-1), H_m,
  // H_(m+1) inside the chunk: a chunk's rows get all three terms from its own neurons.
  std::vector<Neuron> neurons;
  for (int a = 0; a < rows; a += kOneHotChunk) {
    const int b = std::min(rows, a + kOneHotChunk);
    for (int m = a - 1; m <= b; ++m) {
      Neuron r{lin({{index, kOn}}), lin({{kOne, 1.0f / kOn}}), {}};
      if (m != 0) r.gate.terms.push_back({kOne, -kOn * static_cast<float>(m)});
      for (auto [h, w] : {std::pair{m + 1, 1.0f}, std::pair{m, -2.0f}, std::pair{m - 1, 1.0f}})
        if (h >= a && h < b) r.down.push_back({hot[static_cast<size_t>(h)], w});
      neurons.push_back(std::move(r));
    }
  }
  p.mlp(label, std::move(neurons));
}

std::vector<ValueId> one_hot(Program& p, ValueId index, int rows, const std::string& label) {
  if (rows < 1 || rows > (1 << 16)) fail("{}: a one-hot of {} rows (must be in [1, 65536])", label, rows);
  std::vector<ValueId> hot = p.values(label + ".hot", rows);
  one_hot_into(p, index, hot, label + ".hot");
  return hot;
}

TableLookup table_lookup(Program& p, ValueId index, std::span<const float> table, int rows, int cols, const std::string& label) {
  if (rows < 1 || rows > (1 << 16) || cols < 1)
    fail("{}: a table of {} x {} (rows must be in [1, 65536], cols >= 1)", label, rows, cols);
  if (table.size() != static_cast<size_t>(rows) * static_cast<size_t>(cols))
    fail("{}: {} table entries for {} x {}", label, table.size(), rows, cols);
  for (size_t i = 0; i < table.size(); ++i)
    if (!std::isfinite(table[i])) fail("{}: entry {} (row {}) is not finite", label, table[i], i / static_cast<size_t>(cols));
  TableLookup t;
  t.one_hot = one_hot(p, index, rows, label);
  // 2. Select row `index`: one neuron per row, its down column the row's constants.
  t.out = p.values(label + ".out", cols);
  std::vector<Neuron> neurons;
  for (int r = 0; r < rows; ++r) {
    const ValueId h = t.one_hot[static_cast<size_t>(r)];
    Neuron sel{lin({{h, kOn}}), lin({{h, 1.0f / kOn}}), {}};
    for (int c = 0; c < cols; ++c) {
      const float v = table[static_cast<size_t>(r) * static_cast<size_t>(cols) + static_cast<size_t>(c)];
      if (v != 0.0f) sel.down.push_back({t.out[static_cast<size_t>(c)], v});
    }
    if (sel.down.empty()) sel.down.push_back({t.out[0], 0.0f});  // an all-zero row still needs its neuron's slot
    neurons.push_back(std::move(sel));
  }
  p.mlp_select(label + ".select", std::move(neurons));
  return t;
}

TableLookup embedding_lookup(Program& p, const reference::Llama2Checkpoint& checkpoint, ValueId enable, ValueId token) {
  const reference::Llama2Config& c = checkpoint.config();
  const size_t first = p.ops().size();
  TableLookup t = table_lookup(p, token, checkpoint.weights().token_embedding, c.vocab_size, c.dim, "embedding");
  compiler::enable_constants(p, first, enable);
  return t;
}

}  // namespace qpu::npu
