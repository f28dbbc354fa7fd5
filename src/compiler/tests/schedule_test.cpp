#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "compiler/schedule.h"

namespace qpu::compiler {
namespace {

Neuron copy(ValueId dst, ValueId src) { return Neuron{Lin{{{kOne, 128.0f}}}, Lin{{{src, 1.0f / 128}}}, {{dst, 1.0f}}}; }

TEST(Schedule, DependentOpsGoToLaterMlpSublayers) {
  Program p;
  const ValueId a = p.value("a"), b = p.value("b"), c = p.value("c"), x = p.value("x");
  p.mlp("b=a", {copy(b, a)});
  p.mlp("c=b", {copy(c, b)});   // RAW on b: next MLP
  p.mlp("x=a", {copy(x, a)});   // independent: first MLP
  p.mlp("a+=x", {copy(a, x)});  // RAW on x, WAR on a (read by op 0: same or later is fine)
  const Schedule s = schedule(p);
  EXPECT_EQ(s.sublayer, (std::vector<int64_t>{1, 3, 1, 3}));
  EXPECT_EQ(s.num_sublayers, 4);
  EXPECT_EQ(s.num_layers(), 2);
  EXPECT_EQ(critical_path(p), 2);
}

TEST(Schedule, WritesToOneValueKeepProgramOrder) {
  Program p;
  const ValueId v = p.value("v"), a = p.value("a"), b = p.value("b");
  p.mlp("v+=a", {copy(v, a)});
  p.mlp("v+=b", {copy(v, b)});
  EXPECT_EQ(schedule(p).sublayer, (std::vector<int64_t>{1, 3}));
}

TEST(Schedule, NeuronLimitSpillsToTheNextMlp) {
  Program p;
  const ValueId a = p.value("a");
  const auto d = p.values("d", 3);
  for (ValueId v : d) p.mlp("copy", {copy(v, a), copy(v, a)});
  ScheduleLimits limits;
  limits.max_neurons_per_mlp = 4;
  EXPECT_EQ(schedule(p, limits).sublayer, (std::vector<int64_t>{1, 1, 3}));
  limits.max_neurons_per_mlp = 1;
  EXPECT_ANY_THROW(schedule(p, limits));
}

TEST(Schedule, MemoryOpsGoToMixers) {
  Program p;
  const ValueId a = p.value("a"), f = p.value("f"), o = p.value("o"), o2 = p.value("o2");
  p.mlp("f=a", {copy(f, a)});
  AttnMemory m;
  m.key_bits = {a};
  m.query_bits = {a};
  m.write_flag = f;
  m.data = {a};
  m.out = {o};
  p.memory("mem", m);
  p.mlp("o2=o", {copy(o2, o)});
  EXPECT_EQ(schedule(p).sublayer, (std::vector<int64_t>{1, 2, 3}));
}

}  // namespace
}  // namespace qpu::compiler

namespace qpu::compiler {
namespace {

Neuron copy_of(ValueId dst, ValueId src) { return Neuron{Lin{{{kOne, 128.0f}}}, Lin{{{src, 1.0f / 128}}}, {{dst, 1.0f}}}; }

// A decode that ASAP puts at the top, far above its only reader: sink_schedule moves it
// down to the sublayer just above the reader, the schedule keeps its length.
TEST(SinkSchedule, MovesAWideOpDownToItsReader) {
  Program p;
  const ValueId in = p.value("in"), chain = p.value("chain");
  const auto wide = p.values("wide", 6);
  std::vector<Neuron> decode;
  for (ValueId v : wide) decode.push_back(copy_of(v, in));
  p.mlp("decode", std::move(decode));                                // op 0
  ValueId prev = chain;
  p.mlp("chain 0", {copy_of(chain, in)});                            // op 1
  for (int i = 1; i < 5; ++i) {
    const ValueId next = p.value("chain");
    p.mlp("chain " + std::to_string(i), {copy_of(next, prev)});       // ops 2..5
    prev = next;
  }
  const ValueId sum = p.value("sum");
  std::vector<Term> up;
  for (ValueId v : wide) up.push_back({v, 1.0f / 128});
  up.push_back({prev, 1.0f / 128});
  p.mlp("read", {Neuron{Lin{{{kOne, 128.0f}}}, Lin{up}, {{sum, 1.0f}}}});  // op 6
  const Schedule asap = schedule(p);
  EXPECT_EQ(asap.sublayer[0], 1);
  EXPECT_EQ(asap.sublayer[6], 11);
  std::vector<bool> fixed(static_cast<size_t>(p.num_values()), false), kept = fixed;
  fixed[static_cast<size_t>(in)] = true;
  kept[static_cast<size_t>(sum)] = true;
  const Schedule sunk = sink_schedule(p, asap, {}, fixed, kept);
  check_schedule(p, sunk);
  EXPECT_EQ(sunk.num_sublayers, asap.num_sublayers);
  EXPECT_EQ(sunk.sublayer[0], 9);  // the MLP right above the reader
  for (size_t i = 1; i < p.ops().size(); ++i) EXPECT_EQ(sunk.sublayer[i], asap.sublayer[i]) << "op " << i;
}

// An op that ends more lives than it starts (a reduction) stays where ASAP put it, and
// a sink never passes a later write of a value the op reads (WAR) or a later access of a
// value it writes (RAW, WAW).
TEST(SinkSchedule, KeepsReductionsAndEveryOrderingRule) {
  Program p;
  const ValueId a = p.value("a"), b = p.value("b"), c = p.value("c"), out = p.value("out");
  const ValueId t = p.value("t"), u = p.value("u");
  p.mlp("out = a + b + c", {Neuron{Lin{{{kOne, 128.0f}}}, Lin{{{a, 1.0f / 128}, {b, 1.0f / 128}, {c, 1.0f / 128}}}, {{out, 1.0f}}}});
  p.mlp("t = out", {copy_of(t, out)});
  p.mlp("u = t", {copy_of(u, t)});
  p.mlp("a = u (WAR on a)", {copy_of(a, u)});
  const Schedule asap = schedule(p);
  std::vector<bool> fixed(static_cast<size_t>(p.num_values()), false), kept = fixed;
  kept[static_cast<size_t>(a)] = true;
  const Schedule sunk = sink_schedule(p, asap, {}, fixed, kept);
  check_schedule(p, sunk);
  EXPECT_EQ(sunk.sublayer, asap.sublayer);
}

TEST(CheckSchedule, RejectsEveryBrokenRule) {
  Program p;
  const ValueId a = p.value("a"), b = p.value("b"), c = p.value("c");
  p.mlp("b = a", {copy_of(b, a)});
  p.mlp("c = b", {copy_of(c, b)});
  p.mlp("a = c", {copy_of(a, c)});
  const Schedule ok = schedule(p);
  EXPECT_NO_THROW(check_schedule(p, ok));
  Schedule raw = ok;
  raw.sublayer[1] = raw.sublayer[0];  // reads b in the sublayer that writes it
  EXPECT_THROW(check_schedule(p, raw), Error);
  Schedule kind = ok;
  kind.sublayer[0] = 0;  // an MLP op in a mixer sublayer
  EXPECT_THROW(check_schedule(p, kind), Error);
  Schedule range = ok;
  range.sublayer[2] = range.num_sublayers;
  EXPECT_THROW(check_schedule(p, range), Error);
  Program war;
  const ValueId x = war.value("x"), y = war.value("y");
  war.mlp("y = x", {copy_of(y, x)});
  war.mlp("x = 1", {Neuron{Lin{{{kOne, 128.0f}}}, Lin{{{kOne, 1.0f / 128}}}, {{x, 1.0f}}}});
  Schedule bad{{3, 1}, 4};  // x overwritten before the earlier op reads it
  EXPECT_THROW(check_schedule(war, bad), Error);
  ScheduleLimits one;
  one.max_neurons_per_mlp = 1;
  Program two;
  const ValueId d = two.value("d"), e = two.value("e");
  two.mlp("d", {copy_of(d, kOne), copy_of(d, kOne)});
  EXPECT_THROW(check_schedule(two, schedule(two), one), Error);
  static_cast<void>(e);
}

}  // namespace
}  // namespace qpu::compiler
