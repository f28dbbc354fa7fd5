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

  // Drops the mapping's pages that cover `range` (a part of bytes()) from this process's
  // memory (madvise MADV_DONTNEED): a loader that has copied a tensor out gives its pages
  // back, so a streamed load's resident memory does not grow by the file it reads. The
  // mapping is private and read-only, so a later read faults the same bytes back in from
  // the file; releasing a page another reader still uses is therefore harmless.
  void release_pages(std::span<const std::byte> range) const noexcept;

 private:
  void release() noexcept;

  const std::byte* data_ = nullptr;  // nullptr for an empty file (mmap cannot map 0 bytes)
  size_t size_ = 0;
};

}  // namespace qpu::io
