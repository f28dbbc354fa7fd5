#pragma once
// A read-only memory mapping of a whole file (POSIX mmap), released on destruction.
// Checkpoints are mapped rather than read so that a multi-GB file costs no copy
// and only the pages actually upcast are touched.
#include <cstddef>
#include <filesystem>
#include <span>

namespace qpu::io {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::filesystem::path& path);  // throws qpu::Error naming the file
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }

 private:
  void release() noexcept;

  const std::byte* data_ = nullptr;  // nullptr for an empty file (mmap cannot map 0 bytes)
  size_t size_ = 0;
};

}  // namespace qpu::io
