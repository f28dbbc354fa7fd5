#include "compiler/split_mlp.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "common/error.h"

namespace qpu::compiler {

namespace {

struct DisjointSets {
  std::vector<size_t> parent;
  explicit DisjointSets(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), size_t{0}); }
  size_t find(size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  }
  void join(size_t a, size_t b) { parent[find(a)] = find(b); }
};

// The op's neurons grouped into ops of at most max_neurons neurons (see the header).
std::vector<std::vector<Neuron>> split_op(const Op& op, int64_t max_neurons) {
  const size_t n = op.neurons.size();
  if (op.one_live_neuron) {  // a select: runs of consecutive neurons
    std::vector<std::vector<Neuron>> runs;
    for (size_t i = 0; i < n; i += static_cast<size_t>(max_neurons))
      runs.emplace_back(op.neurons.begin() + static_cast<std::ptrdiff_t>(i),
                        op.neurons.begin() + static_cast<std::ptrdiff_t>(std::min(n, i + static_cast<size_t>(max_neurons))));
    return runs;
  }
  DisjointSets sets(n);
  std::unordered_map<ValueId, size_t> writer;  // a neuron that writes the value
  for (size_t i = 0; i < n; ++i)
    for (const Term& t : op.neurons[i].down) {
      const auto [it, added] = writer.emplace(t.value, i);
      if (!added) sets.join(i, it->second);
    }
  for (size_t i = 0; i < n; ++i)
    for (const Lin* lin : {&op.neurons[i].gate, &op.neurons[i].up})
      for (const Term& t : lin->terms)
        if (const auto it = writer.find(t.value); it != writer.end()) sets.join(i, it->second);

  std::unordered_map<size_t, size_t> part_of;  // set root -> part index, in neuron order
  std::vector<std::vector<size_t>> parts;
  for (size_t i = 0; i < n; ++i) {
    const auto [it, added] = part_of.emplace(sets.find(i), parts.size());
    if (added) parts.emplace_back();
    parts[it->second].push_back(i);
  }
  std::vector<std::vector<Neuron>> ops;
  for (const auto& part : parts) {
    if (static_cast<int64_t>(part.size()) > max_neurons)
      fail("split: op '{}' has {} neurons that write one value or read what the op writes: more than the {} of "
           "an MLP sublayer",
           op.label, part.size(), max_neurons);
    size_t target = ops.size();
    for (size_t k = 0; k < ops.size(); ++k)
      if (static_cast<int64_t>(ops[k].size() + part.size()) <= max_neurons) {
        target = k;
        break;
      }
    if (target == ops.size()) ops.emplace_back();
    for (size_t i : part) ops[target].push_back(op.neurons[i]);
  }
  return ops;
}

}  // namespace

Program split_wide_mlps(const Program& program, int64_t max_neurons) {
  if (max_neurons < 1) fail("split: {} neurons per MLP sublayer", max_neurons);
  Program out;
  for (ValueId v = 0; v < program.num_values(); ++v) out.value(program.name(v));
  const auto& ops = program.ops();
  std::vector<size_t> first(ops.size() + 1, 0);  // op i -> its first op in `out`
  for (size_t i = 0; i < ops.size(); ++i) {
    first[i] = out.ops().size();
    const Op& op = ops[i];
    if (op.kind == OpKind::Mlp && static_cast<int64_t>(op.neurons.size()) > max_neurons) {
      for (auto& neurons : split_op(op, max_neurons)) {
        out.mlp(op.label, std::move(neurons));
        out.mutable_ops().back().one_live_neuron = op.one_live_neuron;
        out.mutable_ops().back().exclusive_writes = op.exclusive_writes;  // each part writes a subset
      }
    } else {
      out.mutable_ops().push_back(op);
    }
  }
  first[ops.size()] = out.ops().size();
  for (const OpOrder& o : program.orders())
    out.order(OpRange{first[o.before.begin], first[o.before.end]}, OpRange{first[o.after.begin], first[o.after.end]});
  return out;
}

}  // namespace qpu::compiler
