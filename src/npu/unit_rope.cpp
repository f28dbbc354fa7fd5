#include "npu/unit_rope.h"

#include <math.h>  // glibc's powf/cosf/sinf, as reference/transformer.cpp (run.c) calls them

#include <cmath>
#include <string>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/neurons.h"
#include "npu/table_lookup.h"

namespace qpu::npu {

using compiler::Neuron;
using compiler::Program;
using compiler::ValueId;
using detail::mul_neurons;

RopeConstants rope_constants(int pos, int head_dim, int head_size) {
  const float freq = 1.0f / powf(10000.0f, static_cast<float>(head_dim) / static_cast<float>(head_size));
  const float val = static_cast<float>(pos) * freq;
  return {cosf(val), sinf(val)};
}

void rope_reference(const reference::Llama2Config& c, int pos, float* q, float* k) {
  const int head_size = c.head_size(), kv_dim = c.kv_dim();
  for (int i = 0; i < c.dim; i += 2) {
    const RopeConstants rc = rope_constants(pos, i % head_size, head_size);
    const int rotn = i < kv_dim ? 2 : 1;
    for (int r = 0; r < rotn; r++) {
      float* vec = r == 0 ? q : k;
      const float v0 = vec[i];
      const float v1 = vec[i + 1];
      vec[i] = v0 * rc.fcr - v1 * rc.fci;
      vec[i + 1] = v0 * rc.fci + v1 * rc.fcr;
    }
  }
}

RopeUnit rope_unit(Program& p, const reference::Llama2Config& c, ValueId enable, ValueId pos, const std::vector<ValueId>& q,
                   const std::vector<ValueId>& k) {
  const int dim = c.dim, kv_dim = c.kv_dim(), head_size = c.head_size(), seq = c.seq_len;
  if (static_cast<int>(q.size()) != dim || static_cast<int>(k.size()) != kv_dim)
    fail("rope_unit: q has {} values and k {}, the model needs {} and {}", q.size(), k.size(), dim, kv_dim);
  if (head_size % 2 != 0 || dim % 2 != 0 || kv_dim % 2 != 0 || seq < 1 || seq > (1 << 16))
    fail("rope_unit: unsupported dims (dim {}, kv_dim {}, head_size {}, seq_len {})", dim, kv_dim, head_size, seq);
  RopeUnit u;
  u.first_op = p.ops().size();
  const int pairs = head_size / 2;

  // 1.-2. The (fcr, fci) of this position for every head_dim pair: a table lookup by
  // the integer pos (table_lookup.h), columns fcr(0), fci(0), fcr(1), fci(1), ...
  std::vector<float> table(static_cast<size_t>(seq) * static_cast<size_t>(2 * pairs));
  for (int pp = 0; pp < seq; ++pp)
    for (int t = 0; t < pairs; ++t) {
      const RopeConstants rc = rope_constants(pp, 2 * t, head_size);
      for (float v : {rc.fcr, rc.fci})
        if (!std::isfinite(v) || (v != 0.0f && std::fabs(v) < 0x1p-57f))
          fail("rope_unit: constant {} at position {} is outside P3's gate window", v, pp);
      table[static_cast<size_t>(pp * 2 * pairs + 2 * t)] = rc.fcr;
      table[static_cast<size_t>(pp * 2 * pairs + 2 * t + 1)] = rc.fci;
    }
  const TableLookup lookup = table_lookup(p, pos, table, seq, 2 * pairs, "rope");
  u.one_hot = lookup.one_hot;
  std::vector<ValueId> cr, ci;
  for (int t = 0; t < pairs; ++t) {
    cr.push_back(lookup.out[static_cast<size_t>(2 * t)]);
    ci.push_back(lookup.out[static_cast<size_t>(2 * t + 1)]);
  }
  // 3. Rotate q (every pair) and k (pairs inside kv_dim).
  auto rotate = [&](const std::vector<ValueId>& v, const std::string& name, std::vector<ValueId>& out, std::vector<Neuron>& neurons) {
    out = p.values(name, static_cast<int>(v.size()));
    for (size_t i = 0; i < v.size(); i += 2) {
      const auto t = static_cast<size_t>((static_cast<int>(i) % head_size) / 2);
      mul_neurons(neurons, out[i], cr[t], v[i], 1.0f);        // + fl(v0 * fcr)
      mul_neurons(neurons, out[i], ci[t], v[i + 1], -1.0f);   // - fl(v1 * fci)
      mul_neurons(neurons, out[i + 1], ci[t], v[i], 1.0f);    // + fl(v0 * fci)
      mul_neurons(neurons, out[i + 1], cr[t], v[i + 1], 1.0f);  // + fl(v1 * fcr)
    }
  };
  std::vector<Neuron> neurons;
  rotate(q, "rope.q", u.q, neurons);
  rotate(k, "rope.k", u.k, neurons);
  p.mlp("rope.rotate", std::move(neurons));
  compiler::enable_constants(p, u.first_op, enable);
  return u;
}

}  // namespace qpu::npu
