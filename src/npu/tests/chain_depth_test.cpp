// The chain-depth shadow performs run.c's operations in run.c's order: its logits equal
// the reference's bit for bit, position after position (greedy from BOS). Its depth
// counts then measure the real chain (docs/npu.md, "Chain of dependent roundings").
#include <gtest/gtest.h>

#include <cstring>

#include "npu/chain_depth.h"
#include "reference/transformer.h"

namespace qpu::npu {
namespace {

TEST(ChainDepth, ShadowReproducesTheReferenceAndItsChainGrowsWithThePosition) {
  const auto ckpt = reference::load_llama2_checkpoint(QPU_SHARED_DIR "/models/stories260K/stories260K.bin");
  ChainShadow shadow(ckpt);
  reference::Transformer ref(ckpt);
  std::vector<float> logits;
  int token = 1;
  ChainDepth first, last;
  for (int pos = 0; pos < 24; ++pos) {
    const ChainDepth d = shadow.forward(token, pos, logits);
    const auto expect = ref.forward(token, pos);
    ASSERT_EQ(logits.size(), expect.size());
    ASSERT_EQ(std::memcmp(logits.data(), expect.data(), logits.size() * sizeof(float)), 0) << "position " << pos;
    if (pos == 0) first = d;
    last = d;
    int best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
      if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int>(i);
    token = best;
  }
  // Attention's sums over t <= pos add one C rounding per position in each of the 5 layers
  // (softmax's sum and xb's accumulation are on the chain one after the other).
  EXPECT_GE(last.c_roundings - first.c_roundings, 5 * 23);
  EXPECT_GT(last.sublayers, first.sublayers);
  EXPECT_GT(first.c_roundings, 5 * (64 + 64 + 172));  // at least the matmul chains of every layer
}

}  // namespace
}  // namespace qpu::npu
