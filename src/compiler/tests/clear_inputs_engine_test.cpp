// clear_inputs (clear_dead.h, "Inputs") on the project's engine (src/engine): the
// random programs of clear_inputs_test.cpp, plain and gated, compiled with and without
// the option, give the same output bits as compile() on the engine (its sparse sums,
// idle-sublayer skips and -0 handling), and as compile() on HostSim.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "common/float_bits.h"
#include "compiler/clear_dead.h"
#include "dim_reuse_programs.h"
#include "engine/model.h"

namespace qpu::compiler {
namespace {

using namespace dim_reuse_testing;

// Output bits of every vocab row, one token per row from a fresh state.
std::vector<uint32_t> run_engine(const io::Qwen35Weights& w, const Interface& io) {
  const engine::Model model(w);
  std::vector<uint32_t> bits;
  std::vector<float> logits(static_cast<size_t>(io.vocab_size));
  for (int64_t t = 0; t < io.vocab_size; ++t) {
    engine::State state = model.new_state();
    model.forward(t, state, logits);
    for (size_t o = 0; o < io.outputs.size(); ++o) bits.push_back(float_bits(logits[o]));
  }
  return bits;
}

TEST(ClearInputsEngine, SameOutputsAsCompileWithAndWithoutTheOption) {
  int64_t compared = 0, input_clears = 0, shrunk = 0;
  for (uint64_t seed = 500; seed < 540; ++seed) {
    const bool unit = seed % 2 == 1;
    RandomProgram r = random_program(seed, 6, unit, 12);
    DeadClearOptions opt;
    if (unit) {
      opt = gate_inputs(r, seed + 5);
    } else {
      opt.clear_inputs = true;
    }
    DeadClearOptions without = opt;
    without.clear_inputs = false;
    const Compiled plain = compile(r.p, r.io);
    const CompiledWithReuse base = compile_reusing_dims(r.p, r.io, {}, {}, without);
    const CompiledWithReuse with = compile_reusing_dims(r.p, r.io, {}, {}, opt);
    for (size_t i = r.p.ops().size(); i < with.program.ops().size(); ++i)
      for (ValueId x : r.io.inputs) input_clears += with.program.ops()[i].writes()[0] == x;
    shrunk += with.compiled.allocation.hidden_size < base.compiled.allocation.hidden_size;
    const auto want = run_engine(plain.weights, r.io);
    EXPECT_EQ(run(plain.weights, r.io, seed), want) << "HostSim vs engine, seed " << seed;
    for (const Compiled* c : {&base.compiled, &with.compiled}) {
      const auto got = run_engine(c->weights, r.io);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(want[i], got[i]) << "seed " << seed << " logit " << i;
      compared += static_cast<int64_t>(want.size());
    }
  }
  std::printf("clear_inputs on the engine: %lld outputs compared, %lld input clears, hidden smaller in %lld of 40\n",
              static_cast<long long>(compared), static_cast<long long>(input_clears), static_cast<long long>(shrunk));
  EXPECT_GT(compared, 1000);
  EXPECT_GT(input_clears, 300);
  EXPECT_GT(shrunk, 2);
}

}  // namespace
}  // namespace qpu::compiler
