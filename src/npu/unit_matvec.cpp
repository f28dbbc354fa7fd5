#include "npu/unit_matvec.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <utility>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/neurons.h"
#include "npu/unit_enable.h"
#include "reference/run_c_ops.h"

namespace qpu::npu {

using compiler::Lin;
using compiler::Neuron;
using compiler::Program;
using compiler::Term;
using compiler::ValueId;
using compiler::kOne;
using detail::kOn;
using detail::lin;

NestedMatrix stack_rows(std::string name, const std::vector<NestedMatrix>& parts) {
  NestedMatrix s;
  s.name = std::move(name);
  if (parts.empty()) fail("stack_rows '{}': no matrices", s.name);
  s.cols = parts[0].cols;
  for (const NestedMatrix& m : parts) {
    if (m.cols != s.cols) fail("stack_rows '{}': '{}' has {} columns, '{}' has {}", s.name, m.name, m.cols, parts[0].name, s.cols);
    s.rows += m.rows;
    s.w.insert(s.w.end(), m.w.begin(), m.w.end());
  }
  return s;
}

NestedMatrix llama2_matrix(const reference::Llama2Checkpoint& checkpoint, const std::string& name, int layer) {
  const reference::Llama2Config& c = checkpoint.config();
  const reference::Llama2Weights w = checkpoint.weights();
  NestedMatrix m;
  m.name = name == "wcls" ? name : name + "[" + std::to_string(layer) + "]";
  std::span<const float> all;
  if (name == "wq" || name == "wo") {
    all = name == "wq" ? w.wq : w.wo;
    m.rows = c.dim, m.cols = c.dim;
  } else if (name == "wk" || name == "wv") {
    all = name == "wk" ? w.wk : w.wv;
    m.rows = c.kv_dim(), m.cols = c.dim;
  } else if (name == "w1" || name == "w3") {
    all = name == "w1" ? w.w1 : w.w3;
    m.rows = c.hidden_dim, m.cols = c.dim;
  } else if (name == "w2") {
    all = w.w2;
    m.rows = c.dim, m.cols = c.hidden_dim;
  } else if (name == "wcls") {
    all = w.wcls;
    m.rows = c.vocab_size, m.cols = c.dim;
    layer = 0;
  } else {
    fail("llama2_matrix: no matrix '{}' (wq, wk, wv, wo, w1, w2, w3, wcls)", name);
  }
  if (layer < 0 || layer >= c.n_layers) fail("llama2_matrix: layer {} of '{}' outside [0, {})", layer, name, c.n_layers);
  const size_t size = static_cast<size_t>(m.rows) * static_cast<size_t>(m.cols);
  const auto part = all.subspan(static_cast<size_t>(layer) * size, size);
  m.w.assign(part.begin(), part.end());
  return m;
}

NestedMatrix row_block(const NestedMatrix& m, int first, int count) {
  if (first < 0 || count < 1 || first + count > m.rows)
    fail("row_block: rows [{}, {}) outside '{}' ({} rows)", first, first + count, m.name, m.rows);
  NestedMatrix b;
  b.name = m.name + "[" + std::to_string(first) + ":" + std::to_string(first + count) + "]";
  b.rows = count;
  b.cols = m.cols;
  const auto begin = m.w.begin() + static_cast<std::ptrdiff_t>(first) * m.cols;
  b.w.assign(begin, begin + static_cast<std::ptrdiff_t>(count) * m.cols);
  return b;
}

std::vector<float> matvec_reference(const NestedMatrix& m, const float* x) {
  std::vector<float> out(static_cast<size_t>(m.rows));
  reference::matmul(out, {x, static_cast<size_t>(m.cols)}, m.w, m.cols, m.rows);
  return out;
}

namespace {

// silu(128) * v/128 == v: the neuron that reads one value (gate: the constant, which
// enable_constants turns into the unit's enable) and writes it with the given downs.
Neuron pass(ValueId v, std::vector<Term> down) { return Neuron{lin({{kOne, kOn}}), lin({{v, 1.0f / kOn}}), std::move(down)}; }

}  // namespace

MatvecUnit matvec_unit(Program& p, const std::vector<NestedMatrix>& matrices, const std::vector<ValueId>& x,
                       const std::vector<ValueId>& flags, const MatvecOptions& options) {
  if (matrices.empty()) fail("matvec_unit: no matrices");
  if (flags.size() != matrices.size()) fail("matvec_unit: {} flags for {} matrices", flags.size(), matrices.size());
  const int n = static_cast<int>(x.size());
  if (n < 1) fail("matvec_unit: empty x");
  if (options.max_op_neurons != 0 && options.max_op_neurons < 4)
    fail("matvec_unit: max_op_neurons {} (0 = no limit, else >= 4: a lane's additions are up to 4 neurons)",
         options.max_op_neurons);
  int lanes = 0;
  for (const NestedMatrix& m : matrices) {
    if (m.cols != n) fail("matvec_unit: matrix '{}' has {} columns, x has {}", m.name, m.cols, n);
    if (m.w.size() != static_cast<size_t>(m.rows) * static_cast<size_t>(m.cols) || m.rows < 1)
      fail("matvec_unit: matrix '{}' holds {} floats, expected {} x {}", m.name, m.w.size(), m.rows, m.cols);
    for (float w : m.w)
      if (!std::isfinite(w) || (w != 0.0f && std::fabs(w) < 0x1p-126f))
        fail("matvec_unit: matrix '{}' has weight {} (must be finite, 0 or normal)", m.name, w);
    lanes = std::max(lanes, m.rows);
  }
  MatvecUnit u;
  u.enable = flags_enable(p, flags, "mv.enable");
  u.first_op = p.ops().size();

  // Lane groups [lo, hi) of the add ops: equal sizes, each at most max_op_neurons / 4
  // lanes (a lane's additions are at most 4 neurons).
  const int max_group = options.max_op_neurons == 0 ? lanes : options.max_op_neurons / 4;
  const int num_groups = (lanes + max_group - 1) / max_group;
  std::vector<std::pair<int, int>> groups;
  for (int g = 0; g < num_groups; ++g) groups.push_back({lanes * g / num_groups, lanes * (g + 1) / num_groups});
  auto suffix = [&](size_t g) { return num_groups > 1 ? ".g" + std::to_string(g) : std::string(); };

  // The chain's steps as sum_chain_fused takes them: acc = p0, then groups of <= 3.
  std::vector<std::vector<int>> steps;
  for (int j = 1; j < n;) {
    const int k = std::min(3, n - j);
    std::vector<int> g;
    for (int t = 0; t < k; ++t) g.push_back(j + t);
    steps.push_back(g);
    j += k;
  }
  std::vector<ValueId> p0 = p.values("mv.p0", lanes);
  // slot[set][r][lane]: the products of step s live in set s % 3.
  std::array<std::array<std::vector<ValueId>, 3>, 3> slot;
  for (int s = 0; s < 3; ++s)
    for (int r = 0; r < 3; ++r) slot[static_cast<size_t>(s)][static_cast<size_t>(r)] =
        p.values("mv.s" + std::to_string(s) + std::to_string(r), lanes);

  // Column neurons of the columns in `cols`, writing column cols[r] into dst[r].
  auto columns = [&](const std::vector<int>& cols, const std::vector<const std::vector<ValueId>*>& dst, const std::string& label) {
    std::vector<Neuron> neurons;
    for (size_t m = 0; m < matrices.size(); ++m) {
      const NestedMatrix& M = matrices[m];
      for (size_t r = 0; r < cols.size(); ++r) {
        const int j = cols[r];
        Neuron nr{lin({{flags[m], kOn}}), lin({{x[static_cast<size_t>(j)], 1.0f / kOn}}), {}};
        for (int i = 0; i < M.rows; ++i) {
          const float w = M.w[static_cast<size_t>(i) * static_cast<size_t>(n) + static_cast<size_t>(j)];
          if (w != 0.0f) nr.down.push_back({(*dst[r])[static_cast<size_t>(i)], w});
        }
        if (!nr.down.empty()) neurons.push_back(std::move(nr));
      }
    }
    // A program op needs a neuron; an all-zero block still gets one (it writes +-0).
    if (neurons.empty())
      neurons.push_back(Neuron{lin({{flags[0], kOn}}), lin({{x[0], 1.0f / kOn}}), {{(*dst[0])[0], 0.0f}}});
    p.mlp(label, std::move(neurons));
  };
  auto step_columns = [&](size_t s) {
    const auto& set = slot[s % 3];
    std::vector<const std::vector<ValueId>*> dst;
    for (size_t r = 0; r < steps[s].size(); ++r) dst.push_back(&set[r]);
    columns(steps[s], dst, "mv.cols" + std::to_string(s));
  };

  columns({0}, {&p0}, "mv.cols.p0");
  for (size_t s = 0; s < std::min<size_t>(2, steps.size()); ++s) step_columns(s);
  std::vector<ValueId> acc = p0;
  for (size_t s = 0; s < steps.size(); ++s) {
    const auto& set = slot[s % 3];
    const size_t k = steps[s].size();
    for (size_t g = 0; g < groups.size(); ++g) {
      std::vector<Neuron> neurons;
      for (auto i = static_cast<size_t>(groups[g].first); i < static_cast<size_t>(groups[g].second); ++i) {
        const ValueId a = acc[i], q1 = set[0][i];
        const bool clear_acc = s > 0;  // p0 is never written again
        if (k == 3) {
          const ValueId q2 = set[1][i], q3 = set[2][i];
          // fl(acc + q1) (two live up terms) and q2 (clearing its value) into q3's value:
          // the down sum is the second rounding, the residual add onto q3 the third.
          neurons.push_back(Neuron{lin({{kOne, kOn}}), lin({{a, 1.0f / kOn}, {q1, 1.0f / kOn}}), {{q3, 1.0f}}});
          neurons.push_back(pass(q2, {{q3, 1.0f}, {q2, -1.0f}}));
          neurons.push_back(pass(q1, {{q1, -1.0f}}));
          if (clear_acc) neurons.push_back(pass(a, {{a, -1.0f}}));
        } else if (k == 2) {
          const ValueId q2 = set[1][i];
          std::vector<Term> da{{q2, 1.0f}};
          if (clear_acc) da.push_back({a, -1.0f});
          neurons.push_back(pass(a, da));
          neurons.push_back(pass(q1, {{q2, 1.0f}, {q1, -1.0f}}));
        } else {
          std::vector<Term> da{{q1, 1.0f}};
          if (clear_acc) da.push_back({a, -1.0f});
          neurons.push_back(pass(a, da));
        }
        acc[i] = set[k - 1][i];
      }
      p.mlp("mv.add" + std::to_string(s) + suffix(g), std::move(neurons));
    }
    // Set (s + 2) % 3 was read for the last time by steps s - 1 and s: write it again.
    if (s + 2 < steps.size()) step_columns(s + 2);
  }
  compiler::enable_constants(p, u.first_op, u.enable);
  u.y = acc;
  return u;
}

}  // namespace qpu::npu
