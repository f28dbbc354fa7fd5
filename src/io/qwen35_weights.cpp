#include "io/qwen35_weights.h"

#include <cstring>
#include <set>
#include <string_view>

#include "common/error.h"
#include "io/checkpoint.h"
#include "io/qwen35_layout.h"

namespace qpu::io {

namespace {

// Tensors transformers itself skips when loading the text model
// (Qwen3_5ForCausalLM._keys_to_ignore_on_load_unexpected): the multi-token
// prediction head and the vision tower.
constexpr std::string_view kIgnoredPrefixes[] = {"mtp.", "model.visual."};

bool ignored(std::string_view name) {
  for (auto prefix : kIgnoredPrefixes) {
    if (name.starts_with(prefix)) return true;
  }
  return false;
}

class Loader {
 public:
  // A dry loader checks names, shapes and dtypes but reads no data.
  Loader(const Checkpoint& checkpoint, bool dry) : checkpoint_(checkpoint), dry_(dry) {}
  void set_dry(bool dry) { dry_ = dry; }

  bool has(const std::string& name) const { return checkpoint_.find(name) != nullptr; }

  // Checks presence, dtype and exact shape, then upcasts into `out`.
  void take(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>& out) {
    const Checkpoint::Entry* entry = checkpoint_.find(name);
    if (entry == nullptr) fail("{}: missing tensor '{}' (expected shape {})", checkpoint_.source(), name, format_shape(shape));
    const TensorInfo& tensor = *entry->tensor;
    const std::string file = entry->file->path().string();
    if (tensor.shape != shape)
      fail("{}: tensor '{}' has shape {} but the config requires {}", file, name, format_shape(tensor.shape),
           format_shape(shape));
    if (!is_float_weight_dtype(tensor.dtype))
      fail("{}: tensor '{}' has dtype {}; weights must be F32, BF16 or F16", file, name, dtype_name(tensor.dtype));
    used_.insert(name);
    if (dry_) return;
    out.resize(tensor.numel());
    entry->file->read_f32(tensor, out);
    entry->file->release(tensor);  // the fp32 copy is what is kept
  }

  // Every tensor in the checkpoint must have been taken or be ignorable.
  void check_nothing_left() const {
    for (const auto& [name, entry] : checkpoint_.tensors()) {
      if (used_.contains(name) || ignored(name)) continue;
      fail("{}: unexpected tensor '{}' (shape {}) is not part of a Qwen3.5 text decoder with this config",
           entry.file->path().string(), name, format_shape(entry.tensor->shape));
    }
  }

 private:
  const Checkpoint& checkpoint_;
  bool dry_;
  std::set<std::string, std::less<>> used_;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// transformers loads Qwen3_5ForCausalLM from "model.language_model.*" names too
// (its conversion mapping strips "language_model"), so either prefix is accepted
// whatever the class; the one holding embed_tokens (or, failing that, layer 0) wins.
std::string detect_prefix(const Checkpoint& checkpoint, const Qwen35Config& config) {
  const std::string preferred = config.tensor_prefix;
  const std::string other = preferred == "model." ? "model.language_model." : "model.";
  for (const char* key : {"embed_tokens.weight", "layers.0.input_layernorm.weight"}) {
    if (checkpoint.find(preferred + key)) return preferred;
    if (checkpoint.find(other + key)) return other;
  }
  fail("{}: neither '{}embed_tokens.weight' nor '{}embed_tokens.weight' is present: not a Qwen3.5 text checkpoint",
       checkpoint.source(), preferred, other);
}

// What load() reads: every tensor, none (a check), or the globals only (the layers are
// checked, and read later one at a time by Qwen35Reader::layer).
enum class Read { All, Nothing, Globals };

Qwen35Weights load(const Checkpoint& checkpoint, Qwen35Config config, Read read) {
  const bool dry = read == Read::Nothing;
  Qwen35Weights weights;
  weights.config = std::move(config);
  Qwen35Config& c = weights.config;
  c.tensor_prefix = detect_prefix(checkpoint, c);
  Loader loader(checkpoint, dry);

  auto slots = qwen35_weight_slots(weights);
  const WeightSlot& embed = slots.front();
  const std::vector<int64_t> head_shape{c.vocab_size, c.hidden_size};
  // Tying follows transformers' from_pretrained: with tie_word_embeddings, a present
  // lm_head equal to the embedding is the same matrix; a different one is kept
  // (transformers warns and does not tie); an lm_head without an embedding serves
  // as both. Without tying, lm_head is required.
  const bool head_only = c.tie_word_embeddings && !loader.has(embed.name) && loader.has(kLmHeadName);
  const size_t first_layer_slot = 1, end_layer_slot = slots.size() - 1;  // embed_tokens, the layers, norm
  for (size_t i = 0; i < slots.size(); ++i) {
    WeightSlot& slot = slots[i];
    if (head_only && slot.values == &weights.embed_tokens) {
      loader.take(kLmHeadName, slot.shape, weights.embed_tokens);
      continue;
    }
    loader.set_dry(dry || (read == Read::Globals && i >= first_layer_slot && i < end_layer_slot));
    loader.take(slot.name, slot.shape, *slot.values);
    loader.set_dry(dry);
  }
  if (read == Read::Globals) weights.layers.clear();
  if (!head_only && (!c.tie_word_embeddings || loader.has(kLmHeadName))) {
    loader.take(kLmHeadName, head_shape, weights.lm_head);
    if (c.tie_word_embeddings) {
      if (dry) {
        // Data unread: whether the two are equal is only known when loading.
      } else if (same_bits(weights.lm_head, weights.embed_tokens)) {
        weights.lm_head = {};
      } else {
        c.tie_word_embeddings = false;  // what transformers ends up doing
      }
    }
  }
  loader.check_nothing_left();
  return weights;
}

}  // namespace

Qwen35Weights load_qwen35(const std::filesystem::path& checkpoint_dir) {
  const Qwen35Config config = load_qwen35_config(checkpoint_dir);
  const Checkpoint checkpoint(checkpoint_dir);
  return load(checkpoint, config, Read::All);
}

void check_qwen35_tensors(const Checkpoint& checkpoint, const Qwen35Config& config) {
  load(checkpoint, config, Read::Nothing);
}

Qwen35Reader::Qwen35Reader(const std::filesystem::path& checkpoint_dir) {
  Qwen35Config config = load_qwen35_config(checkpoint_dir);  // first, as load_qwen35: the same errors
  checkpoint_ = std::make_unique<Checkpoint>(checkpoint_dir);
  globals_ = load(*checkpoint_, std::move(config), Read::Globals);
}

Qwen35Reader::~Qwen35Reader() = default;

Qwen35Weights Qwen35Reader::globals() const { return globals_; }

Qwen35Weights Qwen35Reader::take_globals() {
  Qwen35Weights out = std::move(globals_);
  globals_ = Qwen35Weights{};
  globals_.config = out.config;
  return out;
}

LayerWeights Qwen35Reader::layer(int64_t index) const {
  const Qwen35Config& c = globals_.config;
  if (index < 0 || index >= c.num_hidden_layers)
    fail("{}: layer {} is outside the checkpoint's {} layers", checkpoint_->source(), index, c.num_hidden_layers);
  LayerWeights layer;
  layer.type = c.layer_types[static_cast<size_t>(index)];
  // The constructor checked every name, shape and dtype: here the data is only read.
  for (WeightSlot& slot : qwen35_layer_slots(c, index, layer)) {
    const Checkpoint::Entry& entry = checkpoint_->get(slot.name);
    slot.values->resize(entry.tensor->numel());
    entry.file->read_f32(*entry.tensor, *slot.values);
    entry.file->release(*entry.tensor);
  }
  return layer;
}

}  // namespace qpu::io
