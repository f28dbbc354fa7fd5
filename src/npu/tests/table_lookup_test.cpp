// The table lookup (npu/table_lookup.h) on the engine and under HostSim's random
// summation orders, bit for bit: every token of stories260K's embedding table (run.c's
// `memcpy(x, content_row, dim * sizeof(*x))`), random tables with entries across the
// value window, and "idle = zero" (enable 0, index 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/table_lookup.h"
#include "unit_harness.h"

namespace qpu::npu {
namespace {

using compiler::ValueId;
using unit_testing::rand_float;
using unit_testing::UnitHarness;
using unit_testing::UnitProgram;

// HostSim's dense shuffled layers cost ~0.1 s per token: the short build runs a slice
// of each case list under it, the long build (QPU_NPU_CASES = 100,000) all of them.
constexpr bool kLong = QPU_NPU_CASES >= 100000;
template <typename T>
std::vector<T> sim_slice(const std::vector<T>& v, size_t per_case, size_t cases) {
  if (kLong) return v;
  return std::vector<T>(v.begin(), v.begin() + static_cast<ptrdiff_t>(std::min(v.size(), per_case * cases)));
}

UnitProgram embedding_program(const reference::Llama2Checkpoint& checkpoint) {
  UnitProgram u;
  const ValueId enable = u.program.value("enable"), token = u.program.value("token");
  u.inputs = {enable, token};
  u.outputs = embedding_lookup(u.program, checkpoint, enable, token).out;
  return u;
}

// Every token enabled, and its row of the embedding table (run.c's memcpy).
void every_token(const reference::Llama2Checkpoint& checkpoint, std::vector<float>& in, std::vector<float>& expect) {
  const auto& c = checkpoint.config();
  const auto& table = checkpoint.weights().token_embedding;
  for (int t = 0; t < c.vocab_size; ++t) {
    in.insert(in.end(), {1.0f, static_cast<float>(t)});
    expect.insert(expect.end(), table.begin() + static_cast<ptrdiff_t>(t) * c.dim, table.begin() + static_cast<ptrdiff_t>(t + 1) * c.dim);
  }
}

TEST(EmbeddingLookup, EveryTokenGivesItsRowExactly) {
  const auto& checkpoint = unit_testing::stories260k();
  const auto& c = checkpoint.config();
  std::vector<float> in, expect;
  every_token(checkpoint, in, expect);
  const UnitHarness h(embedding_program(checkpoint), 1024);
  const auto r = h.run(in, expect, false);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  EXPECT_EQ(r.cases, c.vocab_size);
  const auto sim = h.run(sim_slice(in, 2, 24), sim_slice(expect, static_cast<size_t>(c.dim), 24), true, 5);
  EXPECT_EQ(sim.mismatches, 0) << sim.first_mismatch;
  // Two MLP sublayers: the ramps (vocab + 2 per chunk of rows) and the rows (vocab neurons).
  const int64_t chunks = (c.vocab_size + kOneHotChunk - 1) / kOneHotChunk;
  EXPECT_EQ(h.layers(), 2);
  EXPECT_EQ(h.neurons(), 2 * int64_t{c.vocab_size} + 2 * chunks);
  std::printf("embedding lookup (vocab %d, dim %d): layers %lld, neurons %lld, hidden %lld\n", c.vocab_size, c.dim,
              static_cast<long long>(h.layers()), static_cast<long long>(h.neurons()), static_cast<long long>(h.hidden()));
}

// On a host of 128 neurons per MLP sublayer the one-hot's chunks and the select's runs of
// rows take sublayers of their own (compiler/split_mlp.h): every row still exactly.
TEST(EmbeddingLookup, SplitOverNarrowSublayersGivesEveryRowExactly) {
  const auto& checkpoint = unit_testing::stories260k();
  const auto& c = checkpoint.config();
  std::vector<float> in, expect;
  every_token(checkpoint, in, expect);
  const UnitHarness h(embedding_program(checkpoint), 1024, 128);
  EXPECT_EQ(h.compiled().weights.config.intermediate_size, 128);
  // The one-hot's 5 chunks fit 128 neurons each, side by side over the layers; the 512
  // rows go in 4 runs, one after another.
  EXPECT_GE(h.layers(), 5);
  const auto r = h.run(in, expect, false);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  EXPECT_EQ(r.cases, c.vocab_size);
  const auto sim = h.run(sim_slice(in, 2, 24), sim_slice(expect, static_cast<size_t>(c.dim), 24), true, 7);
  EXPECT_EQ(sim.mismatches, 0) << sim.first_mismatch;
  const UnitHarness idle(embedding_program(checkpoint), 4, 128);
  EXPECT_EQ(idle.idle_nonzero(), "");
}

TEST(EmbeddingLookup, IdleLookupWritesOnlyZeros) {
  const UnitHarness h(embedding_program(unit_testing::stories260k()), 4);
  EXPECT_EQ(h.idle_nonzero(), "");
}

// Random tables: entries of every binade of the value window, both signs, zeros, whole
// zero rows; every row looked up, in a shuffled order.
TEST(TableLookup, RandomTablesAreExact) {
  std::mt19937_64 rng(2026);
  for (const auto& [rows, cols] : {std::pair{1, 3}, std::pair{2, 1}, std::pair{37, 5}, std::pair{700, 9}}) {
    std::vector<float> table(static_cast<size_t>(rows * cols));
    for (float& v : table) v = (rng() % 8) ? rand_float(rng, -78, 35) : 0.0f;
    if (rows > 2)
      for (int c = 0; c < cols; ++c) table[static_cast<size_t>(cols + c)] = 0.0f;  // row 1 all zero
    table[0] = 0x1p-78f;
    table.back() = -0x1.fffffep35f;
    UnitProgram u;
    const ValueId index = u.program.value("index");
    u.inputs = {index};
    u.outputs = table_lookup(u.program, index, table, rows, cols, "t").out;
    std::vector<int> order(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) order[static_cast<size_t>(r)] = r;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<float> in, expect;
    for (int r : order) {
      in.push_back(static_cast<float>(r));
      expect.insert(expect.end(), table.begin() + r * cols, table.begin() + (r + 1) * cols);
    }
    const UnitHarness h(u, 512);
    const auto e = h.run(in, expect, false);
    EXPECT_EQ(e.mismatches, 0) << rows << " x " << cols << ": " << e.first_mismatch;
    EXPECT_EQ(e.cases, rows);
    const auto s = h.run(sim_slice(in, 1, 24), sim_slice(expect, static_cast<size_t>(cols), 24), true, 11);
    EXPECT_EQ(s.mismatches, 0) << rows << " x " << cols << ": " << s.first_mismatch;
  }
}

TEST(TableLookup, RejectsBadTables) {
  compiler::Program p;
  const ValueId i = p.value("i");
  const std::vector<float> six(6, 1.0f);
  EXPECT_THROW(table_lookup(p, i, six, 0, 6, "t"), Error);
  EXPECT_THROW(table_lookup(p, i, six, 2, 0, "t"), Error);
  EXPECT_THROW(table_lookup(p, i, six, 2, 4, "t"), Error);
  EXPECT_THROW(table_lookup(p, i, std::vector<float>(70000, 1.0f), 70000, 1, "t"), Error);
  std::vector<float> bad = six;
  bad[4] = std::nanf("");
  EXPECT_THROW(table_lookup(p, i, bad, 3, 2, "t"), Error);
  bad[4] = INFINITY;
  EXPECT_THROW(table_lookup(p, i, bad, 3, 2, "t"), Error);
}

}  // namespace
}  // namespace qpu::npu
