// Every code point through the regex classes and NFC, against stock
// `tokenizers` (make_tokenizer_cases.py --unicode). This checks the generated
// unicode_tables.inc against the installed tokenizers. Slow (the Python sweep);
// skipped when QPU_PYTHON is empty.
#include <gtest/gtest.h>

#include <filesystem>

#include "conformance.h"

namespace qpu::tokenizer::testing {
namespace {

TEST(StockTokenizersUnicode, EveryCodePointClassifiedAndNormalizedIdentically) {
  if (std::string(QPU_PYTHON).empty()) GTEST_SKIP() << "QPU_PYTHON is empty (no virtualenv with tokenizers)";
  const std::filesystem::path dir = generate_cases(QPU_PYTHON, "--unicode");
  const Json cases = read_json(dir / "cases.json");
  check_unicode_cases(cases.at("unicode"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qpu::tokenizer::testing
