#include <gtest/gtest.h>

#include "compiler/allocate.h"

namespace qpu::compiler {
namespace {

TEST(Allocate, RailsFillTheHiddenSizeToAMultipleOf64) {
  Program p;
  const auto v = p.values("v", 100);
  p.mlp("a", {Neuron{Lin{{{kOne, 128.0f}}}, Lin{{{v[0], 1.0f}}}, {{v[1], 1.0f}}},
              Neuron{Lin{{{kOne, 128.0f}}}, Lin{{{v[0], 1.0f}}}, {{v[2], 1.0f}}}});
  p.mlp("b", {Neuron{Lin{{{kOne, 128.0f}}}, Lin{{{v[1], 1.0f}}}, {{v[3], 1.0f}}}});
  const Schedule s = schedule(p);
  const Allocation a = allocate(p, s);
  EXPECT_EQ(a.hidden_size, 128);  // 100 values + 2 rails
  EXPECT_EQ(a.rail_dims, (std::vector<int64_t>{126, 127}));
  EXPECT_EQ(a.num_layers, 2);
  EXPECT_EQ(a.neurons_per_layer, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(a.intermediate_size, 2);
  EXPECT_EQ(a.first_neuron, (std::vector<int64_t>{0, 0}));
  // 63 values fit with one rail; 64 need a second block.
  Program q;
  q.values("v", 63);
  EXPECT_EQ(allocate(q, schedule(q)).hidden_size, 64);
  q.value("w");
  EXPECT_EQ(allocate(q, schedule(q)).hidden_size, 128);
}

}  // namespace
}  // namespace qpu::compiler
