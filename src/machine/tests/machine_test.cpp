// The M1 machine end to end (machine/testing/machine.h): a prompt loads x into register X,
// then the host's own greedy argmax, one token per forward, drives MV(A, 0..w-1) into
// Y and MV(B, 0..w-1) (reading Y back through the register file) into Z, then DONE.
// The generated stream must equal the expected one token for token, and y, z decoded
// from the value tokens must equal run.c's matmul bit for bit. QPU_MACHINE_VECTORS =
// vectors at w = 8 on the engine (over QPU_MACHINE_MACHINES machines); QPU_MACHINE_WIDE =
// 32 adds w = 32, 64 adds w = 32 and w = 64; QPU_MACHINE_SIM_VECTORS > 0 adds HostSim.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>

#include <cmath>
#include <random>

#include "common/error.h"
#include "common/float_bits.h"
#include "machine_runner.h"

namespace qpu::machine {
namespace {

using testing::decode_stream;
using testing::engine_hosts;
using testing::run_greedy;
using testing::Run;
using testing::random_float;
using testing::sim_hosts;

// Entries in [2^-4, 2^1) or 0 (one in 8), plus one all-zero column and one all-zero row
// (the column's neuron is left out; the row's lane sums nothing).
std::vector<float> random_matrix(std::mt19937_64& rng, int w) {
  std::vector<float> m(static_cast<size_t>(w * w));
  for (float& v : m) v = rng() % 8 == 0 ? 0.0f : random_float(rng, -4, 1);
  if (w > 2) {
    const auto c = static_cast<int>(rng() % static_cast<uint64_t>(w)), r = static_cast<int>(rng() % static_cast<uint64_t>(w));
    for (int i = 0; i < w; ++i) m[static_cast<size_t>(i * w + c)] = 0.0f;
    for (int j = 0; j < w; ++j) m[static_cast<size_t>(r * w + j)] = 0.0f;
  }
  return m;
}

// x in [2^-3, 2^3) or 0 (one in 16); vector 0 of every batch is all zeros.
std::vector<float> random_vector(std::mt19937_64& rng, int w, bool zeros) {
  std::vector<float> x(static_cast<size_t>(w));
  for (float& v : x) v = zeros || rng() % 16 == 0 ? 0.0f : random_float(rng, -3, 3);
  return x;
}

bool in_uplink_window(float v) { return v == 0.0f || (std::fabs(v) >= 0x1p-47f && std::fabs(v) < 0x1p20f); }

struct Tally {
  int64_t vectors = 0, stream_mismatches = 0, value_mismatches = 0, values = 0, ambiguous = 0, zero_values = 0;
  int64_t max_nonzero = 0;
  double seconds = 0;
  int64_t forwards = 0;
  std::string first;

  double ms_per_cycle() const { return forwards ? 1e3 * seconds / static_cast<double>(forwards) : 0.0; }
};

// Runs `vectors` random x through one machine (fresh host state per vector) and checks
// the stream, the decoded floats and the prompt's own successor predictions.
void run_vectors(const Machine& m, const MachineOptions& o, int vectors, uint64_t seed,
                 const testing::Hosts& new_host, Tally& t) {
  std::mt19937_64 rng(seed);
  const int w = o.width;
  for (int v = 0; v < vectors; ++v) {
    const std::vector<float> x = random_vector(rng, w, v == 0);
    const std::vector<float> y = matvec_c(o.a, x), z = matvec_c(o.b, y);
    for (float c : y) ASSERT_TRUE(in_uplink_window(c)) << describe_float(c);
    for (float c : z) ASSERT_TRUE(in_uplink_window(c)) << describe_float(c);
    if (o.value_jmin > -70) {  // a narrower vocabulary: every part's binade must be >= jmin
      for (const auto* vec : {&y, &z})
        for (float c : *vec)
          ASSERT_TRUE(c == 0.0f || std::fabs(c) >= std::ldexp(1.0f, o.value_jmin + 24)) << describe_float(c);
    }
    const std::vector<int64_t> prompt = m.prompt(x), expected = m.expected_stream(x, o.a, o.b);
    const Run r = run_greedy(m, prompt, new_host(), 8 * w + 4);
    ++t.vectors;
    t.ambiguous += r.ambiguous;
    t.max_nonzero = std::max(t.max_nonzero, r.max_nonzero_on_value_cycles);
    t.seconds += r.generate_seconds;
    t.forwards += r.generate_forwards;
    // The prompt is self-consistent: HDR and every p2 of a WX group predict the next
    // prompt token (the successor parked three cycles in the delay line).
    EXPECT_EQ(r.prompt_argmax[0], prompt[1]);
    for (int i = 0; i < w; ++i) EXPECT_EQ(r.prompt_argmax[static_cast<size_t>(4 * i + 4)], prompt[static_cast<size_t>(4 * i + 5)]);
    if (r.generated != expected) {
      if (t.stream_mismatches++ == 0) {
        size_t k = 0;
        while (k < r.generated.size() && k < expected.size() && r.generated[k] == expected[k]) ++k;
        t.first = "vector " + std::to_string(v) + ": first difference at generated token " + std::to_string(k) +
                  " of " + std::to_string(r.generated.size()) + " (expected " +
                  (k < expected.size() ? std::to_string(expected[k]) : "end") + ", got " +
                  (k < r.generated.size() ? std::to_string(r.generated[k]) : "end") + ")";
      }
      continue;
    }
    const std::vector<float> got = decode_stream(m, r.generated);
    for (size_t i = 0; i < got.size(); ++i) {
      const float want = 0.0f + (i < y.size() ? y[i] : z[i - y.size()]);
      ++t.values;
      t.zero_values += want == 0.0f ? 1 : 0;
      t.value_mismatches += float_bits(got[i]) == float_bits(want) ? 0 : 1;
    }
  }
}

MachineOptions random_options(int w, uint64_t seed) {
  std::mt19937_64 rng(seed);
  MachineOptions o;
  o.width = w;
  o.a = random_matrix(rng, w);
  o.b = random_matrix(rng, w);
  return o;
}

void expect_clean(const Tally& t, const ControlVocab& control) {
  EXPECT_EQ(t.stream_mismatches, 0) << t.first;
  EXPECT_EQ(t.value_mismatches, 0);
  EXPECT_EQ(t.ambiguous, 0);
  // A value-token cycle holds at most the token's inbox channel, the two LM head features
  // of the part the delay line delivers or, on the cycle that hands the successor over,
  // its code (the named flag and at most every group and member bit) and the two control
  // features decoded from it: every unit above is idle and exactly zero.
  const auto bits = [](int64_t n) { return std::bit_width(static_cast<uint64_t>(std::max<int64_t>(n - 1, 1))); };
  EXPECT_LE(t.max_nonzero, 3 + 1 + bits(control.groups()) + bits(control.group_size));
}

#if QPU_MACHINE_VECTORS > 0
TEST(MachineEngine, TwoChainedMatvecsWidth8) {
  Tally t;
  ControlVocab control;  // every machine's: the same tokens
  constexpr int kMachines = QPU_MACHINE_MACHINES;
  for (uint64_t s = 0; s < kMachines; ++s) {
    MachineOptions o = random_options(8, 100 + s);
    // With several machines, the last one is compiled without dim reuse (the option's
    // other path: every value its own dim); it must generate the same streams.
    o.reuse_dims = kMachines == 1 || s + 1 < kMachines;
    Machine m = build_machine(o);
    control = m.control;
    io::Qwen35Weights weights = std::move(m.compiled.weights);  // the engine's copy is the only one
    m.compiled.weights.config = weights.config;                // run_greedy reads the sizes
    run_vectors(m, o, QPU_MACHINE_VECTORS / kMachines, 200 + s, engine_hosts(std::move(weights)), t);
  }
  expect_clean(t, control);
  EXPECT_EQ(t.vectors, QPU_MACHINE_VECTORS / kMachines * kMachines);
  EXPECT_EQ(t.values, t.vectors * 16);
  EXPECT_GE(t.zero_values, 16);  // the all-zero vectors (and zero rows) send the zero token
  std::printf("machine w=8 engine: %lld vectors, %lld floats bit-exact, %lld zeros, %.3f ms per cycle (forward only)\n",
              static_cast<long long>(t.vectors), static_cast<long long>(t.values), static_cast<long long>(t.zero_values),
              t.ms_per_cycle());
}
#endif

TEST(MachineEngine, ShapeAndCounts) {
  const MachineOptions o = random_options(8, 100);
  const Machine m = build_machine(o);
  const auto& c = m.compiled.weights.config;
  int64_t attention = 0;
  for (auto type : c.layer_types) attention += type == io::LayerType::FullAttention ? 1 : 0;
  EXPECT_EQ(attention, 1);  // the idle layer stock transformers needs
  EXPECT_EQ(c.vocab_size, 23297 + 3 + 3 * 8);
  EXPECT_EQ(m.register_file_heads, 8);
  // Heads of 63 columns, one unit per head, one delay line per part (assembler.h: p1's
  // and p2's features are handed over as soon as they are computed): per part the 2^-7
  // mantissa one-hot (128 columns) in 3 heads and the 183 other features (91 binades x 2
  // signs + zero) in 3; the 18 successor columns (2 groups + 16 members, tap 3) in 1.
  EXPECT_EQ(m.delay_heads, 2 * (3 + 3) + 1);
  std::printf("machine w=8: layers %lld, hidden %lld, intermediate %lld, GDN heads per layer %lld (%lld x %lld), "
              "delay heads %d, vocab %lld\n",
              static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.intermediate_size), static_cast<long long>(m.compiled.allocation.num_gdn_heads),
              static_cast<long long>(c.linear_key_head_dim), static_cast<long long>(c.linear_value_head_dim),
              m.delay_heads, static_cast<long long>(c.vocab_size));
}

#if QPU_MACHINE_SIM_VECTORS > 0
// HostSim sums every dot product in a fresh random order; it is slow (dense, shuffled),
// so a w = 2 machine with value tokens of binades [-40, 8] (every part of these y, z
// fits: |y|, |z| >= 2^-16 is asserted) and only the generated cycles' logits computed
// from the hidden state through the LM head's two nonzeros per row.
TEST(MachineSim, RandomSummationOrders) {
  MachineOptions o = random_options(2, 300);
  o.idle_attention_layer = false;  // HostSim runs GDN layers only
  o.value_jmin = -40;
  o.value_jmax = 8;
  const Machine m = build_machine(o);
  Tally t;
  run_vectors(m, o, QPU_MACHINE_SIM_VECTORS, 400, sim_hosts(m.compiled.weights, 1), t);
  expect_clean(t, m.control);
  EXPECT_EQ(t.values, QPU_MACHINE_SIM_VECTORS * 4);
  std::printf("machine w=2 HostSim: %lld vectors, %lld floats bit-exact\n", static_cast<long long>(t.vectors),
              static_cast<long long>(t.values));
}
#endif

TEST(MachineBuild, RejectsBadShapes) {
  MachineOptions o = random_options(4, 1);
  o.width = 5;
  EXPECT_THROW(build_machine(o), Error);
  o = random_options(4, 1);
  o.value_dim = 48;  // not a power of 4 or twice one
  EXPECT_THROW(build_machine(o), Error);
  o = random_options(0, 1);
  EXPECT_THROW(build_machine(o), Error);
}

#if QPU_MACHINE_WIDE > 0
// The matvec unit keeps 10 values per lane (its rotating product sets) and dim reuse
// hands them on, so a lane costs a few residual dims, not w of them (the w^2 products of
// the first skeleton): from w = 8 to w = 40, 32 more lanes may add at most the unit's
// 10 values each (plus the lane and write flags, which the unit's values outlive).
TEST(MachineEngine, HiddenGrowsLinearlyWithWidth) {
  const int64_t narrow = build_machine(random_options(8, 700)).compiled.weights.config.hidden_size;
  const int64_t wide = build_machine(random_options(40, 701)).compiled.weights.config.hidden_size;
  std::printf("machine hidden: w=8 %lld, w=40 %lld\n", static_cast<long long>(narrow), static_cast<long long>(wide));
  EXPECT_LE(wide - narrow, 32 * 12);
  EXPECT_GE(wide, narrow);
}

// Hidden grows linearly with w (matvec unit + dim reuse); the engine's copy of the
// weights is the only one (the dense io::Qwen35Weights dominate the peak RSS:
// docs/npu-machine.md "M1 skeleton (built)").
void run_wide(int w, int vectors) {
  const MachineOptions o = random_options(w, 500 + static_cast<uint64_t>(w));
  Machine m = build_machine(o);
  const auto c = m.compiled.weights.config;
  Tally t;
  io::Qwen35Weights weights = std::move(m.compiled.weights);  // the engine's copy is the only one
  m.compiled.weights.config = c;                             // run_greedy reads the sizes
  run_vectors(m, o, vectors, 600, engine_hosts(std::move(weights)), t);
  expect_clean(t, m.control);
  EXPECT_EQ(t.values, vectors * 2 * w);
  std::printf("machine w=%d: %.3f ms per cycle (forward only); layers %lld, hidden %lld, intermediate %lld, GDN heads "
              "per layer %lld, delay heads %d\n",
              w, t.ms_per_cycle(), static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.intermediate_size), static_cast<long long>(m.compiled.allocation.num_gdn_heads),
              m.delay_heads);
}

TEST(MachineEngine, TwoChainedMatvecsWidth32) { run_wide(32, 3); }
#if QPU_MACHINE_WIDE >= 64
TEST(MachineEngine, TwoChainedMatvecsWidth64) { run_wide(64, 2); }
#endif
#endif

}  // namespace
}  // namespace qpu::machine
