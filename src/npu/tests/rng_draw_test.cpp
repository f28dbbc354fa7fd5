// The RNG draw unit (npu/rng_draw.h): the coin of run.c's n-th draw from the seed and n,
// by GF(2) jumps. Every expected value here comes from stepping reference::random_u32
// (run.c's generator) n times, never from the unit's matrices:
//  * the jump matrices M^(2^k) against 2^k steps, and their products for every n <= 256;
//  * on the engine, for QPU_NPU_CASES seeds (42 in npu_rng_draw_tests, label slow; 6 in
//    the smoke build: run.c's -s 42 and -s 7, 0, 1, 2^63, all ones, then limb patterns
//    and fixed-seed random ones) and EVERY n in [0, 256]: the state bits, both u32
//    halves and the coin, bit for bit; run.c's published coins for seeds 42 and 7;
//  * the same under HostSim's random summation orders on a slice of draws (HostSim
//    takes ~0.5 s per case here: hidden 1,280 x 38 layers, every dot product shuffled);
//  * n past max_draws (n mod 2^K), other max_draws, idle (all zero after every layer;
//    enable 0 with junk seed and n: every value the unit writes is +-0), the cost, and
//    the argument checks.
#include "npu/rng_draw.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/clear_dead.h"
#include "npu/primitives.h"
#include "reference/sampler.h"
#include "unit_harness.h"

namespace qpu::npu {
namespace {

using compiler::ValueId;
using unit_testing::UnitHarness;
using unit_testing::UnitProgram;

constexpr int kStoryDraws = 256;  // a story's draws: at most one per position
constexpr size_t kSeeds = QPU_NPU_CASES;
constexpr bool kFull = kSeeds >= 42;  // the slow build: more HostSim cases, max_draws 1024

// The state after n calls of run.c's random_u32, and the n-th call's u32 (n = 0: the
// output function on the seed itself).
struct Draw {
  uint64_t state;
  uint32_t u32;
  float coin;
};
Draw run_c_draw(uint64_t seed, int64_t n) {
  uint64_t s = seed;
  uint32_t u = static_cast<uint32_t>((s * 0x2545F4914F6CDD1DULL) >> 32);
  for (int64_t i = 0; i < n; ++i) u = reference::random_u32(s);
  return {s, u, static_cast<float>(u >> 8) / 16777216.0f};
}

// Inputs: 4 limbs, n, enable. Outputs: 64 state bits, u32 lo, u32 hi, coin.
UnitProgram build(int max_draws, RngDraw* out = nullptr) {
  UnitProgram u;
  auto& p = u.program;
  const std::array<ValueId, 4> limbs = {p.value("seed0"), p.value("seed1"), p.value("seed2"), p.value("seed3")};
  const ValueId draw = p.value("draw"), enable = p.value("enable");
  u.inputs = {limbs[0], limbs[1], limbs[2], limbs[3], draw, enable};
  const RngDraw r = rng_draw(p, limbs, draw, max_draws, enable);
  u.outputs = r.state;
  u.outputs.insert(u.outputs.end(), {r.u32_lo, r.u32_hi, r.coin});
  if (out) *out = r;
  return u;
}

void add_case(uint64_t seed, int64_t n, int64_t steps, std::vector<float>& in, std::vector<float>& expect) {
  for (int j = 0; j < 4; ++j) in.push_back(static_cast<float>((seed >> (16 * j)) & 0xffffu));
  in.push_back(static_cast<float>(n));
  in.push_back(1.0f);
  const Draw d = run_c_draw(seed, steps);
  for (int i = 0; i < 64; ++i) expect.push_back(static_cast<float>((d.state >> i) & 1u));
  expect.insert(expect.end(), {static_cast<float>(d.u32 & 0xffffu), static_cast<float>(d.u32 >> 16), d.coin});
}

std::vector<uint64_t> test_seeds() {
  std::vector<uint64_t> s = {42, 7, 0, 1, uint64_t{1} << 63, ~uint64_t{0}, 0xffffULL << 48, 0xffffULL,
                             0x8000800080008000ULL, 0x0001000100010001ULL};
  std::mt19937_64 rng(20261130);
  while (s.size() < kSeeds) s.push_back(rng());
  s.resize(kSeeds);
  return s;
}

TEST(RngDrawMatrices, OneStepAndJumpPowersMatchSteppingRunC) {
  const std::vector<Gf2Matrix> powers = xorshift_jump_powers(12);
  std::mt19937_64 rng(5);
  for (int c = 0; c < 200; ++c) {
    const uint64_t s0 = c == 0 ? 1 : c == 1 ? ~uint64_t{0} : rng();
    uint64_t s = s0;
    int64_t steps = 0;
    for (int k = 0; k < 12; ++k) {
      uint64_t jumped = gf2_apply(powers[static_cast<size_t>(k)], s0);
      while (steps < (int64_t{1} << k)) {
        reference::random_u32(s);
        ++steps;
      }
      ASSERT_EQ(jumped, s) << "state " << s0 << ", M^(2^" << k << ")";
    }
  }
  EXPECT_EQ(powers[0], xorshift_matrix());
}

TEST(RngDrawMatrices, ProductsOfPowersGiveEveryDrawUpTo256) {
  const std::vector<Gf2Matrix> powers = xorshift_jump_powers(9);
  for (uint64_t seed : test_seeds()) {
    uint64_t s = seed;
    for (int n = 0; n <= kStoryDraws; ++n) {
      uint64_t jumped = seed;
      for (int k = 0; k < 9; ++k)
        if ((n >> k) & 1) jumped = gf2_apply(powers[static_cast<size_t>(k)], jumped);
      ASSERT_EQ(jumped, s) << "seed " << seed << " n " << n;
      reference::random_u32(s);
    }
  }
  // gf2_multiply against applying its factors one after the other.
  std::mt19937_64 rng(9);
  const Gf2Matrix ab = gf2_multiply(powers[3], powers[5]);
  for (int c = 0; c < 100; ++c) {
    const uint64_t s = rng();
    EXPECT_EQ(gf2_apply(ab, s), gf2_apply(powers[3], gf2_apply(powers[5], s)));
  }
}

// Every n in [0, 256] for kSeeds seeds, on the engine.
TEST(RngDraw, EveryDrawOfManySeedsOnEngine) {
  std::vector<float> in, expect;
  const auto seeds = test_seeds();
  for (uint64_t seed : seeds)
    for (int n = 0; n <= kStoryDraws; ++n) add_case(seed, n, n, in, expect);
  const auto cases = static_cast<int64_t>(seeds.size()) * (kStoryDraws + 1);
  const UnitHarness h(build(kStoryDraws), cases);
  const auto r = h.run(in, expect, false);
  EXPECT_EQ(r.cases, cases);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
}

// run.c's published facts (llama2c-numerics.md), on the engine's outputs directly.
TEST(RngDraw, ReproducesRunCPublishedCoins) {
  std::vector<float> in, expect;
  add_case(42, 1, 1, in, expect);
  add_case(42, 2, 2, in, expect);
  add_case(7, 1, 1, in, expect);
  const UnitHarness h(build(kStoryDraws), 3);
  auto w = h.compiled().weights;
  const auto& alloc = h.compiled().allocation;
  const int64_t H = w.config.hidden_size;
  const UnitProgram& u = build(kStoryDraws);  // same value ids as the harness's program
  for (size_t row = 0; row < 3; ++row)
    for (size_t i = 0; i < 6; ++i) w.embed_tokens[row * static_cast<size_t>(H) + static_cast<size_t>(alloc.dim(u.inputs[i]))] = in[row * 6 + i];
  const Forward fwd = engine_host()(w);
  std::vector<float> hidden(static_cast<size_t>(H));
  auto out = [&](size_t o) { return hidden[static_cast<size_t>(alloc.dim(u.outputs[o]))]; };
  fwd(0, hidden);
  EXPECT_EQ(static_cast<uint32_t>(out(65)) << 16 | static_cast<uint32_t>(out(64)), 0x56ce4ab7u);
  EXPECT_EQ(float_bits(out(66)), float_bits(0.339085221f));
  fwd(1, hidden);
  EXPECT_EQ(float_bits(out(66)), float_bits(0.782255828f));
  fwd(2, hidden);
  EXPECT_EQ(float_bits(out(66)), float_bits(0.820246637f));
}

// Random summation orders: run.c's -s 42 (and -s 7 and a random seed in the slow build)
// at draws whose bits take every jump both ways (each of the 9 bits is 0 in one draw and
// 1 in another: 1, 85 = 0b001010101, 170 = 0b010101010, 256). Every n in [0, 256] was
// run once on 3 seeds x 2 orders (1,542 cases, 808 s): 0 mismatches.
TEST(RngDraw, DrawsUnderHostSimOrders) {
  std::vector<float> in, expect;
  std::vector<uint64_t> seeds = {42};
  std::vector<int> draws = {1, 85, 170, 256};
  if (kFull) {
    seeds.insert(seeds.end(), {7, test_seeds().back()});
    draws.insert(draws.end(), {0, 2, 255, 129, 200, 63});
  }
  for (uint64_t seed : seeds)
    for (int n : draws) add_case(seed, n, n, in, expect);
  const auto cases = static_cast<int64_t>(in.size() / 6);
  const UnitHarness h(build(kStoryDraws), cases);
  for (uint64_t order_seed : kFull ? std::vector<uint64_t>{21, 22} : std::vector<uint64_t>{21}) {
    const auto r = h.run(in, expect, true, order_seed);
    EXPECT_EQ(r.cases, cases);
    EXPECT_EQ(r.mismatches, 0) << "order seed " << order_seed << ": " << r.first_mismatch;
  }
}

// n past max_draws: the unit draws n mod 2^K (K = 9 for 256), up to n < 2^22.
TEST(RngDraw, DrawsPastMaxDrawsWrapModTwoToTheK) {
  std::vector<float> in, expect;
  const std::vector<int64_t> ns = {257, 300, 511, 512, 513, 777, 1023, 1024, 4097, 65535, 65536, 1000003, (1 << 22) - 1};
  for (uint64_t seed : {uint64_t{42}, uint64_t{7}, uint64_t{0x0123456789abcdef}})
    for (int64_t n : ns) add_case(seed, n, n % 512, in, expect);
  const auto cases = static_cast<int64_t>(in.size() / 6);
  const UnitHarness h(build(kStoryDraws), cases);
  const auto r = h.run(in, expect, false);
  EXPECT_EQ(r.cases, cases);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
}

// Other shapes: K = 1 (max_draws 1) and 3 (5): every n in [0, 2^K) for 4 seeds; K = 11
// (1024, slow build only): every n in [0, 2048) for run.c's seeds 42 and 7.
TEST(RngDraw, OtherMaxDraws) {
  for (int max_draws : kFull ? std::vector<int>{1, 5, 1024} : std::vector<int>{1, 5}) {
    SCOPED_TRACE("max_draws " + std::to_string(max_draws));
    const int64_t span = int64_t{1} << std::bit_width(static_cast<unsigned>(max_draws));
    std::vector<float> in, expect;
    std::vector<uint64_t> seeds = {42, 7};
    if (max_draws < 1024) seeds.insert(seeds.end(), {~uint64_t{0}, uint64_t{0x9e3779b97f4a7c15}});
    for (uint64_t seed : seeds)
      for (int64_t n = 0; n < span; ++n) add_case(seed, n, n, in, expect);
    const auto cases = static_cast<int64_t>(in.size() / 6);
    RngDraw r;
    const UnitHarness h(build(max_draws, &r), cases);
    EXPECT_EQ(r.jumps, std::bit_width(static_cast<unsigned>(max_draws)));
    const auto run = h.run(in, expect, false);
    EXPECT_EQ(run.cases, cases);
    EXPECT_EQ(run.mismatches, 0) << run.first_mismatch;
  }
}

// Idle: all inputs 0 -> every value +-0 after every layer; enable 0 with junk seed limbs
// and n -> every value but the inputs +-0 after the last layer (and with enable 1 the
// same rows do draw: the check is not vacuous).
TEST(RngDraw, IdleWritesOnlyZerosWhateverSeedAndDrawHold) {
  struct Junk {
    uint64_t seed;
    int64_t n;
  };
  const std::vector<Junk> junk = {{0, 0}, {42, 1}, {7, 256}, {~uint64_t{0}, 255}, {0x0123456789abcdefULL, 511},
                                  {1, 4097}, {uint64_t{1} << 63, (1 << 22) - 1}, {0xdeadbeefcafef00dULL, 3}};
  RngDraw r;
  const UnitHarness h(build(kStoryDraws, &r), static_cast<int64_t>(junk.size()));
  EXPECT_EQ(h.idle_nonzero(), "");
  io::Qwen35Weights weights = h.compiled().weights;
  const auto& alloc = h.compiled().allocation;
  const int64_t H = weights.config.hidden_size;
  const UnitProgram u = build(kStoryDraws);
  std::vector<float> on_in, on_expect;
  for (size_t row = 0; row < junk.size(); ++row) {
    std::vector<float> in, expect;
    add_case(junk[row].seed, junk[row].n, junk[row].n % 512, in, expect);
    on_in.insert(on_in.end(), in.begin(), in.end());
    on_expect.insert(on_expect.end(), expect.begin(), expect.end());
    in[5] = 0.0f;  // enable
    for (size_t i = 0; i < 6; ++i)
      weights.embed_tokens[row * static_cast<size_t>(H) + static_cast<size_t>(alloc.dim(u.inputs[i]))] = in[i];
  }
  const Forward idle = engine_host()(weights);
  std::vector<float> hidden(static_cast<size_t>(H));
  int64_t checked = 0;
  for (size_t row = 0; row < junk.size(); ++row) {
    idle(static_cast<int64_t>(row), hidden);
    for (int64_t v = 6; v < h.program().num_values(); ++v) {  // values 0..5 are the inputs
      const float x = hidden[static_cast<size_t>(alloc.dim(static_cast<ValueId>(v)))];
      EXPECT_EQ(x, 0.0f) << "row " << row << ": value '" << h.program().name(static_cast<ValueId>(v))
                         << "' = " << describe_float(x);
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int64_t>(junk.size()) * (h.program().num_values() - 6));
  const auto on = h.run(on_in, on_expect, false);
  EXPECT_EQ(on.mismatches, 0) << on.first_mismatch;
}

// The cost (docs/npu.md): sublayers, neurons, nonzero weights (IR terms of gates, ups
// and downs), against one xorshift64star step.
TEST(RngDraw, Cost) {
  auto count = [](const compiler::Program& p, int64_t& ops, int64_t& neurons, int64_t& terms) {
    ops = neurons = terms = 0;
    for (const compiler::Op& op : p.ops())
      if (op.kind == compiler::OpKind::Mlp) {
        ++ops;
        for (const compiler::Neuron& n : op.neurons) {
          ++neurons;
          terms += static_cast<int64_t>(n.gate.terms.size() + n.up.terms.size() + n.down.size());
        }
      }
  };
  for (int max_draws : {256, 1024}) {
    RngDraw r;
    const UnitHarness h(build(max_draws, &r), 1);
    int64_t ops = 0, neurons = 0, terms = 0;
    count(h.program(), ops, neurons, terms);
    std::printf("rng_draw max_draws %d (K = %d): %lld MLP ops, %lld neurons, %lld nonzero terms; compiled: %lld layers, "
                "%lld neurons, hidden %lld\n",
                max_draws, r.jumps, static_cast<long long>(ops), static_cast<long long>(neurons),
                static_cast<long long>(terms), static_cast<long long>(h.layers()), static_cast<long long>(h.neurons()),
                static_cast<long long>(h.hidden()));
    // 2 (floors) + 2 per jump + 18 (xorshift_output).
    EXPECT_EQ(h.layers(), 2 + 2 * r.jumps + 18);
    // Under the v1 width budget (ops sunk as late as useful, <= 1,024 neurons a sublayer).
    const UnitProgram u = build(max_draws);
    compiler::Interface io;
    io.inputs = u.inputs;
    io.outputs = u.outputs;
    io.vocab_size = static_cast<int64_t>(u.outputs.size());
    io.input_rows.assign(static_cast<size_t>(io.vocab_size) * io.inputs.size(), 0.0f);
    const compiler::Compiled budget = compiler::compile(u.program, io, unit_testing::budget_limits());
    std::printf("  with budget_limits(): %lld layers, hidden %lld\n",
                static_cast<long long>(budget.weights.config.num_hidden_layers),
                static_cast<long long>(budget.weights.config.hidden_size));
    EXPECT_EQ(budget.weights.config.num_hidden_layers, h.layers());
    // With dim reuse (dead values cleared): the live width, i.e. what the unit adds to a
    // machine that reuses dims.
    const compiler::CompiledWithReuse reuse = compiler::compile_reusing_dims(u.program, io, unit_testing::budget_limits());
    std::printf("  with dim reuse: %lld layers, hidden %lld\n",
                static_cast<long long>(reuse.compiled.weights.config.num_hidden_layers),
                static_cast<long long>(reuse.compiled.weights.config.hidden_size));
    EXPECT_LE(reuse.compiled.weights.config.hidden_size, unit_testing::kBudgetHidden);
    // Neurons: 3 per floor (60 seed floors, K + 1 floors of n), 129 + 64 per jump, and
    // the output half's (one xorshift64star step minus its 3 xor sublayers' neurons).
    compiler::Program xs;
    const XorShiftOutput xo = xorshift_output(xs, xs.values("s", 64));
    (void)xo;
    int64_t xs_ops = 0, xs_neurons = 0, xs_terms = 0;
    count(xs, xs_ops, xs_neurons, xs_terms);
    EXPECT_EQ(neurons, 3 * (60 + r.jumps + 1) + 193 * r.jumps + xs_neurons);
  }
  compiler::Program step;
  (void)xorshift64star(step, step.values("s", 64));
  int64_t ops = 0, neurons = 0, terms = 0;
  count(step, ops, neurons, terms);
  std::printf("one xorshift64star step (state carried as 64 bits): %lld MLP ops, %lld neurons, %lld nonzero terms\n",
              static_cast<long long>(ops), static_cast<long long>(neurons), static_cast<long long>(terms));
}

TEST(RngDraw, RejectsBadArguments) {
  compiler::Program p;
  const std::array<ValueId, 4> limbs = {p.value("a"), p.value("b"), p.value("c"), p.value("d")};
  const ValueId n = p.value("n"), en = p.value("en");
  EXPECT_THROW(rng_draw(p, limbs, n, 0, en), Error);
  EXPECT_THROW(rng_draw(p, limbs, n, -3, en), Error);
  EXPECT_THROW(rng_draw(p, limbs, n, (1 << 20) + 1, en), Error);
  EXPECT_THROW(rng_draw(p, limbs, limbs[2], 256, en), Error);
  EXPECT_THROW(rng_draw(p, limbs, n, 256, n), Error);
  EXPECT_THROW(rng_draw(p, {limbs[0], limbs[0], limbs[2], limbs[3]}, n, 256, en), Error);
  EXPECT_THROW(rng_draw(p, limbs, 99, 256, en), Error);
  EXPECT_THROW(rng_draw(p, limbs, n, 256, compiler::kOne), Error);
  EXPECT_THROW(rng_draw(p, {limbs[0], limbs[1], limbs[2], -7}, n, 256, en), Error);
  EXPECT_EQ(p.ops().size(), 0u);
  try {
    rng_draw(p, limbs, 99, 256, en);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("draw"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(rng_draw(p, limbs, n, 1 << 20, en));
}

}  // namespace
}  // namespace qpu::npu
