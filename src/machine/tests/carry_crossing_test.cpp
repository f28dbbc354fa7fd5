// The carry crossing (machine/carry_crossing.h): a value of the residual window split into
// the two floats that cross up, and joined again, bit for bit on the engine and on HostSim
// (random summation orders). Cases: the bound 2^-30 and its neighbours, the window's ends,
// zeros of both signs, and random floats of every binade -78 .. 35 (fixed seed).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "machine/carry_crossing.h"
#include "machine/wide_float_ram.h"
#include "npu/tests/unit_harness.h"

namespace qpu::machine {
namespace {

using npu::unit_testing::UnitHarness;
using npu::unit_testing::UnitProgram;

std::vector<float> carry_cases() {
  std::vector<float> xs = {0.0f, -0.0f};
  for (float m : {0x1p-30f, std::nextafter(0x1p-30f, 0.0f), std::nextafter(0x1p-30f, 1.0f), 0x1p-78f,
                  std::nextafter(0x1p-78f, 1.0f), std::nextafter(0x1p36f, 0.0f), 0x1p35f, 0x1p-31f, 1.0f, 0x1p19f})
    for (float s : {1.0f, -1.0f}) xs.push_back(s * m);
  std::mt19937_64 rng(20261207);
  for (int e = -78; e <= 35; ++e)
    for (int k = 0; k < 40; ++k) xs.push_back(npu::unit_testing::rand_float(rng, e, e));
  return xs;
}

// Inputs x and enable; outputs high, low and join(high, low).
UnitProgram carry_program() {
  UnitProgram u;
  compiler::Program& p = u.program;
  const compiler::ValueId x = p.value("x"), enable = p.value("enable");
  const CarryParts parts = carry_split(p, x, enable, "carry");
  const compiler::ValueId back = carry_join(p, parts.high, parts.low, enable, "carry.back");
  u.inputs = {x, enable};
  u.outputs = {parts.high, parts.low, back};
  return u;
}

// The one-float form: the high float, and whether x needed the low one.
TEST(CarryCrossing, OneFloatCarryAndItsBelowBitOnTheEngineAndHostSim) {
  UnitProgram u;
  compiler::Program& p = u.program;
  const compiler::ValueId x = p.value("x"), enable = p.value("enable");
  const OneFloatCarry c = carry_split_one(p, x, enable, "carry");
  u.inputs = {x, enable};
  u.outputs = {c.high, c.below};
  const UnitHarness h(std::move(u), 512);
  std::vector<float> in, expect;
  int below = 0;
  for (float v : carry_cases()) {
    const bool b = v != 0.0f && std::fabs(v) < 0x1p-30f;
    below += b;
    in.insert(in.end(), {v, 1.0f});
    expect.insert(expect.end(), {carry_high_reference(v), b ? 1.0f : 0.0f});
  }
  in.insert(in.end(), {0.0f, 0.0f});  // idle
  expect.insert(expect.end(), {0.0f, 0.0f});
  EXPECT_GT(below, 1000);
  for (bool sim : {false, true}) {
    const auto r = h.run(in, expect, sim, 7);
    EXPECT_EQ(r.mismatches, 0) << (sim ? "HostSim: " : "engine: ") << r.first_mismatch;
  }
}

TEST(CarryCrossing, ReferenceSplitsIntoTheUplinkWindow) {
  int high = 0, low = 0;
  for (float x : carry_cases()) {
    ASSERT_TRUE(carry_crossing_holds(x)) << x;
    const float h = carry_high_reference(x), l = carry_low_reference(x);
    // Each crossing float is one the uplink sends exactly, and at most one is nonzero.
    EXPECT_TRUE(wide_float_ram_holds(h)) << x;
    EXPECT_TRUE(wide_float_ram_holds(l)) << x;
    EXPECT_TRUE(h == 0.0f || l == 0.0f) << x;
    EXPECT_EQ(float_bits(carry_join_reference(h, l)), float_bits(0.0f + x)) << x;
    high += h != 0.0f;
    low += l != 0.0f;
  }
  EXPECT_GT(high, 1000);
  EXPECT_GT(low, 1000);
  EXPECT_FALSE(carry_crossing_holds(0x1p36f));
  EXPECT_FALSE(carry_crossing_holds(std::nextafter(0x1p-78f, 0.0f)));
}

TEST(CarryCrossing, SplitAndJoinBitExactOnTheEngineAndHostSim) {
  const UnitHarness h(carry_program(), 512);
  const std::vector<float> xs = carry_cases();
  std::vector<float> in, expect;
  for (float x : xs) {
    in.insert(in.end(), {x, 1.0f});
    expect.insert(expect.end(), {carry_high_reference(x), carry_low_reference(x), x});
  }
  // Idle rows: enable 0, x 0 give +0 everywhere.
  for (int k = 0; k < 4; ++k) {
    in.insert(in.end(), {0.0f, 0.0f});
    expect.insert(expect.end(), {0.0f, 0.0f, 0.0f});
  }
  for (bool sim : {false, true}) {
    const auto r = h.run(in, expect, sim, 7);
    EXPECT_EQ(r.cases, static_cast<int64_t>(xs.size()) + 4);
    EXPECT_EQ(r.mismatches, 0) << (sim ? "HostSim: " : "engine: ") << r.first_mismatch;
  }
  EXPECT_EQ(h.idle_nonzero(), "");
}

}  // namespace
}  // namespace qpu::machine
