// The C++ tokenizer against outputs of stock `tokenizers` 0.23.3 committed in
// tests/data (written by `make_tokenizer_cases.py tests/data --committed`), so
// the core is checked on every build, with or without Python.
#include <gtest/gtest.h>

#include <filesystem>

#include "conformance.h"

namespace qpu::tokenizer::testing {
namespace {

const std::filesystem::path kData = std::filesystem::path(QPU_SOURCE_DIR) / "src/tokenizer/tests/data";

TEST(CommittedStockCases, Qwen35AndLlamaStyleTokenizers) {
  const Json cases = read_json(kData / "cases.json");
  ASSERT_EQ(cases.at("tokenizers").size(), 2u);
  for (const Json& entry : cases.at("tokenizers")) {
    ASSERT_GT(entry.at("encode").size(), 100u);
    ASSERT_GT(entry.at("decode").size(), 150u);
    check_tokenizer_cases(entry, kData);
  }
}

}  // namespace
}  // namespace qpu::tokenizer::testing
