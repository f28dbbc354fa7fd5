#include "engine/model.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <omp.h>

#include "common/error.h"
#include "engine/elementwise.h"
#include "engine/gated_attention.h"
#include "engine/gated_delta_net.h"
#include "engine/numerics.h"
#include "engine/packed_matrix.h"
#include "engine/trailing_worker.h"
#include "engine/weight_scan.h"

namespace qpu::engine {
namespace {

// What forward needs to know about x to test sublayers for idleness (IdleSublayers,
// docs/engine.md "Idle sublayers"), computed in one pass when first needed after x
// changes: whether every value is finite, and one bit per dim: x[d] is not +-0.
struct ResidualFacts {
  bool finite = false;
  std::vector<uint64_t> live;  // bit k of word w: dim 64 w + k

  void compute(const float* x, int64_t d) {
    live.resize(static_cast<size_t>((d + 63) / 64));
    // One vectorized pass (elementwise.h): it runs after every sublayer that changed x,
    // i.e. several hundred times per cycle of a looped machine.
    finite = elementwise::kernels().live_words(x, d, live.data());
  }
};

// The residual dims that a sublayer's input projections read with a nonzero weight, one
// bit per dim: "every read dim of x is +-0" is "no word of read AND live is nonzero".
// Only the words holding a read dim are stored (a compiled layer reads a few dims of a
// hidden of ~2,400: one to a handful of words instead of ~40), in one contiguous list, so
// that the test of an idle sublayer, which runs for every layer on every cycle, touches
// a cache line or two.
struct ReadDims {
  // The skip is exact whenever the test holds (the weights, norm scale and eps are
  // finite; for a GDN also what GatedDeltaNet::idle_output_zero() checks).
  bool eligible = false;
  struct Word {
    uint32_t index;  // word of ResidualFacts::live
    uint64_t bits;   // its read dims (nonzero)
  };
  std::vector<Word> words;

  // used[d]: some weight in column d is nonzero.
  void build(const std::vector<uint8_t>& used) {
    words.clear();
    for (size_t w = 0; w * 64 < used.size(); ++w) {
      uint64_t bits = 0;
      for (size_t k = 0; k < 64 && w * 64 + k < used.size(); ++k) bits |= static_cast<uint64_t>(used[w * 64 + k] != 0) << k;
      if (bits != 0) words.push_back({static_cast<uint32_t>(w), bits});
    }
  }

};

// What forward tests of every layer on every cycle, for all layers in one contiguous
// array, and their read words in another (Model::Impl). The Layer structs are large and
// cold: reading a flag of each and its own heap vector of words cost about two cache
// misses per layer, ~10% of a looped machine's cycle (~800 layers, most of them idle).
struct SublayerTest {
  uint32_t begin = 0, end = 0;  // its ReadDims words in Impl::read_words
  bool eligible = false;        // ReadDims::eligible
};
struct LayerTests {
  SublayerTest mixer, mlp;  // mixer: GDN layers only
  bool gdn = false;
  bool skip_mixer = false;            // Layer::skip_mixer
  bool idle_state_untouched = false;  // Layer::idle_state_untouched
};

// A run of consecutive layers that forward can skip with one test (docs/engine.md, "Idle
// runs"): while x does not change, a sublayer whose read dims are all +-0 stays idle, so
// if the union of the run's read dims is all +-0 on entry, every sublayer of the run is
// idle in turn and x only goes through x + (+0). Only runs where each sublayer could be
// skipped on its own qualify (every test eligible; no attention mixer that runs); a GDN
// mixer is skipped only when its history and state are known +0 (the per-layer rule),
// which is checked per run on entry from the State (its GDN layers are listed).
inline constexpr int64_t kRunLayers = 16;
struct IdleRun {
  bool usable = false;
  uint32_t words_begin = 0, words_end = 0;  // Impl::run_words: the union of the read words
  uint32_t gdn_begin = 0, gdn_end = 0;      // Impl::run_gdn_layers: GDN layers with a mixer that runs
  int32_t mlp_sublayers = 0;                // the counts a skip adds to IdleSublayerCounts
};

struct Layer {
  io::LayerType type = io::LayerType::LinearAttention;
  std::vector<float> input_scale;  // 1 + input_layernorm.weight
  std::vector<float> post_scale;   // 1 + post_attention_layernorm.weight
  // elementwise::plain_blocks of the two scales (idle blocks of x skip their scale).
  std::vector<uint64_t> input_plain, post_plain;
  // elementwise::non_finite_blocks of the two scales (LiveNorm computes them always).
  std::vector<int32_t> input_odd, post_odd;
  // The blocks of 16 residual dims that the mixer's input projections (GDN layers) and
  // gate/up can read (PackedMatrix::mark_stored_columns; LiveNorm's read_blocks): the
  // norm writes only those, and the products scan only what it wrote.
  std::vector<uint64_t> mixer_read_blocks, mlp_read_blocks;
  // The 64-dim words of the residual holding a row that the GDN's out_proj / down_proj can
  // write (PackedMatrix::mark_stored_rows): their output is +0 everywhere else.
  std::vector<uint32_t> mixer_written, mlp_written;
  GatedDeltaNet linear;
  GatedAttention full;
  PackedMatrix gate_proj, up_proj, down_proj;
  // The mixer's output projection is always +0 (IdleMixers::Skip): forward adds +0
  // without running it, and the layer keeps no state.
  bool skip_mixer = false;
  // IdleSublayers: the dims read by the GDN's in_proj_qkv/z/b/a and by gate/up.
  // mixer_reads is built for GDN layers only (attention sublayers always run).
  ReadDims mixer_reads, mlp_reads;
  // An idle GDN step leaves the recurrent state's bits unchanged whatever it holds
  // (idle decay 1 in every head and the SkipZeros recurrence).
  bool idle_state_untouched = false;
};

// Bit b (of word b / 64) set iff one of dims [16 b, 16 b + 16) is used: the read_blocks of
// elementwise::LiveNorm.
std::vector<uint64_t> read_blocks(const std::vector<uint8_t>& used) {
  const size_t blocks = used.size() / static_cast<size_t>(elementwise::kBlock);
  std::vector<uint64_t> bits((blocks + 63) / 64, 0);
  for (size_t d = 0; d < blocks * static_cast<size_t>(elementwise::kBlock); ++d) {
    if (used[d] != 0) bits[d / 16 / 64] |= uint64_t{1} << (d / 16 % 64);
  }
  return bits;
}

// The words w (dims [64 w, 64 w + 64)) holding a used dim, ascending.
std::vector<uint32_t> used_words(const std::vector<uint8_t>& used) {
  std::vector<uint32_t> words;
  for (size_t d = 0; d < used.size(); ++d) {
    if (used[d] != 0 && (words.empty() || words.back() != d / 64)) words.push_back(static_cast<uint32_t>(d / 64));
  }
  return words;
}

std::vector<float> one_plus(std::vector<float>&& w, int64_t size, const std::string& name) {
  if (static_cast<int64_t>(w.size()) != size) fail("{}: expected {} values, got {}", name, size, w.size());
  for (float& v : w) v = 1.0f + v;  // transformers: output * (1.0 + self.weight.float())
  return std::move(w);
}

PackedMatrix::Options packing(const ModelOptions& options) {
  PackedMatrix::Options p;
  p.sparse_min_zero_fraction = options.sparse_min_zero_fraction;
  p.allow_bf16 = options.allow_bf16;
  if (options.storage == WeightStorage::Dense) p.sparse_min_zero_fraction = 2.0;  // never
  if (options.storage == WeightStorage::Sparse) p.force = PackedMatrix::Format::SparseCsr;
  switch (options.sparse_path) {
    case SparsePath::Auto: p.path = PackedMatrix::Path::Auto; break;
    case SparsePath::Rows: p.path = PackedMatrix::Path::Rows; break;
    case SparsePath::Columns: p.path = PackedMatrix::Path::Columns; break;
  }
  return p;
}

void check_config(const io::Qwen35Config& c) {
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_hidden_layers <= 0) {
    fail("config: vocab_size, hidden_size, intermediate_size and num_hidden_layers must be positive");
  }
  if (static_cast<int64_t>(c.layer_types.size()) != c.num_hidden_layers) {
    fail("config: {} layer_types for {} layers", c.layer_types.size(), c.num_hidden_layers);
  }
}

}  // namespace

struct Model::Impl {
  io::Qwen35Config config;
  float eps = 0;
  PackedMatrix embed;
  PackedMatrix lm_head;  // unused (empty) when tied to embed
  bool tied = false;
  bool skip_idle_channels = true;  // ModelOptions::elementwise == SkipZeros
  bool skip_idle_sublayers = true;  // ModelOptions::idle_sublayers == Skip
  mutable std::atomic<int64_t> skipped_mlp{0}, skipped_gdn{0}, skipped_runs{0};
  std::vector<float> final_scale;
  std::vector<uint64_t> final_plain;  // elementwise::plain_blocks(final_scale)
  std::vector<int32_t> final_odd;     // elementwise::non_finite_blocks(final_scale)
  std::vector<Layer> layers;
  std::vector<LayerTests> tests;          // per layer
  std::vector<ReadDims::Word> read_words;  // of every SublayerTest
  std::vector<IdleRun> runs;               // layers [kRunLayers r, kRunLayers (r + 1)), when they qualify
  std::vector<ReadDims::Word> run_words;   // of every IdleRun
  std::vector<uint32_t> run_gdn_layers;    // of every IdleRun

  void build_idle_runs();  // runs, run_words and run_gdn_layers from tests

  // forward_pair's second thread, started by the first pair; one pair at a time.
  mutable std::mutex pair_mutex;
  mutable std::unique_ptr<TrailingWorker> trailer;

  const PackedMatrix& output() const { return tied ? embed : lm_head; }
};

void Model::Impl::build_idle_runs() {
  Impl& m = *this;
  m.runs.clear();
  m.run_words.clear();
  m.run_gdn_layers.clear();
  const auto layer_count = static_cast<int64_t>(m.tests.size());
  const int64_t words = (m.config.hidden_size + 63) / 64;
  std::vector<uint64_t> bits(static_cast<size_t>(words));
  for (int64_t first = 0; first < layer_count; first += kRunLayers) {
    IdleRun& run = m.runs.emplace_back();
    std::fill(bits.begin(), bits.end(), 0);
    run.usable = m.skip_idle_sublayers;
    run.gdn_begin = static_cast<uint32_t>(m.run_gdn_layers.size());
    const auto take = [&](const SublayerTest& t) {
      run.usable = run.usable && t.eligible;
      for (uint32_t k = t.begin; k < t.end; ++k) bits[m.read_words[k].index] |= m.read_words[k].bits;
    };
    for (int64_t l = first; l < std::min(layer_count, first + kRunLayers); ++l) {
      const LayerTests& t = m.tests[static_cast<size_t>(l)];
      if (!t.skip_mixer) {
        if (!t.gdn) run.usable = false;  // an attention mixer always runs
        else {
          take(t.mixer);
          m.run_gdn_layers.push_back(static_cast<uint32_t>(l));
        }
      }
      take(t.mlp);
      ++run.mlp_sublayers;
    }
    run.gdn_end = static_cast<uint32_t>(m.run_gdn_layers.size());
    run.words_begin = static_cast<uint32_t>(m.run_words.size());
    for (int64_t w = 0; w < words; ++w)
      if (bits[static_cast<size_t>(w)] != 0) m.run_words.push_back({static_cast<uint32_t>(w), bits[static_cast<size_t>(w)]});
    run.words_end = static_cast<uint32_t>(m.run_words.size());
  }
}

Model::Model(io::Qwen35Weights weights) : Model(std::move(weights), ModelOptions{}) {}

Model::Model(io::Qwen35Weights weights, const ModelOptions& options) : impl_(std::make_unique<Impl>()) {
  check_config(weights.config);
  if (static_cast<int64_t>(weights.layers.size()) != weights.config.num_hidden_layers) {
    fail("weights: {} layers, config says {}", weights.layers.size(), weights.config.num_hidden_layers);
  }
  // Each layer leaves the vector when it is packed (and is freed then), as before.
  std::vector<io::LayerWeights> layers = std::move(weights.layers);
  weights.layers.clear();
  build(std::move(weights), LayerSource([&layers](int64_t l) { return std::move(layers[static_cast<size_t>(l)]); }), options);
}

Model::Model(io::Qwen35Weights globals, const LayerSource& layer, const ModelOptions& options)
    : impl_(std::make_unique<Impl>()) {
  build(std::move(globals), layer, options);
}

Model::Model(io::Qwen35Weights globals, const SparseLayerSource& layer, const ModelOptions& options)
    : impl_(std::make_unique<Impl>()) {
  build(std::move(globals), layer, options);
}

// The one packing path of every constructor: globals first, then layer by layer, each
// layer's source arrays dropped as soon as they are packed (dense and sparse layers go
// through the same steps; only pack_matrix's overload differs).
template <class Source>
void Model::build(io::Qwen35Weights weights, const Source& source, const ModelOptions& options) {
  Impl& m = *impl_;
  const io::Qwen35Config& c = weights.config;
  check_config(c);
  if (!weights.layers.empty()) {
    fail("weights: {} dense layers given with a layer source (the source gives all {})", weights.layers.size(),
         c.num_hidden_layers);
  }
  if (!source) fail("weights: no layer source");
  m.config = c;
  m.eps = static_cast<float>(c.rms_norm_eps);  // torch adds the python float as fp32
  m.skip_idle_channels = options.elementwise == Elementwise::SkipZeros;
  m.skip_idle_sublayers = options.idle_sublayers == IdleSublayers::Skip;
  // The idle proofs need rsqrt(mean(x^2) + eps) finite for a finite x.
  const bool eps_ok = std::isfinite(m.eps) && m.eps > 0.0f;
  const PackedMatrix::Options pack = packing(options);
  const int64_t hidden = c.hidden_size;

  m.tied = weights.lm_head.empty();
  PackedMatrix::Options embed_pack = pack;
  if (!m.tied) embed_pack.path = PackedMatrix::Path::Rows;  // only looked up: no column copy
  m.embed = PackedMatrix::pack(weights.embed_tokens, c.vocab_size, hidden, embed_pack, "embed_tokens");
  weights.embed_tokens = {};
  if (!m.tied) {
    m.lm_head = PackedMatrix::pack(weights.lm_head, c.vocab_size, hidden, pack, "lm_head");
    weights.lm_head = {};
  }
  m.final_scale = one_plus(std::move(weights.norm), hidden, "norm.weight");
  m.final_plain = elementwise::plain_blocks(m.final_scale.data(), hidden);
  m.final_odd = elementwise::non_finite_blocks(m.final_scale.data(), hidden);

  const GatedDeltaNetShape gdn_shape{hidden,
                                     c.linear_num_key_heads,
                                     c.linear_num_value_heads,
                                     c.linear_key_head_dim,
                                     c.linear_value_head_dim,
                                     c.linear_conv_kernel_dim};
  // transformers: int(head_dim * partial_rotary_factor)
  const auto rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
  const GatedAttentionShape attn_shape{hidden,          c.num_attention_heads, c.num_key_value_heads,
                                       c.head_dim,      rotary_dim,            c.rope_theta};

  m.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  // Each layer is built on its own (the source's dense weights, packed, and the tests'
  // read dims); only the flattening of the tests below runs in layer order. With
  // build_threads > 1 layers are pulled by several threads at once (each pulls its layers
  // in increasing order): the same model, as every step depends on its own layer alone.
  // An error is reported for the lowest failing layer, whatever the thread timing.
  const int64_t layer_count = c.num_hidden_layers;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(layer_count));
  std::atomic<int64_t> first_error{layer_count};
  const auto build_layer = [&](int64_t l) {
    auto w = source(l);
    Layer& layer = m.layers[static_cast<size_t>(l)];
    const std::string name = fmt::format("layers.{}", l);
    layer.type = c.layer_types[l];
    if (w.type != layer.type) fail("{}: the weights' layer type differs from config.layer_types", name);
    layer.input_scale = one_plus(std::move(w.input_layernorm), hidden, name + ".input_layernorm.weight");
    layer.post_scale = one_plus(std::move(w.post_attention_layernorm), hidden, name + ".post_attention_layernorm.weight");
    layer.input_plain = elementwise::plain_blocks(layer.input_scale.data(), hidden);
    layer.post_plain = elementwise::plain_blocks(layer.post_scale.data(), hidden);
    layer.input_odd = elementwise::non_finite_blocks(layer.input_scale.data(), hidden);
    layer.post_odd = elementwise::non_finite_blocks(layer.post_scale.data(), hidden);
    if (layer.type == io::LayerType::LinearAttention) {
      layer.linear = GatedDeltaNet(std::move(w.linear), gdn_shape, m.eps, pack, name + ".linear_attn",
                                   options.gdn == GdnRecurrence::SkipZeros, m.skip_idle_channels);
      // The read dims from the packed input projections (in_proj_qkv, z, b, a).
      std::vector<uint8_t> used(static_cast<size_t>(hidden), 0);
      const std::vector<const PackedMatrix*> projections = layer.linear.matrices();
      for (size_t i = 0; i < 4; ++i) projections[i]->mark_nonzero_columns(used);
      layer.mixer_reads.build(used);
      std::fill(used.begin(), used.end(), uint8_t{0});
      for (size_t i = 0; i < 4; ++i) projections[i]->mark_stored_columns(used);
      layer.mixer_read_blocks = read_blocks(used);
      std::fill(used.begin(), used.end(), uint8_t{0});
      projections[4]->mark_stored_rows(used);  // out_proj
      layer.mixer_written = used_words(used);
    } else {
      layer.full = GatedAttention(std::move(w.full), attn_shape, m.eps, pack, name + ".self_attn");
    }
    layer.skip_mixer = options.idle_mixers == IdleMixers::Skip &&
                       (layer.type == io::LayerType::LinearAttention ? layer.linear.output_always_zero()
                                                                     : layer.full.output_always_zero());
    if (layer.type == io::LayerType::LinearAttention) {
      layer.mixer_reads.eligible =
          eps_ok && weight_scan::all_finite(layer.input_scale) && layer.linear.idle_output_zero();
      layer.idle_state_untouched = layer.linear.idle_decay_one() && options.gdn == GdnRecurrence::SkipZeros;
    }
    layer.gate_proj = pack_matrix(w.gate_proj, c.intermediate_size, hidden, pack, name + ".mlp.gate_proj");
    layer.up_proj = pack_matrix(w.up_proj, c.intermediate_size, hidden, pack, name + ".mlp.up_proj");
    layer.down_proj = pack_matrix(w.down_proj, hidden, c.intermediate_size, pack, name + ".mlp.down_proj");
    {
      // From the packed matrices: a scan of their stored values, not of the dense ones.
      std::vector<uint8_t> used(static_cast<size_t>(hidden), 0);
      layer.gate_proj.mark_nonzero_columns(used);
      layer.up_proj.mark_nonzero_columns(used);
      layer.mlp_reads.build(used);
      std::fill(used.begin(), used.end(), uint8_t{0});
      layer.gate_proj.mark_stored_columns(used);
      layer.up_proj.mark_stored_columns(used);
      layer.mlp_read_blocks = read_blocks(used);
      std::fill(used.begin(), used.end(), uint8_t{0});
      layer.down_proj.mark_stored_rows(used);
      layer.mlp_written = used_words(used);
      layer.mlp_reads.eligible = eps_ok && weight_scan::all_finite(layer.post_scale) &&
                                 layer.gate_proj.all_finite() && layer.up_proj.all_finite() &&
                                 layer.down_proj.all_finite();
    }
  };
  const int threads = static_cast<int>(std::clamp<int64_t>(options.build_threads, 1, std::max<int64_t>(layer_count, 1)));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
  for (int64_t l = 0; l < layer_count; ++l) {
    if (first_error.load(std::memory_order_relaxed) < l) continue;  // an earlier layer failed
    try {
      build_layer(l);
    } catch (...) {
      errors[static_cast<size_t>(l)] = std::current_exception();
      int64_t seen = first_error.load();
      while (l < seen && !first_error.compare_exchange_weak(seen, l)) {
      }
    }
  }
  if (first_error.load() < layer_count) std::rethrow_exception(errors[static_cast<size_t>(first_error.load())]);

  m.tests.clear();
  m.tests.reserve(static_cast<size_t>(layer_count));
  m.read_words.clear();
  for (int64_t l = 0; l < layer_count; ++l) {
    Layer& layer = m.layers[static_cast<size_t>(l)];
    const auto flatten = [&m](const ReadDims& reads) {
      SublayerTest t;
      t.begin = static_cast<uint32_t>(m.read_words.size());
      m.read_words.insert(m.read_words.end(), reads.words.begin(), reads.words.end());
      t.end = static_cast<uint32_t>(m.read_words.size());
      t.eligible = reads.eligible;
      return t;
    };
    LayerTests& tests = m.tests.emplace_back();
    tests.gdn = layer.type == io::LayerType::LinearAttention;
    tests.skip_mixer = layer.skip_mixer;
    tests.idle_state_untouched = layer.idle_state_untouched;
    if (tests.gdn) tests.mixer = flatten(layer.mixer_reads);
    tests.mlp = flatten(layer.mlp_reads);
    layer.mixer_reads = {};
    layer.mlp_reads = {};
  }
  m.build_idle_runs();
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

const io::Qwen35Config& Model::config() const { return impl_->config; }

State Model::new_state() const {
  const Impl& m = *impl_;
  State s;
  const auto n = m.layers.size();
  s.conv_state.resize(n);
  s.recurrent_state.resize(n);
  s.key_cache.resize(n);
  s.value_cache.resize(n);
  s.conv_zero_inputs.assign(n, 0);
  s.recurrent_zero.assign(n, 0);
  s.conv_zero_blocks.resize(n);
  for (size_t l = 0; l < n; ++l) {
    if (m.layers[l].type == io::LayerType::LinearAttention && !m.layers[l].skip_mixer) {
      const GatedDeltaNetShape& shape = m.layers[l].linear.shape();
      s.conv_state[l].assign(static_cast<size_t>(shape.conv_state_size()), 0.0f);
      s.recurrent_state[l].assign(static_cast<size_t>(shape.recurrent_state_size()), 0.0f);
      s.conv_zero_inputs[l] = static_cast<int32_t>(shape.conv_kernel - 1);  // all +0
      s.recurrent_zero[l] = 1;
      s.conv_zero_blocks[l].assign(static_cast<size_t>(m.layers[l].linear.conv_blocks()),
                                   static_cast<uint8_t>(std::min<int64_t>(shape.conv_kernel - 1, 255)));
    }
  }
  return s;
}

std::vector<int64_t> Model::skipped_mixers() const {
  std::vector<int64_t> skipped;
  for (size_t l = 0; l < impl_->layers.size(); ++l) {
    if (impl_->layers[l].skip_mixer) skipped.push_back(static_cast<int64_t>(l));
  }
  return skipped;
}

IdleSublayerCounts Model::skipped_sublayers() const {
  return {impl_->skipped_mlp.load(std::memory_order_relaxed), impl_->skipped_gdn.load(std::memory_order_relaxed),
          impl_->skipped_runs.load(std::memory_order_relaxed)};
}

StorageStats Model::storage_stats() const {
  const Impl& m = *impl_;
  std::vector<const PackedMatrix*> all{&m.embed};
  if (!m.tied) all.push_back(&m.lm_head);
  for (const Layer& layer : m.layers) {
    auto mixer = layer.type == io::LayerType::LinearAttention ? layer.linear.matrices() : layer.full.matrices();
    all.insert(all.end(), mixer.begin(), mixer.end());
    all.insert(all.end(), {&layer.gate_proj, &layer.up_proj, &layer.down_proj});
  }
  StorageStats stats;
  for (const PackedMatrix* p : all) {
    switch (p->format()) {
      case PackedMatrix::Format::DenseF32: ++stats.dense_f32_matrices; break;
      case PackedMatrix::Format::DenseBf16: ++stats.dense_bf16_matrices; break;
      case PackedMatrix::Format::SparseCsr: ++stats.sparse_matrices; break;
    }
    stats.bytes += static_cast<int64_t>(p->bytes());
  }
  return stats;
}

// One forward over the layers (run_pass). In a pair (forward_pair) the leading forward
// publishes in `lead` how many layers' state it has finished (their mixers; -1: it
// failed), and the trailing one, at the next position, waits on `follow` before it
// reaches a layer's state.
struct Model::Pass {
  int64_t token = 0;
  int64_t position = 0;  // the position this token takes (state.position is not read)
  State* state = nullptr;
  std::span<float> logits, hidden;
  const SublayerTap* tap = nullptr;
  StateJournal* journal = nullptr;  // nullptr: no record
  std::atomic<int64_t>* lead = nullptr;
  const std::atomic<int64_t>* follow = nullptr;
};

namespace {

// Until the leading forward has finished `layers` layers. Spins: the leader is usually a
// layer or two ahead, and a sleep would cost more than the wait.
void wait_for_lead(const std::atomic<int64_t>& lead, int64_t layers) {
  for (int spins = 0;; ++spins) {
    const int64_t done = lead.load(std::memory_order_acquire);
    if (done >= layers) return;
    if (done < 0) fail("forward_pair: the leading forward failed");
    if (spins % 1024 == 1023) std::this_thread::yield();  // a preempted leader gets its core back
    spin_pause();
  }
}

}  // namespace

void StateJournal::reset(int64_t position) {
  position_ = position;
  entries_.clear();
  parts_.clear();
  floats_.clear();
  bytes_.clear();
}

void StateJournal::note_counters(int64_t layer, int32_t conv_zero_inputs, uint8_t recurrent_zero) {
  entries_.push_back({.layer = layer, .gdn = true, .conv_zero_inputs = conv_zero_inputs, .recurrent_zero = recurrent_zero});
}

void StateJournal::note_cache(int64_t layer, size_t cache_size) {
  entries_.push_back({.layer = layer, .cache_size = cache_size});
}

StepSaves StateJournal::begin_step(int64_t layer, const State& state, int64_t heads, int64_t head_size,
                                   int64_t conv_parts) {
  const auto l = static_cast<size_t>(layer);
  Entry& e = entries_.emplace_back();
  e.layer = layer;
  e.gdn = true;
  e.conv_zero_inputs = state.conv_zero_inputs[l];
  e.recurrent_zero = state.recurrent_zero[l];
  e.stepped = true;
  e.blocks_at = bytes_.size();
  bytes_.insert(bytes_.end(), state.conv_zero_blocks[l].begin(), state.conv_zero_blocks[l].end());
  heads_scratch_.resize(static_cast<size_t>(heads * head_size));
  heads_saved_.assign(static_cast<size_t>(heads), 0);
  conv_scratch_.resize(state.conv_state[l].size());
  conv_saved_.assign(static_cast<size_t>(conv_parts), 0);
  return {heads_scratch_.data(), heads_saved_.data(), conv_scratch_.data(), conv_saved_.data()};
}

void StateJournal::end_step(int64_t history) {
  Entry& e = entries_.back();
  e.parts_begin = static_cast<uint32_t>(parts_.size());
  // Conv block b holds channels [16 b, 16 b + 16), the last flag the channels past the last
  // full block: kBlock * history values from 16 b * history (the tail: to the end).
  const size_t block_values = static_cast<size_t>(elementwise::kBlock * history);
  for (size_t b = 0; b < conv_saved_.size(); ++b) {
    if (conv_saved_[b] == 0) continue;
    parts_.push_back({false, static_cast<int64_t>(b), floats_.size()});
    const size_t from = b * block_values, to = std::min(from + block_values, conv_scratch_.size());
    floats_.insert(floats_.end(), conv_scratch_.begin() + static_cast<ptrdiff_t>(from),
                   conv_scratch_.begin() + static_cast<ptrdiff_t>(to));
  }
  const size_t head_size = heads_saved_.empty() ? 0 : heads_scratch_.size() / heads_saved_.size();
  for (size_t j = 0; j < heads_saved_.size(); ++j) {
    if (heads_saved_[j] == 0) continue;
    parts_.push_back({true, static_cast<int64_t>(j), floats_.size()});
    const float* from = heads_scratch_.data() + j * head_size;
    floats_.insert(floats_.end(), from, from + head_size);
  }
  e.parts_end = static_cast<uint32_t>(parts_.size());
}

void Model::undo(StateJournal& journal, State& state) const {
  if (journal.empty()) fail("undo: the journal is empty (no journaled forward, or undone already)");
  if (state.position != journal.position_ + 1 || state.conv_state.size() != impl_->layers.size()) {
    fail("undo: the journal is of the forward at position {}, but the state is at position {}", journal.position_,
         state.position);
  }
  for (auto e = journal.entries_.rbegin(); e != journal.entries_.rend(); ++e) {
    const auto l = static_cast<size_t>(e->layer);
    if (!e->gdn) {
      state.key_cache[l].resize(e->cache_size);
      state.value_cache[l].resize(e->cache_size);
      continue;
    }
    state.conv_zero_inputs[l] = e->conv_zero_inputs;
    state.recurrent_zero[l] = e->recurrent_zero;
    if (!e->stepped) continue;
    const uint8_t* blocks = journal.bytes_.data() + e->blocks_at;
    std::copy(blocks, blocks + state.conv_zero_blocks[l].size(), state.conv_zero_blocks[l].begin());
    const GatedDeltaNetShape& shape = impl_->layers[l].linear.shape();
    const size_t head_size = static_cast<size_t>(shape.k_head_dim * shape.v_head_dim);
    const size_t block_values = static_cast<size_t>(elementwise::kBlock * (shape.conv_kernel - 1));
    for (uint32_t p = e->parts_begin; p < e->parts_end; ++p) {
      const StateJournal::Part& part = journal.parts_[p];
      const float* from = journal.floats_.data() + part.at;
      std::vector<float>& to = part.head ? state.recurrent_state[l] : state.conv_state[l];
      const size_t size = part.head ? head_size : block_values;
      const size_t first = static_cast<size_t>(part.index) * size;
      std::copy(from, from + std::min(size, to.size() - first), to.begin() + static_cast<ptrdiff_t>(first));
    }
  }
  state.position = journal.position_;
  journal.reset(-1);
}

void Model::forward_pair(int64_t token, int64_t draft, State& state, std::span<float> logits,
                         std::span<float> draft_logits, StateJournal& journal) const {
  check_forward(token, state, logits, {});
  check_forward(draft, state, draft_logits, {});
  const Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.pair_mutex);
  if (!m.trailer) m.trailer = std::make_unique<TrailingWorker>();
  const SublayerTap no_tap;
  std::atomic<int64_t> lead{0};
  Pass first{token, state.position, &state, logits, {}, &no_tap};
  first.lead = &lead;
  Pass second{draft, state.position + 1, &state, draft_logits, {}, &no_tap};
  second.follow = &lead;
  second.journal = &journal;
  journal.reset(state.position + 1);
  // The second thread runs its OpenMP regions with the caller's thread count (a thread's
  // own setting; the bits do not depend on it).
  const int threads = omp_get_max_threads();
  m.trailer->post([&] {
    omp_set_num_threads(threads);
    run_pass(second);
  });
  try {
    run_pass(first);
  } catch (...) {
    lead.store(-1, std::memory_order_release);
    try {
      m.trailer->wait();
    } catch (...) {  // its error is "the leading forward failed"; the leader's is the one to report
    }
    journal.reset(-1);
    throw;
  }
  m.trailer->wait();
  state.position += 2;
}

void Model::check_forward(int64_t token, const State& state, std::span<float> logits, std::span<float> hidden) const {
  const Impl& m = *impl_;
  const io::Qwen35Config& c = m.config;
  const int64_t d = c.hidden_size;
  if (token < 0 || token >= c.vocab_size) fail("token {} is outside the vocabulary [0, {})", token, c.vocab_size);
  if (static_cast<int64_t>(logits.size()) != c.vocab_size) {
    fail("forward: logits has {} entries, vocab_size is {}", logits.size(), c.vocab_size);
  }
  if (!hidden.empty() && static_cast<int64_t>(hidden.size()) != d) {
    fail("forward: hidden has {} entries, hidden_size is {}", hidden.size(), d);
  }
  const auto layers = m.layers.size();
  if (state.conv_state.size() != layers || state.recurrent_state.size() != layers ||
      state.key_cache.size() != layers || state.value_cache.size() != layers ||
      state.conv_zero_inputs.size() != layers || state.recurrent_zero.size() != layers ||
      state.conv_zero_blocks.size() != layers || state.position < 0) {
    fail("forward: the state was not made by this model's new_state()");
  }
  for (size_t l = 0; l < layers; ++l) {
    if (m.tests[l].skip_mixer && (!state.conv_state[l].empty() || !state.recurrent_state[l].empty() ||
                                   !state.key_cache[l].empty() || !state.value_cache[l].empty())) {
      fail("forward: layer {} keeps no state in this model (its mixer is skipped), but the state holds "
           "some: it was not made by this model's new_state()", l);
    }
  }
}

void Model::forward(int64_t token, State& state, std::span<float> logits, std::span<float> hidden,
                    const SublayerTap& tap) const {
  check_forward(token, state, logits, hidden);
  run_pass(Pass{token, state.position, &state, logits, hidden, &tap});
  ++state.position;
}

void Model::forward(int64_t token, State& state, std::span<float> logits, StateJournal& journal) const {
  check_forward(token, state, logits, {});
  journal.reset(state.position);
  const SublayerTap no_tap;
  Pass pass{token, state.position, &state, logits, {}, &no_tap};
  pass.journal = &journal;
  run_pass(pass);
  ++state.position;
}

void Model::run_pass(const Pass& pass) const {
  const Impl& m = *impl_;
  const io::Qwen35Config& c = m.config;
  const int64_t d = c.hidden_size;
  const int64_t token = pass.token;
  State& state = *pass.state;
  const std::span<float> logits = pass.logits, hidden = pass.hidden;
  const SublayerTap& tap = *pass.tap;
  StateJournal* const journal = pass.journal;
  const auto layers = m.layers.size();

  // transformers runs its chunked GDN kernel when a layer has no previous state.
  const bool first_token = pass.position == 0;
  // x, normed, mixed [hidden]; gate, up [intermediate]: reused between calls (one set per
  // calling thread), so a step allocates nothing once warm.
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(3 * d + 2 * c.intermediate_size));
  const std::span<float> x(scratch.data(), static_cast<size_t>(d));
  float* normed = x.data() + d;
  float* mixed = normed + d;
  float* gate = mixed + d;
  float* up = gate + c.intermediate_size;
  m.embed.copy_row(token, x.data());

  // The elementwise steps: elementwise.h's kernels (vectorized, silu skipped on all-zero
  // blocks; the same bits) or the plain loops (Elementwise::Dense).
  const elementwise::Kernels& kernels = elementwise::kernels();
  const bool fast = m.skip_idle_channels;
  // What is known about x between sublayers (below); declared here for the norms.
  thread_local ResidualFacts x_facts;
  bool x_facts_known = false;
  const auto know_x = [&] {
    if (!x_facts_known) {
      x_facts.compute(x.data(), d);
      x_facts_known = true;
    }
  };
  // normed is read only by products: on a mostly-zero x it is written on x's live
  // blocks only (elementwise::LiveNorm; the products' bits do not depend on the sign of
  // a zero input). Per calling thread, like the scratch it writes.
  thread_local elementwise::LiveNorm live_norm;
  live_norm.forget();
  // Returns normed's support (PackedMatrix::Support's blocks) when LiveNorm wrote it,
  // else nullptr. read_blocks: LiveNorm's (nullptr: every block).
  const auto rms_norm = [&](const std::vector<float>& scale, const std::vector<uint64_t>& plain,
                            const std::vector<int32_t>& odd, const uint64_t* read_blocks) -> const uint64_t* {
    if (fast) {
      know_x();
      if (live_norm.run(x.data(), d, scale.data(), m.eps, x_facts.live.data(), odd, normed, read_blocks)) {
        return live_norm.written_blocks();
      }
      live_norm.forget();
      elementwise::rms_norm(x.data(), d, scale.data(), m.eps, normed, plain.data());
    } else {
      numerics::rms_norm(x.data(), d, scale.data(), m.eps, normed);
    }
    return nullptr;
  };
  // x = x + mixed, after which x's facts are stale; add_mixed below keeps them.
  const auto add_all = [&] {
    if (fast) {
      kernels.add(x.data(), mixed, d);
    } else {
      for (int64_t i = 0; i < d; ++i) x[i] = x[i] + mixed[i];
    }
  };

  // What is known about x between sublayers, so that an idle sublayer costs only the
  // test of its read dims (docs/engine.md, "Idle sublayers"). A skipped sublayer adds +0,
  // which keeps x finite or not, and leaves no -0 in x once its add has been done.
  // x_facts: valid while x_facts_known (a skipped sublayer keeps them: x + (+0) changes
  // no value's finiteness and no block's liveness). Scratch per calling thread.
  // x_may_hold_minus_zero: only the embedding row can put a -0 into x. Every later write
  // is an add x + y, and in round to nearest a + b is -0 only when a and b are both -0
  // (a + (-a) is +0, and a nonzero exact sum never rounds to zero), so once x holds no
  // -0 no sublayer can make one: the first add_zero is the only one that does anything
  // (a full-width pass after every sublayer that ran, before this was known).
  bool x_may_hold_minus_zero = true;
  const auto x_changed = [&] { x_facts_known = false; };
  // The sublayer's input projections are all +0 on this token (ReadDims::eligible: given
  // every read dim +-0 and x finite).
  // Every dim of words[begin, end) is +0 or -0 in x (x's facts known).
  const auto none_live = [&](const std::vector<ReadDims::Word>& words, uint32_t begin, uint32_t end) {
    uint64_t any = 0;
    for (uint32_t k = begin; k < end; ++k) any |= words[k].bits & x_facts.live[words[k].index];
    return any == 0;
  };
  const auto idle_input = [&](const SublayerTest& t) {
    if (!t.eligible) return false;
    know_x();
    return x_facts.finite && none_live(m.read_words, t.begin, t.end);
  };
  // x = x + (+0) in every dim: only -0 changes (to +0), and only the first time.
  const auto add_zero = [&] {
    if (!x_may_hold_minus_zero) return;
    float* xs = x.data();
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) xs[i] = xs[i] + 0.0f;
    x_may_hold_minus_zero = false;
  };
  // x = x + mixed where `written` (nullptr: anywhere) lists the 64-dim words outside
  // which mixed is +0 (the output projection has no stored row there). Once the first
  // add_zero has run, x holds no -0 and no signalling NaN (every value has been through an
  // add), so x + (+0) is x bit for bit there: only the written words are added, and x's
  // facts are updated on them alone (a value that is not finite stays so under an add, so
  // finiteness is the old flag AND the written words'). Otherwise the full add.
  // In the fast path mixed is read only in the written words (the products wrote only
  // those: multiply_words), so the first add is split: add_zero, x + (+0) everywhere, then
  // the written words. The same bits as x + mixed: the two differ only where x is -0 and
  // mixed is -0, and no product writes -0 (its sums start from +0, dot.h).
  const auto add_mixed = [&](const std::vector<uint32_t>* written) {
    if (fast && written != nullptr) {
      add_zero();  // a no-op once x holds no -0
      for (const uint32_t w : *written) {
        const int64_t begin = 64 * static_cast<int64_t>(w), count = std::min<int64_t>(64, d - begin);
        kernels.add(x.data() + begin, mixed + begin, count);
        if (x_facts_known) {
          x_facts.finite = kernels.live_words(x.data() + begin, count, &x_facts.live[w]) && x_facts.finite;
        }
      }
      return;
    }
    add_all();
    x_changed();
  };
  int64_t skipped_mlp = 0, skipped_gdn = 0, skipped_runs = 0;
  x_changed();

  // The GDN history length is the config's (every GDN layer has the same shape).
  const auto history = static_cast<int32_t>(c.linear_conv_kernel_dim - 1);
  // GDN layer l's conv history is known +0 and an idle step keeps its state (its idle
  // decay is exactly 1, or the state is all +0): an idle step of it may be skipped.
  const auto drained = [&](size_t l) {
    return state.conv_zero_inputs[l] >= history && (m.tests[l].idle_state_untouched || state.recurrent_zero[l] != 0);
  };
  // An idle run (IdleRun) is skipped with one test: its GDN mixers' history and state are
  // known +0 (what the per-layer skip needs, and what skipping them keeps), x is finite, and
  // the union of its read dims is all +-0. Not with a tap (which sees every sublayer).
  const auto idle_run = [&](const IdleRun& run) {
    if (!run.usable || tap) return false;
    for (uint32_t g = run.gdn_begin; g < run.gdn_end; ++g) {
      if (!drained(m.run_gdn_layers[g])) return false;
    }
    know_x();
    return x_facts.finite && none_live(m.run_words, run.words_begin, run.words_end);
  };
  // A pair (forward_pair): the leader publishes how many layers' mixers it has finished
  // (after each mixer, and at the top of every layer for the skipped ones); the trailer
  // waits for that count to pass a layer just before it reaches the layer's state (its
  // mixer: an MLP reads no state, so the trailer runs those without waiting), and tries a
  // whole idle run only when the leader has already left it (the run's test reads its GDN
  // layers' counters). The trailer's mixer l thus runs beside the leader's MLP l: it
  // follows half a layer behind where the leader computes.
  const auto reach_state = [&](size_t l) {
    if (pass.follow != nullptr) wait_for_lead(*pass.follow, static_cast<int64_t>(l + 1));
  };
  for (size_t l = 0; l < layers; ++l) {
    if (pass.lead != nullptr) pass.lead->store(static_cast<int64_t>(l), std::memory_order_release);
    if (l % kRunLayers == 0) {
      const IdleRun& run = m.runs[l / kRunLayers];
      const bool run_left = pass.follow == nullptr || pass.follow->load(std::memory_order_acquire) >=
                                                          static_cast<int64_t>(std::min(l + kRunLayers, layers));
      if (run_left && idle_run(run)) {
        add_zero();
        skipped_mlp += run.mlp_sublayers;
        ++skipped_runs;
        skipped_gdn += run.gdn_end - run.gdn_begin;
        l += static_cast<size_t>(run.mlp_sublayers) - 1;
        continue;
      }
    }
    // Only the compact tests are read for an idle sublayer; `layer` when one runs.
    const LayerTests& tests = m.tests[l];
    const Layer& layer = m.layers[l];
    if (tests.skip_mixer) {
      // The output projection holds no stored weight, so the mixer's output is +0 in
      // every dim whatever h, the caches or any NaN/inf inside (PackedMatrix::always_zero).
      // The add still happens: x + (+0) turns -0 into +0 (docs/engine.md, "Idle mixers").
      add_zero();
    } else if (tests.gdn) {
      reach_state(l);
      int32_t& zero_inputs = state.conv_zero_inputs[l];
      uint8_t& recurrent_zero = state.recurrent_zero[l];
      // idle: the projections are +0, so this step's conv input is +0. fully idle: the
      // conv history is +0 too, so q, k, v are +0 and the output is +0 (state permitting).
      const bool idle = idle_input(tests.mixer);
      const bool fully_idle = idle && zero_inputs >= history;
      const int32_t next_zero_inputs = idle ? std::min(zero_inputs + 1, history) : 0;
      const uint8_t next_recurrent_zero = recurrent_zero != 0 && fully_idle ? 1 : 0;
      if (m.skip_idle_sublayers && idle && drained(l)) {
        add_zero();
        ++skipped_gdn;
        if (journal != nullptr && (next_zero_inputs != zero_inputs || next_recurrent_zero != recurrent_zero)) {
          journal->note_counters(static_cast<int64_t>(l), zero_inputs, recurrent_zero);
        }
      } else {
        // idle but the history is live (the cycles after a micro-op fed the layer): the
        // projections are +0 (the idle test's proof), so neither they nor the norm run.
        const bool projections_zero = m.skip_idle_sublayers && idle;
        const uint64_t* support =
            projections_zero ? nullptr
                             : rms_norm(layer.input_scale, layer.input_plain, layer.input_odd,
                                        layer.mixer_read_blocks.data());
        const GatedDeltaNetShape& shape = layer.linear.shape();
        const StepSaves saves =
            journal == nullptr ? StepSaves{}
                               : journal->begin_step(static_cast<int64_t>(l), state, shape.num_v_heads,
                                                     shape.k_head_dim * shape.v_head_dim, layer.linear.conv_blocks() + 1);
        layer.linear.step(normed, state.conv_state[l], state.recurrent_state[l], first_token, mixed,
                          state.conv_zero_blocks[l], projections_zero, support, journal != nullptr ? &saves : nullptr,
                          fast ? &layer.mixer_written : nullptr);
        if (journal != nullptr) journal->end_step(shape.conv_kernel - 1);
        add_mixed(&layer.mixer_written);
      }
      zero_inputs = next_zero_inputs;
      recurrent_zero = next_recurrent_zero;
    } else {
      reach_state(l);
      rms_norm(layer.input_scale, layer.input_plain, layer.input_odd, nullptr);
      if (journal != nullptr) journal->note_cache(static_cast<int64_t>(l), state.key_cache[l].size());
      layer.full.step(normed, pass.position, state.key_cache[l], state.value_cache[l], mixed);
      add_mixed(nullptr);
    }
    // Layer l's state is final: the trailer may take it while this thread runs the MLP.
    if (pass.lead != nullptr) pass.lead->store(static_cast<int64_t>(l + 1), std::memory_order_release);
    // x is what the mixer left, bit for bit (a skipped one's x + (+0) included).
    if (tap) tap(static_cast<int64_t>(2 * l), x);

    if (m.skip_idle_sublayers && idle_input(tests.mlp)) {
      add_zero();  // gate = up = +0, silu(+0) * (+0) = +0, down = +0
      ++skipped_mlp;
      if (tap) tap(static_cast<int64_t>(2 * l + 1), x);
      continue;
    }
    // MLP: down(silu(gate(h)) * up(h))
    const uint64_t* support = rms_norm(layer.post_scale, layer.post_plain, layer.post_odd, layer.mlp_read_blocks.data());
    const PackedMatrix::Job gate_up[] = {{&layer.gate_proj, normed, gate},
                                         {&layer.up_proj, normed, up}};
    PackedMatrix::multiply_all(gate_up, {support != nullptr ? normed : nullptr, d, support});
    if (fast) {
      kernels.silu_mul(gate, up, c.intermediate_size);
    } else {
      for (int64_t i = 0; i < c.intermediate_size; ++i) gate[i] = numerics::silu(gate[i]) * up[i];
    }
    if (fast) {  // add_mixed reads only the written words (below)
      layer.down_proj.multiply_words(gate, mixed, layer.mlp_written);
    } else {
      layer.down_proj.multiply(gate, mixed);
    }
    add_mixed(&layer.mlp_written);
    if (tap) tap(static_cast<int64_t>(2 * l + 1), x);
  }
  if (skipped_mlp != 0) m.skipped_mlp.fetch_add(skipped_mlp, std::memory_order_relaxed);
  if (skipped_runs != 0) m.skipped_runs.fetch_add(skipped_runs, std::memory_order_relaxed);
  if (skipped_gdn != 0) m.skipped_gdn.fetch_add(skipped_gdn, std::memory_order_relaxed);

  if (pass.lead != nullptr) pass.lead->store(static_cast<int64_t>(layers), std::memory_order_release);
  if (!hidden.empty()) std::copy(x.begin(), x.end(), hidden.begin());
  rms_norm(m.final_scale, m.final_plain, m.final_odd, nullptr);
  m.output().multiply(normed, logits.data());
}

}  // namespace qpu::engine
