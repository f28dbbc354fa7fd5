#pragma once
// Fixture for tests on a tiny checkpoint that transformers writes: GetParam() names
// the variant of make_tiny_qwen35.py, generated into a fresh scratch directory.
// Skips when QPU_PYTHON is empty.
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "test_helpers.h"

namespace qpu::io::testing {

class TransformersCheckpoint : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string python = QPU_PYTHON;
    if (python.empty()) GTEST_SKIP() << "QPU_PYTHON is not set (configure with -DQPU_PYTHON=...)";
    const std::string script = testing::test_data("make_tiny_qwen35.py").string();
    const std::string log = (scratch_ / "python.log").string();
    const std::string command =
        "'" + python + "' '" + script + "' '" + scratch_.path().string() + "' " + GetParam() + " > '" + log + "' 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command << "\n" << testing::read_file(log);
    dir_ = scratch_ / GetParam();
  }

  ScratchDir scratch_;
  std::filesystem::path dir_;
};

}  // namespace qpu::io::testing
