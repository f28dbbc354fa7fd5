#pragma once
// Stage 4: emit Qwen3.5 weights and config for a scheduled, allocated Program.
//
// Encoding (docs/npu.md): every RMSNorm over the residual has rails that make its
// scale exactly 2^-k (k = norm_exponent), so a residual value x reaches the
// projections as x * 2^-k, exactly while |x| is inside the value window
// [2^(k-126), 2^(k-12)] (or 0). Weights are written in value units and multiplied by
// 2^k here; the constant rail reaches them as exactly 8. The final norm's weight is
// 2^k (scale 1 + 2^k == 2^k in fp32), so logits are the output values themselves.
#include <cstdint>
#include <vector>

#include "compiler/allocate.h"
#include "compiler/ir.h"
#include "compiler/schedule.h"
#include "io/qwen35_weights.h"

namespace qpu::compiler {

// How a test or a machine talks to the compiled layers: which values the token
// embedding sets (one row per vocab entry) and which values become logits 0..n-1.
struct Interface {
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  int64_t vocab_size = 0;          // >= outputs.size()
  std::vector<float> input_rows;   // [vocab_size, inputs.size()], row-major
};

struct EmitOptions {
  int norm_exponent = 48;          // k
  int64_t head_dim = 256;          // attention head size (a power of 4, >= 16)
  int64_t linear_head_dim = 16;    // the idle Gated DeltaNet heads (all weights 0) when no GDN memory
  // Head dims of every Gated DeltaNet layer when the program has GDN memories
  // (Qwen3.5's 128 x 128: a two-hot read, see gdn_layout.h).
  int64_t gdn_key_head_dim = 128;
  int64_t gdn_value_head_dim = 128;
};

struct Compiled {
  Schedule schedule;
  Allocation allocation;
  io::Qwen35Weights weights;
};

// Runs every stage: validate, schedule, allocate, emit. Throws qpu::Error naming the
// op or value on inconsistent input (e.g. too many data values for one head).
Compiled compile(const Program& program, const Interface& interface, const ScheduleLimits& limits = {},
                 const EmitOptions& options = {});

// The emission stage alone.
io::Qwen35Weights emit(const Program& program, const Schedule& schedule, const Allocation& allocation,
                       const Interface& interface, const EmitOptions& options = {});

// Value of every rail dim in the token embedding: 2^(k+3).
float rail_value(int norm_exponent);

}  // namespace qpu::compiler
