#include <gtest/gtest.h>

#include "npu/memory_suite.h"

namespace qpu::npu {
namespace {

// 256 writes (32 in the smoke build) of 256 random fp32 values at random distinct
// 12-bit addresses, then as many reads: every value must come back with its exact bits.
TEST(AttentionMemory, ReadsReturnTheWrittenBits) {
  MemoryOptions o;
  const int64_t n = QPU_NPU_CASES >= 20000 ? 256 : 32;
  o.writes_per_sequence = n;
  o.reads_per_sequence = n;
  const MemoryResult r = run_memory_suite(o);
  EXPECT_EQ(r.values_read, n * 256);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
}

}  // namespace
}  // namespace qpu::npu
