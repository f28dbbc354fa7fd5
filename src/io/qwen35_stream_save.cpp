#include "io/qwen35_stream_save.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/checkpoint.h"
#include "io/dtype.h"
#include "io/qwen35_layout.h"
#include "io/qwen35_save.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace qpu::io {

namespace {

bool exact_in_bf16(std::span<const float> values) {
  for (float v : values)
    if (!f32_to_bf16_exact(v)) return false;
  return true;
}

// The tensors of the shard being filled; a full shard is written under a provisional
// name and renamed once the shard count is known (finish).
class Shards {
 public:
  Shards(std::filesystem::path dir, const StreamSaveOptions& options) : dir_(std::move(dir)), options_(options) {
    if (options_.max_shard_bytes == 0) fail("{}: max shard size must be positive", dir_.string());
  }

  // `owned` holds the values, or is empty and `view` points at values that outlive the
  // shard (the globals).
  void add(const std::string& name, std::vector<int64_t> shape, std::vector<float> owned, std::span<const float> view,
           StreamSaveResult& result) {
    const std::span<const float> values = owned.empty() ? view : std::span<const float>(owned);
    uint64_t numel = 1;
    for (int64_t d : shape)
      if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel))
        fail("{}: tensor '{}': invalid shape {}", dir_.string(), name, format_shape(shape));
    if (numel != values.size())
      fail("{}: tensor '{}': shape {} needs {} values, got {}", dir_.string(), name, format_shape(shape), numel,
           values.size());
    const bool bf16 = options_.bf16_where_exact && exact_in_bf16(values);
    const uint64_t bytes = values.size() * (bf16 ? 2 : 4);
    if (!pending_.empty() && pending_bytes_ + bytes > options_.max_shard_bytes) flush();
    result.parameters += values.size();
    result.tensor_bytes += bytes;
    ++(bf16 ? result.bf16_tensors : result.f32_tensors);
    pending_.push_back({name, bf16 ? DType::BF16 : DType::F32, std::move(shape), std::move(owned), view});
    pending_bytes_ += bytes;
  }

  // Writes the last shard, renames every shard to its final name, writes the index.
  void finish(StreamSaveResult& result) {
    if (!pending_.empty() || written_.empty()) flush();
    const size_t n = written_.size();
    if (n == 1) {
      rename(written_[0].file, kSingleFileName);
      result.files.push_back(kSingleFileName);
      return;
    }
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t i = 0; i < n; ++i) {
      const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n);
      rename(written_[i].file, name);
      for (const std::string& t : written_[i].tensors) weight_map[t] = name;
      result.files.push_back(name);
    }
    const nlohmann::json index = {
        {"metadata", {{"total_size", result.tensor_bytes}, {"total_parameters", result.parameters}}},
        {"weight_map", weight_map}};
    const std::string text = index.dump(2) + "\n";
    write_file_atomically(dir_ / kIndexFileName, text);
    result.files.push_back(kIndexFileName);
  }

 private:
  struct Pending {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<float> owned;
    std::span<const float> view;
  };
  struct Written {
    std::string file;
    std::vector<std::string> tensors;
  };

  void flush() {
    std::vector<TensorToWrite> tensors;
    Written w{fmt::format("model-{:05d}.partial.safetensors", written_.size() + 1), {}};
    for (const Pending& t : pending_) {
      tensors.push_back({t.name, t.dtype, t.shape, t.owned.empty() ? t.view : std::span<const float>(t.owned)});
      w.tensors.push_back(t.name);
    }
    write_safetensors(dir_ / w.file, tensors, {{"format", "pt"}});
    written_.push_back(std::move(w));
    pending_.clear();
    pending_bytes_ = 0;
  }

  void rename(const std::string& from, const std::string& to) const {
    std::error_code ec;
    std::filesystem::rename(dir_ / from, dir_ / to, ec);
    if (ec) fail("{}: cannot rename {} to {}: {}", dir_.string(), from, to, ec.message());
  }

  std::filesystem::path dir_;
  const StreamSaveOptions& options_;
  std::vector<Pending> pending_;
  uint64_t pending_bytes_ = 0;
  std::vector<Written> written_;
};

}  // namespace

StreamSaveResult save_qwen35_streamed(const std::filesystem::path& dir, const Qwen35Weights& globals,
                                      const std::function<LayerWeights(int64_t)>& layer,
                                      const StreamSaveOptions& options) {
  if (!std::filesystem::is_directory(dir)) fail("{}: not a directory", dir.string());
  // An older checkpoint's files would stay beside the new ones (and a model.safetensors
  // wins over an index when loading): only an empty directory is written into.
  if (!std::filesystem::is_empty(dir)) fail("{}: not empty (a checkpoint is written into an empty directory)", dir.string());
  const Qwen35Config& c = globals.config;
  StreamSaveResult result;
  Shards shards(dir, options);
  shards.add(c.tensor_prefix + "embed_tokens.weight", {c.vocab_size, c.hidden_size}, {}, globals.embed_tokens, result);
  const auto layers = static_cast<int64_t>(c.layer_types.size());
  for (int64_t l = 0; l < layers; ++l) {
    LayerWeights w = layer(l);
    if (w.type != c.layer_types[static_cast<size_t>(l)])
      fail("{}: layer {} is {} but the config says {}", dir.string(), l, layer_type_name(w.type),
           layer_type_name(c.layer_types[static_cast<size_t>(l)]));
    for (const WeightSlot& slot : qwen35_layer_slots(c, l, w)) shards.add(slot.name, slot.shape, std::move(*slot.values), {}, result);
    if (options.progress) options.progress(l + 1, layers);
  }
  shards.add(c.tensor_prefix + "norm.weight", {c.hidden_size}, {}, globals.norm, result);
  if (!globals.lm_head.empty()) shards.add(kLmHeadName, {c.vocab_size, c.hidden_size}, {}, globals.lm_head, result);
  shards.finish(result);
  Qwen35Config config = c;
  config.tie_word_embeddings = globals.lm_head.empty();
  if (options.adjust_config) options.adjust_config(config);
  const std::string text = qwen35_config_to_json(config).dump(2) + "\n";
  write_file_atomically(dir / "config.json", text);
  result.files.push_back("config.json");
  return result;
}

}  // namespace qpu::io
