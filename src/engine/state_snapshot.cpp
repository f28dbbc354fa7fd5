#include "engine/state_snapshot.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace qpu::engine {

namespace {

constexpr const char* kFormat = "qpu-state-v1";

std::string tensor_name(size_t layer, const char* what) { return fmt::format("layers.{}.{}", layer, what); }

// What a layer keeps, at the config's shapes (attention: per cached token).
struct LayerShapes {
  std::vector<int64_t> conv, recurrent, token;
};

LayerShapes shapes_of(const io::Qwen35Config& c) {
  return {{c.linear_conv_dim(), c.linear_conv_kernel_dim - 1},
          {c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim},
          {c.num_key_value_heads, c.head_dim}};
}

std::vector<bool> skipped_layers(const Model& model) {
  std::vector<bool> skipped(static_cast<size_t>(model.config().num_hidden_layers), false);
  for (int64_t l : model.skipped_mixers()) skipped[static_cast<size_t>(l)] = true;
  return skipped;
}

}  // namespace

void write_state_snapshot(const std::filesystem::path& path, const Model& model, const State& state) {
  const io::Qwen35Config& c = model.config();
  const LayerShapes s = shapes_of(c);
  const std::vector<bool> skipped = skipped_layers(model);
  std::vector<io::TensorToWrite> tensors;
  for (size_t l = 0; l < c.layer_types.size(); ++l) {
    if (skipped[l]) continue;
    if (c.layer_types[l] == io::LayerType::LinearAttention) {
      tensors.push_back({tensor_name(l, "conv_state"), io::DType::F32, s.conv, state.conv_state[l]});
      tensors.push_back({tensor_name(l, "recurrent_state"), io::DType::F32, s.recurrent, state.recurrent_state[l]});
    } else {
      const int64_t per_token = s.token[0] * s.token[1];
      const auto tokens = static_cast<int64_t>(state.key_cache[l].size()) / std::max<int64_t>(per_token, 1);
      tensors.push_back({tensor_name(l, "key_cache"), io::DType::F32, {tokens, s.token[0], s.token[1]}, state.key_cache[l]});
      tensors.push_back(
          {tensor_name(l, "value_cache"), io::DType::F32, {tokens, s.token[0], s.token[1]}, state.value_cache[l]});
    }
  }
  io::write_safetensors(path, tensors, {{"format", kFormat}, {"position", std::to_string(state.position)}});
}

State read_state_snapshot(const std::filesystem::path& path, const Model& model) {
  const io::SafetensorsFile file(path);
  const std::string where = path.string();
  const auto& meta = file.header().metadata;
  const auto format = meta.find("format");
  if (format == meta.end() || format->second != kFormat)
    fail("{}: not a host state snapshot (metadata format is not {})", where, kFormat);
  const auto pos = meta.find("position");
  int64_t position = -1;
  try {
    if (pos != meta.end()) position = std::stoll(pos->second);
  } catch (const std::exception&) {
    position = -1;
  }
  if (position < 0) fail("{}: no valid position in the metadata", where);

  const io::Qwen35Config& c = model.config();
  const LayerShapes s = shapes_of(c);
  const std::vector<bool> skipped = skipped_layers(model);
  State state = model.new_state();
  state.position = position;
  size_t expected = 0;
  auto read = [&](size_t l, const char* what, const std::vector<int64_t>& shape, std::vector<float>& out) {
    const std::string name = tensor_name(l, what);
    const io::TensorInfo* t = file.find(name);
    if (t == nullptr) fail("{}: tensor '{}' is missing", where, name);
    if (t->shape != shape)
      fail("{}: tensor '{}' has shape {}, the model's state {}", where, name, io::format_shape(t->shape),
           io::format_shape(shape));
    out = file.read_f32(*t);
    ++expected;
  };
  for (size_t l = 0; l < c.layer_types.size(); ++l) {
    if (skipped[l]) continue;
    if (c.layer_types[l] == io::LayerType::LinearAttention) {
      read(l, "conv_state", s.conv, state.conv_state[l]);
      read(l, "recurrent_state", s.recurrent, state.recurrent_state[l]);
      // Nothing is known to be +0 now (State's contract for hand-written states).
      state.conv_zero_inputs[l] = 0;
      state.recurrent_zero[l] = 0;
      std::fill(state.conv_zero_blocks[l].begin(), state.conv_zero_blocks[l].end(), uint8_t{0});
    } else {
      read(l, "key_cache", {position, s.token[0], s.token[1]}, state.key_cache[l]);
      read(l, "value_cache", {position, s.token[0], s.token[1]}, state.value_cache[l]);
    }
  }
  if (file.tensors().size() != expected)
    fail("{}: {} tensors, the model's state has {} (a skipped layer's, or another model's)", where,
         file.tensors().size(), expected);
  return state;
}

}  // namespace qpu::engine
