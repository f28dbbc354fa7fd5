// Building the attention machines at cache sizes whose blocks outnumber the cache's bank
// groups (32 banks = 4 groups of 8; 48 positions = 6 blocks, 256 = 32). Only the build:
// fast enough for the sanitizer run, which is where an out-of-range flag index shows (the
// exp RAM's wipe flags were once indexed by block in a vector sized by bank group: the
// 256-position story went wrong at position 40, the first position of block 5). The
// golden tests that run these machines (qkv_machine_tests, token_machine_tests) are
// too slow for the sanitizers.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "machine/testing/qkv_machine.h"
#include "machine/token_machine.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::machine {
namespace {

const reference::Llama2Checkpoint& stories260k() {
  static const reference::Llama2Checkpoint c =
      reference::load_llama2_checkpoint(std::string(QPU_SHARED_DIR) + "/models/stories260K/stories260K.bin");
  return c;
}

TEST(AttentionMachineBuild, QkvMachineWithMoreBlocksThanBankGroups) {
  for (const int positions : {40, 48, 64}) {
    SCOPED_TRACE("positions " + std::to_string(positions));
    QkvMachineOptions o;
    o.attention = true;
    o.max_positions = positions;
    const QkvMachine m = build_qkv_machine(stories260k(), o);
    const int last = (positions - 1) / 8;
    EXPECT_GE(m.id("EXP(4)." + std::to_string(last) + ".3"), 0);
    EXPECT_GE(m.id("PROB(4)." + std::to_string(last) + ".3"), 0);
  }
}

TEST(AttentionMachineBuild, TokenMachineForAWholeStory) {
  TokenMachineOptions o;
  o.max_positions = 256;
  o.kv_banks = 32;
  const TokenMachine m = build_token_machine(stories260k(), o);
  EXPECT_EQ(m.max_positions, 256);
  EXPECT_GE(m.id("EXP(4).31.3"), 0);
  const auto& c = m.compiled.weights.config;
  std::printf("token machine, 256 positions: %lld layers, hidden %lld, intermediate %lld, vocab %lld\n",
              static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.intermediate_size), static_cast<long long>(c.vocab_size));
}

}  // namespace
}  // namespace qpu::machine
