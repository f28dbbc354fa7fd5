// M2b's first step end to end (machine/qkv_machine.h): a prompt loads run.c's x at the
// start of layer l (the golden record x_in of the greedy story) into register X and the
// position into POS; QKV(l) stores q, k, v (after RoPE) into the float RAMs in one cycle;
// the read-back micro-ops send every stored float up. The stream must equal the expected
// one token for token, i.e. every float equals run.c's q_rope, k_rope and v bit for bit.
#include <gtest/gtest.h>

#include <cstdio>

#include "common/float_bits.h"
#include "machine/qkv_machine.h"
#include "machine_runner.h"
#include "npu/tests/unit_harness.h"

namespace qpu::machine {
namespace {

using K = reference::TraceKind;
using npu::unit_testing::golden;
using npu::unit_testing::stories260k;

TEST(QkvMachine, GoldenRecordsBitExactOnTheEngine) {
  const QkvMachine m = build_qkv_machine(stories260k(), QkvMachineOptions{});
  const auto& c = m.compiled.weights.config;
  std::printf("qkv machine: layers %lld, hidden %lld, intermediate %lld, GDN heads per layer %lld, vocab %lld\n",
              static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.intermediate_size), static_cast<long long>(m.compiled.allocation.num_gdn_heads),
              static_cast<long long>(c.vocab_size));
  EXPECT_LE(c.intermediate_size, 1024);
  const auto& gold = golden();
  auto hosts = testing::engine_hosts(m.model());
  int64_t floats = 0, cycles = 0;
  double seconds = 0;
  // Position 0 (RoPE's identity), a middle one and the last golden one; every layer.
  for (const auto& [pos, l] : std::vector<std::pair<int, int>>{{0, 0}, {37, 1}, {95, 2}, {12, 3}, {64, 4}}) {
    SCOPED_TRACE("pos " + std::to_string(pos) + ", layer " + std::to_string(l));
    const std::vector<int64_t> expected =
        m.expected_stream(gold.at(K::q_rope, pos, l), gold.at(K::k_rope, pos, l), gold.at(K::v, pos, l));
    const testing::Run r = testing::run_greedy(m, m.prompt(gold.at(K::x_in, pos, l), pos, l), hosts(),
                                               static_cast<int64_t>(expected.size()) + 4);
    EXPECT_EQ(r.ambiguous, 0);
    EXPECT_LE(r.max_nonzero_on_value_cycles, 3);
    EXPECT_EQ(r.prompt_argmax.back(), m.id("RQ.0"));  // QKV names its successor at once
    ASSERT_EQ(r.generated.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(r.generated[i], expected[i]) << "generated token " << i;
    floats += m.dim + 2 * m.kv_dim;
    cycles += r.generate_forwards;
    seconds += r.generate_seconds;
  }
  std::printf("qkv machine: %lld floats bit-exact (q, k after RoPE, v) over %lld generated cycles, %.3f ms per cycle\n",
              static_cast<long long>(floats), static_cast<long long>(cycles),
              cycles ? 1e3 * seconds / static_cast<double>(cycles) : 0.0);
}

}  // namespace
}  // namespace qpu::machine
