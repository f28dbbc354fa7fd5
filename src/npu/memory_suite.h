#pragma once
// Conformance of the attention memory (write-once associative rows, read exactly):
// a token stream of writes (random distinct addresses, random fp32 rows inside the
// value window) then reads of written addresses; every value read must have the bits
// that were written.
#include <cstdint>
#include <string>

#include "compiler/emit.h"

namespace qpu::npu {

struct MemoryResult {
  int64_t values_read = 0;
  int64_t mismatches = 0;
  int64_t sequences = 0;
  std::string first_mismatch;
};

struct MemoryOptions {
  int address_bits = 12;
  int64_t row_values = 256;        // data values per row (one head of 256)
  int64_t writes_per_sequence = 512;
  int64_t reads_per_sequence = 512;
  int64_t sequences = 1;
  uint64_t seed = 3;
};

MemoryResult run_memory_suite(const MemoryOptions& options);

}  // namespace qpu::npu
