// Interface inputs that give their dims back after their last read
// (DeadClearOptions::clear_inputs, clear_dead.h "Inputs"): the same outputs bit for bit
// as compile() on HostSim (a fresh random summation order in every dot product), with
// inputs +0, -0 and nonzero, never in more dims than without the option; kept inputs and
// values hold their final contents in the final residual stream; the enable-gated form
// on idle and running rows; and mutations (a clear before the last read, a life that
// forgets the embedding, no input clears) that must break the outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/clear_dead.h"
#include "compiler/host_sim.h"
#include "dim_reuse_programs.h"

namespace qpu::compiler {
namespace {

using namespace dim_reuse_testing;

// The final residual stream of every vocab row (HostSim), row after row.
std::vector<std::vector<float>> finals(const io::Qwen35Weights& w, const Interface& io, uint64_t seed) {
  std::vector<std::vector<float>> rows;
  std::vector<float> logits(static_cast<size_t>(io.vocab_size));
  for (int64_t t = 0; t < io.vocab_size; ++t) {
    std::vector<float> hidden(static_cast<size_t>(w.config.hidden_size));
    HostSim sim(w, seed + static_cast<uint64_t>(t));
    sim.forward(t, logits, hidden);
    rows.push_back(std::move(hidden));
  }
  return rows;
}

// The clear op (index >= first) that writes v, or -1.
int64_t clear_of(const Program& p, size_t first, ValueId v) {
  for (size_t i = first; i < p.ops().size(); ++i)
    if (p.ops()[i].writes() == std::vector<ValueId>{v}) return static_cast<int64_t>(i);
  return -1;
}

bool contains(const std::vector<ValueId>& list, ValueId v) { return std::find(list.begin(), list.end(), v) != list.end(); }

// 40 random programs with 12 to 23 inputs, read anywhere (some several times, far apart,
// some never), rows with +0, -0 and nonzero inputs; a few inputs and one value that
// would be cleared are kept.
TEST(ClearInputs, RandomProgramsKeepOutputsInNoMoreDims) {
  int64_t compared = 0, cleared_inputs = 0, dropped = 0, unread = 0, kept_checked = 0, hidden_base = 0,
          hidden_with = 0, hidden_sunk_base = 0, hidden_sunk = 0, smaller = 0, zero_rows = 0, broken_early = 0,
          early_tried = 0, broken_no_embedding = 0, broken_no_clears = 0;
  ScheduleLimits sink;
  sink.sink = true;
  for (uint64_t seed = 300; seed < 340; ++seed) {
    RandomProgram r = random_program(seed, 6, false, 12);
    std::mt19937_64 rng(seed * 7 + 1);
    DeadClearOptions keep_only;
    for (ValueId x : r.io.inputs)
      if (rng() % 6 == 0) keep_only.keep.push_back(x);
    const DeadClears plain_dc = add_dead_value_clears(r.p, r.io);
    const ValueId kept_value = plain_dc.cleared.empty() ? -1 : plain_dc.cleared[rng() % plain_dc.cleared.size()];
    if (kept_value >= 0) keep_only.keep.push_back(kept_value);
    DeadClearOptions opt = keep_only;
    opt.clear_inputs = true;

    // (The outputs of the plans without the option are DimReuse's; here only their width.)
    const Compiled plain = compile(r.p, r.io);
    const ReusePlan base = plan_dim_reuse(r.p, r.io, {}, keep_only);
    const ReusePlan sunk_base = plan_dim_reuse(r.p, r.io, sink, keep_only);
    const CompiledWithReuse with = compile_reusing_dims(r.p, r.io, {}, {}, opt);
    const ReusePlan plan = plan_dim_reuse(r.p, r.io, {}, opt);  // what `with` emitted
    const ReusePlan sunk_plan = plan_dim_reuse(r.p, r.io, sink, opt);
    const Compiled& c = with.compiled;
    ASSERT_EQ(c.allocation.dim_of_value, plan.allocation.dim_of_value);
    for (size_t i = 0; i < r.p.ops().size(); ++i) ASSERT_EQ(c.schedule.sublayer[i], plain.schedule.sublayer[i]);
    EXPECT_EQ(c.schedule.num_sublayers, plain.schedule.num_sublayers);
    EXPECT_EQ(c.allocation.intermediate_size, plain.allocation.intermediate_size);
    EXPECT_EQ(sunk_plan.schedule.num_sublayers, plain.schedule.num_sublayers);
    EXPECT_LE(c.allocation.hidden_size, base.allocation.hidden_size) << "seed " << seed;
    EXPECT_LE(sunk_plan.allocation.hidden_size, sunk_base.allocation.hidden_size) << "seed " << seed;
    hidden_base += base.allocation.hidden_size;
    hidden_with += c.allocation.hidden_size;
    hidden_sunk_base += sunk_base.allocation.hidden_size;
    hidden_sunk += sunk_plan.allocation.hidden_size;
    smaller += c.allocation.hidden_size < base.allocation.hidden_size;

    check_schedule(plan.program, plan.schedule);
    expect_disjoint_lives(plan.program, plan.schedule, plan.allocation, plan.lifetimes);
    check_schedule(sunk_plan.program, sunk_plan.schedule);
    expect_disjoint_lives(sunk_plan.program, sunk_plan.schedule, sunk_plan.allocation, sunk_plan.lifetimes);
    // Lifetimes: read inputs live from the embedding to their clear (or to the end when
    // the clear was dropped), unread, kept and output inputs to the end.
    std::vector<char> read(static_cast<size_t>(r.p.num_values()), 0);
    for (const Op& op : r.p.ops())
      for (ValueId v : op.reads()) read[static_cast<size_t>(v)] = 1;
    const size_t first = r.p.ops().size();
    for (ValueId x : r.io.inputs) {
      const Lifetime lt = plan.lifetimes[static_cast<size_t>(x)];
      const int64_t clear = clear_of(plan.program, first, x);
      if (contains(opt.keep, x) || contains(r.io.outputs, x) || !read[static_cast<size_t>(x)]) {
        EXPECT_EQ(lt, Lifetime::Program) << "seed " << seed;
        EXPECT_EQ(clear, -1) << "seed " << seed;
        unread += !read[static_cast<size_t>(x)];
        continue;
      }
      EXPECT_EQ(lt, clear >= 0 ? Lifetime::EmbeddingToLastAccess : Lifetime::Program) << "seed " << seed;
      cleared_inputs += clear >= 0;
      dropped += clear < 0;
    }
    if (kept_value >= 0) {
      EXPECT_EQ(plan.lifetimes[static_cast<size_t>(kept_value)], Lifetime::FromFirstAccess);
      EXPECT_EQ(clear_of(plan.program, first, kept_value), -1);
    }

    // Outputs, bit for bit; kept inputs and the kept value in the final residual stream.
    const auto want = run(plain.weights, r.io, 5000 * seed);
    const io::Qwen35Weights sunk = emit(sunk_plan.program, sunk_plan.schedule, sunk_plan.allocation, r.io);
    for (const io::Qwen35Weights* x : {&c.weights, &sunk}) {
      const auto got = run(*x, r.io, 5000 * seed + 31);
      ASSERT_EQ(want.size(), got.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(want[i], got[i]) << "seed " << seed << " logit " << i;
      compared += static_cast<int64_t>(want.size());
    }
    const auto plain_final = finals(plain.weights, r.io, 77), with_final = finals(c.weights, r.io, 78);
    const size_t stride = r.io.inputs.size();
    for (int64_t row = 0; row < r.io.vocab_size; ++row) {
      const auto& h = with_final[static_cast<size_t>(row)];
      for (size_t i = 0; i < stride; ++i) {
        const float x = r.io.input_rows[static_cast<size_t>(row) * stride + i];
        zero_rows += x == 0.0f;
        if (!contains(opt.keep, r.io.inputs[i])) continue;
        // No op writes an input here; every sublayer adds a +-0 sum, which turns -0 into +0.
        EXPECT_EQ(float_bits(h[static_cast<size_t>(c.allocation.dim(r.io.inputs[i]))]), float_bits(0.0f + x))
            << "seed " << seed << " row " << row;
        ++kept_checked;
      }
      if (kept_value >= 0) {
        EXPECT_EQ(float_bits(h[static_cast<size_t>(c.allocation.dim(kept_value))]),
                  float_bits(plain_final[static_cast<size_t>(row)][static_cast<size_t>(plain.allocation.dim(kept_value))]))
            << "seed " << seed << " row " << row;
        ++kept_checked;
      }
    }

    // Mutation 1: each input clear one MLP sublayer before its input's last read by an op.
    {
      ReusePlan m = plan;
      bool moved = false;
      for (ValueId x : r.io.inputs) {
        const int64_t clear = clear_of(m.program, first, x);
        if (clear < 0) continue;
        int64_t last_read = -1;
        for (size_t i = 0; i < first; ++i)
          if (contains(m.program.ops()[i].reads(), x)) last_read = std::max(last_read, m.schedule.sublayer[i]);
        if (last_read - 2 < 1) continue;
        m.schedule.sublayer[static_cast<size_t>(clear)] = last_read - 2;
        moved = true;
      }
      if (moved) {
        ++early_tried;
        m.allocation = allocate(m.program, m.schedule, m.lifetimes);
        broken_early += run(emit(m.program, m.schedule, m.allocation, r.io), r.io, 3) != want;
      }
    }
    // Mutation 2: cleared inputs live from their first read instead of the embedding.
    {
      ReusePlan m = plan;
      for (auto& lt : m.lifetimes)
        if (lt == Lifetime::EmbeddingToLastAccess) lt = Lifetime::ToLastAccess;
      m.allocation = allocate(m.program, m.schedule, m.lifetimes);
      broken_no_embedding += run(emit(m.program, m.schedule, m.allocation, r.io), r.io, 4) != want;
    }
    // Mutation 3: the same allocation without the input clears.
    {
      ReusePlan m = plan;
      auto& ops = m.program.mutable_ops();
      std::vector<Op> kept_ops(ops.begin(), ops.begin() + static_cast<std::ptrdiff_t>(first));
      std::vector<int64_t> sublayers(m.schedule.sublayer.begin(), m.schedule.sublayer.begin() + static_cast<std::ptrdiff_t>(first));
      for (size_t i = first; i < ops.size(); ++i)
        if (!contains(r.io.inputs, ops[i].writes()[0])) {
          kept_ops.push_back(ops[i]);
          sublayers.push_back(m.schedule.sublayer[i]);
        }
      ops = std::move(kept_ops);
      m.schedule.sublayer = std::move(sublayers);
      m.allocation = allocate(m.program, m.schedule, m.lifetimes);
      broken_no_clears += run(emit(m.program, m.schedule, m.allocation, r.io), r.io, 5) != want;
    }
  }
  std::printf("clear_inputs, 40 random programs: hidden %lld with, %lld without (sunk: %lld, %lld), smaller in %lld; "
              "inputs cleared %lld, dropped %lld, unread %lld; kept checks %lld, +-0 input cells %lld; broken: "
              "clear before the last read %lld of %lld, no embedding in the life %lld of 40, no input clears %lld of 40\n",
              static_cast<long long>(hidden_with), static_cast<long long>(hidden_base),
              static_cast<long long>(hidden_sunk), static_cast<long long>(hidden_sunk_base), static_cast<long long>(smaller),
              static_cast<long long>(cleared_inputs), static_cast<long long>(dropped), static_cast<long long>(unread),
              static_cast<long long>(kept_checked), static_cast<long long>(zero_rows), static_cast<long long>(broken_early),
              static_cast<long long>(early_tried), static_cast<long long>(broken_no_embedding),
              static_cast<long long>(broken_no_clears));
  EXPECT_GT(compared, 1000);
  EXPECT_GT(cleared_inputs, 350);
  EXPECT_GT(unread, 20);
  EXPECT_GT(kept_checked, 300);
  EXPECT_GT(zero_rows, 350);
  EXPECT_LT(hidden_with, hidden_base);
  EXPECT_LT(hidden_sunk, hidden_sunk_base);
  EXPECT_GE(broken_early, early_tried * 8 / 10);
  EXPECT_GE(broken_no_embedding, 32);
  EXPECT_GE(broken_no_clears, 28);
}


// The enable-gated form: unit inputs' clears read the unit's enable (a computed value)
// or the flag input itself (which may be -0 and its own enable), on idle rows (flag
// +-0, unit inputs +-0 of either sign) and running rows. Mutation: the input clears
// gated by an independent flag instead.
TEST(ClearInputs, EnableGatedInputClearsKeepOutputsOnIdleAndRunningRows) {
  int64_t compared = 0, gated_input_clears = 0, on_flag = 0, idle_rows = 0, minus_zero_flags = 0, hidden_base = 0,
          hidden_with = 0, larger = 0, broken_wrong = 0;
  ScheduleLimits sink;
  sink.sink = true;
  for (uint64_t seed = 400; seed < 460; ++seed) {
    RandomProgram r = random_program(seed, 8, true, 10);
    std::vector<ValueId> gated;
    const DeadClearOptions opt = gate_inputs(r, seed + 17, &gated);
    const size_t stride = r.io.inputs.size();
    const ValueId flag = r.io.inputs[stride - 2];
    for (int64_t row = 0; row < r.io.vocab_size; ++row) {
      const float f = r.io.input_rows[static_cast<size_t>(row) * stride + stride - 2];
      idle_rows += f == 0.0f;
      minus_zero_flags += float_bits(f) == 0x80000000u;
    }
    DeadClearOptions without = opt;
    without.clear_inputs = false;
    const Compiled plain = compile(r.p, r.io);
    const ReusePlan base = plan_dim_reuse(r.p, r.io, {}, without);  // width only
    const CompiledWithReuse with = compile_reusing_dims(r.p, r.io, {}, {}, opt);
    const CompiledWithReuse sunk = compile_reusing_dims(r.p, r.io, sink, {}, opt);
    for (size_t i = 0; i < r.p.ops().size(); ++i) ASSERT_EQ(with.compiled.schedule.sublayer[i], plain.schedule.sublayer[i]);
    EXPECT_EQ(with.compiled.schedule.num_sublayers, plain.schedule.num_sublayers);
    EXPECT_EQ(with.compiled.allocation.intermediate_size, plain.allocation.intermediate_size);
    const ReusePlan plan = plan_dim_reuse(r.p, r.io, {}, opt);
    check_schedule(plan.program, plan.schedule);
    expect_disjoint_lives(plan.program, plan.schedule, plan.allocation, plan.lifetimes);
    hidden_base += base.allocation.hidden_size;
    hidden_with += with.compiled.allocation.hidden_size;
    larger += with.compiled.allocation.hidden_size > base.allocation.hidden_size;
    // Every input clear reads its input's enable (unit inputs) or the constant.
    for (size_t i = r.p.ops().size(); i < with.program.ops().size(); ++i) {
      const Neuron& nr = with.program.ops()[i].neurons.at(0);
      const ValueId v = nr.down.at(0).value;
      if (!contains(r.io.inputs, v)) continue;
      const auto e = opt.enable_of.find(v);
      EXPECT_EQ(nr.gate.terms.at(0).value, e == opt.enable_of.end() ? kOne : e->second) << "seed " << seed;
      gated_input_clears += e != opt.enable_of.end();
      on_flag += nr.gate.terms[0].value == flag;
    }
    const auto want = run(plain.weights, r.io, 7000 * seed);
    for (const Compiled* x : {&with.compiled, &sunk.compiled}) {
      const auto got = run(x->weights, r.io, 7000 * seed + 3);
      ASSERT_EQ(want.size(), got.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(want[i], got[i]) << "seed " << seed << " logit " << i;
      compared += static_cast<int64_t>(want.size());
    }
    // Mutation: the unit inputs' clears gated by `wrong` (a copy of an independent flag).
    DeadClearOptions wrong = opt;
    for (ValueId x : gated) wrong.enable_of[x] = r.wrong;
    const CompiledWithReuse bad = compile_reusing_dims(r.p, r.io, {}, {}, wrong);
    broken_wrong += run(bad.compiled.weights, r.io, 9) != want;
  }
  std::printf("clear_inputs, enable-gated: %lld gated input clears (%lld on the flag input), idle rows %lld (flag -0: "
              "%lld); hidden %lld with, %lld without (larger in %lld); broken with a wrong gate %lld of 60\n",
              static_cast<long long>(gated_input_clears), static_cast<long long>(on_flag),
              static_cast<long long>(idle_rows), static_cast<long long>(minus_zero_flags),
              static_cast<long long>(hidden_with), static_cast<long long>(hidden_base), static_cast<long long>(larger),
              static_cast<long long>(broken_wrong));
  EXPECT_GT(compared, 2000);
  EXPECT_GT(gated_input_clears, 300);
  EXPECT_GT(on_flag, 100);
  EXPECT_GT(minus_zero_flags, 60);
  EXPECT_GE(idle_rows, 60 * 2);
  EXPECT_LT(hidden_with, hidden_base);
  EXPECT_GE(broken_wrong, 20);
}

// Built to show it: 16 inputs read at the top, then 44 values alive at once. Without
// the option the inputs hold 16 dims to the end (16 + 8 + 44 + 5 = 73 > 63 value dims:
// hidden 128); with it they are cleared in sublayer 1, beside their readers, and the
// values need 8 + 44 + 5 = 57 dims (hidden 64). One kept input is read back from the
// final residual stream; the others' dims go to later values.
TEST(ClearInputs, InputsReadAtTheTopFreeTheirDims) {
  Program p;
  const auto x = p.values("x", 16), a = p.values("a", 8), s = p.values("s", 44), out = p.values("out", 5);
  std::vector<Neuron> pairs, spread, sums;
  for (int j = 0; j < 8; ++j) pairs.push_back(copy_into(a[j], {{x[j], 1.0f}, {x[j + 8], 0.5f}}));
  for (int i = 0; i < 44; ++i) spread.push_back(copy_into(s[i], {{a[i % 8], i % 2 ? -2.0f : 1.0f}}));
  for (int k = 0; k < 5; ++k) sums.push_back(copy_into(out[k], {{s[k], 1.0f}, {s[k + 5], 1.0f}}));
  p.mlp("pairs", std::move(pairs));
  p.mlp("spread", std::move(spread));
  p.mlp("sums", std::move(sums));
  Interface io;
  io.inputs = x;
  io.outputs = out;
  io.vocab_size = 40;
  std::mt19937_64 rng(11);
  for (int64_t row = 0; row < io.vocab_size; ++row)
    for (int i = 0; i < 16; ++i) {
      const uint64_t c = rng() % 4;  // small integers: every sum exact in any order
      io.input_rows.push_back(c == 0 ? 0.0f : c == 1 ? -0.0f : static_cast<float>(static_cast<int>(rng() % 17) - 8));
    }
  DeadClearOptions opt;
  opt.clear_inputs = true;
  opt.keep = {x[5]};
  const CompiledWithReuse base = compile_reusing_dims(p, io);
  const CompiledWithReuse with = compile_reusing_dims(p, io, {}, {}, opt);
  EXPECT_EQ(base.compiled.allocation.hidden_size, 128);
  EXPECT_EQ(with.compiled.allocation.hidden_size, 64);
  const ReusePlan plan = plan_dim_reuse(p, io, {}, opt);
  expect_disjoint_lives(plan.program, plan.schedule, plan.allocation, plan.lifetimes);
  const Allocation& al = with.compiled.allocation;
  const size_t first = p.ops().size();
  int64_t reused = 0;
  for (int i = 0; i < 16; ++i) {
    const int64_t clear = clear_of(with.program, first, x[i]);
    if (i == 5) {
      EXPECT_EQ(clear, -1);
      EXPECT_EQ(plan.lifetimes[static_cast<size_t>(x[i])], Lifetime::Program);
      continue;
    }
    ASSERT_GE(clear, 0) << i;
    EXPECT_EQ(with.compiled.schedule.sublayer[static_cast<size_t>(clear)], 1) << i;  // beside its reader
    EXPECT_EQ(plan.lifetimes[static_cast<size_t>(x[i])], Lifetime::EmbeddingToLastAccess);
    for (ValueId v : s) reused += al.dim(v) == al.dim(x[i]);
  }
  EXPECT_EQ(reused, 15);  // every cleared input's dim holds an s value later
  const Compiled plain = compile(p, io);
  const auto want = run(plain.weights, io, 1);
  EXPECT_EQ(run(with.compiled.weights, io, 2), want);
  int64_t nonzero = 0;
  const auto rows = finals(with.compiled.weights, io, 3);
  for (int64_t row = 0; row < io.vocab_size; ++row) {
    const float x5 = io.input_rows[static_cast<size_t>(row) * 16 + 5];
    EXPECT_EQ(float_bits(rows[static_cast<size_t>(row)][static_cast<size_t>(al.dim(x[5]))]), float_bits(0.0f + x5));
    for (size_t o = 0; o < out.size(); ++o) nonzero += want[static_cast<size_t>(row) * out.size() + o] != 0u;
  }
  EXPECT_GT(nonzero, 100);
}

// Which inputs are cleared and how they live, on a hand-made program.
TEST(ClearInputs, LifetimesOfInputs) {
  Program p;
  const ValueId far = p.value("far"), once = p.value("once"), unread = p.value("unread"), rw = p.value("rw"),
                wlast = p.value("wlast"), as_out = p.value("as_out"), self = p.value("self"), kept = p.value("kept"),
                t = p.value("t"), u = p.value("u"), w = p.value("w"), y = p.value("y");
  p.mlp("t", {copy_into(t, {{far, 1.0f}, {once, 1.0f}}), copy_into(u, {{rw, 1.0f}, {kept, 1.0f}}),
              copy_into(w, {{self, 1.0f}})});                       // sublayer 1
  p.mlp("rw", {copy_into(rw, {{t, 1.0f}}), copy_into(wlast, {{u, 1.0f}}),
               Neuron{L({{kOne, 128.0f}}), L({{self, 1.0f / 128}}), {{self, -1.0f}}}});  // 3: self clears itself
  p.mlp("y", {copy_into(y, {{rw, 1.0f}, {w, 1.0f}})});                // 5: reads rw's final value
  p.mlp("y2", {copy_into(y, {{far, 1.0f}, {as_out, 1.0f}})});         // 7: far read again
  Interface io;
  io.inputs = {far, once, unread, rw, wlast, as_out, self, kept};
  io.outputs = {y, as_out};
  io.vocab_size = 2;
  io.input_rows.assign(16, 1.0f);
  // Without the option: every input to the end, no input cleared.
  const DeadClears plain = add_dead_value_clears(p, io);
  for (ValueId v : io.inputs) {
    EXPECT_EQ(plain.lifetimes[static_cast<size_t>(v)], Lifetime::Program) << p.name(v);
    EXPECT_FALSE(contains(plain.cleared, v)) << p.name(v);
  }
  DeadClearOptions opt;
  opt.clear_inputs = true;
  opt.keep = {kept, t};
  const DeadClears dc = add_dead_value_clears(p, io, opt);
  const auto life = [&](ValueId v) { return dc.lifetimes[static_cast<size_t>(v)]; };
  // Read inputs (and rw: written, its final value read) get a clear and live from the
  // embedding; the self-clearing input needs no clear op.
  for (ValueId v : {far, once, rw}) {
    EXPECT_TRUE(contains(dc.cleared, v)) << p.name(v);
    EXPECT_EQ(life(v), Lifetime::EmbeddingToLastAccess) << p.name(v);
  }
  EXPECT_EQ(dc.self_cleared, std::vector<ValueId>{self});
  EXPECT_EQ(life(self), Lifetime::EmbeddingToLastAccess);
  // Never read, written last and never read, an output, kept: to the end.
  for (ValueId v : {unread, wlast, as_out, kept}) {
    EXPECT_FALSE(contains(dc.cleared, v)) << p.name(v);
    EXPECT_EQ(life(v), Lifetime::Program) << p.name(v);
  }
  // A kept value is not cleared; the others are as without the option.
  EXPECT_FALSE(contains(dc.cleared, t));
  EXPECT_EQ(life(t), Lifetime::FromFirstAccess);
  EXPECT_EQ(plain.lifetimes[static_cast<size_t>(t)], Lifetime::ToLastAccess);
  for (ValueId v : {u, w}) EXPECT_EQ(life(v), plain.lifetimes[static_cast<size_t>(v)]) << p.name(v);
  // The input clears come after the others; far lives to its last read (sublayer 7).
  EXPECT_EQ(dc.cleared, (std::vector<ValueId>{u, w, far, once, rw}));
  const Schedule s = schedule(dc.program);
  check_schedule(dc.program, s);
  const Allocation al = allocate(dc.program, s, dc.lifetimes);
  const int64_t far_clear = clear_of(dc.program, p.ops().size(), far);
  EXPECT_EQ(s.sublayer[static_cast<size_t>(far_clear)], 7);
  EXPECT_EQ(s.sublayer[static_cast<size_t>(clear_of(dc.program, p.ops().size(), once))], 1);
  // Inputs never share a dim (all live from the embedding); once's dim is free from 2.
  std::vector<int64_t> dims;
  for (ValueId v : io.inputs) dims.push_back(al.dim(v));
  std::sort(dims.begin(), dims.end());
  EXPECT_EQ(std::unique(dims.begin(), dims.end()), dims.end());
  EXPECT_TRUE(al.dim(rw) != al.dim(once) && al.dim(y) == al.dim(once)) << "y (first access 5) takes once's dim";
  // Bad options.
  DeadClearOptions bad;
  bad.keep = {99};
  EXPECT_THROW(add_dead_value_clears(p, io, bad), Error);
  bad.keep = {kOne};
  EXPECT_THROW(add_dead_value_clears(p, io, bad), Error);
}

}  // namespace
}  // namespace qpu::compiler
