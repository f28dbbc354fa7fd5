// The rmsnorm unit (npu/unit_rmsnorm.h) against run.c's rmsnorm, bit for bit: random
// inputs inside the windows (fixed seeds) on the engine and under HostSim's random
// summation orders, edge cases, the real stories260K weight vectors (rms_att[0..4],
// rms_ffn[0..4], rms_final) fed with the golden x records of the greedy story, and
// "idle = zero" after every layer. QPU_NPU_CASES random cases (100,000 in
// npu_units_a_tests, label slow; a short slice in npu_units_a_smoke_tests).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/divide.h"
#include "npu/unit_rmsnorm.h"
#include "reference/run_c_ops.h"
#include "unit_harness.h"

namespace qpu::npu {
namespace {

using unit_testing::rand_float;

using unit_testing::UnitHarness;
using unit_testing::UnitProgram;
using K = reference::TraceKind;

constexpr int64_t kCases = QPU_NPU_CASES;
constexpr bool kLong = kCases >= 100000;

struct Built {
  UnitProgram unit;
  RmsnormUnit rms;
};

Built build(const std::vector<std::vector<float>>& weights, int n) {
  Built b;
  auto& p = b.unit.program;
  const auto x = p.values("x", n);
  const auto flags = p.values("flag", static_cast<int>(weights.size()));
  b.unit.inputs = flags;
  b.unit.inputs.insert(b.unit.inputs.end(), x.begin(), x.end());
  b.rms = rmsnorm_unit(p, weights, x, flags);
  b.unit.outputs = b.rms.out;
  return b;
}

void add_case(const std::vector<std::vector<float>>& ws, size_t s, const std::vector<float>& x, std::vector<float>& in,
              std::vector<float>& expect) {
  for (size_t f = 0; f < ws.size(); ++f) in.push_back(f == s ? 1.0f : 0.0f);
  in.insert(in.end(), x.begin(), x.end());
  std::vector<float> o(x.size());
  reference::rmsnorm(o, x, ws[s]);
  expect.insert(expect.end(), o.begin(), o.end());
}

std::vector<std::vector<float>> random_weights(std::mt19937_64& rng, int count, int n) {
  std::vector<std::vector<float>> ws(static_cast<size_t>(count));
  for (auto& w : ws)
    for (int j = 0; j < n; ++j) w.push_back(rng() % 32 ? rand_float(rng, -6, 3) : 0.0f);
  return ws;
}

// x inside the windows: rms(x) < 64 (sqrt input < 2^12), |x| >= 2^-30 or 0 (squares in
// the value window), a spread of scales from all-tiny (the 1e-5 dominates) to rms ~ 60.
void random_cases(std::mt19937_64& rng, const std::vector<std::vector<float>>& ws, int n, int64_t count,
                  std::vector<float>& in, std::vector<float>& expect, bool edges = true) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t c = 0; c < count; ++c) {
    const int e = -30 + static_cast<int>(rng() % 35);  // top binade of this case, -30..4
    for (auto& v : x) v = (rng() % 16) ? rand_float(rng, std::max(-30, e - 1 - static_cast<int>(rng() % 24)), e) : 0.0f;
    add_case(ws, rng() % ws.size(), x, in, expect);
  }
  for (size_t s = 0; edges && s < ws.size(); ++s) {
    for (float v : {0.0f, 1.0f, -1.0f, 0x1p-30f, 0x1.fffffep4f, 0.003162f, 1e-3f})
      add_case(ws, s, std::vector<float>(static_cast<size_t>(n), v), in, expect);
    std::fill(x.begin(), x.end(), 0.0f);
    x[0] = 0x1.fffffep5f;  // one big value
    add_case(ws, s, x, in, expect);
  }
}

TEST(Rmsnorm, EngineMatchesRunCOnRandomCases) {
  std::mt19937_64 rng(2026);
  const auto ws = random_weights(rng, 3, 64);
  const Built b = build(ws, 64);
  std::vector<float> in, expect;
  random_cases(rng, ws, 64, kCases, in, expect);
  const UnitHarness h(b.unit, 4096);
  const auto r = h.run(in, expect, false);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  EXPECT_GT(r.cases, kCases);
  std::printf("rmsnorm n=64, 3 weight vectors: %lld cases, layers %lld, neurons %lld, values %lld, hidden %lld\n",
              static_cast<long long>(r.cases), static_cast<long long>(h.layers()), static_cast<long long>(h.neurons()),
              static_cast<long long>(h.program().num_values()), static_cast<long long>(h.hidden()));
}

// n not a power of two: ss / n by divide_const.
TEST(Rmsnorm, EngineMatchesRunCForNotPowerOfTwoLength) {
  std::mt19937_64 rng(48);
  const auto ws = random_weights(rng, 2, 48);
  const Built b = build(ws, 48);
  std::vector<float> in, expect;
  random_cases(rng, ws, 48, kCases / 10, in, expect);
  const UnitHarness h(b.unit, 4096);
  const auto r = h.run(in, expect, false);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
}

TEST(Rmsnorm, SimulatorWithRandomSummationOrdersMatchesRunC) {
  std::mt19937_64 rng(9);
  const auto ws = random_weights(rng, 2, 16);
  const Built b = build(ws, 16);
  std::vector<float> in, expect;
  // ~1-4 s per case (a 102-layer checkpoint, every dot product shuffled): 100 cases
  // were run once (0 mismatches); the slow test keeps 24 random + 16 edge cases.
  random_cases(rng, ws, 16, kLong ? 24 : 1, in, expect, kLong);
  const UnitHarness h(b.unit, 256);
  const auto r = h.run(in, expect, true, 3);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
}

TEST(Rmsnorm, IdleUnitWritesOnlyZeros) {
  std::mt19937_64 rng(4);
  const Built b = build(random_weights(rng, 2, 64), 64);
  const UnitHarness h(b.unit, 8);
  EXPECT_EQ(h.idle_nonzero(kLong ? 1 : 51), "");  // the short slice checks layers 51 and 102
}

TEST(Rmsnorm, RejectsBadWeights) {
  compiler::Program p;
  const auto x = p.values("x", 4);
  const auto f = p.values("f", 1);
  EXPECT_THROW(rmsnorm_unit(p, {std::vector<float>(3, 1.0f)}, x, f), Error);
  EXPECT_THROW(rmsnorm_unit(p, {std::vector<float>(4, 1.0f)}, x, {}), Error);
  EXPECT_THROW(rmsnorm_unit(p, {std::vector<float>(4, NAN)}, x, f), Error);
}

// compiler::enable_constants on the deepest primitives the units use (divide, sqrt_rn):
// with enable = 1 the transformed program gives the untransformed one's bits (and C's);
// with enable = 0 and zero operands it writes only zeros, the untransformed one does not.
TEST(RmsnormEnable, DivideAndSqrtWithEnableOneAreBitIdentical) {
  auto make = [](bool gate) {
    UnitProgram u;
    auto& p = u.program;
    const auto in = p.values("in", 4);  // enable, a, b, x
    u.inputs = in;
    u.outputs = {divide(p, in[1], in[2], DivWindow{-9, 6}), sqrt_rn(p, in[3], SqrtWindow{-17, 12})};
    if (gate) compiler::enable_constants(p, 0, in[0]);
    return u;
  };
  std::mt19937_64 rng(31);
  std::vector<float> in, expect;
  const int64_t count = kLong ? 20000 : 50;
  for (int64_t c = 0; c < count; ++c) {
    const float b = std::fabs(rand_float(rng, -9, 5)), x = std::fabs(rand_float(rng, -17, 11));
    const float a = (c % 8 == 0) ? 1.0f : rand_float(rng, -40, 11);
    in.insert(in.end(), {1.0f, a, b, x});
    expect.insert(expect.end(), {a / b, std::sqrt(x)});
  }
  const UnitHarness plain(make(false), 4096), gated(make(true), 4096);
  const auto rp = plain.run(in, expect, false), rg = gated.run(in, expect, false);
  EXPECT_EQ(rp.mismatches, 0) << rp.first_mismatch;
  EXPECT_EQ(rg.mismatches, 0) << rg.first_mismatch;
  EXPECT_EQ(gated.idle_nonzero(kLong ? 1 : 20), "");
  EXPECT_NE(plain.idle_nonzero(kLong ? 1 : 20), "");  // the constants are written by an idle plain unit
}

// stories260K's 11 weight vectors in one unit; each golden x record (x_in -> att_rms_out,
// x_att_res -> ffn_rms_out, the last layer's x_ffn_res -> final_rms_out) with its flag.
TEST(RmsnormGolden, ElevenWeightVectorsMatchTheStory) {
  const auto& ck = unit_testing::stories260k();
  const auto& cfg = ck.config();
  const auto w = ck.weights();
  const auto n = static_cast<size_t>(cfg.dim);
  std::vector<std::vector<float>> ws;
  for (int l = 0; l < cfg.n_layers; ++l)
    ws.emplace_back(w.rms_att.begin() + static_cast<std::ptrdiff_t>(l * n), w.rms_att.begin() + static_cast<std::ptrdiff_t>((l + 1) * n));
  for (int l = 0; l < cfg.n_layers; ++l)
    ws.emplace_back(w.rms_ffn.begin() + static_cast<std::ptrdiff_t>(l * n), w.rms_ffn.begin() + static_cast<std::ptrdiff_t>((l + 1) * n));
  ws.emplace_back(w.rms_final.begin(), w.rms_final.end());
  const Built b = build(ws, cfg.dim);
  const auto& gold = unit_testing::golden();
  ASSERT_GE(gold.positions, 64);
  std::vector<float> in, expect;
  int64_t records = 0;
  auto add = [&](size_t s, const std::vector<float>& x, const std::vector<float>& out) {
    for (size_t f = 0; f < ws.size(); ++f) in.push_back(f == s ? 1.0f : 0.0f);
    in.insert(in.end(), x.begin(), x.end());
    expect.insert(expect.end(), out.begin(), out.end());
    std::vector<float> c(x.size());  // the C reference of the random cases reproduces the record
    reference::rmsnorm(c, x, ws[s]);
    EXPECT_EQ(c, out) << "weight vector " << s;
    ++records;
  };
  for (int pos = 0; pos < gold.positions; ++pos) {
    if (!kLong && pos % 32 != 31) continue;
    for (int l = 0; l < cfg.n_layers; ++l) {
      add(static_cast<size_t>(l), gold.at(K::x_in, pos, l), gold.at(K::att_rms_out, pos, l));
      add(static_cast<size_t>(cfg.n_layers + l), gold.at(K::x_att_res, pos, l), gold.at(K::ffn_rms_out, pos, l));
    }
    add(ws.size() - 1, gold.at(K::x_ffn_res, pos, cfg.n_layers - 1), gold.at(K::final_rms_out, pos, -1));
  }
  const UnitHarness h(b.unit, 1024);
  const auto r = h.run(in, expect, false);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  EXPECT_EQ(r.cases, records);
  std::printf("rmsnorm golden: %lld records, layers %lld, neurons %lld, values %lld, hidden %lld\n",
              static_cast<long long>(records), static_cast<long long>(h.layers()), static_cast<long long>(h.neurons()),
              static_cast<long long>(h.program().num_values()), static_cast<long long>(h.hidden()));
}

}  // namespace
}  // namespace qpu::npu
