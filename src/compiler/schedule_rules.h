#pragma once
// The placement rules that every scheduler of schedule.h shares (internal to the
// compiler library): which sublayer kind an op needs, what it occupies there, and the
// explicit orders of a program indexed by op.
#include <cstdint>
#include <vector>

#include "compiler/ir.h"
#include "compiler/schedule.h"

namespace qpu::compiler {

inline bool fits_kind(const Op& op, int64_t s) {
  return (op.kind == OpKind::Mlp) == Schedule::is_mlp(s);
}

inline int64_t op_size(const Op& op) {
  return op.kind == OpKind::Mlp ? static_cast<int64_t>(op.neurons.size()) : 1;
}

inline int64_t op_limit(const Op& op, const ScheduleLimits& limits) {
  return op.kind == OpKind::Mlp          ? limits.max_neurons_per_mlp
         : op.kind == OpKind::AttnMemory ? limits.max_memories_per_mixer
                                         : limits.max_gdn_memories_per_mixer;
}

// Sublayers between two writes of one value, in program order: 1, except between two
// ops that both promise exclusive writes (ir.h, Op::exclusive_writes), whose writes
// commute and may share a sublayer.
inline int64_t waw_gap(const Op& earlier, const Op& later) {
  return earlier.exclusive_writes && later.exclusive_writes ? 0 : 1;
}

// What is placed in each sublayer: units used, and the memories per kind (a mixer
// sublayer holds one kind of memory). Flat arrays, grown as sublayers are used.
struct Occupancy {
  std::vector<int64_t> used, attn, gdn;

  bool fits(const Op& op, int64_t s, const ScheduleLimits& limits) const {
    if (!fits_kind(op, s)) return false;
    const auto u = static_cast<size_t>(s);
    const bool empty = u >= used.size();
    if ((empty ? 0 : used[u]) + op_size(op) > op_limit(op, limits)) return false;
    if (empty || op.kind == OpKind::Mlp) return true;
    return (op.kind == OpKind::AttnMemory ? gdn[u] : attn[u]) == 0;
  }
  void add(const Op& op, int64_t s, int64_t sign) {
    const auto u = static_cast<size_t>(s);
    if (u >= used.size()) {
      used.resize(u + 1, 0);
      attn.resize(u + 1, 0);
      gdn.resize(u + 1, 0);
    }
    used[u] += sign * op_size(op);
    if (op.kind == OpKind::AttnMemory) attn[u] += sign;
    if (op.kind == OpKind::GdnMemory) gdn[u] += sign;
  }
};

// The explicit ordering constraints of a program (ir.h, Program::order), indexed by op:
// the constraints an op is in the `after` range of (it must wait for them) and in the
// `before` range of (the ops it must stay above).
struct OrderIndex {
  std::vector<std::vector<size_t>> waits_for, holds_back;  // per op: indices into orders

  explicit OrderIndex(const Program& program)
      : waits_for(program.ops().size()), holds_back(program.ops().size()) {
    program.check_orders();  // mutable_ops() may have removed ops since
    const auto& orders = program.orders();
    for (size_t k = 0; k < orders.size(); ++k) {
      for (size_t i = orders[k].after.begin; i < orders[k].after.end; ++i) waits_for[i].push_back(k);
      for (size_t i = orders[k].before.begin; i < orders[k].before.end; ++i) holds_back[i].push_back(k);
    }
  }
};

}  // namespace qpu::compiler
