#pragma once
// Stage 2: place every op of a Program into a host sublayer. Sublayer s belongs to
// decoder layer s / 2; even sublayers are mixers (attention / Gated DeltaNet), odd
// ones are MLPs. Greedy as-soon-as-possible in program order, under the dependence
// rules of ir.h and per-sublayer resource limits. A mixer sublayer holds attention
// memories or GDN memories, never both (a host layer is one kind of mixer).
#include <cstdint>
#include <vector>

#include "compiler/ir.h"

namespace qpu::compiler {

struct ScheduleLimits {
  int64_t max_neurons_per_mlp = 9216;  // Qwen3.5-4B intermediate size
  int64_t max_memories_per_mixer = 4;  // KV heads of a Qwen3.5-4B attention layer
  int64_t max_gdn_memories_per_mixer = 16;  // key heads of a Qwen3.5-4B GDN layer
};

struct Schedule {
  std::vector<int64_t> sublayer;  // per op
  int64_t num_sublayers = 0;      // 1 + the last sublayer used (0 for an empty program)

  int64_t num_layers() const { return (num_sublayers + 1) / 2; }
  static bool is_mlp(int64_t s) { return s % 2 == 1; }
};

// Throws qpu::Error when one op alone exceeds a limit.
Schedule schedule(const Program& program, const ScheduleLimits& limits = {});

// Length of the longest chain of dependent ops (each RAW/WAW edge counts one): the
// floor on sublayers any schedule needs, ignoring sublayer kinds and resources.
int64_t critical_path(const Program& program);

}  // namespace qpu::compiler
