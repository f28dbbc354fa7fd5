#include "engine/model.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "common/error.h"
#include "engine/elementwise.h"
#include "engine/gated_attention.h"
#include "engine/gated_delta_net.h"
#include "engine/numerics.h"
#include "engine/packed_matrix.h"

namespace qpu::engine {
namespace {

struct Layer {
  io::LayerType type = io::LayerType::LinearAttention;
  std::vector<float> input_scale;  // 1 + input_layernorm.weight
  std::vector<float> post_scale;   // 1 + post_attention_layernorm.weight
  GatedDeltaNet linear;
  GatedAttention full;
  PackedMatrix gate_proj, up_proj, down_proj;
  // The mixer's output projection is always +0 (IdleMixers::Skip): forward adds +0
  // without running it, and the layer keeps no state.
  bool skip_mixer = false;
};

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
  std::vector<float> final_scale;
  std::vector<Layer> layers;

  const PackedMatrix& output() const { return tied ? embed : lm_head; }
};

Model::Model(io::Qwen35Weights weights) : Model(std::move(weights), ModelOptions{}) {}

Model::Model(io::Qwen35Weights weights, const ModelOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const io::Qwen35Config& c = weights.config;
  check_config(c);
  m.config = c;
  m.eps = static_cast<float>(c.rms_norm_eps);  // torch adds the python float as fp32
  m.skip_idle_channels = options.elementwise == Elementwise::SkipZeros;
  const PackedMatrix::Options pack = packing(options);
  const int64_t hidden = c.hidden_size;

  if (static_cast<int64_t>(weights.layers.size()) != c.num_hidden_layers) {
    fail("weights: {} layers, config says {}", weights.layers.size(), c.num_hidden_layers);
  }
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
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    io::LayerWeights& w = weights.layers[l];
    Layer& layer = m.layers[l];
    const std::string name = fmt::format("layers.{}", l);
    layer.type = c.layer_types[l];
    if (w.type != layer.type) fail("{}: the weights' layer type differs from config.layer_types", name);
    layer.input_scale = one_plus(std::move(w.input_layernorm), hidden, name + ".input_layernorm.weight");
    layer.post_scale = one_plus(std::move(w.post_attention_layernorm), hidden, name + ".post_attention_layernorm.weight");
    if (layer.type == io::LayerType::LinearAttention) {
      layer.linear = GatedDeltaNet(std::move(w.linear), gdn_shape, m.eps, pack, name + ".linear_attn",
                                   options.gdn == GdnRecurrence::SkipZeros, m.skip_idle_channels);
    } else {
      layer.full = GatedAttention(std::move(w.full), attn_shape, m.eps, pack, name + ".self_attn");
    }
    layer.skip_mixer = options.idle_mixers == IdleMixers::Skip &&
                       (layer.type == io::LayerType::LinearAttention ? layer.linear.output_always_zero()
                                                                     : layer.full.output_always_zero());
    layer.gate_proj = PackedMatrix::pack(w.gate_proj, c.intermediate_size, hidden, pack, name + ".mlp.gate_proj");
    layer.up_proj = PackedMatrix::pack(w.up_proj, c.intermediate_size, hidden, pack, name + ".mlp.up_proj");
    layer.down_proj = PackedMatrix::pack(w.down_proj, hidden, c.intermediate_size, pack, name + ".mlp.down_proj");
    w = io::LayerWeights{};
  }
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
  for (size_t l = 0; l < n; ++l) {
    if (m.layers[l].type == io::LayerType::LinearAttention && !m.layers[l].skip_mixer) {
      const GatedDeltaNetShape& shape = m.layers[l].linear.shape();
      s.conv_state[l].assign(static_cast<size_t>(shape.conv_state_size()), 0.0f);
      s.recurrent_state[l].assign(static_cast<size_t>(shape.recurrent_state_size()), 0.0f);
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

void Model::forward(int64_t token, State& state, std::span<float> logits, std::span<float> hidden) const {
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
      state.key_cache.size() != layers || state.value_cache.size() != layers || state.position < 0) {
    fail("forward: the state was not made by this model's new_state()");
  }
  for (size_t l = 0; l < layers; ++l) {
    if (m.layers[l].skip_mixer && (!state.conv_state[l].empty() || !state.recurrent_state[l].empty() ||
                                   !state.key_cache[l].empty() || !state.value_cache[l].empty())) {
      fail("forward: layer {} keeps no state in this model (its mixer is skipped), but the state holds "
           "some: it was not made by this model's new_state()", l);
    }
  }

  // transformers runs its chunked GDN kernel when a layer has no previous state.
  const bool first_token = state.position == 0;
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
  const auto rms_norm = [&](const std::vector<float>& scale) {
    if (fast) {
      elementwise::rms_norm(x.data(), d, scale.data(), m.eps, normed);
    } else {
      numerics::rms_norm(x.data(), d, scale.data(), m.eps, normed);
    }
  };
  const auto add_mixed = [&] {
    if (fast) {
      kernels.add(x.data(), mixed, d);
    } else {
      for (int64_t i = 0; i < d; ++i) x[i] = x[i] + mixed[i];
    }
  };

  for (size_t l = 0; l < layers; ++l) {
    const Layer& layer = m.layers[l];
    if (layer.skip_mixer) {
      // The output projection holds no stored weight, so the mixer's output is +0 in
      // every dim whatever h, the caches or any NaN/inf inside (PackedMatrix::always_zero).
      // The add still runs: x + (+0) turns -0 into +0 (docs/engine.md, "Idle mixers").
      std::fill(mixed, mixed + d, 0.0f);
    } else {
      rms_norm(layer.input_scale);
      if (layer.type == io::LayerType::LinearAttention) {
        layer.linear.step(normed, state.conv_state[l], state.recurrent_state[l], first_token, mixed);
      } else {
        layer.full.step(normed, state.position, state.key_cache[l], state.value_cache[l], mixed);
      }
    }
    add_mixed();

    // MLP: down(silu(gate(h)) * up(h))
    rms_norm(layer.post_scale);
    const PackedMatrix::Job gate_up[] = {{&layer.gate_proj, normed, gate},
                                         {&layer.up_proj, normed, up}};
    PackedMatrix::multiply_all(gate_up);
    if (fast) {
      kernels.silu_mul(gate, up, c.intermediate_size);
    } else {
      for (int64_t i = 0; i < c.intermediate_size; ++i) gate[i] = numerics::silu(gate[i]) * up[i];
    }
    layer.down_proj.multiply(gate, mixed);
    add_mixed();
  }

  if (!hidden.empty()) std::copy(x.begin(), x.end(), hidden.begin());
  rms_norm(m.final_scale);
  m.output().multiply(normed, logits.data());
  ++state.position;
}

}  // namespace qpu::engine
