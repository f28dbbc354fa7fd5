#pragma once
// Two models that must be the same model: every step's logits, hidden and State bits
// compared (the streamed constructors and loaders against the dense ones).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/float_bits.h"
#include "engine/model.h"

namespace qpu::engine::testing {

inline void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(float_bits(a[i]), float_bits(b[i])) << what << " [" << i << "]: " << describe_float(a[i]) << " vs "
                                                  << describe_float(b[i]);
}

inline void expect_same_state_bits(const State& a, const State& b, const std::string& what) {
  EXPECT_EQ(a.position, b.position) << what;
  ASSERT_EQ(a.conv_state.size(), b.conv_state.size()) << what;
  for (size_t l = 0; l < a.conv_state.size(); ++l) {
    const std::string n = what + " layer " + std::to_string(l);
    expect_same_bits(a.conv_state[l], b.conv_state[l], n + " conv_state");
    expect_same_bits(a.recurrent_state[l], b.recurrent_state[l], n + " recurrent_state");
    expect_same_bits(a.key_cache[l], b.key_cache[l], n + " key_cache");
    expect_same_bits(a.value_cache[l], b.value_cache[l], n + " value_cache");
  }
  EXPECT_EQ(a.conv_zero_inputs, b.conv_zero_inputs) << what;
  EXPECT_EQ(a.recurrent_zero, b.recurrent_zero) << what;
}

// Both models step through `tokens` side by side from new states; every step's logits,
// hidden and State must match bit for bit.
inline void expect_same_run(const Model& a, const Model& b, const std::vector<int64_t>& tokens, const std::string& what) {
  State sa = a.new_state(), sb = b.new_state();
  expect_same_state_bits(sa, sb, what + " new_state");
  const auto vocab = static_cast<size_t>(a.config().vocab_size);
  const auto hidden = static_cast<size_t>(a.config().hidden_size);
  for (size_t s = 0; s < tokens.size(); ++s) {
    std::vector<float> la(vocab), lb(vocab), ha(hidden), hb(hidden);
    a.forward(tokens[s], sa, la, ha);
    b.forward(tokens[s], sb, lb, hb);
    const std::string step = what + " step " + std::to_string(s);
    expect_same_bits(la, lb, step + " logits");
    expect_same_bits(ha, hb, step + " hidden");
    expect_same_state_bits(sa, sb, step);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace qpu::engine::testing
