#pragma once
// The Qwen3.5 inference engine: single-sequence decode, one token per forward
// step, fp32, deterministic (identical bits on every run and at every thread
// count). It implements stock transformers' Qwen3_5ForCausalLM semantics
// (../shared/docs/qwen35-spec.md) and knows nothing about NPUs.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "io/qwen35_weights.h"

namespace qpu::engine {

struct StepSaves;  // gated_delta_net.h

// Everything a sequence carries between forward steps. Each vector of vectors is
// indexed by layer index (0 .. num_hidden_layers-1); the entries of layers of the
// other type stay empty, and so do all four entries of a layer whose mixer the model
// skips (Model::skipped_mixers(): its output is a known +0, so it keeps no cache).
struct State {
  int64_t position = 0;                                // tokens consumed so far
  std::vector<std::vector<float>> conv_state;          // per GDN layer: [conv_dim, kernel-1], oldest input first
  std::vector<std::vector<float>> recurrent_state;     // per GDN layer: [v_heads, dk, dv]
  std::vector<std::vector<float>> key_cache;           // per attention layer: [t, kv_heads, head_dim]
  std::vector<std::vector<float>> value_cache;         // per attention layer: [t, kv_heads, head_dim]
  // What forward knows about each GDN layer's state without reading it (IdleSublayers,
  // docs/engine.md "Idle sublayers"); forward keeps both up to date in every mode.
  // conv_zero_inputs: how many of the layer's last kernel-1 conv inputs are known to be
  //   +0 (capped at kernel-1; at kernel-1 every conv_state value is +0).
  // recurrent_zero: 1 while recurrent_state is known to be all +0 (new_state, then only
  //   steps whose conv and projections were all +0).
  // conv_zero_blocks: per GDN layer, per block of 16 conv channels, how many of the
  //   block's last kernel-1 conv inputs are known to be +0 (GatedDeltaNet::step).
  // Code that writes conv_state or recurrent_state by hand must set these to 0.
  std::vector<int32_t> conv_zero_inputs;
  std::vector<uint8_t> recurrent_zero;
  std::vector<std::vector<uint8_t>> conv_zero_blocks;
};

// What one forward overwrote in a State, so that Model::undo can put the State back bit
// for bit (speculative decoding: Model::forward_pair runs a guessed next token and takes
// it back when the guess was wrong). Per layer the forward touched: a GDN layer's zero
// counters, and when its step ran, the conv blocks and value heads it wrote (GatedDeltaNet's
// StepSaves); an attention layer's cache length. Reused between forwards
// (its buffers stay allocated).
class StateJournal {
 public:
  bool empty() const { return position_ < 0; }
  // Floats copied (conv blocks and heads): what a journaled forward costs beyond its own.
  int64_t saved_floats() const { return static_cast<int64_t>(floats_.size()); }

 private:
  friend class Model;
  struct Entry {
    int64_t layer = 0;
    bool gdn = false;
    int32_t conv_zero_inputs = 0;  // GDN: State's counters before
    uint8_t recurrent_zero = 0;
    bool stepped = false;          // GDN: the step ran; its block counters and saves are kept
    size_t blocks_at = 0;          // into bytes_: conv_zero_blocks before
    uint32_t parts_begin = 0, parts_end = 0;  // into parts_: the conv blocks and heads saved
    size_t cache_size = 0;         // attention: key and value cache sizes before
  };
  // A saved piece of a GDN layer's state: conv block `index` (StepSaves' conv flags) or
  // value head `index`, its old values at floats_[at].
  struct Part {
    bool head = false;
    int64_t index = 0;
    size_t at = 0;
  };
  void reset(int64_t position);
  // Model::forward's records: a GDN layer's counters before (its step did not run), an
  // attention layer's cache length before, and a GDN step's saves: begin_step keeps the
  // counters and returns where the step copies what it overwrites; end_step keeps the
  // parts it copied.
  void note_counters(int64_t layer, int32_t conv_zero_inputs, uint8_t recurrent_zero);
  void note_cache(int64_t layer, size_t cache_size);
  StepSaves begin_step(int64_t layer, const State& state, int64_t heads, int64_t head_size, int64_t conv_parts);
  void end_step(int64_t history);
  int64_t position_ = -1;  // state.position before the forward (-1: nothing recorded)
  std::vector<Entry> entries_;
  std::vector<Part> parts_;
  std::vector<float> floats_;
  std::vector<uint8_t> bytes_;
  // The StepSaves of the step running now (kept between forwards: no allocation once warm).
  std::vector<float> heads_scratch_, conv_scratch_;
  std::vector<uint8_t> heads_saved_, conv_saved_;
};

// How the weight matrices are stored (the results are identical in every mode; see
// docs/engine.md). Auto: a matrix with more than sparse_min_zero_fraction values
// equal to +0 is CSR. Dense: never CSR. Sparse: always CSR (tests). A dense matrix
// whose values are all bf16 numbers is kept as bf16 (exact), otherwise fp32.
enum class WeightStorage { Auto, Dense, Sparse };

// How the Gated DeltaNet recurrence runs (docs/engine.md, "Exact zeros in the GDN").
// SkipZeros leaves out the state rows whose k_i or q_i is exactly 0 and the decay
// multiply when exp(g) == 1: the same output bits as Dense for every finite state.
// Dense is the plain loop over the whole state (kept for tests and benchmarks).
enum class GdnRecurrence { SkipZeros, Dense };

// How a sparse (CSR) product walks its matrix (docs/engine.md, "Skipping exact-zero
// inputs"). Auto: per call, only the columns whose input is nonzero when they hold few
// enough of the weights, else every row. Rows: always every row (no column copy is
// stored). Columns: the column walk whenever the input is finite. Same bits in all modes.
enum class SparsePath { Auto, Rows, Columns };

// How the elementwise work over the full width runs (norm scaling, residual adds,
// silu(gate) * up, the GDN conv, l2norm and gated RMSNorm; docs/engine.md, "Idle
// channels"). SkipZeros: vectorized, and blocks of channels whose inputs are exact zeros
// write their known result without computing it (elementwise.h): the bits of Dense for
// every input. Dense: the plain scalar loops (kept for tests and benchmarks).
enum class Elementwise { SkipZeros, Dense };

// Layers whose mixer output projection (attention o_proj, GDN out_proj) holds no stored
// weight: every weight is +0 and the matrix is CSR (PackedMatrix::always_zero), so the
// mixer's output is +0 in every dim whatever its input, NaN and inf included
// (docs/engine.md, "Idle mixers"). Skip: such a layer adds +0 to the residual without
// running the mixer, and its cache does not grow (compiled checkpoints keep one all-zero
// full-attention layer that transformers needs; its cache would cost O(position) per
// token). Compute: run it anyway (tests, benchmarks). Same bits either way.
enum class IdleMixers { Skip, Compute };

// Sublayers whose result is provably "add +0 to the residual" on this token (docs/engine.md,
// "Idle sublayers"): every residual dim that the sublayer's input projections read with a
// nonzero weight is +-0 (and the residual is finite, the layer's weights are finite).
// Skip: an MLP sublayer, or a GDN mixer whose conv history is known +0 and whose
// recurrence provably leaves its state unchanged, is replaced by x = x + (+0) (only the
// -0 -> +0 of that add is done, once). Compute: run it anyway (tests, benchmarks). Same
// logits, hidden and State bits either way. Attention sublayers always run.
enum class IdleSublayers { Skip, Compute };

struct ModelOptions {
  WeightStorage storage = WeightStorage::Auto;
  double sparse_min_zero_fraction = 0.9;
  bool allow_bf16 = true;  // false: dense matrices stay fp32 (tests, benchmarks)
  GdnRecurrence gdn = GdnRecurrence::SkipZeros;
  SparsePath sparse_path = SparsePath::Auto;
  Elementwise elementwise = Elementwise::SkipZeros;
  IdleMixers idle_mixers = IdleMixers::Skip;
  IdleSublayers idle_sublayers = IdleSublayers::Skip;
  // Threads that build layers side by side in the streaming constructor (each packs the
  // layers it pulls; the model is the same for any count). 1: the layers are pulled one at
  // a time in order 0, 1, ... (LayerSource). More: the source is called from that many
  // threads at once, so it must be safe to call concurrently, and up to that many dense
  // layers are alive at a time.
  int build_threads = 1;
};

// How many sublayers forward() skipped as idle (IdleSublayers::Skip), summed over every
// forward of the model since construction (all threads).
struct IdleSublayerCounts {
  int64_t mlp = 0;
  int64_t gdn = 0;
  int64_t runs = 0;  // whole runs of layers skipped with one test (counted in mlp and gdn too)
};

// What the constructor chose, for logs and benchmarks.
struct StorageStats {
  int64_t dense_f32_matrices = 0;
  int64_t dense_bf16_matrices = 0;
  int64_t sparse_matrices = 0;
  int64_t bytes = 0;  // weight storage of all matrices
};

// The weights of layer l (0 .. num_hidden_layers-1), built on demand (docs/engine.md,
// "Streaming construction"). The model calls it once per layer, in order 0, 1, ...,
// packs the layer and frees it before the next call (ModelOptions::build_threads = 1;
// with more, from that many threads at once, each thread in increasing order).
using LayerSource = std::function<io::LayerWeights(int64_t layer)>;
// The same, each layer's projections given as their entries (io::SparseMatrix): a compiled
// layer of nearly all +0 is packed without its dense arrays (the same model; docs/engine.md,
// "Streaming construction").
using SparseLayerSource = std::function<io::SparseLayerWeights(int64_t layer)>;

// Sees the residual stream after every sublayer of one forward: `sublayer` 2 l is layer
// l's token mixer, 2 l + 1 its MLP (the numbering of compiler/schedule.h). Like
// transformers' output_hidden_states, but per sublayer: for tools that look inside an
// ordinary forward pass (e.g. `qpu story --verify` reading a compiled machine's nested
// logits where they sit). It observes only; the forward's bits do not depend on it. A
// skipped (idle) sublayer is reported too, with the residual it provably leaves.
using SublayerTap = std::function<void(int64_t sublayer, std::span<const float> residual)>;

class Model {
 public:
  explicit Model(io::Qwen35Weights weights);
  Model(io::Qwen35Weights weights, const ModelOptions& options);
  // Streaming construction: `globals` holds the config, embed_tokens, norm and lm_head,
  // and no layers (else an error); `layer` gives config.num_hidden_layers layers. At most
  // one dense layer is alive at a time (plus what the source itself keeps). The dense
  // constructors above hand their layers through this same path, so both build the same
  // model and make the same checks (a layer of the wrong type or shape is an error
  // naming the layer).
  Model(io::Qwen35Weights globals, const LayerSource& layer, const ModelOptions& options = {});
  Model(io::Qwen35Weights globals, const SparseLayerSource& layer, const ModelOptions& options = {});
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  const io::Qwen35Config& config() const;
  State new_state() const;
  StorageStats storage_stats() const;
  // The layers whose mixer forward() skips (IdleMixers::Skip), ascending.
  std::vector<int64_t> skipped_mixers() const;
  IdleSublayerCounts skipped_sublayers() const;

  // One decode step: consumes `token` at position state.position, advances the
  // state, and writes config().vocab_size logits. If `hidden` is not empty it
  // receives the last layer's residual stream (before the final norm), which
  // tests use to look inside an ordinary forward pass. `tap`, if set, is called after
  // every sublayer (SublayerTap).
  void forward(int64_t token, State& state, std::span<float> logits,
               std::span<float> hidden = {}, const SublayerTap& tap = {}) const;
  // The same step, recording in `journal` (cleared first) what it overwrites in `state`.
  void forward(int64_t token, State& state, std::span<float> logits, StateJournal& journal) const;
  // Puts `state` back to what it was before the journaled forward (bit for bit: every
  // cache, history, head and counter). The journal must be the latest forward's on this
  // state (else an error); it is empty afterwards.
  void undo(StateJournal& journal, State& state) const;

  // Speculative decoding on two threads (docs/engine.md, "Forward pairs"): forward(token)
  // on the calling thread and forward(draft) at the next position on a second thread that
  // trails the first layer by layer (it reaches a layer's state only after the first token
  // has written it). logits and draft_logits get the bits of the two forwards run one after
  // the other, and the state ends as after both, with the draft's writes in `journal`: when
  // `draft` was not the token that should follow (the caller's pick from logits), undo
  // puts the state back to where forward(token) alone leaves it. Calls on one model are
  // serialized (one trailing thread per model).
  void forward_pair(int64_t token, int64_t draft, State& state, std::span<float> logits,
                    std::span<float> draft_logits, StateJournal& journal) const;

 private:
  struct Impl;
  struct Pass;  // one forward's inputs, and its place in a pair (model.cpp)
  std::unique_ptr<Impl> impl_;

  void check_forward(int64_t token, const State& state, std::span<float> logits, std::span<float> hidden) const;
  void run_pass(const Pass& pass) const;

  template <class Source>  // LayerSource or SparseLayerSource
  void build(io::Qwen35Weights globals, const Source& layer, const ModelOptions& options);
};

}  // namespace qpu::engine
