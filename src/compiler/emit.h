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
#include <functional>
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

// The emission stage one layer at a time, so that a compiled checkpoint of hundreds of
// dense layers never exists in memory at once (docs/engine.md, "Streaming
// construction"). The constructor runs every check of emit (options, interface, every
// op, the schedule's layers) and indexes the ops by layer; globals() and layer(l) then
// build tensors and cannot fail on a valid l. layer(l) gives the bits of emit's
// layers[l] (the same writes in the same order), in any order, any number of times.
// Keeps references: program, allocation and interface must outlive the emitter.
class LayerEmitter {
 public:
  LayerEmitter(const Program& program, const Schedule& schedule, const Allocation& allocation,
               const Interface& interface, const EmitOptions& options = {});

  const io::Qwen35Config& config() const { return config_; }
  int64_t num_layers() const { return config_.num_hidden_layers; }
  // config, embed_tokens, norm and lm_head; `layers` is empty.
  io::Qwen35Weights globals() const;
  // Throws qpu::Error when l is outside [0, num_layers()).
  io::LayerWeights layer(int64_t l) const;
  // The same layer with its projections as entries (io::SparseMatrix): the same values,
  // bit for bit, without the dense arrays (what engine::Model's SparseLayerSource takes).
  io::SparseLayerWeights sparse_layer(int64_t l) const;

 private:
  // layer and sparse_layer: M is std::vector<float> or io::SparseMatrixBuilder (emit.cpp).
  template <class M>
  io::BasicLayerWeights<M> emit_layer(int64_t l) const;

  const Program& program_;
  const Allocation& alloc_;
  const Interface& interface_;
  EmitOptions options_;
  io::Qwen35Config config_;
  std::vector<std::vector<size_t>> ops_of_layer_;  // op indexes, in program order
};

// Receives the layers of emit_streaming, in order 0 .. L-1, each exactly once.
using LayerSink = std::function<void(int64_t layer, io::LayerWeights&& weights)>;

// emit, streamed: returns the globals (LayerEmitter::globals(), `layers` empty) and
// hands each layer to `sink` as soon as it is built; only one dense layer is alive in
// here at a time. Every check runs before the first layer reaches the sink.
io::Qwen35Weights emit_streaming(const Program& program, const Schedule& schedule, const Allocation& allocation,
                                 const Interface& interface, const EmitOptions& options, const LayerSink& sink);

// Value of every rail dim in the token embedding: 2^(k+3).
float rail_value(int norm_exponent);

}  // namespace qpu::compiler
