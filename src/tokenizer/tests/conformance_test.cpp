// The C++ tokenizer against stock `tokenizers`, live: make_tokenizer_cases.py
// builds tokenizers (trained on its embedded corpus, the Qwen3.5 one through
// transformers' own Qwen3_5Tokenizer) and records what stock tokenizers does.
// Skipped when QPU_PYTHON is empty.
#include <gtest/gtest.h>

#include <filesystem>

#include "conformance.h"

namespace qpu::tokenizer::testing {
namespace {

class StockTokenizers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::string(QPU_PYTHON).empty()) return;
    dir_ = generate_cases(QPU_PYTHON, "");
    cases_ = read_json(dir_ / "cases.json");
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    if (std::string(QPU_PYTHON).empty()) GTEST_SKIP() << "QPU_PYTHON is empty (no virtualenv with tokenizers)";
  }
  static inline std::filesystem::path dir_;
  static inline Json cases_;
};

TEST_F(StockTokenizers, TokenizersEncodeDecodeAndStreamIdentically) {
  ASSERT_EQ(cases_.at("tokenizers").size(), 4u);
  for (const Json& entry : cases_.at("tokenizers")) {
    ASSERT_GT(entry.at("encode").size(), 500u);
    check_tokenizer_cases(entry, dir_);
  }
}

TEST_F(StockTokenizers, NormalizersAgree) { check_normalizer_cases(cases_.at("normalizers")); }

TEST_F(StockTokenizers, PreTokenizersAgree) { check_pre_tokenizer_cases(cases_.at("pre_tokenizers")); }

TEST_F(StockTokenizers, DecodersAgree) { check_decoder_cases(cases_.at("decoders")); }

}  // namespace
}  // namespace qpu::tokenizer::testing
