// compiler::WindowCheck on the project's engine: it finds nothing in programs that keep
// the builders' contract (the random dim-reuse programs, 40 seeds, every row), and it
// finds a value read below the window and the residue its dead-value clear leaves for
// the dim's next occupant.
#include "compiler/window_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "compiler/clear_dead.h"
#include "dim_reuse_programs.h"
#include "engine/model.h"

namespace qpu::compiler {
namespace {

using namespace dim_reuse_testing;

// Runs every vocab row from a fresh state with the check on every sublayer.
WindowCheck check_every_row(const Program& p, const Compiled& c, const Interface& io) {
  WindowCheck check(p, c.schedule, c.allocation, io.inputs, EmitOptions{}.norm_exponent);
  const engine::Model model(c.weights);
  const int64_t H = c.weights.config.hidden_size;
  std::vector<float> logits(static_cast<size_t>(io.vocab_size));
  for (int64_t t = 0; t < io.vocab_size; ++t) {
    engine::State state = model.new_state();
    check.before_sublayer(0, std::span<const float>(c.weights.embed_tokens).subspan(static_cast<size_t>(t * H),
                                                                                     static_cast<size_t>(H)));
    model.forward(t, state, logits, {},
                  [&](int64_t s, std::span<const float> residual) { check.before_sublayer(s + 1, residual); });
  }
  return check;
}

TEST(WindowCheck, FindsNothingInProgramsThatKeepTheContract) {
  int64_t rows = 0;
  for (uint64_t seed = 700; seed < 740; ++seed) {
    const bool unit = seed % 2 == 1;
    RandomProgram r = random_program(seed, 6, unit, seed % 3 == 0 ? 12 : 0);
    DeadClearOptions opt;
    if (unit) opt.enable_of = r.enable_of;
    const CompiledWithReuse c = compile_reusing_dims(r.p, r.io, {}, {}, opt);
    const WindowCheck check = check_every_row(c.program, c.compiled, r.io);
    EXPECT_EQ(check.violations(), 0) << "seed " << seed << ": "
                                     << (check.first_violations().empty() ? "" : check.first_violations()[0]);
    rows += r.io.vocab_size;
  }
  EXPECT_GE(rows, 240);
}

// in -> small = in * 2^-40 (below the window for in < 2^-38) -> out = small * 2^40, and
// after small's clear a chain of fresh values, one of which gets small's dim. The first
// op also writes two values nobody reads: the MLPs of 3 neurons leave room for the clears
// (plan_dim_reuse places them only where the program's largest MLP leaves room).
struct BelowWindow {
  Program p;
  Interface io;
  ValueId small = -1;
};

BelowWindow below_window_program(float input) {
  BelowWindow b;
  Program& p = b.p;
  const ValueId in = p.value("in");
  b.small = p.value("small");
  const ValueId out = p.value("out");
  p.mlp("shrink", {copy_into(b.small, {{in, 0x1p-40f}}), copy_into(p.value("pad"), {{in, 1.0f}}),
                   copy_into(p.value("pad"), {{in, 2.0f}})});
  p.mlp("grow", {copy_into(out, {{b.small, 0x1p40f}})});
  ValueId prev = out;
  for (int i = 0; i < 6; ++i) {
    const ValueId next = p.value("chain" + std::to_string(i));
    p.mlp("chain", {copy_into(next, {{prev, 1.0f}})});
    prev = next;
  }
  b.io.inputs = {in};
  b.io.outputs = {prev};
  b.io.vocab_size = 1;
  b.io.input_rows = {input};
  return b;
}

TEST(WindowCheck, FindsAReadBelowTheWindowAndTheResidueOfItsClear) {
  // k = 48: the window is [2^-78, 2^36]. 0x1.fffffep-50 * 2^-40 = 0x1.fffffep-90 reaches
  // the projections as 0x1.fffffep-138, a subnormal: the read rounds, and so does the clear.
  const BelowWindow b = below_window_program(0x1.fffffep-50f);
  const CompiledWithReuse c = compile_reusing_dims(b.p, b.io);
  const WindowCheck check = check_every_row(c.program, c.compiled, b.io);
  ASSERT_GE(check.violations(), 1);
  bool read = false, residue = false;
  for (const std::string& v : check.first_violations()) {
    read |= v.find("read outside the window: op 'grow' value 'small'") != std::string::npos;
    residue |= v.find("starts on a dim that is not +0") != std::string::npos;
  }
  EXPECT_TRUE(read) << check.first_violations()[0];
  // Some later value takes small's dim (its clear's residue is there) when the allocation
  // reuses it; it does here: the chain starts after the clear.
  int64_t sharing = 0;
  for (ValueId v = 0; v < c.program.num_values(); ++v)
    sharing += v != b.small && c.compiled.allocation.dim(v) == c.compiled.allocation.dim(b.small);
  ASSERT_GE(sharing, 1);
  EXPECT_TRUE(residue);

  // The same program with an input inside the window: nothing to report.
  const BelowWindow ok = below_window_program(0x1.fffffep-30f);
  const CompiledWithReuse c_ok = compile_reusing_dims(ok.p, ok.io);
  EXPECT_EQ(check_every_row(c_ok.program, c_ok.compiled, ok.io).violations(), 0);
}

// A stream that is not the allocation's hidden size is an error, not a read past its end.
TEST(WindowCheck, AResidualOfAnotherSizeIsAnError) {
  const BelowWindow b = below_window_program(0x1.fffffep-30f);
  const CompiledWithReuse c = compile_reusing_dims(b.p, b.io);
  WindowCheck check(c.program, c.compiled.schedule, c.compiled.allocation, b.io.inputs, EmitOptions{}.norm_exponent);
  const size_t H = static_cast<size_t>(c.compiled.allocation.hidden_size);
  std::vector<float> residual(H + 1, 0.0f);
  EXPECT_THROW(check.before_sublayer(0, std::span<const float>(residual).first(H - 1)), Error);
  EXPECT_THROW(check.before_sublayer(0, residual), Error);
  check.before_sublayer(0, std::span<const float>(residual).first(H));
  EXPECT_EQ(check.violations(), 0);
}

}  // namespace
}  // namespace qpu::compiler
