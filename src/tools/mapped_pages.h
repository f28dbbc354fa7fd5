#pragma once
// Dropping the pages of a read-only mapping after they were read, so that a pass
// over a multi-GB checkpoint keeps its resident size near the piece in hand. The
// pages stay in the page cache; a later read faults them back in from the file.
// Safe because the mappings (io::MappedFile: PROT_READ, MAP_PRIVATE) are never
// written, so there is no private copy to lose.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <span>

namespace qpu::tools {

inline void release_pages(std::span<const std::byte> bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(bytes.data()) + page - 1) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(bytes.data()) + bytes.size()) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace qpu::tools
