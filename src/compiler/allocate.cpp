#include "compiler/allocate.h"

#include <algorithm>

namespace qpu::compiler {

Allocation allocate(const Program& program, const Schedule& schedule) {
  Allocation a;
  const int64_t n = program.num_values();
  // Smallest q with 64 q >= n + q: q rails plus the values fit in 64 q dims.
  int64_t q = 1;
  while (64 * q < n + q) ++q;
  a.hidden_size = 64 * q;
  for (int64_t v = 0; v < n; ++v) a.dim_of_value.push_back(v);
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

}  // namespace qpu::compiler
