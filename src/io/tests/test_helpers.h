#pragma once
// Shared by the io tests (and the tests that write checkpoints): scratch directories,
// small file helpers, and the bit-for-bit comparison of two checkpoints' weights.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
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

// A small Qwen3.5 text config (vocab 40, hidden 16, 2 attention heads of 8 sharing one KV
// head, GDN heads of 4) with these layer types.
inline nlohmann::json tiny_qwen35_config(bool tied, const std::vector<std::string>& layer_types) {
  return {{"architectures", {"Qwen3_5ForCausalLM"}},
          {"model_type", "qwen3_5_text"},
          {"vocab_size", 40},
          {"hidden_size", 16},
          {"intermediate_size", 24},
          {"num_hidden_layers", layer_types.size()},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"head_dim", 8},
          {"linear_num_key_heads", 1},
          {"linear_num_value_heads", 2},
          {"linear_key_head_dim", 4},
          {"linear_value_head_dim", 4},
          {"layer_types", layer_types},
          {"tie_word_embeddings", tied}};
}

// `action` throws qpu::Error whose message holds every fragment.
template <typename F>
void expect_error(F&& action, const std::vector<std::string>& fragments) {
  try {
    action();
    ADD_FAILURE() << "no error; expected '" << fragments.front() << "'";
  } catch (const Error& e) {
    for (const auto& fragment : fragments) EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
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
