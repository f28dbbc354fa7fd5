// The segment machine (machine/testing/segment_machine.h): C's running sum of up to
// `capacity` terms, one segment per cycle, the running value crossing up between
// segments as two floats. Every generated token (the crossing floats after every segment,
// the branch's choice) is compared with C's loop; the chain unit's shape does not grow
// with the capacity.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <cstdio>
#include <random>
#include <vector>

#include "common/error.h"
#include "compiler/window_check.h"
#include "machine/carry_crossing.h"
#include "machine/crossing_routine.h"
#include "machine/testing/segment_machine.h"
#include "machine/tests/machine_runner.h"
#include "npu/tests/unit_harness.h"

namespace qpu::machine {
namespace {

using testing::engine_hosts;
using testing::run_greedy;

// Terms of the machine's window: random binades [-26, 4], random signs, some +-0; every
// 13 terms the running sum is brought back to 0 (-acc), then to a small value, then to
// one ulp of it (-nextafter(acc, 0)): a running value below 2^-30 that crosses as the
// low float.
std::vector<float> random_terms(std::mt19937_64& rng, int count) {
  std::vector<float> t;
  float acc = 0.0f;
  for (int i = 0; i < count; ++i) {
    float x = npu::unit_testing::rand_float(rng, -26, 4);
    if (i % 13 == 10) x = -acc;
    if (i % 13 == 11) x = npu::unit_testing::rand_float(rng, -26, -9);
    if (i % 13 == 12) x = -std::nextafter(acc, 0.0f);
    if (i % 11 == 7) x = (rng() & 1) ? 0.0f : -0.0f;
    if (!segment_machine_holds(x)) x = npu::unit_testing::rand_float(rng, -26, 4);
    t.push_back(x);
    acc += x;
  }
  return t;
}

struct Counts {
  int64_t runs = 0, floats = 0, low = 0, cycles = 0;
};

void run_cases(const SegmentMachine& m, const std::vector<int>& ns, uint64_t seed, Counts& c) {
  const testing::Hosts hosts = engine_hosts(m.model());
  std::mt19937_64 rng(seed);
  for (int n : ns) {
    const int padded = (n + m.width - 1) / m.width * m.width;
    const std::vector<float> terms = random_terms(rng, padded);
    const std::vector<int64_t> expected = m.expected_stream(n, terms);
    const testing::Run r = run_greedy(m, m.prompt(n, terms), hosts(), static_cast<int64_t>(expected.size()) + 4);
    ASSERT_EQ(r.generated, expected) << "n = " << n;
    ASSERT_EQ(r.ambiguous, 0) << "n = " << n;
    ++c.runs;
    c.cycles += static_cast<int64_t>(r.generated.size());
    float acc = 0.0f;
    for (int t = 0; t < n; ++t) {
      acc += terms[static_cast<size_t>(t)];
      if ((t + 1) % m.width == 0 || t + 1 == n) {
        c.floats += 2;
        c.low += carry_low_reference(acc) != 0.0f;
      }
    }
  }
}

TEST(SegmentMachine, RunningSumBitExactAcrossSegments) {
  SegmentMachineOptions o;
  o.width = 8;
  o.capacity = 256;
  const SegmentMachine m = build_segment_machine(o);
  testing::print_shape("segment machine (w 8, capacity 256)", m);
  Counts c;
  // Every segment count from 1 to 32, partial last segments, and the capacity itself.
  std::vector<int> ns = {1, 7, 8, 9, 16, 17, 63, 64, 65, 129, 200, 255, 256};
  run_cases(m, ns, 20261207, c);
  std::printf("segment machine: %lld runs, %lld crossing floats (%lld low), %lld generated cycles\n",
              static_cast<long long>(c.runs), static_cast<long long>(c.floats), static_cast<long long>(c.low),
              static_cast<long long>(c.cycles));
  EXPECT_GT(c.low, 0) << "no running value crossed as its low float";
}

// Neurons and ops of the chain unit (SEG's ops: the carry's join, the masks, C's
// additions, the carry's split).
std::pair<int64_t, int64_t> chain_unit(const SegmentMachine& m) {
  int64_t neurons = 0, ops = 0;
  for (const auto& op : m.program.ops())
    if (op.label.rfind("seg.", 0) == 0) {
      ++ops;
      neurons += static_cast<int64_t>(op.neurons.size());
    }
  return {neurons, ops};
}

TEST(SegmentMachine, ChainUnitDoesNotGrowWithTheCapacity) {
  // The capacity adds term RAM heads (16 segments each), their reads and control tokens;
  // the chain unit, the crossing and the uplink stay as they are.
  SegmentMachineOptions o;
  o.width = 8;
  o.capacity = 128;
  const SegmentMachine small = build_segment_machine(o);
  o.capacity = 4096;
  const SegmentMachine large = build_segment_machine(o);
  testing::print_shape("segment machine (w 8, capacity 128)", small);
  testing::print_shape("segment machine (w 8, capacity 4096)", large);
  const auto a = chain_unit(small), b = chain_unit(large);
  std::printf("chain unit: %lld neurons in %lld ops (both capacities)\n", static_cast<long long>(a.first),
              static_cast<long long>(a.second));
  EXPECT_GT(a.first, 0);
  EXPECT_EQ(a, b);
  Counts c;
  run_cases(large, {4096, 1000}, 7, c);
}

// The builders' contract (compiler/window_check.h) on every cycle of a run: every value an
// op reads is +-0 or in the value window, every value starts on a dim holding +0.
TEST(SegmentMachine, EveryReadInTheValueWindowAndEveryValueStartsOnPlusZero) {
  SegmentMachineOptions o;
  o.capacity = 64;
  const SegmentMachine m = build_segment_machine(o);
  compiler::WindowCheck check(m.program, m.compiled.schedule, m.compiled.allocation, m.interface.inputs,
                              m.emit_options.norm_exponent);
  const int64_t H = m.compiled.weights.config.hidden_size;
  const testing::Step inner = engine_hosts(std::make_shared<const engine::Model>(m.model()),
                                           [&](int64_t s, std::span<const float> residual) {
                                             check.before_sublayer(s + 1, residual);
                                           })();
  const testing::Step step = [&](int64_t token, std::span<float> logits, std::span<float> hidden) {
    check.before_sublayer(0, std::span<const float>(m.compiled.weights.embed_tokens)
                                 .subspan(static_cast<size_t>(token * H), static_cast<size_t>(H)));
    inner(token, logits, hidden);
  };
  std::mt19937_64 rng(11);
  const std::vector<float> terms = random_terms(rng, 64);
  const std::vector<int64_t> expected = m.expected_stream(61, terms);
  const testing::Run r = run_greedy(m, m.prompt(61, terms), step, static_cast<int64_t>(expected.size()) + 4);
  EXPECT_EQ(r.generated, expected);
  std::string first;
  for (const std::string& v : check.first_violations()) first += "\n  " + v;
  EXPECT_EQ(check.violations(), 0) << first;
}

// The same bits in any summation order (HostSim draws a fresh order in every dot
// product): a low float among the crossings.
TEST(SegmentMachine, RunningSumBitExactOnHostSim) {
  SegmentMachineOptions o;
  o.capacity = 32;
  o.idle_attention_layer = false;  // HostSim runs GDN and MLP sublayers only
  const SegmentMachine m = build_segment_machine(o);
  const io::Qwen35Weights weights = m.dense_weights();  // sim_hosts keeps a reference
  const testing::Hosts hosts = testing::sim_hosts(weights, 5);
  std::mt19937_64 rng(3);
  std::vector<float> terms = random_terms(rng, 32);
  // Segment 0 ends on 2^-43 (its low float), segment 1 starts from it.
  terms[0] = 0x1p-20f;
  terms[1] = -(0x1p-20f - 0x1p-43f);
  for (size_t t = 2; t < 8; ++t) terms[t] = 0.0f;
  float acc = 0.0f;
  int low = 0;
  for (size_t t = 0; t < 32; ++t) {
    acc += terms[t];
    low += (t % 8 == 7) && carry_low_reference(acc) != 0.0f;
  }
  EXPECT_GT(low, 0);
  const std::vector<int64_t> expected = m.expected_stream(32, terms);
  const testing::Run r = run_greedy(m, m.prompt(32, terms), hosts(), static_cast<int64_t>(expected.size()) + 4);
  EXPECT_EQ(r.generated, expected);
}

TEST(SegmentMachine, RefusesBadShapesAndPrompts) {
  SegmentMachineOptions o;
  o.width = 0;
  EXPECT_THROW(build_segment_machine(o), Error);
  o.width = 32;
  EXPECT_THROW(build_segment_machine(o), Error);
  o.width = 8;
  o.capacity = 12;
  EXPECT_THROW(build_segment_machine(o), Error);
  o.capacity = 4104;
  EXPECT_THROW(build_segment_machine(o), Error);
  o.capacity = 16;
  const SegmentMachine m = build_segment_machine(o);
  const std::vector<float> terms(16, 1.0f);
  EXPECT_THROW(m.prompt(0, terms), Error);
  EXPECT_THROW(m.prompt(17, terms), Error);
  EXPECT_THROW(m.prompt(9, std::vector<float>(8, 1.0f)), Error);
  std::vector<float> wide = terms;
  wide[3] = 0x1p-27f;
  EXPECT_THROW(m.prompt(4, wide), Error);
}

// The crossing routine's contract: a carry fits the register file (two floats a value),
// every chain's carry fits the routine, and the routine is built once, after its carries.
TEST(CrossingRoutine, RefusesCarriesItCannotTake) {
  AssemblerOptions o;
  o.elements = 4;
  Assembler as(o, CrossingRoutine::names(2), "CROSS.0");
  EXPECT_THROW(CrossingRoutine(as, 3, 1), Error);  // 6 floats, 4 elements
  EXPECT_THROW(CrossingRoutine(as, 0, 1), Error);
  CrossingRoutine cross(as, 2, 1);
  const compiler::ValueId on = as.input("on");
  EXPECT_THROW(cross.build(), Error);  // no carry yet
  EXPECT_THROW(cross.carry(as.program().values("x", 3), on, on, "three"), Error);
  EXPECT_THROW(cross.first_cross(3), Error);
  EXPECT_EQ(cross.first_cross(1), "CROSS.2");  // one value: the last two floats
  cross.carry(as.program().values("x", 1), on, on, "one");
  EXPECT_EQ(cross.build().size(), 4u);
  EXPECT_THROW(cross.build(), Error);
  EXPECT_THROW(cross.carry(as.program().values("y", 1), on, on, "late"), Error);
}

}  // namespace
}  // namespace qpu::machine
