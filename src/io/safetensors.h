#pragma once
// Reading safetensors files: an 8-byte little-endian header length N, N bytes of
// JSON ({name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}), then the
// data section. The header is validated completely before any tensor is touched:
// a file that passes parse_safetensors_header can be read without further checks.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/dtype.h"
#include "io/mapped_file.h"

namespace qpu::io {

// Same limit as the official library: a larger header is treated as hostile.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte range [begin, end) relative to the start of the data section
  uint64_t end = 0;

  uint64_t numel() const;  // product of shape (1 for a scalar)
  uint64_t nbytes() const { return end - begin; }
};

// "[3, 4]"
std::string format_shape(std::span<const int64_t> shape);

struct SafetensorsHeader {
  uint64_t header_size = 0;  // N, the JSON length (including padding)
  uint64_t data_offset = 0;  // 8 + N: where the data section starts in the file
  uint64_t data_size = 0;    // bytes after the header (all covered by tensors)
  std::vector<TensorInfo> tensors;  // in data order (ascending begin)
  std::map<std::string, std::string> metadata;

  const TensorInfo* find(std::string_view name) const;  // nullptr when absent

  std::map<std::string, size_t, std::less<>> index;  // name -> position in `tensors`
};

// Parses and validates a complete file image held in memory (the fuzzer's entry
// point; the file reader below uses it on the mapping). Every violation throws
// qpu::Error whose message starts with `source` and names the tensor involved.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, const std::string& source);

// Widens little-endian F32/BF16/F16 data to fp32, exactly. `raw` must hold
// out.size() elements of `dtype`. Large tensors are converted by several threads;
// the result does not depend on how many.
void upcast_to_f32(DType dtype, std::span<const std::byte> raw, std::span<float> out);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);  // maps and validates

  const std::filesystem::path& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  uint64_t file_size() const { return file_.size(); }

  const TensorInfo* find(std::string_view name) const { return header_.find(name); }
  const TensorInfo& get(std::string_view name) const;  // throws naming file and tensor

  std::span<const std::byte> raw(const TensorInfo& tensor) const;

  // fp32 copy of a float tensor; other dtypes throw (file, tensor and dtype named).
  void read_f32(const TensorInfo& tensor, std::span<float> out) const;
  std::vector<float> read_f32(const TensorInfo& tensor) const;
  std::vector<float> read_f32(std::string_view name) const { return read_f32(get(name)); }
  // Gives the tensor's pages back after it was read (MappedFile::release_pages).
  void release(const TensorInfo& tensor) const noexcept { file_.release_pages(raw(tensor)); }

 private:
  std::filesystem::path path_;
  MappedFile file_;
  SafetensorsHeader header_;
};

}  // namespace qpu::io
