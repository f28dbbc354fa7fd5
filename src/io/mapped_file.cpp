#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "common/error.h"

namespace qpu::io {

namespace {

// Closes the descriptor on every path out of the constructor; the mapping keeps
// the file alive on its own.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) {
  FdGuard guard{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (guard.fd < 0) fail("{}: cannot open: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(guard.fd, &st) != 0) fail("{}: cannot stat: {}", path.string(), std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", path.string());
  if (st.st_size == 0) return;
  void* mapped = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, guard.fd, 0);
  if (mapped == MAP_FAILED) fail("{}: cannot mmap: {}", path.string(), std::strerror(errno));
  data_ = static_cast<const std::byte*>(mapped);
  size_ = static_cast<size_t>(st.st_size);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release_pages(std::span<const std::byte> range) const noexcept {
  if (data_ == nullptr || range.empty() || range.data() < data_ || range.data() + range.size() > data_ + size_) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(range.data()) & ~(page - 1);
  const auto end = reinterpret_cast<uintptr_t>(range.data() + range.size());
  // Advice only: a failure leaves the pages resident, which changes no byte read.
  (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace qpu::io
