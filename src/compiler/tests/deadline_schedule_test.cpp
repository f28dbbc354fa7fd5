// schedule_by_deadline (schedule.h) and the clear room of plan_dim_reuse (clear_dead.h):
// every placement rule and order on random programs (checked by check_schedule and pair
// by pair), ASAP where nothing is scarce, the critical path kept where greedy placement
// in program order loses it, and the same outputs on HostSim with dim reuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "compiler/clear_dead.h"
#include "compiler/schedule.h"
#include "dim_reuse_programs.h"
#include "random_structures.h"

namespace qpu::compiler {
namespace {

using dim_reuse_testing::copy_into;
using namespace schedule_testing;

int64_t neurons_in(const Program& p, const Schedule& s, int64_t sublayer) {
  int64_t n = 0;
  for (size_t i = 0; i < p.ops().size(); ++i)
    if (s.sublayer[i] == sublayer && p.ops()[i].kind == OpKind::Mlp) n += static_cast<int64_t>(p.ops()[i].neurons.size());
  return n;
}

// Random programs of every op kind with random orders and tight random limits: every
// rule and limit holds (check_schedule), every order pair by pair; with nothing scarce
// (and MLPs only: a mixer holds one memory kind, whichever is placed first) the
// schedule is ASAP, op for op the greedy one, and no schedule under limits is shorter.
TEST(DeadlineSchedule, RandomProgramsObeyEveryRule) {
  int64_t orders = 0, differs = 0;
  const ScheduleLimits roomy = roomy_limits();
  for (uint64_t seed = 0; seed < 400; ++seed) {
    std::mt19937_64 rng(seed);
    Program p = random_structure(rng, false);
    add_random_orders(p, rng, static_cast<int>(below(rng, 6)), schedule(p, roomy));
    orders += static_cast<int64_t>(p.orders().size());
    const ScheduleLimits limits = tight_limits(rng);
    const Schedule s = schedule_by_deadline(p, limits);
    ASSERT_NO_THROW(check_schedule(p, s, limits)) << "seed " << seed;
    EXPECT_EQ(broken_orders(p, s), 0) << "seed " << seed;
    differs += s.sublayer != schedule(p, limits).sublayer;
    // MLPs alone (no mixer holding one memory kind before another): ASAP when roomy, and
    // never shorter than that under the limits.
    Program q = random_structure(rng, true);
    add_random_orders(q, rng, static_cast<int>(below(rng, 6)), schedule(q, roomy));
    const Schedule asap = schedule(q, roomy);
    EXPECT_EQ(schedule_by_deadline(q, roomy).sublayer, asap.sublayer) << "seed " << seed;
    const Schedule tight = schedule_by_deadline(q, limits);
    ASSERT_NO_THROW(check_schedule(q, tight, limits)) << "seed " << seed;
    EXPECT_GE(tight.num_sublayers, asap.num_sublayers) << "seed " << seed;
  }
  std::printf("%lld orders; %lld of 400 schedules differ from the greedy one\n", static_cast<long long>(orders),
              static_cast<long long>(differs));
  EXPECT_GT(orders, 600);
  EXPECT_GT(differs, 50);  // the limits bind: the two schedulers really choose
}

// In program order: K independent filler ops, then a chain of K dependent ops, each op
// 2 neurons, 4 neurons per MLP sublayer. Greedy placement fills the first K/2 MLP
// sublayers with fillers and runs the chain below them (3K/2 MLP sublayers); by
// deadline the chain starts at once with one filler beside each link (K).
TEST(DeadlineSchedule, KeepsTheCriticalPathThatGreedyOrderLoses) {
  constexpr int K = 12;
  Program p;
  const ValueId x = p.value("x");
  const auto fill = p.values("fill", K);
  const auto chain = p.values("chain", K);
  auto two = [&](ValueId dst, ValueId src) { return std::vector<Neuron>{copy_into(dst, {{src, 1.0f}}), copy_into(dst, {{src, 2.0f}})}; };
  for (int i = 0; i < K; ++i) p.mlp("fill", two(fill[static_cast<size_t>(i)], x));
  for (int i = 0; i < K; ++i) p.mlp("link", two(chain[static_cast<size_t>(i)], i == 0 ? x : chain[static_cast<size_t>(i - 1)]));
  ScheduleLimits limits;
  limits.max_neurons_per_mlp = 4;
  const Schedule greedy = schedule(p, limits), deadline = schedule_by_deadline(p, limits);
  EXPECT_EQ(greedy.num_sublayers, 2 * (K / 2 + K));
  EXPECT_EQ(deadline.num_sublayers, 2 * K);
  for (int i = 0; i < K; ++i) EXPECT_EQ(deadline.sublayer[static_cast<size_t>(K + i)], 2 * i + 1) << "link " << i;
  for (int64_t s = 1; s < deadline.num_sublayers; s += 2) EXPECT_EQ(neurons_in(p, deadline, s), 4) << "sublayer " << s;
  EXPECT_NO_THROW(check_schedule(p, deadline, limits));
  limits.max_neurons_per_mlp = 1;
  try {
    schedule_by_deadline(p, limits);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'fill'"), std::string::npos) << e.what();
  }
}

// Random exact programs (dim_reuse_programs.h), compiled plainly and with dim reuse
// scheduled by deadline, with and without a clear room: the same logits bit for bit on
// HostSim, disjoint lives, every limit kept, and with a room the program's own ops split
// to the limit less the room.
TEST(DeadlineSchedule, OutputsOnHostSimDoNotChange) {
  int64_t compared = 0, clears = 0;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    dim_reuse_testing::RandomProgram r = dim_reuse_testing::random_program(seed, 6);
    const Compiled plain = compile(r.p, r.io);
    const auto want = dim_reuse_testing::run(plain.weights, r.io, 100 * seed);
    for (int64_t room : {0, 3}) {
      ScheduleLimits limits;
      limits.sink = true;
      limits.by_deadline = true;
      limits.max_neurons_per_mlp = 8;
      limits.clear_room = room;
      const ReusePlan plan = plan_dim_reuse(r.p, r.io, limits);
      ASSERT_NO_THROW(check_schedule(plan.program, plan.schedule, limits)) << "seed " << seed;
      dim_reuse_testing::expect_disjoint_lives(plan.program, plan.schedule, plan.allocation, plan.lifetimes);
      // The ops before the clears are the program's own (split into parts of at most 8 - room).
      size_t first_clear = 0;
      while (first_clear < plan.program.ops().size() && plan.program.ops()[first_clear].label.rfind("clear ", 0) != 0)
        ++first_clear;
      clears += static_cast<int64_t>(plan.program.ops().size() - first_clear);
      for (size_t i = 0; i < first_clear; ++i)
        EXPECT_LE(static_cast<int64_t>(plan.program.ops()[i].neurons.size()), 8 - room) << "seed " << seed;
      const CompiledWithReuse reuse = compile_reusing_dims(r.p, r.io, limits);
      const auto got = dim_reuse_testing::run(reuse.compiled.weights, r.io, 100 * seed + 7);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "seed " << seed << " logit " << i;
      compared += static_cast<int64_t>(want.size());
    }
  }
  std::printf("HostSim: %lld logits compared, %lld clears placed\n", static_cast<long long>(compared),
              static_cast<long long>(clears));
  EXPECT_GT(compared, 1000);
  EXPECT_GT(clears, 200);
}

TEST(DeadlineSchedule, ClearRoomOutsideTheLimitIsRefused) {
  dim_reuse_testing::RandomProgram r = dim_reuse_testing::random_program(1, 6);
  ScheduleLimits limits;
  limits.max_neurons_per_mlp = 8;
  for (int64_t room : {-1, 8, 9}) {
    limits.clear_room = room;
    try {
      plan_dim_reuse(r.p, r.io, limits);
      FAIL() << room;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("clear room of " + std::to_string(room)), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace qpu::compiler
