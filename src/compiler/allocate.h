#pragma once
// Stage 3: give every value a residual dim, every neuron an MLP row of its layer and
// every memory op a KV head of its attention layer (or a key/value head pair of its
// Gated DeltaNet layer). Rails (the constant dims that fix
// the RMSNorm scale, exactness-toolkit P1) take the last dims: hidden = 64 * q with q
// rails, so that q rails of 2^(k+3) have squares summing to exactly hidden * 4^k.
#include <cstdint>
#include <vector>

#include "compiler/ir.h"
#include "compiler/schedule.h"

namespace qpu::compiler {

struct Allocation {
  int64_t hidden_size = 0;
  std::vector<int64_t> dim_of_value;  // per value
  std::vector<int64_t> rail_dims;     // the rails; rail_dims[0] carries constants
  int64_t num_layers = 0;
  int64_t intermediate_size = 1;      // max neurons over layers (at least 1)
  int64_t num_kv_heads = 1;           // max memory ops over mixers (at least 1)
  int64_t num_gdn_heads = 0;          // max GDN memory ops over mixers (0: no GDN memory)
  std::vector<bool> layer_has_attention;  // per layer
  // per op: first MLP row (MLP ops), KV head (attention memories) or GDN key/value
  // head (GDN memories) in its layer
  std::vector<int64_t> first_neuron;
  std::vector<int64_t> neurons_per_layer;

  int64_t dim(ValueId v) const { return dim_of_value[static_cast<size_t>(v)]; }
};

// Every value its own dim for the whole program.
Allocation allocate(const Program& program, const Schedule& schedule);

// How long a value holds its dim, for the interval allocation below.
enum class Lifetime {
  Program,          // from the embedding to the output head (interface inputs)
  FromFirstAccess,  // from its first access (read or write) to the output head
  ToLastAccess,     // from its first access to its last; +0 afterwards
  // From the embedding to its last access; +0 afterwards (interface inputs that
  // clear_dead.h clears after their last read). No access at all: as Program.
  EmbeddingToLastAccess,
};

// Interval allocation (linear scan over sublayers). A value occupies its dim over the
// sublayers of its lifetime, both ends inclusive (the embedding is sublayer -1). For
// ToLastAccess and EmbeddingToLastAccess the caller promises that the dim holds exactly
// +0 after the last access's residual add (compiler/clear_dead.h makes it so). A value
// whose first access is in a strictly later sublayer may then take the dim: it starts
// at +0, as every value does (ir.h). Values that live from the embedding never share a
// dim with each other (the embedding row sets each of them).
// A value no op accesses starts at the end of the program (it only needs a dim that is
// +0 there). The hidden size becomes about the largest number of live values at any
// sublayer plus the rails.
Allocation allocate(const Program& program, const Schedule& schedule, const std::vector<Lifetime>& lifetimes);

}  // namespace qpu::compiler
