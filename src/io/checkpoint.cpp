#include "io/checkpoint.h"

#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace qpu::io {

namespace {

// A shard must be a plain file name next to the index: no separators, no "." or
// "..", no NUL; otherwise a crafted index could read files outside the checkpoint.
bool is_plain_file_name(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  return name.find_first_of(std::string_view("/\\\0", 3)) == std::string::npos;
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail("{}: read error", path.string());
  return buffer.str();
}

}  // namespace

std::map<std::string, std::string> parse_safetensors_index(std::string_view text, const std::string& source) {
  const auto root = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) fail("{}: not valid JSON", source);
  if (!root.is_object()) fail("{}: not a JSON object", source);
  const auto map_it = root.find("weight_map");
  if (map_it == root.end()) fail("{}: no weight_map", source);
  if (!map_it->is_object()) fail("{}: weight_map is not an object", source);
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string()) fail("{}: tensor '{}': shard is not a string", source, tensor);
    const auto& file = shard.get_ref<const std::string&>();
    if (!is_plain_file_name(file))
      fail("{}: tensor '{}': shard '{}' is not a plain file name inside the checkpoint directory", source, tensor, file);
    weight_map.emplace(tensor, file);
  }
  return weight_map;
}

Checkpoint::Checkpoint(const std::filesystem::path& dir) : dir_(dir) {
  if (!std::filesystem::is_directory(dir)) fail("{}: not a directory", dir.string());
  const auto single = dir / kSingleFileName;
  const auto index_path = dir / kIndexFileName;
  if (std::filesystem::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const auto& tensor : files_[0]->tensors()) tensors_.emplace(tensor.name, Entry{files_[0].get(), &tensor});
    return;
  }
  if (!std::filesystem::exists(index_path))
    fail("{}: neither {} nor {} found", dir.string(), kSingleFileName, kIndexFileName);

  sharded_ = true;
  const auto source = index_path.string();
  const auto weight_map = parse_safetensors_index(read_text_file(index_path), source);
  if (weight_map.empty()) fail("{}: weight_map is empty", source);

  std::map<std::string, const SafetensorsFile*> shards;
  for (const auto& [tensor, shard] : weight_map) {
    if (shards.contains(shard)) continue;
    const auto path = dir / shard;
    if (!std::filesystem::exists(path)) fail("{}: tensor '{}': shard file {} does not exist", source, tensor, path.string());
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    shards.emplace(shard, files_.back().get());
  }
  // Every listed tensor is in its shard, and no shard holds a tensor the index
  // sends elsewhere or does not list (that would be a second, silently ignored copy).
  for (const auto& [tensor, shard] : weight_map) {
    const SafetensorsFile* file = shards.at(shard);
    const TensorInfo* info = file->find(tensor);
    if (info == nullptr) fail("{}: tensor '{}' is listed in shard {} but that file does not contain it", source, tensor, shard);
    tensors_.emplace(tensor, Entry{file, info});
  }
  for (const auto& [shard, file] : shards) {
    for (const auto& info : file->tensors()) {
      const auto it = weight_map.find(info.name);
      if (it == weight_map.end())
        fail("{}: tensor '{}' in shard {} is not listed in the weight_map", source, info.name, shard);
      if (it->second != shard)
        fail("{}: tensor '{}' is in shard {} but the weight_map places it in {}", source, info.name, shard, it->second);
    }
  }
}

std::string Checkpoint::source() const {
  return (dir_ / (sharded_ ? kIndexFileName : kSingleFileName)).string();
}

const Checkpoint::Entry* Checkpoint::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const Checkpoint::Entry& Checkpoint::get(std::string_view name) const {
  const Entry* entry = find(name);
  if (entry == nullptr) fail("{}: no tensor '{}'", source(), name);
  return *entry;
}

}  // namespace qpu::io
