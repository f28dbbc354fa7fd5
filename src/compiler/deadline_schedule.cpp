// List scheduling by deadline (schedule.h, schedule_by_deadline): the dependence graph
// of the placement rules, each op's latest sublayer in a resource-free schedule, then
// sublayer by sublayer the ready ops placed most urgent first.
#include <algorithm>
#include <queue>
#include <utility>

#include "common/error.h"
#include "compiler/schedule.h"
#include "compiler/schedule_rules.h"

namespace qpu::compiler {

namespace {

// The placement rules of ir.h as a graph. Nodes 0..ops-1 are the ops; one node per
// explicit order follows them (it waits for the order's `before` ops and holds back its
// `after` ops). An edge (to, gap): `to` goes at least `gap` sublayers below its source
// (1: RAW, WAW and order edges; 0: WAR, a write may share the sublayer of an earlier read,
// and WAW between exclusive writes, waw_gap).
struct Edge {
  size_t to;
  int64_t gap;
};

struct Graph {
  size_t ops = 0;
  std::vector<std::vector<Edge>> succ;
  std::vector<int64_t> preds;  // edges into each node

  void add(size_t from, size_t to, int64_t gap) {
    succ[from].push_back({to, gap});
    ++preds[to];
  }
  bool is_op(size_t node) const { return node < ops; }
};

Graph dependence_graph(const Program& program) {
  const auto& ops = program.ops();
  const auto& orders = program.orders();
  Graph g;
  g.ops = ops.size();
  g.succ.resize(ops.size() + orders.size());
  g.preds.assign(g.succ.size(), 0);
  std::vector<int64_t> last_write(static_cast<size_t>(program.num_values()), -1);
  std::vector<std::vector<size_t>> readers(static_cast<size_t>(program.num_values()));  // since the last write
  const OrderIndex index(program);
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::vector<ValueId> reads = ops[i].reads(), writes = ops[i].writes();
    for (ValueId v : reads)
      if (last_write[static_cast<size_t>(v)] >= 0) g.add(static_cast<size_t>(last_write[static_cast<size_t>(v)]), i, 1);
    for (ValueId v : writes) {
      if (const int64_t w = last_write[static_cast<size_t>(v)]; w >= 0)
        g.add(static_cast<size_t>(w), i, waw_gap(ops[static_cast<size_t>(w)], ops[i]));
      for (size_t r : readers[static_cast<size_t>(v)])
        if (r != i) g.add(r, i, 0);
    }
    for (size_t k : index.waits_for[i]) g.add(ops.size() + k, i, 1);
    for (size_t k : index.holds_back[i]) g.add(i, ops.size() + k, 0);
    for (ValueId v : reads) readers[static_cast<size_t>(v)].push_back(i);
    for (ValueId v : writes) {
      last_write[static_cast<size_t>(v)] = static_cast<int64_t>(i);
      readers[static_cast<size_t>(v)].clear();
    }
  }
  return g;
}

// Nodes in an order where every edge goes forward (Kahn).
std::vector<size_t> topological_order(const Graph& g) {
  std::vector<int64_t> left = g.preds;
  std::vector<size_t> order;
  order.reserve(g.succ.size());
  for (size_t n = 0; n < g.succ.size(); ++n)
    if (left[n] == 0) order.push_back(n);
  for (size_t k = 0; k < order.size(); ++k)
    for (const Edge& e : g.succ[order[k]])
      if (--left[e.to] == 0) order.push_back(e.to);
  if (order.size() != g.succ.size()) fail("schedule_by_deadline: the program's orders form a cycle");
  return order;
}

// The first sublayer at or after s that holds op's kind (order nodes: s itself).
int64_t kind_at_or_after(const Op* op, int64_t s) {
  return op == nullptr || fits_kind(*op, s) ? s : s + 1;
}
int64_t kind_at_or_before(const Op* op, int64_t s) {
  return op == nullptr || fits_kind(*op, s) ? s : s - 1;
}

// Each node's latest sublayer in the resource-free schedule of the critical path's
// length (its deadline: the smaller, the more urgent).
std::vector<int64_t> deadlines(const Program& program, const Graph& g, const std::vector<size_t>& topo) {
  const auto& ops = program.ops();
  auto op_of = [&](size_t n) { return g.is_op(n) ? &ops[n] : nullptr; };
  std::vector<int64_t> earliest(g.succ.size(), 0);
  int64_t length = 0;
  for (size_t n : topo) {
    earliest[n] = kind_at_or_after(op_of(n), earliest[n]);
    length = std::max(length, earliest[n] + 1);
    for (const Edge& e : g.succ[n]) earliest[e.to] = std::max(earliest[e.to], earliest[n] + e.gap);
  }
  std::vector<int64_t> latest(g.succ.size(), length);
  for (size_t k = topo.size(); k-- > 0;) {
    const size_t n = topo[k];
    int64_t s = length;
    for (const Edge& e : g.succ[n]) s = std::min(s, latest[e.to] - e.gap);
    latest[n] = kind_at_or_before(op_of(n), std::min(s, length - 1));
  }
  return latest;
}

// Ops that do not fit a sublayer tried before the rest wait for the next one: bounds
// the work per sublayer when many large ops are ready.
constexpr int kMaxMisfits = 64;

}  // namespace

Schedule schedule_by_deadline(const Program& program, const ScheduleLimits& limits) {
  const auto& ops = program.ops();
  for (const Op& op : ops)
    if (op_size(op) > op_limit(op, limits))
      fail("schedule: op '{}' needs {} units but a sublayer has {}", op.label, op_size(op), op_limit(op, limits));
  const Graph g = dependence_graph(program);
  const std::vector<int64_t> deadline = deadlines(program, g, topological_order(g));

  using Key = std::pair<int64_t, size_t>;  // (deadline or start, node)
  std::priority_queue<Key, std::vector<Key>, std::greater<>> waiting;  // by first allowed sublayer
  std::priority_queue<Key, std::vector<Key>, std::greater<>> ready[2];  // [mlp]: by deadline
  std::vector<int64_t> left = g.preds, start(g.succ.size(), 0);
  Schedule out;
  out.sublayer.assign(ops.size(), -1);
  Occupancy room;
  size_t placed = 0;

  // A node whose predecessors are all placed: an order node is placed at once (at the
  // latest sublayer of its `before` ops), an op waits for its first allowed sublayer.
  std::vector<size_t> released;
  auto place = [&](size_t n, int64_t s) {
    released.push_back(n);
    while (!released.empty()) {
      const size_t m = released.back();
      released.pop_back();
      const int64_t at = m == n ? s : start[m];
      for (const Edge& e : g.succ[m]) {
        start[e.to] = std::max(start[e.to], at + e.gap);
        if (--left[e.to] > 0) continue;
        if (g.is_op(e.to)) {
          waiting.push({kind_at_or_after(&ops[e.to], start[e.to]), e.to});
        } else {
          released.push_back(e.to);
        }
      }
    }
  };
  for (size_t n = 0; n < g.succ.size(); ++n)
    if (left[n] == 0) {
      if (g.is_op(n)) {
        waiting.push({kind_at_or_after(&ops[n], 0), n});
      } else {
        place(n, 0);  // an order with no `before` op
      }
    }

  std::vector<size_t> misfits;
  for (int64_t s = 0; placed < ops.size(); ++s) {
    auto& queue = ready[Schedule::is_mlp(s) ? 1 : 0];
    misfits.clear();
    for (;;) {
      while (!waiting.empty() && waiting.top().first <= s) {
        const size_t n = waiting.top().second;
        waiting.pop();
        ready[ops[n].kind == OpKind::Mlp ? 1 : 0].push({deadline[n], n});
      }
      if (queue.empty() || static_cast<int>(misfits.size()) >= kMaxMisfits) break;
      const size_t n = queue.top().second;
      queue.pop();
      if (!room.fits(ops[n], s, limits)) {
        misfits.push_back(n);
        continue;
      }
      room.add(ops[n], s, 1);
      out.sublayer[n] = s;
      out.num_sublayers = std::max(out.num_sublayers, s + 1);
      ++placed;
      place(n, s);
    }
    for (size_t n : misfits) queue.push({deadline[n], n});
  }
  return out;
}

}  // namespace qpu::compiler
