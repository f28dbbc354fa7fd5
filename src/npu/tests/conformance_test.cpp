// The conformance suite's short slice on the real engine: every primitive compiled
// into tiny Qwen3.5 checkpoints, QPU_NPU_CASES random cases (20,000 in the short slice,
// 300 in the sanitizer-sized smoke build; fixed seeds) plus its edge cases,
// compared bit for bit with C. `qpu primitives --long` runs >= 1M cases each.
#include <gtest/gtest.h>

#include <limits>

#include "common/error.h"
#include "npu/engine_host.h"
#include "npu/primitives.h"
#include "npu/suite.h"

namespace qpu::npu {
namespace {

class Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Conformance, EngineMatchesC) {
  for (const PrimitiveSpec& spec : all_primitives()) {
    if (spec.name != GetParam()) continue;
    SuiteOptions o;
    o.cases = QPU_NPU_CASES / spec.short_divisor;
    o.rows = 512;
    const SuiteResult r = run_primitive(spec, engine_host(), o);
    EXPECT_EQ(r.cases, o.cases + static_cast<int64_t>(spec.edge_cases.size()));
    EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
    return;
  }
  FAIL() << "no primitive " << GetParam();
}

std::vector<std::string> with_greater_windows(std::vector<std::string> names) {
  for (std::string& n : greater_spec_names()) names.push_back(std::move(n));
  return names;
}

INSTANTIATE_TEST_SUITE_P(All, Conformance,
                         ::testing::ValuesIn(with_greater_windows({"mul", "add", "dot_const", "dot_var", "dot_fused_const", "dot_fused_var", "round_to_int", "split12",
                                           "int_to_bits", "max_step", "argmax", "xorshift", "divide", "divide_const", "divide_shared", "sqrt",
                                           "expf"})));

}  // namespace
}  // namespace qpu::npu

namespace qpu::npu {
namespace {

// greater's window is a precondition, not a formality: outside it the bit is wrong, and a
// window the scales cannot hold is refused.
TEST(GreaterWindow, ScalesPerWindowAndRefusedWindows) {
  EXPECT_EQ(greater_scales({}), 5);  // the default [2^-70, 2^36]
  EXPECT_EQ(greater_scales({-54, 2}), 3);
  EXPECT_EQ(greater_scales({-9, 36}), 2);
  EXPECT_EQ(greater_scales({14, 36}), 1);
  EXPECT_EQ(greater_scales({-70, -48}), 1);
  EXPECT_EQ(greater_scales({-70, -47}), 2);
  Program p;
  const ValueId a = p.value("a"), b = p.value("b");
  EXPECT_THROW(greater(p, a, b, {-71, 36}), Error);  // W_0 = 2^80: the gate would overflow
  EXPECT_THROW(greater(p, a, b, {-70, 37}), Error);  // beyond the value window
  EXPECT_THROW(greater(p, a, b, {5, 4}), Error);
}

// constant_window(c) = {k - 24, 36} for 2^k <= |c| < 2^(k + 1) inside [2^-46, 2^12); the
// default window elsewhere (0, NaN, too small, too large).
TEST(GreaterWindow, ConstantWindowFromTheConstantsBinade) {
  auto is = [](GreaterWindow w, int lo, int hi) { return w.lo == lo && w.hi == hi; };
  EXPECT_TRUE(is(constant_window(1.0f), -24, 36));
  EXPECT_TRUE(is(constant_window(0x1.fffffep-1f), -25, 36));
  EXPECT_TRUE(is(constant_window(-0x1.fffffep0f), -24, 36));
  EXPECT_TRUE(is(constant_window(0x1.62e42ep+6f), -18, 36));  // expf's overflow threshold
  EXPECT_TRUE(is(constant_window(0x1p-46f), -70, 36));
  EXPECT_TRUE(is(constant_window(-0x1.fffffep11f), -13, 36));
  for (float c : {0.0f, -0.0f, 0x1.fffffep-47f, 0x1p12f, -0x1p20f, std::numeric_limits<float>::quiet_NaN()})
    EXPECT_TRUE(is(constant_window(c), GreaterWindow{}.lo, GreaterWindow{}.hi)) << c;
  EXPECT_EQ(greater_scales(constant_window(1.0f)), 3);
  EXPECT_EQ(greater_scales(constant_window(0x1p-8f)), 3);
  EXPECT_EQ(greater_scales(constant_window(0x1p-9f)), 4);
}

TEST(GreaterWindow, EngineBitIsWrongBelowTheWindow) {
  // Window [2^-9, 2^36] (2 scales): d = 2^-9 is exact, d = 2^-19 (scale 0 sees G = 1/2,
  // t_0 ~ 0.0012, snapped to 0) comes out 0 although a > b. The default window gets both.
  Program p;
  const ValueId a = p.value("a"), b = p.value("b");
  const ValueId narrow = greater(p, a, b, {-9, 36}), wide = greater(p, a, b);
  compiler::Interface io;
  io.inputs = {a, b};
  io.outputs = {narrow, wide};
  io.vocab_size = 2;
  io.input_rows = {0x1p-9f, 0.0f, 0x1p-19f, 0.0f};
  const compiler::Compiled c = compiler::compile(p, io);
  const Forward fwd = engine_host()(c.weights);
  std::vector<float> hidden(static_cast<size_t>(c.weights.config.hidden_size));
  auto out = [&](ValueId v) { return hidden[static_cast<size_t>(c.allocation.dim(v))]; };
  fwd(0, hidden);
  EXPECT_EQ(out(narrow), 1.0f);
  EXPECT_EQ(out(wide), 1.0f);
  fwd(1, hidden);
  EXPECT_EQ(out(narrow), 0.0f);
  EXPECT_EQ(out(wide), 1.0f);
}

// run.c's published facts (llama2c-numerics.md): seed 42 gives u32 0x56ce4ab7 and coin
// 0.339085221, then coin 0.782255828; seed 7 gives coin 0.820246637 first. Two chained
// steps on the engine, the state staying in bit form between them.
TEST(XorShift, EngineReproducesRunCSeeds) {
  Program p;
  const auto in = p.values("seed", 64);
  const XorShiftStep a = xorshift64star(p, in);
  const XorShiftStep b = xorshift64star(p, a.state);
  compiler::Interface io;
  io.inputs = in;
  io.outputs = {a.u32_lo, a.u32_hi, a.coin, b.coin};
  io.vocab_size = 4;
  io.input_rows.assign(4 * 64, 0.0f);
  const uint64_t seeds[2] = {42, 7};
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 64; ++i) io.input_rows[static_cast<size_t>(r * 64 + i)] = static_cast<float>((seeds[r] >> i) & 1u);
  const compiler::Compiled c = compiler::compile(p, io);
  const Forward fwd = engine_host()(c.weights);
  std::vector<float> hidden(static_cast<size_t>(c.weights.config.hidden_size));
  auto out = [&](ValueId v) { return hidden[static_cast<size_t>(c.allocation.dim(v))]; };
  fwd(0, hidden);
  EXPECT_EQ(out(a.u32_lo), static_cast<float>(0x4ab7));
  EXPECT_EQ(out(a.u32_hi), static_cast<float>(0x56ce));
  EXPECT_EQ(out(a.coin), 0.339085221f);
  EXPECT_EQ(out(b.coin), 0.782255828f);
  fwd(1, hidden);
  EXPECT_EQ(out(a.coin), 0.820246637f);
}

}  // namespace
}  // namespace qpu::npu
