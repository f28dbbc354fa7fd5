// Op::exclusive_writes (ir.h): writes of one value by ops that all promise it may share a
// sublayer. Both schedulers, sinking, check_schedule and critical_path follow the rule
// (checked pair by pair on random structures against an independent longest path), and
// a select built from exclusive picks computes the picked value bit for bit on HostSim
// with its picks side by side.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/clear_dead.h"
#include "compiler/schedule.h"
#include "dim_reuse_programs.h"
#include "random_structures.h"

namespace qpu::compiler {
namespace {

using namespace schedule_testing;

// Every pair of writes of one value in program order: strictly later, or the same
// sublayer when both ops promise exclusive writes. Returns the pairs that share one.
int64_t expect_write_pairs(const Program& p, const Schedule& s, uint64_t seed) {
  int64_t shared = 0;
  const auto& ops = p.ops();
  for (size_t j = 0; j < ops.size(); ++j)
    for (size_t i = 0; i < j; ++i) {
      if (!shares(ops[i].writes(), ops[j].writes())) continue;
      const bool both = ops[i].exclusive_writes && ops[j].exclusive_writes;
      if (both) {
        EXPECT_GE(s.sublayer[j], s.sublayer[i]) << "seed " << seed << " ops " << i << ", " << j;
        shared += s.sublayer[j] == s.sublayer[i];
      } else {
        EXPECT_GT(s.sublayer[j], s.sublayer[i]) << "seed " << seed << " ops " << i << ", " << j;
      }
    }
  return shared;
}

TEST(ExclusiveWrites, RandomStructuresFollowTheRule) {
  int64_t shared = 0, shorter = 0;
  const ScheduleLimits roomy = roomy_limits();
  for (uint64_t seed = 0; seed < 400; ++seed) {
    std::mt19937_64 rng(seed);
    Program p = random_structure(rng, seed % 2 == 0, /*exclusive=*/true);
    add_random_orders(p, rng, static_cast<int>(below(rng, 4)), schedule(p, roomy));
    const ScheduleLimits limits = tight_limits(rng);
    for (const ScheduleLimits& l : {roomy, limits}) {
      const Schedule greedy = schedule(p, l), deadline = schedule_by_deadline(p, l);
      ASSERT_NO_THROW(check_schedule(p, greedy, l)) << "seed " << seed;
      ASSERT_NO_THROW(check_schedule(p, deadline, l)) << "seed " << seed;
      shared += expect_write_pairs(p, greedy, seed) + expect_write_pairs(p, deadline, seed);
      EXPECT_EQ(broken_orders(p, deadline), 0) << "seed " << seed;
      // Sinking keeps the rule (every value's lives free to move).
      const std::vector<bool> none(static_cast<size_t>(p.num_values()), false);
      const Schedule sunk = sink_schedule(p, greedy, l, none, none);
      ASSERT_NO_THROW(check_schedule(p, sunk, l)) << "seed " << seed;
      shared += expect_write_pairs(p, sunk, seed);
    }
    EXPECT_EQ(critical_path(p), longest_chain(p)) << "seed " << seed;
    // Without the promises the same structure is never shorter.
    Program plain = p;
    for (Op& op : plain.mutable_ops()) op.exclusive_writes = false;
    EXPECT_GE(critical_path(plain), critical_path(p)) << "seed " << seed;
    shorter += critical_path(plain) > critical_path(p);
  }
  std::printf("%lld write pairs share a sublayer; %lld of 400 critical paths shorter\n", static_cast<long long>(shared),
              static_cast<long long>(shorter));
  EXPECT_GT(shared, 400);   // the schedulers use the rule
  EXPECT_GT(shorter, 40);   // and it shortens chains
}

// K picks, each gated by its own flag (one set per token), write `out`; a copy reads it.
// Exclusive: the picks share one sublayer and `out` is the picked input bit for bit on
// HostSim (adversarial summation order), greedy and by deadline, with dim reuse. Without
// the promise they take K sublayers.
TEST(ExclusiveWrites, PicksSideBySideSelectExactly) {
  constexpr int K = 9;
  auto build = [&](bool exclusive) {
    Program p;
    const auto flag = p.values("flag", K);
    const auto data = p.values("data", K);
    const ValueId out = p.value("out"), copy = p.value("copy");
    for (int k = 0; k < K; ++k) {
      const auto u = static_cast<size_t>(k);
      p.mlp("pick", {Neuron{Lin{{{flag[u], 128.0f}}}, Lin{{{data[u], 1.0f / 128.0f}}}, {{out, 1.0f}}}});
      if (exclusive) p.mark_exclusive_writes({p.ops().size() - 1, p.ops().size()});
    }
    p.mlp("copy", {dim_reuse_testing::copy_into(copy, {{out, 1.0f}})});
    Interface io;
    io.inputs = flag;
    io.inputs.insert(io.inputs.end(), data.begin(), data.end());
    io.outputs = {copy};
    io.vocab_size = 64;
    std::mt19937_64 rng(5);
    std::vector<float> want;
    for (int64_t t = 0; t < io.vocab_size; ++t) {
      const auto picked = static_cast<size_t>(t % K);
      for (int k = 0; k < K; ++k) io.input_rows.push_back(static_cast<size_t>(k) == picked ? 1.0f : 0.0f);
      for (int k = 0; k < K; ++k) {
        const float d = (rng() % 7 == 0) ? -0.0f : dim_reuse_testing::rand_float(rng, -20, 20);
        io.input_rows.push_back(d);
        if (static_cast<size_t>(k) == picked) want.push_back(d + 0.0f);  // a -0 pick reads as +-0
      }
    }
    return std::make_tuple(p, io, want);
  };
  for (bool by_deadline : {false, true}) {
    const auto [p, io, want] = build(true);
    ScheduleLimits limits;
    limits.sink = true;
    limits.by_deadline = by_deadline;
    const CompiledWithReuse c = compile_reusing_dims(p, io, limits);
    ASSERT_NO_THROW(check_schedule(c.program, c.compiled.schedule, limits));
    for (int k = 1; k < K; ++k)
      EXPECT_EQ(c.compiled.schedule.sublayer[static_cast<size_t>(k)], c.compiled.schedule.sublayer[0]) << "pick " << k;
    const auto got = dim_reuse_testing::run(c.compiled.weights, io, 17);
    ASSERT_EQ(got.size(), want.size());
    for (size_t t = 0; t < want.size(); ++t)
      EXPECT_EQ(got[t] & 0x7fffffffu, float_bits(want[t]) & 0x7fffffffu) << "token " << t;  // +-0 either sign
    for (size_t t = 0; t < want.size(); ++t) {
      if (want[t] != 0.0f) {
        EXPECT_EQ(got[t], float_bits(want[t])) << "token " << t;
      }
    }

    const auto [q, qio, qwant] = build(false);
    const Schedule plain = by_deadline ? schedule_by_deadline(q, limits) : schedule(q, limits);
    for (int k = 1; k < K; ++k)
      EXPECT_EQ(plain.sublayer[static_cast<size_t>(k)], plain.sublayer[static_cast<size_t>(k - 1)] + 2) << "pick " << k;
  }
}

TEST(ExclusiveWrites, MarkingOutsideTheProgramIsRefused) {
  Program p;
  const ValueId a = p.value("a");
  p.mlp("one", {dim_reuse_testing::copy_into(a, {{a, 1.0f}})});
  EXPECT_THROW(p.mark_exclusive_writes({0, 2}), Error);
  EXPECT_THROW(p.mark_exclusive_writes({1, 1}), Error);
  EXPECT_NO_THROW(p.mark_exclusive_writes({0, 1}));
  EXPECT_TRUE(p.ops()[0].exclusive_writes);
}

}  // namespace
}  // namespace qpu::compiler
