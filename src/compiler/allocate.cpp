#include "compiler/allocate.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>

#include "common/error.h"

namespace qpu::compiler {

namespace {

// Rails and the per-layer rows/heads, once every value has a dim in [0, num_dims).
Allocation finish(const Program& program, const Schedule& schedule, std::vector<int64_t> dims, int64_t num_dims) {
  Allocation a;
  // Smallest q with 64 q >= num_dims + q: q rails plus the value dims fit in 64 q dims.
  int64_t q = 1;
  while (64 * q < num_dims + q) ++q;
  a.hidden_size = 64 * q;
  a.dim_of_value = std::move(dims);
  for (int64_t r = 0; r < q; ++r) a.rail_dims.push_back(a.hidden_size - q + r);

  a.num_layers = schedule.num_layers();
  a.layer_has_attention.assign(static_cast<size_t>(a.num_layers), false);
  a.neurons_per_layer.assign(static_cast<size_t>(a.num_layers), 0);
  std::vector<int64_t> heads_per_layer(static_cast<size_t>(a.num_layers), 0);
  std::vector<int64_t> gdn_heads_per_layer(static_cast<size_t>(a.num_layers), 0);
  const auto& ops = program.ops();
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto layer = static_cast<size_t>(schedule.sublayer[i] / 2);
    if (ops[i].kind == OpKind::Mlp) {
      a.first_neuron.push_back(a.neurons_per_layer[layer]);
      a.neurons_per_layer[layer] += static_cast<int64_t>(ops[i].neurons.size());
      a.intermediate_size = std::max(a.intermediate_size, a.neurons_per_layer[layer]);
    } else if (ops[i].kind == OpKind::GdnMemory) {
      a.first_neuron.push_back(gdn_heads_per_layer[layer]);
      a.num_gdn_heads = std::max(a.num_gdn_heads, ++gdn_heads_per_layer[layer]);
    } else {
      a.layer_has_attention[layer] = true;
      a.first_neuron.push_back(heads_per_layer[layer]);
      a.num_kv_heads = std::max(a.num_kv_heads, ++heads_per_layer[layer]);
    }
  }
  return a;
}

}  // namespace

Allocation allocate(const Program& program, const Schedule& schedule) {
  const int64_t n = program.num_values();
  std::vector<int64_t> dims;
  for (int64_t v = 0; v < n; ++v) dims.push_back(v);
  return finish(program, schedule, std::move(dims), n);
}

Allocation allocate(const Program& program, const Schedule& schedule, const std::vector<Lifetime>& lifetimes) {
  const int64_t n = program.num_values();
  if (static_cast<int64_t>(lifetimes.size()) != n)
    fail("allocate: {} lifetimes for {} values", lifetimes.size(), n);
  if (schedule.sublayer.size() != program.ops().size())
    fail("allocate: schedule has {} ops, program {}", schedule.sublayer.size(), program.ops().size());
  constexpr int64_t kNone = -1;
  constexpr int64_t kForever = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> first(static_cast<size_t>(n), kNone), last(static_cast<size_t>(n), kNone);
  const auto& ops = program.ops();
  for (size_t i = 0; i < ops.size(); ++i) {
    const int64_t s = schedule.sublayer[i];
    auto touch = [&](ValueId v) {
      auto& f = first[static_cast<size_t>(v)];
      f = f == kNone ? s : std::min(f, s);
      last[static_cast<size_t>(v)] = std::max(last[static_cast<size_t>(v)], s);
    };
    for (ValueId v : ops[i].reads()) touch(v);
    for (ValueId v : ops[i].writes()) touch(v);
  }
  // Live interval [start, end] per value, in sublayers: -1 is the embedding, kForever
  // the output head; an unaccessed value starts at the end (num_sublayers).
  struct Interval {
    int64_t start, end;
    ValueId v;
  };
  std::vector<Interval> intervals;
  for (ValueId v = 0; v < n; ++v) {
    const auto i = static_cast<size_t>(v);
    const int64_t start = first[i] == kNone ? schedule.num_sublayers : first[i];
    switch (lifetimes[i]) {
      case Lifetime::Program: intervals.push_back({-1, kForever, v}); break;
      case Lifetime::FromFirstAccess: intervals.push_back({start, kForever, v}); break;
      case Lifetime::ToLastAccess: intervals.push_back({start, first[i] == kNone ? start : last[i], v}); break;
      case Lifetime::EmbeddingToLastAccess: intervals.push_back({-1, first[i] == kNone ? kForever : last[i], v}); break;
    }
  }
  std::stable_sort(intervals.begin(), intervals.end(),
                   [](const Interval& x, const Interval& y) { return x.start < y.start; });
  // Linear scan: a dim whose value ended in sublayer e is +0 from sublayer e + 1 on.
  using EndDim = std::pair<int64_t, int64_t>;
  std::priority_queue<EndDim, std::vector<EndDim>, std::greater<>> active;  // (end, dim)
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> free_dims;  // lowest first
  std::vector<int64_t> dims(static_cast<size_t>(n), 0);
  int64_t num_dims = 0;
  for (const Interval& iv : intervals) {
    while (!active.empty() && active.top().first < iv.start) {
      free_dims.push(active.top().second);
      active.pop();
    }
    int64_t d = num_dims;
    if (!free_dims.empty()) {
      d = free_dims.top();
      free_dims.pop();
    } else {
      ++num_dims;
    }
    dims[static_cast<size_t>(iv.v)] = d;
    active.push({iv.end, d});
  }
  return finish(program, schedule, std::move(dims), num_dims);
}

}  // namespace qpu::compiler
