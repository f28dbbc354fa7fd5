#include <gtest/gtest.h>

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
