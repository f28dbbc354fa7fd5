#pragma once
// Shared by the io tests (and the tests that write checkpoints): scratch directories,
// small file helpers, and the bit-for-bit comparison of two checkpoints' weights.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/float_bits.h"
#include "common/testing/scratch_files.h"
#include "io/qwen35_layout.h"
#include "io/qwen35_weights.h"

namespace qpu::io::testing {

// Scratch directories and file helpers are shared by all tests (common/testing).
using qpu::testing::read_file;
using qpu::testing::write_file;
struct ScratchDir : qpu::testing::ScratchDir {
  ScratchDir() : qpu::testing::ScratchDir("qpu-io-test") {}
};

// Source-tree test data (src/io/tests/...).
inline std::filesystem::path test_data(const std::string& relative) {
  return std::filesystem::path(QPU_SOURCE_DIR) / "src/io/tests" / relative;
}

// Every tensor of `a` and `b` (the same names in the same order, lm_head included) holds
// the same float bits.
inline void expect_same_weights(const Qwen35Weights& a, const Qwen35Weights& b) {
  const auto sa = qwen35_weight_slots(a);
  const auto sb = qwen35_weight_slots(b);
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    ASSERT_EQ(sa[i].name, sb[i].name);
    ASSERT_EQ(sa[i].values->size(), sb[i].values->size()) << sa[i].name;
    for (size_t j = 0; j < sa[i].values->size(); ++j)
      ASSERT_EQ(float_bits((*sa[i].values)[j]), float_bits((*sb[i].values)[j])) << sa[i].name << "[" << j << "]";
  }
  ASSERT_EQ(a.lm_head.size(), b.lm_head.size());
  for (size_t j = 0; j < a.lm_head.size(); ++j) ASSERT_EQ(float_bits(a.lm_head[j]), float_bits(b.lm_head[j]));
}

}  // namespace qpu::io::testing
