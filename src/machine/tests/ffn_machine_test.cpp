// M2a end to end (machine/testing/ffn_machine.h): stories260K's FFN half-layers on the looped
// machine. A prompt loads run.c's x before the FFN of layer l (the golden record
// x_att_res of the greedy story) into a register; the host's own greedy argmax, one
// token per forward, then drives SW(l).0..24 (write-down cycles) and FFN(l).0..63 for
// every layer from l to the last. The generated stream must equal the expected one token
// for token; the first layer's 64 floats decoded from it must equal run.c's x after the
// FFN (x_ffn_res) bit for bit, and the later layers' the composition of run.c's FFNs.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "common/float_bits.h"
#include "engine/model.h"
#include "machine/testing/ffn_machine.h"
#include "machine_runner.h"
#include "synthetic_checkpoint.h"
#include "npu/tests/unit_harness.h"

namespace qpu::machine {
namespace {

using K = reference::TraceKind;
using npu::unit_testing::golden;
using npu::unit_testing::stories260k;

std::string describe_token(const FfnMachine& m, int64_t id) {
  if (m.control.contains(id)) return m.control_names[static_cast<size_t>(m.control.index(id))];
  if (id >= 0 && id < m.encoding.vocab.size()) return "part " + describe_float(m.encoding.vocab.value(id));
  return "id " + std::to_string(id);
}

const FfnMachine& machine() {
  static const FfnMachine m = build_ffn_machine(stories260k(), FfnMachineOptions{});
  return m;
}

TEST(FfnMachine, ShapeFitsTheWidthBudget) {
  const FfnMachine& m = machine();
  const auto& c = m.compiled.weights.config;
  EXPECT_EQ(m.chunks, 25);  // ceil(172 / 7)
  EXPECT_EQ(m.register_file_heads, 2 * 64);  // X0/X1 (one head per element) and XB
  EXPECT_LE(c.intermediate_size, 1024);
  std::printf("ffn machine: layers %lld, hidden %lld, intermediate %lld, GDN heads per layer %lld (%lld x %lld), "
              "delay heads %d, vocab %lld (%lld control tokens)\n",
              static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.intermediate_size), static_cast<long long>(m.compiled.allocation.num_gdn_heads),
              static_cast<long long>(c.linear_key_head_dim), static_cast<long long>(c.linear_value_head_dim),
              m.delay_heads, static_cast<long long>(c.vocab_size), static_cast<long long>(m.control.count));
}

TEST(FfnMachine, GoldenRecordsBitExactOnTheEngine) {
  const FfnMachine& m = machine();
  const reference::Llama2Checkpoint& ck = stories260k();
  const auto& gold = golden();
  auto hosts = testing::engine_hosts(m.model());
  int64_t floats = 0, cycles = 0;
  double seconds = 0;
  // Every layer as the first one (positions 5 and 40 of the greedy story): layer l's
  // output is checked against run.c's record, the later layers against ffn_c.
  std::vector<std::pair<int, int>> cases = {{5, 0}, {40, 1}, {5, 2}, {40, 3}, {5, 4}};
  if (std::getenv("QPU_FFN_MACHINE_CASES")) cases.resize(std::stoul(std::getenv("QPU_FFN_MACHINE_CASES")));
  for (const auto& [pos, first] : cases) {
    SCOPED_TRACE("pos " + std::to_string(pos) + ", first layer " + std::to_string(first));
    const std::vector<float>& x = gold.at(K::x_att_res, pos, first);
    const std::vector<int64_t> prompt = m.prompt(x, first), expected = m.expected_stream(ck, x, first);
    const testing::Run r = testing::run_greedy(m, prompt, hosts(), static_cast<int64_t>(expected.size()) + 4);
    EXPECT_EQ(r.ambiguous, 0);
    EXPECT_LE(r.max_nonzero_on_value_cycles, 3);
    EXPECT_EQ(r.prompt_argmax.back(), m.swiglu(first, 1));  // SW(first).0 names its successor at once
    ASSERT_EQ(r.generated.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_EQ(r.generated[i], expected[i]) << "generated token " << i << ": " << describe_token(m, r.generated[i])
                                             << " instead of " << describe_token(m, expected[i]);
    // The first layer's floats: skip SW(first).1.. and FFN(first).0, then groups of 4.
    const std::vector<float>& want = gold.at(K::x_ffn_res, pos, first);
    const auto first_float = r.generated.begin() + m.chunks;
    const std::vector<int64_t> tail(first_float, first_float + 4 * m.dim);
    const std::vector<float> got = testing::decode_stream(m, tail);
    for (int i = 0; i < m.dim; ++i)
      EXPECT_EQ(float_bits(got[static_cast<size_t>(i)]), float_bits(0.0f + want[static_cast<size_t>(i)]))
          << "x[" << i << "]: " << describe_float(got[static_cast<size_t>(i)]) << " vs "
          << describe_float(want[static_cast<size_t>(i)]);
    floats += m.dim * (m.layers - first);
    cycles += r.generate_forwards;
    seconds += r.generate_seconds;
  }
  std::printf("ffn machine: %lld floats bit-exact over %lld generated cycles, %.3f ms per cycle (forward only)\n",
              static_cast<long long>(floats), static_cast<long long>(cycles), cycles ? 1e3 * seconds / static_cast<double>(cycles) : 0.0);
}

// The whole nested layer but the attention itself: x_in of layer l into X((l + 1) % 2)
// and run.c's attention output xb (att_out) into XB, then ATTO(l) (x += wo xb), SW(l),
// FFN(l) and the later layers' FFNs. Layer l's 64 floats after ATTO must equal run.c's
// x_att_res, and after the FFN x_ffn_res: the input of layer l + 1.
TEST(FfnMachine, WholeLayerButAttentionBitExactOnTheEngine) {
  const FfnMachine& m = machine();
  const reference::Llama2Checkpoint& ck = stories260k();
  const auto& gold = golden();
  auto hosts = testing::engine_hosts(m.model());
  int64_t floats = 0;
  for (const auto& [pos, l] : std::vector<std::pair<int, int>>{{3, 0}, {77, 2}, {50, 4}}) {
    SCOPED_TRACE("pos " + std::to_string(pos) + ", layer " + std::to_string(l));
    const std::vector<float>& x = gold.at(K::x_in, pos, l);
    const std::vector<float>& xb = gold.at(K::att_out, pos, l);
    const std::vector<int64_t> expected = m.expected_layer(ck, x, xb, l);
    const testing::Run r =
        testing::run_greedy(m, m.prompt_layer(x, xb, l), hosts(), static_cast<int64_t>(expected.size()) + 4);
    EXPECT_EQ(r.ambiguous, 0);
    EXPECT_LE(r.max_nonzero_on_value_cycles, 3);
    ASSERT_EQ(r.generated.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_EQ(r.generated[i], expected[i]) << "generated token " << i << ": " << describe_token(m, r.generated[i])
                                             << " instead of " << describe_token(m, expected[i]);
    const std::vector<float> atto = testing::decode_stream(m, {r.generated.begin(), r.generated.begin() + 4 * m.dim});
    const auto first_ffn = r.generated.begin() + 4 * m.dim + m.chunks;
    const std::vector<float> ffn = testing::decode_stream(m, {first_ffn, first_ffn + 4 * m.dim});
    for (int i = 0; i < m.dim; ++i) {
      const auto u = static_cast<size_t>(i);
      EXPECT_EQ(float_bits(atto[u]), float_bits(0.0f + gold.at(K::x_att_res, pos, l)[u])) << "x_att_res[" << i << "]";
      EXPECT_EQ(float_bits(ffn[u]), float_bits(0.0f + gold.at(K::x_ffn_res, pos, l)[u])) << "x_ffn_res[" << i << "]";
    }
    floats += 2 * m.dim;
  }
  std::printf("ffn machine, whole layer but attention: %lld golden floats (x_att_res, x_ffn_res) bit-exact\n",
              static_cast<long long>(floats));
}

// Any llama2.c checkpoint: a synthetic one (synthetic_checkpoint.h), random x from
// random first layers. Narrow GDN layers (4 heads per mixer) keep it small.
TEST(FfnMachine, SyntheticCheckpointBitExactOnTheEngine) {
  std::mt19937_64 weights(808);
  const reference::Llama2Checkpoint ck = testing::synthetic_checkpoint(weights);
  FfnMachineOptions o;
  o.lanes = 2;
  o.limits.max_gdn_memories_per_mixer = 4;
  const FfnMachine m = build_ffn_machine(ck, o);
  EXPECT_EQ(m.chunks, 3);
  auto hosts = testing::engine_hosts(m.model());
  std::mt19937_64 rng(809);
  int64_t floats = 0;
  for (int v = 0; v < 6; ++v) {
    const int first = v % ck.config().n_layers;
    std::vector<float> x(static_cast<size_t>(ck.config().dim));
    for (auto& e : x) e = v == 0 || rng() % 8 == 0 ? 0.0f : npu::unit_testing::rand_float(rng, -6, 2);
    const std::vector<int64_t> expected = m.expected_stream(ck, x, first);
    const testing::Run r = testing::run_greedy(m, m.prompt(x, first), hosts(), static_cast<int64_t>(expected.size()) + 4);
    EXPECT_EQ(r.ambiguous, 0);
    EXPECT_LE(r.max_nonzero_on_value_cycles, 3);
    ASSERT_EQ(r.generated, expected) << "vector " << v;
    floats += ck.config().dim * (ck.config().n_layers - first);
    // ATTO too: the same layer from x_in with a random attention output xb.
    std::vector<float> xb(x.size());
    for (auto& e : xb) e = npu::unit_testing::rand_float(rng, -6, 1);
    const std::vector<int64_t> layer = m.expected_layer(ck, x, xb, first);
    const testing::Run a = testing::run_greedy(m, m.prompt_layer(x, xb, first), hosts(), static_cast<int64_t>(layer.size()) + 4);
    EXPECT_EQ(a.ambiguous, 0);
    ASSERT_EQ(a.generated, layer) << "vector " << v << " through ATTO";
    floats += ck.config().dim * (ck.config().n_layers - first + 1);
  }
  const auto& c = m.compiled.weights.config;
  std::printf("ffn machine (synthetic dim 6, hidden 5, 3 layers): %lld floats bit-exact; layers %lld, hidden %lld, "
              "intermediate %lld\n",
              static_cast<long long>(floats), static_cast<long long>(c.num_hidden_layers),
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.intermediate_size));
}

}  // namespace
}  // namespace qpu::machine
