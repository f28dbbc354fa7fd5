// The matvec unit (npu/unit_matvec.h) against run.c's matmul, bit for bit: random
// matrices and inputs (fixed seeds) on the engine and under HostSim's random summation
// orders, chain lengths with every tail (n - 1 = 0, 1, 2 mod 3), the real stories260K
// matrices fed with the golden records of the greedy story, and "idle = zero".
// QPU_NPU_CASES random cases per configuration (100,000 in npu_units_a_tests, label
// slow; a short slice in npu_units_a_smoke_tests).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/error.h"
#include "npu/unit_matvec.h"
#include "unit_harness.h"

namespace qpu::npu {
namespace {

using unit_testing::rand_float;

using unit_testing::UnitHarness;
using unit_testing::UnitProgram;
using K = reference::TraceKind;

constexpr int64_t kCases = QPU_NPU_CASES;
constexpr bool kLong = kCases >= 100000;

NestedMatrix random_matrix(std::mt19937_64& rng, const std::string& name, int rows, int cols) {
  NestedMatrix m{name, rows, cols, {}};
  for (int i = 0; i < rows * cols; ++i) m.w.push_back(rng() % 32 ? rand_float(rng, -12, 3) : 0.0f);
  return m;
}

struct Built {
  UnitProgram unit;
  MatvecUnit mv;
  int lanes = 0;
};

Built build(const std::vector<NestedMatrix>& ms) {
  Built b;
  auto& p = b.unit.program;
  const auto x = p.values("x", ms[0].cols);
  const auto flags = p.values("flag", static_cast<int>(ms.size()));
  b.unit.inputs = flags;
  b.unit.inputs.insert(b.unit.inputs.end(), x.begin(), x.end());
  b.mv = matvec_unit(p, ms, x, flags);
  b.unit.outputs = b.mv.y;
  b.lanes = static_cast<int>(b.mv.y.size());
  return b;
}

// Cases: flags one-hot (m), then x; expected: C's matmul of matrix m, +0 beyond its rows.
void add_case(const std::vector<NestedMatrix>& ms, int lanes, size_t m, const std::vector<float>& x, std::vector<float>& in,
              std::vector<float>& expect) {
  for (size_t f = 0; f < ms.size(); ++f) in.push_back(f == m ? 1.0f : 0.0f);
  in.insert(in.end(), x.begin(), x.end());
  std::vector<float> y = matvec_reference(ms[m], x.data());
  y.resize(static_cast<size_t>(lanes), 0.0f);
  expect.insert(expect.end(), y.begin(), y.end());
}

void random_cases(std::mt19937_64& rng, const std::vector<NestedMatrix>& ms, int lanes, int64_t count, std::vector<float>& in,
                  std::vector<float>& expect) {
  const int n = ms[0].cols;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t c = 0; c < count; ++c) {
    // |w x| >= 2^-47 and every partial sum < 2^36: inside the value window.
    const int e = -35 + static_cast<int>(rng() % 50);
    const bool spread = rng() & 1;
    for (auto& v : x) v = (rng() % 16) ? (spread ? rand_float(rng, -35, 14) : rand_float(rng, std::max(-35, e - 8), e)) : 0.0f;
    add_case(ms, lanes, rng() % ms.size(), x, in, expect);
  }
  // Edge cases: zeros, cancellations that only left-to-right order gets right.
  for (size_t m = 0; m < ms.size(); ++m) {
    std::fill(x.begin(), x.end(), 0.0f);
    add_case(ms, lanes, m, x, in, expect);
    for (int j = 0; j < n; ++j) x[static_cast<size_t>(j)] = j % 2 ? -0x1p10f : 0x1.000002p10f;
    add_case(ms, lanes, m, x, in, expect);
    for (int j = 0; j < n; ++j) x[static_cast<size_t>(j)] = j == 0 ? 0x1p20f : 0x1p-5f;
    add_case(ms, lanes, m, x, in, expect);
  }
}

class MatvecRandom : public ::testing::TestWithParam<int> {};

// n = 64 (stories260K's dim; 63 = 21 x 3), 66 and 68 (tails of 2 and 1), 2 and 1.
TEST_P(MatvecRandom, EngineMatchesRunCMatmul) {
  const int n = GetParam();
  std::mt19937_64 rng(1000 + static_cast<uint64_t>(n));
  const std::vector<NestedMatrix> ms = {random_matrix(rng, "a", 64, n), random_matrix(rng, "b", 32, n),
                                        random_matrix(rng, "c", 48, n)};
  const Built b = build(ms);
  std::vector<float> in, expect;
  random_cases(rng, ms, b.lanes, n == 64 ? kCases : kCases / 10, in, expect);
  const UnitHarness h(b.unit, 4096);
  const auto r = h.run(in, expect, false);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  EXPECT_GT(r.cases, n == 64 ? kCases : kCases / 10);
  // Depth: 1 + ceil((n - 1)/3) MLP sublayers (the enable neuron shares the first).
  EXPECT_EQ(h.layers(), 1 + (n - 1 + 2) / 3);
  std::printf("matvec n=%d, 3 matrices (64/32/48 rows): %lld cases, layers %lld, neurons %lld, values %lld\n", n,
              static_cast<long long>(r.cases), static_cast<long long>(h.layers()), static_cast<long long>(h.neurons()),
              static_cast<long long>(h.program().num_values()));
}

INSTANTIATE_TEST_SUITE_P(Lengths, MatvecRandom, ::testing::Values(64, 66, 68, 2, 1));

TEST(Matvec, SimulatorWithRandomSummationOrdersMatchesRunC) {
  std::mt19937_64 rng(77);
  const std::vector<NestedMatrix> ms = {random_matrix(rng, "a", 16, 20), random_matrix(rng, "b", 12, 20)};
  const Built b = build(ms);
  std::vector<float> in, expect;
  random_cases(rng, ms, b.lanes, kLong ? 2000 : 100, in, expect);
  const UnitHarness h(b.unit, 512);
  const auto r = h.run(in, expect, true, 5);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
}

TEST(Matvec, IdleUnitWritesOnlyZeros) {
  std::mt19937_64 rng(5);
  const Built b = build({random_matrix(rng, "a", 24, 64), random_matrix(rng, "b", 20, 64)});
  const UnitHarness h(b.unit, 8);
  EXPECT_EQ(h.idle_nonzero(), "");
}

TEST(Matvec, RejectsBadShapes) {
  compiler::Program p;
  const auto x = p.values("x", 4);
  const auto f = p.values("f", 1);
  EXPECT_THROW(matvec_unit(p, {NestedMatrix{"m", 2, 3, std::vector<float>(6, 1.0f)}}, x, f), Error);
  EXPECT_THROW(matvec_unit(p, {NestedMatrix{"m", 2, 4, std::vector<float>(7, 1.0f)}}, x, f), Error);
  EXPECT_THROW(matvec_unit(p, {NestedMatrix{"m", 2, 4, std::vector<float>(8, 1.0f)}}, x, {}), Error);
  EXPECT_THROW(stack_rows("s", {NestedMatrix{"a", 1, 4, std::vector<float>(4)}, NestedMatrix{"b", 1, 3, std::vector<float>(3)}}), Error);
}

// The real matrices of stories260K, every layer selected by its flag, fed with the golden
// records (x = the record before the matmul) and compared with the record after it.
struct GoldenGroup {
  std::string name;
  std::vector<NestedMatrix> matrices;   // one per layer (or block)
  K input;
  std::vector<K> outputs;               // concatenated = the stacked rows
  int out_offset = 0;                   // first record value (classifier blocks)
  bool per_layer = true;
};

void run_golden(const GoldenGroup& g) {
  const auto& gold = unit_testing::golden();
  ASSERT_GE(gold.positions, 64);
  const Built b = build(g.matrices);
  std::vector<float> in, expect;
  int64_t checked = 0;
  for (int pos = 0; pos < gold.positions; ++pos) {
    if (!kLong && pos % 8 != 7) continue;
    for (size_t m = 0; m < g.matrices.size(); ++m) {
      const int layer = g.per_layer ? static_cast<int>(m) : -1;
      const auto& x = gold.at(g.input, pos, layer);
      for (size_t f = 0; f < g.matrices.size(); ++f) in.push_back(f == m ? 1.0f : 0.0f);
      in.insert(in.end(), x.begin(), x.end());
      std::vector<float> y;
      for (K k : g.outputs) {
        const auto& rec = gold.at(k, pos, layer);
        y.insert(y.end(), rec.begin(), rec.end());
      }
      y = std::vector<float>(y.begin() + g.out_offset, y.begin() + g.out_offset + g.matrices[m].rows);
      // The golden record is run.c's own result; matvec_reference must agree with it.
      EXPECT_EQ(matvec_reference(g.matrices[m], x.data()), y) << g.name << " pos " << pos;
      y.resize(static_cast<size_t>(b.lanes), 0.0f);
      expect.insert(expect.end(), y.begin(), y.end());
      ++checked;
    }
  }
  const UnitHarness h(b.unit, 1024);
  const auto r = h.run(in, expect, false);
  EXPECT_EQ(r.mismatches, 0) << g.name << ": " << r.first_mismatch;
  EXPECT_EQ(r.cases, checked);
  std::printf("golden %s: %lld records, layers %lld, neurons %lld, values %lld, hidden %lld\n", g.name.c_str(),
              static_cast<long long>(checked), static_cast<long long>(h.layers()), static_cast<long long>(h.neurons()),
              static_cast<long long>(h.program().num_values()), static_cast<long long>(h.hidden()));
}

std::vector<NestedMatrix> per_layer(const std::vector<std::string>& names) {
  const auto& ck = unit_testing::stories260k();
  std::vector<NestedMatrix> out;
  for (int l = 0; l < ck.config().n_layers; ++l) {
    std::vector<NestedMatrix> parts;
    for (const auto& n : names) parts.push_back(llama2_matrix(ck, n, l));
    out.push_back(parts.size() == 1 ? parts[0] : stack_rows("stack", parts));
  }
  return out;
}

TEST(MatvecGolden, QkvStackedMatchesTheStory) {
  run_golden({"wq|wk|wv", per_layer({"wq", "wk", "wv"}), K::att_rms_out, {K::q, K::k, K::v}});
}
TEST(MatvecGolden, WoMatchesTheStory) { run_golden({"wo", per_layer({"wo"}), K::att_out, {K::wo_out}}); }
TEST(MatvecGolden, W1MatchesTheStory) { run_golden({"w1", per_layer({"w1"}), K::ffn_rms_out, {K::hb}}); }
TEST(MatvecGolden, W3MatchesTheStory) { run_golden({"w3", per_layer({"w3"}), K::ffn_rms_out, {K::hb2}}); }
TEST(MatvecGolden, W2MatchesTheStory) { run_golden({"w2", per_layer({"w2"}), K::ffn_prod, {K::w2_out}}); }
TEST(MatvecGolden, ClassifierBlocksMatchTheStory) {
  const NestedMatrix wcls = llama2_matrix(unit_testing::stories260k(), "wcls", 0);
  for (int first = 0; first < wcls.rows; first += 128) {
    if (!kLong && first != 0 && first + 128 < wcls.rows) continue;  // the short slice: first and last block
    run_golden({"wcls block " + std::to_string(first), {row_block(wcls, first, 128)}, K::final_rms_out, {K::logits}, first, false});
  }
}

}  // namespace
}  // namespace qpu::npu
