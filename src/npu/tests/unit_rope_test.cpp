// The RoPE unit (npu/unit_rope.h) against run.c's RoPE, bit for bit: random q, k and
// positions (fixed seeds) on the engine and under HostSim's random summation orders,
// every position of stories260K's seq_len, the golden q/k records of the greedy story
// (q, k -> q_rope, k_rope at every layer), and "idle = zero" (enable 0, pos 0, q = k = 0).
// QPU_NPU_CASES random cases (100,000 in npu_units_a_tests, label slow; a short slice
// in npu_units_a_smoke_tests).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/error.h"
#include "npu/unit_rope.h"
#include "unit_harness.h"

namespace qpu::npu {
namespace {

using unit_testing::rand_float;

using unit_testing::UnitHarness;
using unit_testing::UnitProgram;
using K = reference::TraceKind;
using compiler::ValueId;

constexpr int64_t kCases = QPU_NPU_CASES;
constexpr bool kLong = kCases >= 100000;

UnitProgram build(const reference::Llama2Config& c) {
  UnitProgram u;
  auto& p = u.program;
  const ValueId enable = p.value("enable"), pos = p.value("pos");
  const auto q = p.values("q", c.dim), k = p.values("k", c.kv_dim());
  u.inputs = {enable, pos};
  u.inputs.insert(u.inputs.end(), q.begin(), q.end());
  u.inputs.insert(u.inputs.end(), k.begin(), k.end());
  const RopeUnit r = rope_unit(p, c, enable, pos, q, k);
  u.outputs = r.q;
  u.outputs.insert(u.outputs.end(), r.k.begin(), r.k.end());
  return u;
}

void add_case(const reference::Llama2Config& c, int pos, std::vector<float> q, std::vector<float> k, std::vector<float>& in,
              std::vector<float>& expect) {
  in.insert(in.end(), {1.0f, static_cast<float>(pos)});
  in.insert(in.end(), q.begin(), q.end());
  in.insert(in.end(), k.begin(), k.end());
  rope_reference(c, pos, q.data(), k.data());
  expect.insert(expect.end(), q.begin(), q.end());
  expect.insert(expect.end(), k.begin(), k.end());
}

// q, k in the value window with products >= 2^-78 (|v| >= 2^-40 against |fci| >= 2^-16 at
// stories260K's positions), a quarter of them pairs that cancel (v0 fcr ~ v1 fci).
void random_cases(std::mt19937_64& rng, const reference::Llama2Config& c, int64_t count, std::vector<float>& in,
                  std::vector<float>& expect) {
  std::vector<float> q(static_cast<size_t>(c.dim)), k(static_cast<size_t>(c.kv_dim()));
  for (int64_t n = 0; n < count; ++n) {
    const int pos = static_cast<int>(rng() % static_cast<uint64_t>(c.seq_len));
    const int e = -30 + static_cast<int>(rng() % 45);
    for (auto* v : {&q, &k})
      for (size_t i = 0; i < v->size(); i += 2) {
        float& a = (*v)[i];
        float& b = (*v)[i + 1];
        a = (rng() % 16) ? rand_float(rng, std::max(-40, e - 10), e) : 0.0f;
        b = (rng() % 16) ? rand_float(rng, std::max(-40, e - 10), e) : 0.0f;
        if (rng() % 4 == 0) {  // a near-cancelling pair: v1 ~ v0 fcr / fci
          const RopeConstants rc = rope_constants(pos, static_cast<int>(i) % c.head_size(), c.head_size());
          if (rc.fci != 0.0f && a != 0.0f) {
            const float t = a * rc.fcr / rc.fci;
            if (std::isfinite(t) && std::fabs(t) >= 0x1p-40f && std::fabs(t) <= 0x1p14f) b = t;
          }
        }
      }
    add_case(c, pos, q, k, in, expect);
  }
}

reference::Llama2Config stories_config() { return unit_testing::stories260k().config(); }

TEST(Rope, EngineMatchesRunCOnRandomCases) {
  const auto c = stories_config();
  std::mt19937_64 rng(512);
  std::vector<float> in, expect;
  random_cases(rng, c, kCases, in, expect);
  // Every position once with q = k = (1, 2, 3, ...) / 16 and once with ones.
  std::vector<float> q(static_cast<size_t>(c.dim)), k(static_cast<size_t>(c.kv_dim()));
  for (int pos = 0; pos < c.seq_len; ++pos) {
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i + 1) / 16.0f;
    for (size_t i = 0; i < k.size(); ++i) k[i] = -static_cast<float>(i + 1) / 16.0f;
    add_case(c, pos, q, k, in, expect);
    add_case(c, pos, std::vector<float>(q.size(), 1.0f), std::vector<float>(k.size(), 0.0f), in, expect);
  }
  const UnitProgram u = build(c);
  const UnitHarness h(u, 4096);
  const auto r = h.run(in, expect, false);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  EXPECT_EQ(r.cases, kCases + 2 * c.seq_len);
  EXPECT_EQ(h.layers(), 3);
  std::printf("rope (dim %d, kv_dim %d, seq_len %d): %lld cases, layers %lld, neurons %lld, values %lld, hidden %lld\n", c.dim,
              c.kv_dim(), c.seq_len, static_cast<long long>(r.cases), static_cast<long long>(h.layers()),
              static_cast<long long>(h.neurons()), static_cast<long long>(h.program().num_values()),
              static_cast<long long>(h.hidden()));
}

TEST(Rope, SimulatorWithRandomSummationOrdersMatchesRunC) {
  const auto c = stories_config();
  std::mt19937_64 rng(13);
  std::vector<float> in, expect;
  random_cases(rng, c, kLong ? 1000 : 10, in, expect);
  const UnitHarness h(build(c), 1024);
  const auto r = h.run(in, expect, true, 17);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
}

TEST(Rope, IdleUnitWritesOnlyZeros) {
  const UnitHarness h(build(stories_config()), 8);
  EXPECT_EQ(h.idle_nonzero(), "");
}

TEST(Rope, RejectsBadShapes) {
  const auto c = stories_config();
  compiler::Program p;
  const ValueId e = p.value("e"), pos = p.value("pos");
  EXPECT_THROW(rope_unit(p, c, e, pos, p.values("q", c.dim - 2), p.values("k", c.kv_dim())), Error);
  EXPECT_THROW(rope_unit(p, c, e, pos, p.values("q", c.dim), p.values("k", c.dim)), Error);
}

TEST(RopeGolden, QAndKRecordsMatchTheStory) {
  const auto c = stories_config();
  const auto& gold = unit_testing::golden();
  ASSERT_GE(gold.positions, 64);
  std::vector<float> in, expect;
  int64_t records = 0;
  for (int pos = 0; pos < gold.positions; ++pos)
    for (int l = 0; l < c.n_layers; ++l) {
      in.insert(in.end(), {1.0f, static_cast<float>(pos)});
      for (K kind : {K::q, K::k}) {
        const auto& v = gold.at(kind, pos, l);
        in.insert(in.end(), v.begin(), v.end());
      }
      for (K kind : {K::q_rope, K::k_rope}) {
        const auto& v = gold.at(kind, pos, l);
        expect.insert(expect.end(), v.begin(), v.end());
      }
      // The C reference of the random cases reproduces the records.
      std::vector<float> q = gold.at(K::q, pos, l), k = gold.at(K::k, pos, l);
      rope_reference(c, pos, q.data(), k.data());
      EXPECT_EQ(q, gold.at(K::q_rope, pos, l));
      EXPECT_EQ(k, gold.at(K::k_rope, pos, l));
      ++records;
    }
  const UnitHarness h(build(c), 1024);
  const auto r = h.run(in, expect, false);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  EXPECT_EQ(r.cases, records);
}

}  // namespace
}  // namespace qpu::npu
