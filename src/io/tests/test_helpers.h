#pragma once
// Shared by the io tests: scratch directories and small file helpers.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/testing/scratch_files.h"

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

}  // namespace qpu::io::testing
