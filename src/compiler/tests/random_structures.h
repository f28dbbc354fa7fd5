#pragma once
// Random program structures and explicit orders for the scheduler tests (nothing is
// run), and the placement rules checked independently of the schedulers: orders pair by
// pair, the critical path as a longest path over explicit predecessor lists.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir.h"
#include "compiler/schedule.h"
#include "dim_reuse_programs.h"

namespace qpu::compiler::schedule_testing {

using dim_reuse_testing::copy_into;

inline uint64_t below(std::mt19937_64& rng, uint64_t n) { return rng() % n; }

// Every op of every order's `after` range in a strictly later sublayer than every op of
// its `before` range, pair by pair. Returns how many orders are broken.
inline int broken_orders(const Program& p, const Schedule& s) {
  int broken = 0;
  for (const OpOrder& o : p.orders()) {
    bool ok = true;
    for (size_t a = o.before.begin; a < o.before.end; ++a)
      for (size_t b = o.after.begin; b < o.after.end; ++b) ok = ok && s.sublayer[a] < s.sublayer[b];
    broken += !ok;
  }
  return broken;
}

inline bool shares(const std::vector<ValueId>& x, const std::vector<ValueId>& y) {
  for (ValueId v : x)
    if (std::binary_search(y.begin(), y.end(), v)) return true;
  return false;
}

// Per op, the earlier ops it must come after and by how many sublayers: 1 for RAW, WAW
// and every order edge, 0 for WAW between two ops that promise exclusive writes (ir.h).
struct Predecessor {
  size_t op;
  int64_t gap;
};
inline std::vector<std::vector<Predecessor>> predecessors(const Program& p) {
  const auto& ops = p.ops();
  std::vector<std::vector<Predecessor>> pred(ops.size());
  for (size_t i = 0; i < ops.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      if (shares(ops[i].reads(), ops[j].writes()))
        pred[i].push_back({j, 1});
      else if (shares(ops[i].writes(), ops[j].writes()))
        pred[i].push_back({j, ops[i].exclusive_writes && ops[j].exclusive_writes ? 0 : 1});
    }
  for (const OpOrder& o : p.orders())
    for (size_t b = o.after.begin; b < o.after.end; ++b)
      for (size_t a = o.before.begin; a < o.before.end; ++a) pred[b].push_back({a, 1});
  return pred;
}

inline int64_t longest_chain(const Program& p) {
  const auto pred = predecessors(p);
  std::vector<int64_t> depth(pred.size(), 1);
  int64_t longest = 0;
  for (size_t i = 0; i < pred.size(); ++i) {
    for (const Predecessor& j : pred[i]) depth[i] = std::max(depth[i], depth[j.op] + j.gap);
    longest = std::max(longest, depth[i]);
  }
  return longest;
}

// Random forward orders: single edges and range pairs, anywhere in the program. Of four
// random candidates, the one whose `after` op the order-free ASAP schedule `asap` puts
// highest relative to its `before` op (the least likely to be implied by the data).
inline void add_random_orders(Program& p, std::mt19937_64& rng, int count, const Schedule& asap) {
  const size_t n = p.ops().size();
  if (n < 2) return;
  for (int k = 0; k < count; ++k) {
    OpOrder best{};
    int64_t best_gap = 0;
    for (int c = 0; c < 4; ++c) {
      OpOrder o{};
      if (rng() % 2) {
        const size_t i = below(rng, n - 1);
        o = {{i, i + 1}, {i + 1 + below(rng, n - 1 - i), 0}};
        o.after.end = o.after.begin + 1;
      } else {
        size_t cut[4];  // a < b <= c < d
        for (size_t& x : cut) x = below(rng, n + 1);
        std::sort(cut, cut + 4);
        if (cut[0] == cut[1] || cut[2] == cut[3]) continue;
        const size_t len = std::min<size_t>(cut[1] - cut[0], 1 + below(rng, 6));  // short and long ranges
        o = {{cut[1] - len, cut[1]}, {cut[2], cut[3]}};
      }
      const int64_t gap = asap.sublayer[o.after.begin] - asap.sublayer[o.before.end - 1];
      if (best.after.end == 0 || gap < best_gap) {
        best = o;
        best_gap = gap;
      }
    }
    if (best.after.end != 0) p.order(best.before, best.after);
  }
}

// Limits that never bind.
inline ScheduleLimits roomy_limits() {
  ScheduleLimits l;
  l.max_neurons_per_mlp = 1 << 20;
  l.max_memories_per_mixer = 1 << 20;
  l.max_gdn_memories_per_mixer = 1 << 20;
  return l;
}

// Tight random limits: 4 to 6 neurons per MLP sublayer, 1 to 3 memories of each kind per mixer.
inline ScheduleLimits tight_limits(std::mt19937_64& rng) {
  ScheduleLimits l;
  l.max_neurons_per_mlp = 4 + static_cast<int64_t>(below(rng, 3));
  l.max_memories_per_mixer = 1 + static_cast<int64_t>(below(rng, 3));
  l.max_gdn_memories_per_mixer = 1 + static_cast<int64_t>(below(rng, 3));
  return l;
}

// A random program of every op kind, for the placement rules only (nothing is run):
// MLPs of 1..4 neurons, attention and GDN memories, reading and writing random values;
// with `exclusive`, a third of the ops promise exclusive writes (ir.h).
inline Program random_structure(std::mt19937_64& rng, bool mlp_only, bool exclusive = false) {
  Program p;
  const auto v = p.values("v", 10 + static_cast<int>(below(rng, 20)));
  auto any = [&] { return v[below(rng, v.size())]; };
  const int n_ops = 5 + static_cast<int>(below(rng, 40));
  for (int o = 0; o < n_ops; ++o) {
    const uint64_t kind = mlp_only ? 0 : below(rng, 6);
    const std::string label = "op" + std::to_string(o);
    if (kind <= 3) {
      std::vector<Neuron> neurons;
      const uint64_t count = 1 + below(rng, 4);
      for (uint64_t n = 0; n < count; ++n) neurons.push_back(copy_into(any(), {{any(), 1.0f}, {any(), 0.5f}}));
      p.mlp(label, std::move(neurons));
    } else if (kind == 4) {
      AttnMemory m;
      m.key_bits = {any()};
      m.query_bits = {any()};
      m.write_flag = any();
      m.data = {any(), any()};
      m.out = {any(), any()};
      p.memory(label, m);
    } else {
      GdnMemory m;
      m.key_bits = {any()};
      m.query_bits = {any()};
      m.data = {any()};
      m.out = {any()};
      p.gdn_memory(label, m);
    }
    if (exclusive && below(rng, 3) == 0) p.mark_exclusive_writes({p.ops().size() - 1, p.ops().size()});
  }
  return p;
}

}  // namespace qpu::compiler::schedule_testing
