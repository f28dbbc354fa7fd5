#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"
#include "compiler/emit.h"
#include "compiler/host_sim.h"

namespace qpu::compiler {
namespace {

TEST(Emit, RailSquaresSumToHiddenTimes4PowK) {
  for (int64_t q = 1; q <= 5; ++q) {
    const int k = 48;
    const double sum = static_cast<double>(q) * std::ldexp(1.0, 2 * (k + 3));
    EXPECT_EQ(sum, static_cast<double>(64 * q) * std::ldexp(1.0, 2 * k));
  }
}

TEST(Emit, CopyNeuronRunsInTheSimulatorAndLogitsAreValues) {
  Program p;
  const ValueId a = p.value("a"), r = p.value("r");
  // r += silu(128) * (3 a / 128) = fl(3 a)
  p.mlp("r=3a", {Neuron{Lin{{{kOne, 128.0f}}}, Lin{{{a, 3.0f / 128.0f}}}, {{r, 1.0f}}}});
  Interface io;
  io.inputs = {a};
  io.outputs = {r, a};
  io.vocab_size = 3;
  io.input_rows = {1.0f, 0x1.555556p-2f, -0x1p-70f};
  const Compiled c = compile(p, io);
  EXPECT_EQ(c.weights.config.hidden_size, 64);
  EXPECT_EQ(c.weights.config.num_hidden_layers, 1);
  EXPECT_EQ(c.weights.embed_tokens[63], rail_value(48));
  HostSim sim(c.weights, 5);
  std::vector<float> logits(3), hidden(64);
  for (int64_t t = 0; t < 3; ++t) {
    sim.forward(t, logits, hidden);
    const float x = io.input_rows[static_cast<size_t>(t)];
    EXPECT_EQ(hidden[1], 3.0f * x);
    EXPECT_EQ(logits[0], 3.0f * x);
    EXPECT_EQ(logits[1], x);
    EXPECT_EQ(logits[2], 0.0f);
  }
}

TEST(Emit, RejectsBadOptions) {
  Program p;
  const ValueId a = p.value("a");
  p.mlp("x", {Neuron{Lin{{{kOne, 128.0f}}}, Lin{{{a, 1.0f}}}, {{a, 1.0f}}}});
  Interface io;
  io.vocab_size = 1;
  EmitOptions o;
  o.head_dim = 128;  // 1/sqrt(128) is not exact
  EXPECT_THROW(compile(p, io, {}, o), Error);
  o = {};
  o.norm_exponent = 80;
  EXPECT_THROW(compile(p, io, {}, o), Error);
  io.outputs = {a, a};
  EXPECT_THROW(compile(p, io), Error);
}

}  // namespace
}  // namespace qpu::compiler
