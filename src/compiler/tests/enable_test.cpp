// enable_constants (compiler/enable.h): with enable = 1 a program computes the same
// floats as before, bit for bit; with enable = 0 and zero operands every value stays
// +-0 after every layer. The program below uses every kind of constant the builders
// use: constant gates (silu(128)), constant ups, constant biases in gates (P6 steps,
// greater's -200) and P3's variable gates (untouched).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/emit.h"
#include "compiler/enable.h"
#include "compiler/host_sim.h"

namespace qpu::compiler {
namespace {

struct Demo {
  Program p;
  ValueId enable, a, b, n;       // n: a small integer
  std::vector<ValueId> outputs;  // every value but the inputs
  size_t first_op = 0;
};

Lin L(std::initializer_list<Term> t) { return Lin{std::vector<Term>(t)}; }

Demo demo() {
  Demo d;
  Program& p = d.p;
  d.enable = p.value("enable");
  d.a = p.value("a");
  d.b = p.value("b");
  d.n = p.value("n");
  const ValueId sum = p.value("sum"), c = p.value("c"), step = p.value("step"), prod = p.value("prod"),
                sum2 = p.value("sum2"), bit = p.value("bit");
  d.first_op = p.ops().size();
  // sum = fl(a + b): two copy neurons with the constant gate 128.
  p.mlp("sum", {Neuron{L({{kOne, 128.0f}}), L({{d.a, 1.0f / 128}}), {{sum, 1.0f}}},
                Neuron{L({{kOne, 128.0f}}), L({{d.b, 1.0f / 128}}), {{sum, 1.0f}}}});
  // c = 0.3f: a constant up.
  p.mlp("c", {Neuron{L({{kOne, 128.0f}}), L({{kOne, 0.3f / 128}}), {{c, 1.0f}}}});
  // step = [n >= 3] (P6): gates 128 (n - 2) and 128 (n - 3).
  p.mlp("step", {Neuron{L({{d.n, 128.0f}, {kOne, -256.0f}}), L({{kOne, 1.0f / 128}}), {{step, 1.0f}}},
                 Neuron{L({{d.n, 128.0f}, {kOne, -384.0f}}), L({{kOne, 1.0f / 128}}), {{step, -1.0f}}}});
  // prod = fl(sum * b): P3's pair, no constants.
  const float S = 0x1p64f;
  p.mlp("prod", {Neuron{L({{sum, S}}), L({{d.b, 1.0f}}), {{prod, 1.0f / S}}},
                 Neuron{L({{sum, -S}}), L({{d.b, -1.0f}}), {{prod, 1.0f / S}}}});
  // sum2 = fl(sum + c): an up form with two live terms.
  p.mlp("sum2", {Neuron{L({{kOne, 128.0f}}), L({{sum, 1.0f / 128}, {c, 1.0f / 128}}), {{sum2, 1.0f}}}});
  // bit = [step > 1/2] as greater's last step: silu(512 step - 200) - silu(512 step - 328).
  p.mlp("bit", {Neuron{L({{step, 512.0f}, {kOne, -200.0f}}), L({{kOne, 1.0f / 128}}), {{bit, 1.0f}}},
                Neuron{L({{step, 512.0f}, {kOne, -328.0f}}), L({{kOne, 1.0f / 128}}), {{bit, -1.0f}}}});
  d.outputs = {sum, c, step, prod, sum2, bit};
  return d;
}

Interface io_for(const Demo& d, const std::vector<float>& rows) {
  Interface io;
  io.inputs = {d.enable, d.a, d.b, d.n};
  io.outputs = d.outputs;
  io.vocab_size = static_cast<int64_t>(rows.size() / 4);
  io.input_rows = rows;
  return io;
}

float rand_float(std::mt19937_64& rng, int emin, int emax) {
  const int e = emin + static_cast<int>(rng() % static_cast<uint64_t>(emax - emin + 1));
  const float x = std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f, e);
  return (rng() & 1) ? -x : x;
}

TEST(EnableConstants, CountsAndRejects) {
  Demo d = demo();
  // sum 2, c 2, step 4, sum2 1, bit 4 constant terms.
  EXPECT_EQ(enable_constants(d.p, d.first_op, d.enable), 13);
  EXPECT_EQ(enable_constants(d.p, d.first_op, d.enable), 0);  // nothing left
  Demo e = demo();
  EXPECT_THROW(enable_constants(e.p, 0, static_cast<ValueId>(e.p.num_values())), Error);
  EXPECT_THROW(enable_constants(e.p, 0, kOne), Error);
  Program p;
  const ValueId en = p.value("en"), x = p.value("x");
  p.mlp("both", {Neuron{L({{kOne, 128.0f}, {en, 1.0f}}), L({{x, 1.0f}}), {{x, 1.0f}}}});
  EXPECT_THROW(enable_constants(p, 0, en), Error);
}

TEST(EnableConstants, EnableOneIsBitIdenticalUnderRandomSummationOrders) {
  std::mt19937_64 rng(20261130);
  // Batches of 256 rows (the simulator's output head costs vocab^2 per batch; the test
  // also runs under ASan).
  constexpr int kRows = 256, kBatches = 8;
  int64_t mismatches = 0, constant_ok = 0;
  for (int batch = 0; batch < kBatches; ++batch) {
    std::vector<float> rows;
    for (int r = 0; r < kRows; ++r) {
      // Every value (a, b, a + b, (a + b) b) inside the value window [2^-78, 2^36].
      const float a = rand_float(rng, -30, 15);
      float b = (r % 4 == 0) ? -a : rand_float(rng, -30, 15);
      if (r % 16 == 1) b = 0.0f;
      rows.insert(rows.end(), {1.0f, a, b, static_cast<float>(rng() % 8)});
    }
    Demo plain = demo(), gated = demo();
    enable_constants(gated.p, gated.first_op, gated.enable);
    const Compiled cp = compile(plain.p, io_for(plain, rows)), cg = compile(gated.p, io_for(gated, rows));
    HostSim sp(cp.weights, 1 + static_cast<uint64_t>(batch)), sg(cg.weights, 100 + static_cast<uint64_t>(batch));
    std::vector<float> lp(kRows), lg(kRows), hp(static_cast<size_t>(cp.weights.config.hidden_size)),
        hg(static_cast<size_t>(cg.weights.config.hidden_size));
    for (int r = 0; r < kRows; ++r) {
      sp.forward(r, lp, hp);
      sg.forward(r, lg, hg);
      for (size_t o = 0; o < plain.outputs.size(); ++o)
        if (float_bits(lp[o]) != float_bits(lg[o])) ++mismatches;
      constant_ok += lg[1] == 0.3f;
      // The C meaning of the demo, so the comparison is not between two wrong programs.
      const float a = rows[static_cast<size_t>(r) * 4 + 1], b = rows[static_cast<size_t>(r) * 4 + 2];
      const float n = rows[static_cast<size_t>(r) * 4 + 3];
      EXPECT_EQ(float_bits(lg[0]), float_bits(0.0f + (a + b)));
      EXPECT_EQ(float_bits(lg[3]), float_bits(0.0f + (a + b) * b));
      EXPECT_EQ(float_bits(lg[4]), float_bits((a + b) + 0.3f));
      EXPECT_EQ(lg[5], n >= 3.0f ? 1.0f : 0.0f);
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(constant_ok, kRows * kBatches);
}

// The weights of the first `layers` layers only: the residual after them.
io::Qwen35Weights truncated(const io::Qwen35Weights& w, int64_t layers) {
  io::Qwen35Weights t = w;
  t.layers.resize(static_cast<size_t>(layers));
  t.config.num_hidden_layers = layers;
  t.config.layer_types.resize(static_cast<size_t>(layers));
  return t;
}

TEST(EnableConstants, IdleUnitWritesOnlyZerosAfterEveryLayer) {
  std::vector<float> idle(4 * 8, 0.0f);  // every row idle (vocab >= the 6 outputs)
  for (bool gate : {false, true}) {
    Demo d = demo();
    if (gate) enable_constants(d.p, d.first_op, d.enable);
    const Compiled c = compile(d.p, io_for(d, idle));
    const auto n_values = static_cast<size_t>(d.p.num_values());
    bool all_zero = true;
    for (int64_t l = 1; l <= c.weights.config.num_hidden_layers; ++l) {
      const io::Qwen35Weights w = truncated(c.weights, l);
      HostSim sim(w, static_cast<uint64_t>(l));
      std::vector<float> logits(static_cast<size_t>(w.config.vocab_size)),
          hidden(static_cast<size_t>(w.config.hidden_size));
      sim.forward(0, logits, hidden);
      for (size_t v = 0; v < n_values; ++v)
        all_zero = all_zero && hidden[static_cast<size_t>(c.allocation.dim(static_cast<ValueId>(v)))] == 0.0f;
    }
    // Without the transform the constant c = 0.3 is written even by an idle unit.
    EXPECT_EQ(all_zero, gate);
  }
}

}  // namespace
}  // namespace qpu::compiler
