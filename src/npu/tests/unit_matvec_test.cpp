// The matvec unit (npu/unit_matvec.h) against run.c's matmul, bit for bit: random
// matrices and inputs (fixed seeds) on the engine and under HostSim's random summation
// orders, chain lengths with every tail (n - 1 = 0, 1, 2 mod 3), the real stories260K
// matrices fed with the golden records of the greedy story, and "idle = zero". MatvecWidth:
// lane groups (MatvecOptions) compiled under the width budget's 1,024 neurons per MLP
// sublayer with sink and dim reuse (every stories260K matvec, random wide matrices).
// QPU_NPU_CASES random cases per configuration (100,000 in npu_units_a_tests, label
// slow; a short slice in npu_units_a_smoke_tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/error.h"
#include "compiler/clear_dead.h"
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

// Golden cases of g at `positions` (every layer's flag): x in, C's rows out (padded to
// `lanes` with +0). The golden record is run.c's own result; matvec_reference must agree.
void golden_cases(const GoldenGroup& g, int lanes, const std::vector<int>& positions, std::vector<float>& in,
                  std::vector<float>& expect) {
  const auto& gold = unit_testing::golden();
  for (int pos : positions)
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
      EXPECT_EQ(matvec_reference(g.matrices[m], x.data()), y) << g.name << " pos " << pos;
      y.resize(static_cast<size_t>(lanes), 0.0f);
      expect.insert(expect.end(), y.begin(), y.end());
    }
}

void run_golden(const GoldenGroup& g) {
  const auto& gold = unit_testing::golden();
  ASSERT_GE(gold.positions, 64);
  const Built b = build(g.matrices);
  std::vector<int> positions;
  for (int pos = 0; pos < gold.positions; ++pos)
    if (kLong || pos % 8 == 7) positions.push_back(pos);
  std::vector<float> in, expect;
  golden_cases(g, b.lanes, positions, in, expect);
  const auto checked = static_cast<int64_t>(positions.size() * g.matrices.size());
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

// ---- Width: lane groups (MatvecOptions) under the budget's 1,024 neurons per sublayer ----

// Every matvec of stories260K as the machine uses it: one flag per layer (or the one
// classifier), x = the golden record before it, y = the records after it.
std::vector<GoldenGroup> stories_matvecs() {
  return {{"wq|wk|wv", per_layer({"wq", "wk", "wv"}), K::att_rms_out, {K::q, K::k, K::v}},
          {"wo", per_layer({"wo"}), K::att_out, {K::wo_out}},
          {"w1|w3", per_layer({"w1", "w3"}), K::ffn_rms_out, {K::hb, K::hb2}},
          {"w2", per_layer({"w2"}), K::ffn_prod, {K::w2_out}},
          {"wcls", {llama2_matrix(unit_testing::stories260k(), "wcls", 0)}, K::final_rms_out, {K::logits}, 0, false}};
}

compiler::ScheduleLimits budget_limits(int64_t max_neurons_per_mlp = 1024) {
  compiler::ScheduleLimits l;
  l.max_neurons_per_mlp = max_neurons_per_mlp;
  l.sink = true;
  return l;
}

struct Shape {
  int64_t sublayers = 0, mlp_sublayers = 0, hidden = 0, intermediate = 0, neurons = 0;
};

Shape shape_of(const Built& b, const compiler::ScheduleLimits& limits) {
  compiler::Interface io;
  io.inputs = b.unit.inputs;
  io.outputs = b.unit.outputs;
  io.vocab_size = static_cast<int64_t>(io.outputs.size());
  const compiler::ReusePlan plan = compiler::plan_dim_reuse(b.unit.program, io, limits);
  compiler::check_schedule(plan.program, plan.schedule, limits);
  Shape s;
  s.sublayers = plan.schedule.num_sublayers;
  s.mlp_sublayers = plan.allocation.num_layers;
  s.hidden = plan.allocation.hidden_size;
  s.intermediate = plan.allocation.intermediate_size;
  for (const auto& op : b.unit.program.ops()) s.neurons += static_cast<int64_t>(op.neurons.size());
  return s;
}

Built build_with(const std::vector<NestedMatrix>& ms, const MatvecOptions& o) {
  Built b;
  auto& p = b.unit.program;
  const auto x = p.values("x", ms[0].cols);
  const auto flags = p.values("flag", static_cast<int>(ms.size()));
  b.unit.inputs = flags;
  b.unit.inputs.insert(b.unit.inputs.end(), x.begin(), x.end());
  b.mv = matvec_unit(p, ms, x, flags, o);
  b.unit.outputs = b.mv.y;
  b.lanes = static_cast<int>(b.mv.y.size());
  return b;
}

MatvecOptions budget_options() {
  MatvecOptions o;
  o.max_op_neurons = kBudgetMaxOpNeurons;
  return o;
}

// Compiles b with dim reuse under `limits`, the cases baked into the embedding, and runs
// every case on the engine: the number of cases whose outputs differ from expect.
int64_t run_compiled(const Built& b, const compiler::ScheduleLimits& limits, const std::vector<float>& in,
                     const std::vector<float>& expect, std::string& first) {
  compiler::Interface io;
  io.inputs = b.unit.inputs;
  io.outputs = b.unit.outputs;
  const auto count = static_cast<int64_t>(in.size() / io.inputs.size());
  io.vocab_size = std::max<int64_t>(count, static_cast<int64_t>(io.outputs.size()));
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * io.inputs.size(), 0.0f);
  std::copy(in.begin(), in.end(), io.input_rows.begin());
  const compiler::CompiledWithReuse c = compiler::compile_reusing_dims(b.unit.program, io, limits);
  const Forward fwd = engine_host()(c.compiled.weights);
  std::vector<float> hidden(static_cast<size_t>(c.compiled.weights.config.hidden_size));
  int64_t bad = 0;
  for (int64_t t = 0; t < count; ++t) {
    fwd(t, hidden);
    for (size_t o = 0; o < io.outputs.size(); ++o) {
      const float got = hidden[static_cast<size_t>(c.compiled.allocation.dim(io.outputs[o]))];
      const float want = 0.0f + expect[static_cast<size_t>(t) * io.outputs.size() + o];
      if (float_bits(got) != float_bits(want)) {
        if (bad == 0) first = "case " + std::to_string(t) + " output " + std::to_string(o) + ": expected " + describe_float(want) +
                              " got " + describe_float(got);
        ++bad;
        break;
      }
    }
  }
  return bad;
}


// Default limits: lane groups change nothing in the schedule's length. At the budget's
// 1,024 neurons per sublayer (and sink), every matvec compiles with add ops of <= 128
// neurons, no sublayer holds more than 1,024 neurons, and the length is within 3 MLP
// sublayers of the floor max(chain depth, ceil(neurons / 1,024)). (Schedule and
// allocation only: MatvecWidth.StoriesMatvecsMatchTheStory runs them.)
TEST(MatvecWidth, EveryStoriesMatvecCompilesUnderTheBudget) {
  for (const GoldenGroup& g : stories_matvecs()) {
    const int n = g.matrices[0].cols;
    const int64_t depth = 1 + (n - 1 + 2) / 3;  // MLP sublayers of the unit
    const Built plain = build_with(g.matrices, {});
    const Shape d = shape_of(plain, {});
    EXPECT_EQ(d.mlp_sublayers, depth) << g.name;
    const Built split = build_with(g.matrices, budget_options());
    const Shape ds = shape_of(split, {});
    EXPECT_EQ(ds.mlp_sublayers, depth) << g.name;  // same length at the default limit
    EXPECT_EQ(ds.neurons, d.neurons) << g.name;    // the same neurons, regrouped
    for (const auto& op : split.unit.program.ops()) EXPECT_LE(op.neurons.size(), 128u) << g.name << " " << op.label;
    const Shape w = shape_of(split, budget_limits());
    EXPECT_LE(w.intermediate, 1024) << g.name;
    const int64_t floor = std::max(depth, (w.neurons + 1023) / 1024);
    EXPECT_GE(w.mlp_sublayers, floor) << g.name;
    EXPECT_LE(w.mlp_sublayers, floor + 3) << g.name;
    // Without groups, 4 D + 3 M neurons in one op per step do not fit 1,024: the
    // compiler splits such an op by the lanes it writes (compiler/split_mlp.h).
    if (4 * plain.lanes > 1024) {
      size_t widest = 0;
      for (const auto& op : plain.unit.program.ops()) widest = std::max(widest, op.neurons.size());
      EXPECT_GT(widest, 1024u) << g.name;
      EXPECT_LE(shape_of(plain, budget_limits()).intermediate, 1024) << g.name;
    }
    std::printf("%-9s lanes %3d: default %lld sublayers, hidden %lld, intermediate %lld | 1,024 + sink: %lld sublayers, "
                "hidden %lld, intermediate %lld | neurons %lld\n",
                g.name.c_str(), split.lanes, static_cast<long long>(d.sublayers), static_cast<long long>(d.hidden),
                static_cast<long long>(d.intermediate), static_cast<long long>(w.sublayers), static_cast<long long>(w.hidden),
                static_cast<long long>(w.intermediate), static_cast<long long>(w.neurons));
  }
}

// The same units compiled (dim reuse, 1,024, sink) and run on the engine: C's rows on
// the golden records of positions 7, 40 and 95, every layer's flag, plus one idle case
// (every flag and x 0: all +0). w1||w3 and wcls emit 1.4 and 2.9 GB of dense weights
// (hidden x 1,024 x 3 per layer), so the short slice runs the three narrow matrices.
TEST(MatvecWidth, StoriesMatvecsMatchTheStory) {
  for (const GoldenGroup& g : stories_matvecs()) {
    const Built split = build_with(g.matrices, budget_options());
    if (!kLong && 4 * split.lanes > 1024) continue;
    std::vector<float> in, expect;
    golden_cases(g, split.lanes, {7, 40, 95}, in, expect);
    in.insert(in.end(), split.unit.inputs.size(), 0.0f);
    expect.insert(expect.end(), static_cast<size_t>(split.lanes), 0.0f);
    std::string first;
    EXPECT_EQ(run_compiled(split, budget_limits(), in, expect, first), 0) << g.name << ": " << first;
  }
}

// Lane groups on random matrices wider than a sublayer: at a 256-neuron limit (the
// budget scaled down 4x, so the weights stay small) 4 x 80 lanes do not fit one; odd
// group sizes (max_op_neurons 36: 9 lanes), chain tails 0, 1, 2; engine, sink, dim reuse.
TEST(MatvecWidth, LaneGroupsMatchRunCMatmul) {
  for (int n : {64, 66, 68, 2}) {
    std::mt19937_64 rng(4000 + static_cast<uint64_t>(n));
    const std::vector<NestedMatrix> ms = {random_matrix(rng, "a", 80, n), random_matrix(rng, "b", 7, n),
                                          random_matrix(rng, "c", 50, n)};
    MatvecOptions o;
    o.max_op_neurons = 36;
    const Built b = build_with(ms, o);
    const Shape w = shape_of(b, budget_limits(256));
    EXPECT_LE(w.intermediate, 256);
    if (n > 3) {  // steps of 3 additions: 3 or 4 neurons per lane
      // Without groups an op of a step is wider than 256; split by lanes, it fits.
      const Built plain = build_with(ms, {});
      size_t widest = 0;
      for (const auto& op : plain.unit.program.ops()) widest = std::max(widest, op.neurons.size());
      EXPECT_GT(widest, 256u);
      EXPECT_LE(shape_of(plain, budget_limits(256)).intermediate, 256);
      EXPECT_GT(w.mlp_sublayers, 1 + (n - 1 + 2) / 3);  // 4 x 80 + 9 > 256: more than one sublayer per step
    }
    std::vector<float> in, expect;
    random_cases(rng, ms, b.lanes, n == 64 ? kCases / 10 : kCases / 100 + 30, in, expect);
    std::string first;
    EXPECT_EQ(run_compiled(b, budget_limits(256), in, expect, first), 0) << "n " << n << ": " << first;
  }
}

TEST(MatvecWidth, IdleUnitWithLaneGroupsWritesOnlyZeros) {
  std::mt19937_64 rng(6);
  MatvecOptions o;
  o.max_op_neurons = 32;
  const Built b = build_with({random_matrix(rng, "a", 24, 64), random_matrix(rng, "b", 20, 64)}, o);
  const UnitHarness h(b.unit, 8);
  EXPECT_EQ(h.idle_nonzero(), "");
}

TEST(MatvecWidth, RejectsTooSmallALimit) {
  compiler::Program p;
  const auto x = p.values("x", 4);
  const auto f = p.values("f", 1);
  MatvecOptions o;
  o.max_op_neurons = 3;
  EXPECT_THROW(matvec_unit(p, {NestedMatrix{"m", 2, 4, std::vector<float>(8, 1.0f)}}, x, f, o), Error);
}

}  // namespace
}  // namespace qpu::npu
