#pragma once
// A Hugging Face checkpoint directory's tensors: either one model.safetensors or a
// model.safetensors.index.json whose weight_map sends every tensor to a shard file.
// Like transformers, a present model.safetensors wins over an index.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"

namespace qpu::io {

inline constexpr const char* kSingleFileName = "model.safetensors";
inline constexpr const char* kIndexFileName = "model.safetensors.index.json";

class Checkpoint {
 public:
  // Opens (maps and validates) every file. Throws qpu::Error naming the file and,
  // for index problems, the tensor and shard.
  explicit Checkpoint(const std::filesystem::path& dir);

  struct Entry {
    const SafetensorsFile* file;
    const TensorInfo* tensor;
  };

  const std::filesystem::path& dir() const { return dir_; }
  bool sharded() const { return sharded_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  const std::map<std::string, Entry, std::less<>>& tensors() const { return tensors_; }

  // The file that lists the tensors: model.safetensors or the index (for messages).
  std::string source() const;

  const Entry* find(std::string_view name) const;  // nullptr when absent
  const Entry& get(std::string_view name) const;   // throws naming the directory and tensor

 private:
  std::filesystem::path dir_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry, std::less<>> tensors_;
};

// Validates an index.json text (`source` names it): an object with a "weight_map"
// object of tensor -> shard file name, where names stay inside the directory
// (plain file names only). Returns the weight map.
std::map<std::string, std::string> parse_safetensors_index(std::string_view text, const std::string& source);

}  // namespace qpu::io
