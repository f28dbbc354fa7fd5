// The top-p precheck on stories260K: run.c's stories that the machine holds pass; one where
// more entries reach run.c's cutoff than the machine orders is found at its position, with
// the count of probabilities at or above the cutoff, counted here from run.c's own logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "npu/unit_topp.h"
#include "reference/generate.h"
#include "reference/run_c_ops.h"
#include "runner/story_precheck.h"

namespace qpu::runner {
namespace {

const std::string kModels = std::string(QPU_SHARED_DIR) + "/models/stories260K/";

struct Stories {
  reference::Llama2Checkpoint checkpoint = reference::load_llama2_checkpoint(kModels + "stories260K.bin");
  reference::Tokenizer tokenizer = reference::Tokenizer::load(kModels + "tok512.bin", checkpoint.config().vocab_size);
};

// Entries >= run.c's cutoff at every sampled position of run.c's story with these flags.
std::vector<std::pair<int, int64_t>> kept_per_position(const Stories& s, const std::string& prompt, int steps, float t,
                                                        float topp, uint64_t seed) {
  reference::Transformer transformer(s.checkpoint);
  reference::Sampler sampler(s.checkpoint.config().vocab_size, t, topp, seed);
  const int n = s.checkpoint.config().vocab_size;
  const float cutoff = (1.0f - topp) / static_cast<float>(n - 1);
  std::vector<std::pair<int, int64_t>> kept;
  reference::GenerateCallbacks cb;
  cb.on_step = [&](const reference::GenerateStep& e) {
    if (e.forced) return;
    std::vector<float> p(e.logits.begin(), e.logits.end());
    for (float& x : p) x /= t;
    reference::softmax(p);
    kept.emplace_back(e.pos, std::count_if(p.begin(), p.end(), [&](float x) { return x >= cutoff; }));
  };
  try {
    reference::generate(transformer, s.tokenizer, sampler, prompt, steps, false, cb);
  } catch (const Error&) {
  }
  return kept;
}

TEST(ToppPrecheck, StoriesTheMachineHoldsPass) {
  const Stories s;
  EXPECT_FALSE(first_topp_overflow(s.checkpoint, s.tokenizer, "Lily", 256, 0.8f, 0.9f, 7, npu::kToppSlots));
  EXPECT_FALSE(first_topp_overflow(s.checkpoint, s.tokenizer, "", 256, 1.0f, 0.9f, 42, npu::kToppSlots));
  for (const auto& [pos, kept] : kept_per_position(s, "Lily", 256, 0.8f, 0.9f, 7)) {
    EXPECT_GE(kept, 1) << pos;
    EXPECT_LE(kept, npu::kToppSlots) << pos;
  }
}

TEST(ToppPrecheck, TheFirstPositionBeyondTheMachineIsFound) {
  const Stories s;
  const auto kept = kept_per_position(s, "", 8, 1.8f, 0.95f, 3);
  const auto first = std::find_if(kept.begin(), kept.end(), [](const auto& k) { return k.second > npu::kToppSlots; });
  ASSERT_NE(first, kept.end());
  const auto over = first_topp_overflow(s.checkpoint, s.tokenizer, "", 8, 1.8f, 0.95f, 3, npu::kToppSlots);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->position, first->first);
  EXPECT_EQ(over->kept, first->second);
  // With room for every entry nothing is refused.
  EXPECT_FALSE(first_topp_overflow(s.checkpoint, s.tokenizer, "", 8, 1.8f, 0.95f, 3, 512));
  EXPECT_THROW(first_topp_overflow(s.checkpoint, s.tokenizer, "", 8, 0.0f, 0.95f, 3, 128), Error);
  EXPECT_THROW(first_topp_overflow(s.checkpoint, s.tokenizer, "", 8, 1.0f, 1.0f, 3, 128), Error);
}

}  // namespace
}  // namespace qpu::runner
