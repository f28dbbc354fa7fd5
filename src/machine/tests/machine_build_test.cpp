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

#include "io/qwen35_layout.h"
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

// A shape-only build (what qpu compile's search builds per candidate) has the full
// build's config, program and schedule, and no embedding or LM head; so the parameter
// count of a candidate is the written checkpoint's. On a deadline schedule with a room
// for the clears, as the search builds them.
TEST(AttentionMachineBuild, ShapeOnlyIsTheFullBuildsShape) {
  TokenMachineOptions o;
  o.max_positions = 16;
  o.limits.max_neurons_per_mlp = 512;
  o.limits.by_deadline = true;
  o.limits.clear_room = 128;
  const TokenMachine full = build_token_machine(stories260k(), o);
  o.shape_only = true;
  const TokenMachine shape = build_token_machine(stories260k(), o);
  const auto &a = full.compiled.weights.config, &b = shape.compiled.weights.config;
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.layer_types, b.layer_types);
  EXPECT_EQ(io::qwen35_parameter_count(a), io::qwen35_parameter_count(b));
  EXPECT_EQ(full.compiled.schedule.sublayer, shape.compiled.schedule.sublayer);
  EXPECT_EQ(full.program.ops().size(), shape.program.ops().size());
  EXPECT_FALSE(full.compiled.weights.embed_tokens.empty());
  EXPECT_TRUE(shape.compiled.weights.embed_tokens.empty());
  EXPECT_LE(a.intermediate_size, 512);
}

}  // namespace
}  // namespace qpu::machine
