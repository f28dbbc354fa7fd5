// Explicit ordering constraints (ir.h, Program::order): every scheduler entry point
// (schedule, schedule_after, sink_schedule, check_schedule, critical_path) and dim reuse
// (plan_dim_reuse) honour them; they only move ops, so HostSim computes the same outputs
// bit for bit; and serializing two independent wide blocks shrinks the hidden size.
// The constraints are checked here independently of schedule.cpp: pairwise, from the
// ranges, and the critical path as a longest path over explicit predecessor lists.
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

TEST(Order, ValidatesItsOpIndices) {
  Program p;
  const ValueId a = p.value("a"), b = p.value("b");
  for (int i = 0; i < 4; ++i) p.mlp("op" + std::to_string(i), {copy_into(b, {{a, 1.0f}})});
  EXPECT_THROW(p.order(1, 1), Error);  // strictly later: not itself
  EXPECT_THROW(p.order(2, 1), Error);  // backwards
  EXPECT_THROW(p.order(0, 4), Error);  // no op 4
  EXPECT_THROW(p.order(static_cast<size_t>(-1), 2), Error);
  EXPECT_THROW(p.order(OpRange{0, 0}, OpRange{1, 2}), Error);  // empty
  EXPECT_THROW(p.order(OpRange{0, 2}, OpRange{3, 3}), Error);
  EXPECT_THROW(p.order(OpRange{0, 2}, OpRange{1, 3}), Error);  // overlapping
  EXPECT_THROW(p.order(OpRange{2, 1}, OpRange{3, 4}), Error);
  EXPECT_TRUE(p.orders().empty());  // a rejected order leaves nothing behind
  try {
    p.order(3, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'op3'"), std::string::npos) << e.what();
  }
  p.order(0, 3);
  p.order(OpRange{0, 2}, OpRange{2, 4});
  ASSERT_EQ(p.orders().size(), 2u);
  EXPECT_EQ(p.orders()[1].after.end, 4u);
  const Program copy = p;  // a plain value: orders travel with copies
  EXPECT_EQ(copy.orders().size(), 2u);
  EXPECT_NO_THROW(copy.validate());
  // A transform that drops ops an order names: every entry point says so, none crashes.
  p.mutable_ops().resize(3);
  EXPECT_THROW(p.validate(), Error);
  EXPECT_THROW(schedule(p), Error);
  EXPECT_THROW(critical_path(p), Error);
  EXPECT_THROW(check_schedule(p, Schedule{{1, 3, 5}, 6}), Error);
  const std::vector<bool> flags(2, false);
  EXPECT_THROW(sink_schedule(p, Schedule{{1, 3, 5}, 6}, {}, flags, flags), Error);
}

// Two independent ops, one order: the later one moves to the next MLP sublayer, and
// check_schedule names both ops when a schedule puts them side by side.
TEST(Order, MovesAnIndependentOpAndIsChecked) {
  Program p;
  const ValueId a = p.value("a"), b = p.value("b"), c = p.value("c");
  p.mlp("first", {copy_into(b, {{a, 1.0f}})});
  p.mlp("second", {copy_into(c, {{a, 1.0f}})});
  EXPECT_EQ(schedule(p).sublayer, (std::vector<int64_t>{1, 1}));
  Program q = p;
  q.order(0, 1);
  const Schedule s = schedule(q);
  EXPECT_EQ(s.sublayer, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(critical_path(p), 1);
  EXPECT_EQ(critical_path(q), 2);
  try {
    check_schedule(q, schedule(p));
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'first'"), std::string::npos) << m;
    EXPECT_NE(m.find("'second'"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(check_schedule(p, schedule(p)));
  // A mixer op ordered after an MLP op goes to the next mixer, not the same layer's.
  Program r;
  const ValueId x = r.value("x"), y = r.value("y"), z = r.value("z");
  r.mlp("mlp", {copy_into(y, {{x, 1.0f}})});
  GdnMemory m;
  m.key_bits = {x};
  m.query_bits = {x};
  m.data = {x};
  m.out = {z};
  r.gdn_memory("gdn", m);
  EXPECT_EQ(schedule(r).sublayer, (std::vector<int64_t>{1, 0}));
  r.order(0, 1);
  EXPECT_EQ(schedule(r).sublayer, (std::vector<int64_t>{1, 2}));
}

// Two chains of 3 and 4 dependent ops: an order from the end of one to the start of
// the other puts them end to end (3 + 4), one from the start of one to the end of the
// other changes nothing, and a range order counts like its strongest edge.
TEST(Order, CriticalPathCountsTheEdge) {
  Program base;
  const auto va = base.values("a", 4), vb = base.values("b", 5);
  // ops 0..2: a chain of 3; ops 3..6: a chain of 4
  for (size_t i = 0; i < 3; ++i) base.mlp("a" + std::to_string(i), {copy_into(va[i + 1], {{va[i], 1.0f}})});
  for (size_t i = 0; i < 4; ++i) base.mlp("b" + std::to_string(i), {copy_into(vb[i + 1], {{vb[i], 1.0f}})});
  EXPECT_EQ(critical_path(base), 4);
  Program end_to_start = base;
  end_to_start.order(2, 3);
  EXPECT_EQ(critical_path(end_to_start), 7);
  EXPECT_EQ(schedule(end_to_start).num_sublayers, 14);  // 7 MLP sublayers
  Program start_to_end = base;
  start_to_end.order(0, 6);
  EXPECT_EQ(critical_path(start_to_end), 4);
  Program middle = base;
  middle.order(1, 4);  // a1 (depth 2) before b1: b1 at depth 3, the b chain ends at 5
  EXPECT_EQ(critical_path(middle), 5);
  Program ranges = base;
  ranges.order(OpRange{0, 3}, OpRange{3, 7});
  EXPECT_EQ(critical_path(ranges), 7);
  for (const Program* p : {&base, &end_to_start, &start_to_end, &middle, &ranges})
    EXPECT_EQ(critical_path(*p), longest_chain(*p));
}

// Random programs of every op kind with random orders: ASAP, ASAP after a placed
// prefix and sinking all satisfy every order (checked pair by pair) and check_schedule;
// critical_path is the longest chain over explicit predecessor lists; a schedule made
// without the orders that breaks one is rejected.
TEST(Order, RandomProgramsHonourRandomOrders) {
  int64_t orders = 0, rejected = 0, moved_by_orders = 0, sunk_ops = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    std::mt19937_64 rng(seed);
    const Program plain = random_structure(rng, false);
    ScheduleLimits limits;
    limits.max_neurons_per_mlp = 4 + static_cast<int64_t>(below(rng, 6));
    limits.max_memories_per_mixer = 1 + static_cast<int64_t>(below(rng, 3));
    limits.max_gdn_memories_per_mixer = 1 + static_cast<int64_t>(below(rng, 3));
    const Schedule without = schedule(plain, limits);
    Program p = plain;
    add_random_orders(p, rng, static_cast<int>(below(rng, 6)), without);
    orders += static_cast<int64_t>(p.orders().size());

    const Schedule s = schedule(p, limits);
    ASSERT_NO_THROW(check_schedule(p, s, limits)) << "seed " << seed;
    EXPECT_EQ(broken_orders(p, s), 0) << "seed " << seed;
    EXPECT_EQ(critical_path(p), longest_chain(p)) << "seed " << seed;
    EXPECT_LE(critical_path(plain), critical_path(p));

    moved_by_orders += without.sublayer != s.sublayer;
    if (broken_orders(p, without) > 0) {
      EXPECT_THROW(check_schedule(p, without, limits), Error) << "seed " << seed;
      ++rejected;
    }
    EXPECT_NO_THROW(check_schedule(plain, without, limits));

    // A placed prefix (from the order-respecting schedule), the rest ASAP.
    Schedule prefix;
    const size_t keep = below(rng, p.ops().size() + 1);
    prefix.sublayer.assign(s.sublayer.begin(), s.sublayer.begin() + static_cast<std::ptrdiff_t>(keep));
    for (int64_t x : prefix.sublayer) prefix.num_sublayers = std::max(prefix.num_sublayers, x + 1);
    const Schedule after = schedule_after(p, prefix, limits);
    ASSERT_NO_THROW(check_schedule(p, after, limits)) << "seed " << seed;
    EXPECT_EQ(broken_orders(p, after), 0);
    EXPECT_EQ(after.sublayer, s.sublayer);  // the same greedy placement

    std::vector<bool> fixed(static_cast<size_t>(p.num_values())), kept(fixed.size());
    for (size_t v = 0; v < fixed.size(); ++v) {
      fixed[v] = below(rng, 5) == 0;
      kept[v] = below(rng, 3) == 0;
    }
    const Schedule sunk = sink_schedule(p, s, limits, fixed, kept);
    ASSERT_NO_THROW(check_schedule(p, sunk, limits)) << "seed " << seed;
    EXPECT_EQ(broken_orders(p, sunk), 0) << "seed " << seed;
    EXPECT_EQ(sunk.num_sublayers, s.num_sublayers);
    for (size_t i = 0; i < s.sublayer.size(); ++i) sunk_ops += sunk.sublayer[i] != s.sublayer[i];
  }
  std::printf("%lld orders, %lld schedules without them rejected, %lld programs moved, %lld ops sunk\n",
              static_cast<long long>(orders), static_cast<long long>(rejected), static_cast<long long>(moved_by_orders),
              static_cast<long long>(sunk_ops));
  EXPECT_GT(orders, 600);
  EXPECT_GT(rejected, 50);  // the orders are often not implied by the data
  EXPECT_GT(moved_by_orders, 100);
  EXPECT_GT(sunk_ops, 100);  // sinking really moves ops next to the orders
}

// ASAP is tight: with room to spare, every op of an MLP-only program sits in the first
// MLP sublayer its data rules and orders allow, recomputed here from the definitions.
TEST(Order, AsapPlacesEveryOpAsEarlyAsItsOrdersAllow) {
  ScheduleLimits roomy;
  roomy.max_neurons_per_mlp = 1 << 20;
  int64_t held_by_order = 0;
  for (uint64_t seed = 1000; seed < 1300; ++seed) {
    std::mt19937_64 rng(seed);
    Program p = random_structure(rng, true);
    add_random_orders(p, rng, 1 + static_cast<int>(below(rng, 5)), schedule(p, roomy));
    const Schedule s = schedule(p, roomy);
    const auto& ops = p.ops();
    for (size_t i = 0; i < ops.size(); ++i) {
      int64_t data = 0, order = 0;
      for (size_t j = 0; j < i; ++j) {
        if (shares(ops[i].reads(), ops[j].writes()) || shares(ops[i].writes(), ops[j].writes()))
          data = std::max(data, s.sublayer[j] + 1);
        if (shares(ops[i].writes(), ops[j].reads())) data = std::max(data, s.sublayer[j]);  // WAR
      }
      for (const OpOrder& o : p.orders())
        if (i >= o.after.begin && i < o.after.end)
          for (size_t a = o.before.begin; a < o.before.end; ++a) order = std::max(order, s.sublayer[a] + 1);
      const int64_t bound = std::max(data, order);
      EXPECT_EQ(s.sublayer[i], bound % 2 == 1 ? bound : bound + 1) << "seed " << seed << " op " << i;
      held_by_order += order > data + 1;
    }
  }
  std::printf("%lld ops held back by an order alone\n", static_cast<long long>(held_by_order));
  EXPECT_GT(held_by_order, 80);
}

// Orders only move ops: random exact programs (dim_reuse_programs.h) compiled with and
// without random orders, plain and with dim reuse + sinking, give the same logits bit
// for bit on HostSim; the reuse plan's program keeps the orders (its clears come after).
TEST(Order, OutputsOnHostSimDoNotChange) {
  ScheduleLimits sink, roomy;
  sink.sink = true;
  roomy.max_neurons_per_mlp = 1 << 20;  // the plan's own cap is internal: check the rules alone
  int64_t compared = 0, moved = 0;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    dim_reuse_testing::RandomProgram r = dim_reuse_testing::random_program(seed, 6);
    std::mt19937_64 rng(seed + 77);
    Program q = r.p;
    const Compiled plain = compile(r.p, r.io);
    add_random_orders(q, rng, 2 + static_cast<int>(below(rng, 4)), plain.schedule);
    const Compiled ordered = compile(q, r.io);
    EXPECT_EQ(broken_orders(q, ordered.schedule), 0);
    for (size_t i = 0; i < r.p.ops().size(); ++i) moved += plain.schedule.sublayer[i] != ordered.schedule.sublayer[i];
    const ReusePlan plan = plan_dim_reuse(q, r.io, sink);
    ASSERT_EQ(plan.program.orders().size(), q.orders().size());
    for (size_t k = 0; k < q.orders().size(); ++k) {
      EXPECT_EQ(plan.program.orders()[k].before.begin, q.orders()[k].before.begin);
      EXPECT_EQ(plan.program.orders()[k].after.end, q.orders()[k].after.end);
    }
    EXPECT_NO_THROW(check_schedule(plan.program, plan.schedule, roomy));
    dim_reuse_testing::expect_disjoint_lives(plan.program, plan.schedule, plan.allocation, plan.lifetimes);
    const CompiledWithReuse reuse = compile_reusing_dims(q, r.io, sink);
    const auto want = dim_reuse_testing::run(plain.weights, r.io, 100 * seed);
    for (const io::Qwen35Weights* w : {&ordered.weights, &reuse.compiled.weights}) {
      const auto got = dim_reuse_testing::run(*w, r.io, 100 * seed + 7);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "seed " << seed << " logit " << i;
      compared += static_cast<int64_t>(want.size());
    }
  }
  std::printf("HostSim: %lld logits compared, %lld ops moved by the orders\n", static_cast<long long>(compared),
              static_cast<long long>(moved));
  EXPECT_GT(compared, 1000);
  EXPECT_GT(moved, 100);
}

// Two independent wide blocks: A writes W values from x and sums them into sa, B the
// same into sb. ASAP runs them side by side (2W values live at once); one order, "B's
// first op after A's last", runs them one after the other, and A's values are cleared
// before B's start: dim reuse then needs about W dims, not 2W. The logits stay the same.
TEST(Order, SerializingTwoWideBlocksShrinksTheHiddenSize) {
  constexpr int W = 200;
  Program p;
  const ValueId x = p.value("x"), sa = p.value("sa"), sb = p.value("sb");
  auto block = [&](const char* name, ValueId sum, float scale) {
    const auto wide = p.values(name, W);
    std::vector<Neuron> spread;
    std::vector<Term> all;
    for (int i = 0; i < W; ++i) {
      // x * (1..4) * scale: small integers, so the sum is exact in every order.
      spread.push_back(copy_into(wide[static_cast<size_t>(i)], {{x, scale * static_cast<float>(1 + i % 4)}}));
      all.push_back({wide[static_cast<size_t>(i)], 1.0f});
    }
    p.mlp(std::string(name) + " spread", std::move(spread));
    p.mlp(std::string(name) + " sum", {copy_into(sum, all)});
  };
  block("a", sa, 1.0f);  // ops 0, 1
  block("b", sb, 2.0f);  // ops 2, 3
  Interface io;
  io.inputs = {x};
  io.outputs = {sa, sb};
  io.vocab_size = 4;
  io.input_rows = {1.0f, -3.0f, 7.0f, 0.0f};
  Program serial = p;
  serial.order(OpRange{0, 2}, OpRange{2, 4});

  ScheduleLimits limits;
  limits.max_neurons_per_mlp = 1024;
  limits.sink = true;
  const ReusePlan side_by_side = plan_dim_reuse(p, io, limits);
  const ReusePlan one_after_other = plan_dim_reuse(serial, io, limits);
  EXPECT_EQ(side_by_side.schedule.sublayer[2], 1);
  EXPECT_EQ(one_after_other.schedule.sublayer[2], 5);
  EXPECT_EQ(broken_orders(one_after_other.program, one_after_other.schedule), 0);
  // Side by side, all 2W wide values are live in sublayers 1..3 (plus x, the sums, rails).
  EXPECT_GE(side_by_side.allocation.hidden_size, 2 * W + 3);
  // One after the other, B's values take A's dims: W + a few (the hidden size is a
  // multiple of 64, rails included).
  EXPECT_LE(one_after_other.allocation.hidden_size, W + 64);
  dim_reuse_testing::expect_disjoint_lives(one_after_other.program, one_after_other.schedule,
                                           one_after_other.allocation, one_after_other.lifetimes);
  std::printf("two wide blocks (W = %d): hidden %lld side by side, %lld one after the other; sublayers %lld vs %lld\n",
              W,
              static_cast<long long>(side_by_side.allocation.hidden_size),
              static_cast<long long>(one_after_other.allocation.hidden_size),
              static_cast<long long>(side_by_side.schedule.num_sublayers),
              static_cast<long long>(one_after_other.schedule.num_sublayers));

  const auto want = dim_reuse_testing::run(compile(p, io).weights, io, 5);
  const auto got = dim_reuse_testing::run(compile_reusing_dims(serial, io, limits).compiled.weights, io, 6);
  EXPECT_EQ(got, want);
  // The sums themselves, not only agreement: sa = x * (50 * (1+2+3+4)) = 500x, sb = 1000x.
  const float xs[] = {1.0f, -3.0f, 7.0f, 0.0f};
  for (size_t t = 0; t < 4; ++t) {
    EXPECT_EQ(want[2 * t], float_bits(500.0f * xs[t]));
    EXPECT_EQ(want[2 * t + 1], float_bits(1000.0f * xs[t]));
  }
}

}  // namespace
}  // namespace qpu::compiler
