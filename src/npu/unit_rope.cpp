#include "npu/unit_rope.h"

#include <math.h>  // glibc's powf/cosf/sinf, as reference/transformer.cpp (run.c) calls them

#include <cmath>
#include <string>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/neurons.h"

namespace qpu::npu {

using compiler::Neuron;
using compiler::Program;
using compiler::Term;
using compiler::ValueId;
using compiler::kOne;
using detail::kOn;
using detail::lin;
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

  // 1. One-hot of pos: r_m for m = -1..seq feeds H_(m-1), H_m, H_(m+1).
  u.one_hot = p.values("rope.hot", seq);
  {
    std::vector<Neuron> neurons;
    for (int m = -1; m <= seq; ++m) {
      Neuron r{lin({{pos, kOn}}), lin({{kOne, 1.0f / kOn}}), {}};
      if (m != 0) r.gate.terms.push_back({kOne, -kOn * static_cast<float>(m)});
      for (auto [h, w] : {std::pair{m + 1, 1.0f}, std::pair{m, -2.0f}, std::pair{m - 1, 1.0f}})
        if (h >= 0 && h < seq) r.down.push_back({u.one_hot[static_cast<size_t>(h)], w});
      neurons.push_back(std::move(r));
    }
    p.mlp("rope.hot", std::move(neurons));
  }
  // 2. Select (fcr, fci) of this position for every head_dim pair.
  const std::vector<ValueId> cr = p.values("rope.fcr", pairs), ci = p.values("rope.fci", pairs);
  {
    std::vector<Neuron> neurons;
    for (int pp = 0; pp < seq; ++pp) {
      const ValueId h = u.one_hot[static_cast<size_t>(pp)];
      Neuron sel{lin({{h, kOn}}), lin({{h, 1.0f / kOn}}), {}};
      for (int t = 0; t < pairs; ++t) {
        const RopeConstants rc = rope_constants(pp, 2 * t, head_size);
        for (float v : {rc.fcr, rc.fci})
          if (!std::isfinite(v) || (v != 0.0f && std::fabs(v) < 0x1p-57f))
            fail("rope_unit: constant {} at position {} is outside P3's gate window", v, pp);
        if (rc.fcr != 0.0f) sel.down.push_back({cr[static_cast<size_t>(t)], rc.fcr});
        if (rc.fci != 0.0f) sel.down.push_back({ci[static_cast<size_t>(t)], rc.fci});
      }
      if (sel.down.empty()) sel.down.push_back({cr[0], 0.0f});
      neurons.push_back(std::move(sel));
    }
    p.mlp("rope.select", std::move(neurons));
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
