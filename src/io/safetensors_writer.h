#pragma once
// Writing safetensors files from fp32 values, as the official library lays them
// out: JSON header padded with spaces to a multiple of 8 bytes (so the data
// section is 8-byte aligned), tensors ordered by element size then name (so every
// tensor stays aligned to its element size). Files appear atomically: each is
// written to a temporary name in the same directory and renamed when complete.
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "io/dtype.h"

namespace qpu::io {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;  // F32, BF16 or F16
  std::vector<int64_t> shape;
  std::span<const float> values;  // product(shape) values, row-major
};

// The caller asserts narrowing to BF16/F16 is exact; the writer verifies it and
// throws qpu::Error naming the tensor, the element and the value if not (nothing
// is left behind on failure). Names must be unique, non-empty and not "__metadata__".
void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

// transformers-style sharding into `dir`: tensors (in the given order) are packed
// greedily into shards of at most max_shard_bytes of data (a bigger tensor gets a
// shard of its own), named <stem>-00001-of-0000N.safetensors, with
// <stem>.safetensors.index.json ({"metadata": {"total_size", "total_parameters"},
// "weight_map"}) written last. When everything fits in one shard, a single
// <stem>.safetensors is written and no index, like save_pretrained.
// Returns the file names written (shards then index).
std::vector<std::string> write_sharded_safetensors(const std::filesystem::path& dir,
                                                   std::span<const TensorToWrite> tensors,
                                                   uint64_t max_shard_bytes,
                                                   const std::map<std::string, std::string>& metadata = {},
                                                   const std::string& stem = "model");

// Writes `bytes` to `path` atomically (temporary file + rename), for the index,
// config.json and anything else small.
void write_file_atomically(const std::filesystem::path& path, std::span<const char> bytes);

}  // namespace qpu::io
