// Dim reuse (compiler/clear_dead.h + the interval allocate()): programs compiled with
// and without reuse compute the same outputs, bit for bit, on HostSim (a fresh random
// summation order in every dot product), in fewer dims; without the clears they do not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

TEST(DimReuse, RandomProgramsComputeTheSameOutputsInFewerDims) {
  int64_t dims_plain = 0, dims_reuse = 0, compared = 0, shrunk = 0, broken_without_clears = 0;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    RandomProgram r = random_program(seed, 6);  // 6 rows: fast enough under ASan
    const Compiled plain = compile(r.p, r.io);
    const CompiledWithReuse reuse = compile_reusing_dims(r.p, r.io);
    const Compiled& c = reuse.compiled;
    // The original ops keep their sublayers; clears only add ops after them.
    for (size_t i = 0; i < r.p.ops().size(); ++i) ASSERT_EQ(c.schedule.sublayer[i], plain.schedule.sublayer[i]);
    EXPECT_EQ(c.schedule.num_sublayers, plain.schedule.num_sublayers);
    EXPECT_EQ(c.allocation.intermediate_size, plain.allocation.intermediate_size);
    EXPECT_LE(c.allocation.hidden_size, plain.allocation.hidden_size);
    DeadClears dc = add_dead_value_clears(r.p, r.io);
    expect_disjoint_lives(reuse.program, c.schedule, c.allocation, dc.lifetimes);
    // Values actually share dims: fewer distinct dims than values.
    std::vector<int64_t> d = c.allocation.dim_of_value;
    std::sort(d.begin(), d.end());
    const auto distinct = static_cast<int64_t>(std::unique(d.begin(), d.end()) - d.begin());
    dims_plain += r.p.num_values();
    dims_reuse += distinct;
    shrunk += distinct < r.p.num_values();
    const auto want = run(plain.weights, r.io, 1000 * seed);
    const auto got = run(c.weights, r.io, 1000 * seed + 500);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(want[i], got[i]) << "seed " << seed << " logit " << i;
    compared += static_cast<int64_t>(want.size());
    // Mutation: the same allocation without the clear ops must go wrong somewhere (the
    // dims still hold the dead values when the next ones land on them).
    Program no_clears = reuse.program;
    no_clears.mutable_ops().resize(r.p.ops().size());
    Schedule s = c.schedule;
    s.sublayer.resize(r.p.ops().size());
    const auto bad = run(emit(no_clears, s, allocate(no_clears, s, dc.lifetimes), r.io), r.io, 7);
    broken_without_clears += bad != want;
  }
  EXPECT_GT(compared, 1000);
  EXPECT_GE(shrunk, 55);
  // About 58% of the dims (random reads keep some values alive for long).
  EXPECT_LT(dims_reuse * 3, dims_plain * 2) << dims_reuse << " of " << dims_plain;
  RecordProperty("dims", std::to_string(dims_reuse) + " of " + std::to_string(dims_plain) + ", broken without clears " + std::to_string(broken_without_clears) + " of 60, compared " + std::to_string(compared));
  EXPECT_GE(broken_without_clears, 50);
}

// Distinct dims an allocation uses for values.
int64_t distinct_dims(const Allocation& a) {
  std::vector<int64_t> d = a.dim_of_value;
  std::sort(d.begin(), d.end());
  return static_cast<int64_t>(std::unique(d.begin(), d.end()) - d.begin());
}

bool is_clear_shape(const Neuron& nr) {
  return nr.gate.terms.size() == 1 && nr.gate.terms[0].weight == 128.0f && nr.up.terms.size() == 1 &&
         nr.down.size() == 1 && nr.down[0].value == nr.up.terms[0].value &&
         std::fabs(nr.down[0].weight) == 1.0f && nr.up.terms[0].weight == -nr.down[0].weight / 128.0f;
}

// Self-clearing values (their last write is an exact clear of themselves) give their
// dims back, and a unit's clears read its enable (DeadClearOptions): the same outputs
// bit for bit as compile() on idle and running rows, with and without sinking, in no
// more dims than without the options. Mutations: clears gated by a wrong flag, and
// self-clears that leave half of v (not recognised; forcing them breaks the outputs).
TEST(DimReuse, SelfClearsAndEnableGatedClearsKeepOutputs) {
  int64_t compared = 0, self_cleared = 0, generated = 0, gated_clears = 0, dims_base = 0, dims_gated = 0,
          broken_wrong_gate = 0, broken_forced = 0, idle_rows = 0;
  ScheduleLimits sink;
  sink.sink = true;
  for (uint64_t seed = 200; seed < 260; ++seed) {
    RandomProgram r = random_program(seed, 6, true);
    generated += r.self_clears;
    const DeadClearOptions opt{r.enable_of};
    const Compiled plain = compile(r.p, r.io);
    const CompiledWithReuse base = compile_reusing_dims(r.p, r.io);
    const CompiledWithReuse gated = compile_reusing_dims(r.p, r.io, {}, {}, opt);
    const CompiledWithReuse sunk = compile_reusing_dims(r.p, r.io, sink, {}, opt);
    const Compiled& c = gated.compiled;
    for (size_t i = 0; i < r.p.ops().size(); ++i) ASSERT_EQ(c.schedule.sublayer[i], plain.schedule.sublayer[i]);
    EXPECT_EQ(c.schedule.num_sublayers, plain.schedule.num_sublayers);
    EXPECT_EQ(c.allocation.intermediate_size, plain.allocation.intermediate_size);
    check_schedule(sunk.program, sunk.compiled.schedule);
    const ReusePlan plan = plan_dim_reuse(r.p, r.io, {}, opt);
    expect_disjoint_lives(plan.program, plan.schedule, plan.allocation, plan.lifetimes);
    const ReusePlan sunk_plan = plan_dim_reuse(r.p, r.io, sink, opt);
    expect_disjoint_lives(sunk_plan.program, sunk_plan.schedule, sunk_plan.allocation, sunk_plan.lifetimes);
    // Every clear of a unit value reads the enable, every other one the constant; the
    // enable's own clear (if any) comes after all of them.
    for (size_t i = r.p.ops().size(); i < gated.program.ops().size(); ++i) {
      const Neuron& nr = gated.program.ops()[i].neurons.at(0);
      const ValueId v = nr.down.at(0).value;
      ASSERT_TRUE(is_clear_shape(nr));
      EXPECT_EQ(nr.gate.terms[0].value, r.enable_of.count(v) ? r.enable : kOne) << "seed " << seed;
      gated_clears += nr.gate.terms[0].value == r.enable;
      if (v == r.enable) {
        EXPECT_EQ(i + 1, gated.program.ops().size()) << "seed " << seed;
      }
    }
    const DeadClears dc = add_dead_value_clears(r.p, r.io, opt);
    self_cleared += static_cast<int64_t>(dc.self_cleared.size());
    for (ValueId v : dc.self_cleared) EXPECT_EQ(dc.lifetimes[static_cast<size_t>(v)], Lifetime::ToLastAccess);
    dims_base += distinct_dims(base.compiled.allocation);
    dims_gated += distinct_dims(c.allocation);
    EXPECT_LE(c.allocation.hidden_size, base.compiled.allocation.hidden_size) << "seed " << seed;
    const auto want = run(plain.weights, r.io, 5000 * seed);
    for (const Compiled* x : {&base.compiled, &c, &sunk.compiled}) {
      const auto got = run(x->weights, r.io, 5000 * seed + 31);
      ASSERT_EQ(want.size(), got.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(want[i], got[i]) << "seed " << seed << " logit " << i;
      compared += static_cast<int64_t>(want.size());
    }
    idle_rows += r.io.input_rows[r.io.inputs.size() - 2] == 0.0f;  // row 0: the unit idle
    // Mutation 1: the unit's clears gated by an independent flag.
    DeadClearOptions wrong;
    for (const auto& [v, e] : r.enable_of) wrong.enable_of[v == r.enable ? r.wrong : v] = r.wrong;
    const CompiledWithReuse bad = compile_reusing_dims(r.p, r.io, {}, {}, wrong);
    broken_wrong_gate += run(bad.compiled.weights, r.io, 9) != want;
    // Mutation 2: every exact self-clear now leaves v/2. Not recognised (the compiler
    // still matches the plain compile of the mutant); forced to end their lives (as a
    // loose check would), the outputs go wrong.
    Program half = r.p;
    for (Op& op : half.mutable_ops())
      for (Neuron& nr : op.neurons)
        if (is_clear_shape(nr)) nr.down[0].weight *= 0.5f;
    const DeadClears hdc = add_dead_value_clears(half, r.io, opt);
    EXPECT_TRUE(hdc.self_cleared.empty()) << "seed " << seed;
    const auto half_want = run(compile(half, r.io).weights, r.io, 11);
    ReusePlan hp = plan_dim_reuse(half, r.io, {}, opt);
    EXPECT_EQ(run(emit(hp.program, hp.schedule, hp.allocation, r.io), r.io, 12), half_want) << "seed " << seed;
    for (ValueId v : dc.self_cleared) hp.lifetimes[static_cast<size_t>(v)] = Lifetime::ToLastAccess;
    hp.allocation = allocate(hp.program, hp.schedule, hp.lifetimes);
    broken_forced += run(emit(hp.program, hp.schedule, hp.allocation, r.io), r.io, 13) != half_want;
  }
  EXPECT_GT(compared, 3000);
  EXPECT_EQ(idle_rows, 60);
  EXPECT_GT(generated, 300);
  EXPECT_GT(self_cleared, 200);
  EXPECT_GT(gated_clears, 300);
  EXPECT_LT(dims_gated, dims_base);
  std::printf("self-clears: %lld generated, %lld values self-cleared, %lld enable-gated clears; dims %lld with the "
              "options, %lld without; broken: wrong gate %lld of 60, forced half clears %lld of 60\n",
              static_cast<long long>(generated), static_cast<long long>(self_cleared), static_cast<long long>(gated_clears),
              static_cast<long long>(dims_gated), static_cast<long long>(dims_base), static_cast<long long>(broken_wrong_gate),
              static_cast<long long>(broken_forced));
  EXPECT_GE(broken_wrong_gate, 30);
  EXPECT_GE(broken_forced, 30);
}

// The self-clear is recognised structurally and conservatively: both exact shapes, on
// the constant or (with the option only) on v's enable, when the enable's final value
// is what it reads; anything else keeps v's dim to the end, and a read afterwards gets
// an ordinary clear.
TEST(DimReuse, SelfClearRecognitionIsStructural) {
  struct Case {
    const char* name;
    ValueId gate_of;  // 0: the constant, 1: the enable e
    float gate, up, down;
    bool with_option, extra_term, read_after, late_enable, expect;
  };
  const Case cases[] = {
      {"kOne, up +v/128, down -1", 0, 128.0f, 1.0f / 128, -1.0f, false, false, false, false, true},
      {"kOne, up -v/128, down +1", 0, 128.0f, -1.0f / 128, 1.0f, false, false, false, false, true},
      {"enable, with the option", 1, 128.0f, 1.0f / 128, -1.0f, true, false, false, false, true},
      {"enable, without the option", 1, 128.0f, 1.0f / 128, -1.0f, false, false, false, false, false},
      {"enable written after the clear", 1, 128.0f, 1.0f / 128, -1.0f, true, false, false, true, false},
      {"kOne, option given", 0, 128.0f, -1.0f / 128, 1.0f, true, false, false, false, true},
      {"gate 64", 0, 64.0f, 1.0f / 128, -1.0f, false, false, false, false, false},
      {"up v/64", 0, 128.0f, 1.0f / 64, -1.0f, false, false, false, false, false},
      {"down -0.5", 0, 128.0f, 1.0f / 128, -0.5f, false, false, false, false, false},
      {"down +1 with up +v/128", 0, 128.0f, 1.0f / 128, 1.0f, false, false, false, false, false},
      {"a second term into v", 0, 128.0f, 1.0f / 128, -1.0f, false, true, false, false, false},
      {"read afterwards", 0, 128.0f, 1.0f / 128, -1.0f, false, false, true, false, false},
  };
  for (const Case& k : cases) {
    Program p;
    const ValueId x = p.value("x"), f = p.value("f"), e = p.value("e"), v = p.value("v"), out = p.value("out"),
                  late = p.value("late");
    p.mlp("e", {copy_into(e, {{f, 1.0f}})});
    p.mlp("v", {copy_into(v, {{x, 1.0f}})});
    std::vector<Neuron> ns = {copy_into(out, {{v, 1.0f}}),
                              Neuron{L({{k.gate_of ? e : kOne, k.gate}}), L({{v, k.up}}), {{v, k.down}}}};
    if (k.extra_term) ns.push_back(copy_into(v, {{x, 0.0f}}));  // a term of weight 0, still a term
    p.mlp("read and clear v", std::move(ns));
    if (k.read_after) p.mlp("late", {copy_into(late, {{v, 1.0f}})});
    if (k.late_enable) p.mlp("e again", {copy_into(e, {{f, 0.0f}})});
    Interface io;
    io.inputs = {x, f};
    io.outputs = {out};
    DeadClearOptions opt;
    if (k.with_option) opt.enable_of = {{v, e}};
    const DeadClears dc = add_dead_value_clears(p, io, opt);
    const bool self = std::find(dc.self_cleared.begin(), dc.self_cleared.end(), v) != dc.self_cleared.end();
    EXPECT_EQ(self, k.expect) << k.name;
    const bool cleared = std::find(dc.cleared.begin(), dc.cleared.end(), v) != dc.cleared.end();
    EXPECT_EQ(cleared, k.read_after) << k.name;
    const Lifetime want = k.expect || k.read_after ? Lifetime::ToLastAccess : Lifetime::FromFirstAccess;
    EXPECT_EQ(dc.lifetimes[static_cast<size_t>(v)], want) << k.name;
  }
}

// Enable chains: a clear that reads an enable comes before the enable's own clear (also
// along v -> e1 -> e2), an enable read only by clears is cleared too, and the options
// are checked.
TEST(DimReuse, EnableGatedClearsAreOrderedAndChecked) {
  Program p;
  const ValueId x = p.value("x"), f = p.value("f"), e2 = p.value("e2"), e1 = p.value("e1"), v = p.value("v"),
                w = p.value("w"), out = p.value("out");
  p.mlp("e2", {copy_into(e2, {{f, 1.0f}})});
  p.mlp("e1", {copy_into(e1, {{e2, 1.0f}})});  // e2's last read (by an op)
  p.mlp("v", {copy_into(v, {{x, 1.0f}}), copy_into(w, {{x, 2.0f}})});
  p.mlp("out", {copy_into(out, {{v, 1.0f}, {w, 1.0f}})});
  Interface io;
  io.inputs = {x, f};
  io.outputs = {out};
  DeadClearOptions opt;
  opt.enable_of = {{v, e1}, {w, e1}, {e1, e2}, {e2, e2}};
  const DeadClears dc = add_dead_value_clears(p, io, opt);
  // e1's final value is read by no op, but by the clears of v and w: cleared too.
  EXPECT_EQ(dc.cleared, (std::vector<ValueId>{v, w, e1, e2}));
  const auto& ops = dc.program.ops();
  const std::vector<ValueId> gates = {e1, e1, e2, e2};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(ops[p.ops().size() + i].neurons[0].gate.terms[0].value, gates[i]) << i;
  const Schedule s = schedule(dc.program);
  check_schedule(dc.program, s);
  for (size_t i = p.ops().size(); i + 1 < ops.size(); ++i) EXPECT_LE(s.sublayer[i], s.sublayer[i + 1]);
  // Without the option: e1 is written and never read, so it keeps its dim.
  const DeadClears plain = add_dead_value_clears(p, io);
  EXPECT_EQ(plain.cleared, (std::vector<ValueId>{e2, v, w}));
  EXPECT_EQ(plain.lifetimes[static_cast<size_t>(e1)], Lifetime::FromFirstAccess);
  // Checks: a cycle, values out of range, an enable whose last write clears it.
  DeadClearOptions cycle;
  cycle.enable_of = {{v, e1}, {e1, v}};
  EXPECT_THROW(add_dead_value_clears(p, io, cycle), Error);
  DeadClearOptions range;
  range.enable_of = {{v, 99}};
  EXPECT_THROW(add_dead_value_clears(p, io, range), Error);
  range.enable_of = {{v, kOne}};
  EXPECT_THROW(add_dead_value_clears(p, io, range), Error);
  Program q = p;
  q.mlp("clear e1", {Neuron{L({{kOne, 128.0f}}), L({{e1, -1.0f / 128}}), {{e1, 1.0f}}}});
  DeadClearOptions self;
  self.enable_of = {{v, e1}};
  EXPECT_THROW(add_dead_value_clears(q, io, self), Error);
  EXPECT_NO_THROW(add_dead_value_clears(q, io));  // e1 self-clears, no clear reads it
}

// sink_schedule (limits.sink): the same outputs bit for bit, the same length and
// intermediate size, every rule kept, and fewer dims in all than reuse alone.
TEST(DimReuse, SinkingKeepsOutputsAndSavesDims) {
  int64_t hidden_reuse = 0, hidden_sink = 0, moved = 0, compared = 0;
  ScheduleLimits sink;
  sink.sink = true;
  for (uint64_t seed = 100; seed < 160; ++seed) {
    RandomProgram r = random_program(seed, 6);
    const Compiled plain = compile(r.p, r.io);
    const CompiledWithReuse reuse = compile_reusing_dims(r.p, r.io);
    const CompiledWithReuse sunk = compile_reusing_dims(r.p, r.io, sink);
    const Compiled& c = sunk.compiled;
    check_schedule(sunk.program, c.schedule);
    EXPECT_EQ(c.schedule.num_sublayers, plain.schedule.num_sublayers);
    EXPECT_LE(c.allocation.intermediate_size, plain.allocation.intermediate_size);
    for (size_t i = 0; i < r.p.ops().size(); ++i) moved += c.schedule.sublayer[i] != plain.schedule.sublayer[i];
    DeadClears dc = add_dead_value_clears(r.p, r.io);
    // Clears dropped past the end change a lifetime: recompute from the plan itself.
    const ReusePlan plan = plan_dim_reuse(r.p, r.io, sink);
    expect_disjoint_lives(plan.program, plan.schedule, plan.allocation, plan.lifetimes);
    hidden_reuse += reuse.compiled.allocation.hidden_size;
    hidden_sink += c.allocation.hidden_size;
    const auto want = run(plain.weights, r.io, 3000 * seed);
    const auto got = run(c.weights, r.io, 3000 * seed + 17);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(want[i], got[i]) << "seed " << seed << " logit " << i;
    compared += static_cast<int64_t>(want.size());
  }
  EXPECT_GT(compared, 1000);
  EXPECT_GT(moved, 60);  // the pass really moves ops
  EXPECT_LE(hidden_sink, hidden_reuse);
  RecordProperty("hidden", std::to_string(hidden_sink) + " sunk vs " + std::to_string(hidden_reuse) + " reuse alone, " +
                               std::to_string(moved) + " ops moved");
  std::printf("random programs: hidden %lld with sinking, %lld with reuse alone; %lld ops moved\n",
              static_cast<long long>(hidden_sink), static_cast<long long>(hidden_reuse), static_cast<long long>(moved));
}

// The clear neuron alone, on every kind of value: v + (-v) is +0, also for v = -0.
TEST(DimReuse, ClearNeuronLeavesExactlyPlusZero) {
  Program p;
  const ValueId x = p.value("x"), y = p.value("y"), z = p.value("z");
  p.mlp("y", {copy_into(y, {{x, 1.0f}})});
  p.mlp("z", {copy_into(z, {{y, 1.0f}})});
  const DeadClears dc = add_dead_value_clears(p, Interface{});  // nothing pinned here
  // x is never written (+0 all along), z never read after its write: only y is cleared.
  ASSERT_EQ(dc.cleared, (std::vector<ValueId>{y}));
  // Clear x itself by hand with the same neuron the transform writes for y.
  Program q;
  const ValueId qx = q.value("x");
  Neuron clear = dc.program.ops().back().neurons[0];
  clear.up.terms[0].value = qx;
  clear.down[0].value = qx;
  q.mlp("clear x", {clear});
  std::mt19937_64 rng(5);
  Interface io;
  io.inputs = {qx};
  io.outputs = {qx};
  std::vector<float> xs = {0.0f, -0.0f, 0x1p-78f, -0x1p36f, 1.0f, -3.0f};
  for (int i = 0; i < 250; ++i) xs.push_back(rand_float(rng, -78, 35));
  io.vocab_size = static_cast<int64_t>(xs.size());
  io.input_rows = xs;
  const Compiled c = compile(q, io);
  std::vector<float> logits(xs.size()), hidden(static_cast<size_t>(c.weights.config.hidden_size));
  for (size_t t = 0; t < xs.size(); ++t) {
    HostSim sim(c.weights, 40 + t);
    sim.forward(static_cast<int64_t>(t), logits, hidden);
    EXPECT_EQ(float_bits(logits[0]), 0u) << xs[t];
  }
}

// Memory ops: a value last read by a GDN memory (mixer) is cleared in a later MLP
// sublayer; the memory's out values are read and cleared too. Tokens are a random
// sequence (the GDN state and conv taps carry across tokens).
TEST(DimReuse, GdnMemoryProgramsComputeTheSameOutputs) {
  int64_t nonzero = 0, broken_without_clears = 0;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    std::mt19937_64 rng(100 + seed);
    Program p;
    const auto bits_in = p.values("bit", 4), data_in = p.values("data", 3);
    const ValueId wf_in = p.value("wf"), rf_in = p.value("rf");
    // Computed operands (dead after the memory reads them).
    const auto kb = p.values("kb", 2), qb = p.values("qb", 2), data = p.values("d", 3);
    const ValueId wf = p.value("wflag"), rf = p.value("rflag");
    p.mlp("operands", {copy_into(kb[0], {{bits_in[0], 1.0f}}), copy_into(kb[1], {{bits_in[1], 1.0f}}),
                       copy_into(qb[0], {{bits_in[2], 1.0f}}), copy_into(qb[1], {{bits_in[3], 1.0f}}),
                       copy_into(data[0], {{data_in[0], 1.0f}}), copy_into(data[1], {{data_in[1], 1.0f}}),
                       copy_into(data[2], {{data_in[2], 1.0f}}), copy_into(wf, {{wf_in, 1.0f}}),
                       copy_into(rf, {{rf_in, 1.0f}})});
    GdnMemory m;
    m.key_bits = kb;
    m.query_bits = qb;
    m.write_flag = wf;
    m.read_flag = rf;
    m.data = data;
    m.out = p.values("o", 3);
    m.key_tap = static_cast<int>(rng() % 4);
    m.data_taps = {static_cast<int>(rng() % 4), 0, static_cast<int>(rng() % 4)};
    p.gdn_memory("mem", m);
    // Later work in fresh values (they may take the dims of kb, qb, d, flags), a second
    // round of operands written into new values, then outputs.
    const auto s = p.values("s", 4);
    p.mlp("sum", {copy_into(s[0], {{m.out[0], 1.0f}, {m.out[1], 1.0f}}), copy_into(s[1], {{m.out[2], 0.5f}})});
    p.mlp("more", {copy_into(s[2], {{s[0], 1.0f}, {s[1], -1.0f}}), copy_into(s[3], {{s[0], 0.5f}, {data_in[0], 1.0f}})});
    p.mlp("twice", {copy_into(s[2], {{s[3], 1.0f}})});
    Interface io;
    io.inputs = bits_in;
    io.inputs.insert(io.inputs.end(), data_in.begin(), data_in.end());
    io.inputs.push_back(wf_in);
    io.inputs.push_back(rf_in);
    io.outputs = {s[2], s[3], s[1]};
    io.vocab_size = 48;
    for (int64_t r = 0; r < io.vocab_size; ++r) {
      for (int b = 0; b < 4; ++b) io.input_rows.push_back(static_cast<float>(rng() % 2));
      for (int d = 0; d < 3; ++d) io.input_rows.push_back(rng() % 8 == 0 ? 0.0f : static_cast<float>(32 + rng() % 4064));
      io.input_rows.push_back(static_cast<float>(rng() % 2));
      io.input_rows.push_back(static_cast<float>(rng() % 3 != 0));
    }
    EmitOptions eo;
    eo.gdn_key_head_dim = 16;
    eo.gdn_value_head_dim = 16;
    const Compiled plain = compile(p, io, {}, eo);
    const CompiledWithReuse reuse = compile_reusing_dims(p, io, {}, eo);
    ScheduleLimits sink;  // and with sink_schedule: the memory's conv taps see the same values
    sink.sink = true;
    const CompiledWithReuse sunk = compile_reusing_dims(p, io, sink, eo);
    check_schedule(sunk.program, sunk.compiled.schedule);
    const DeadClears dc = add_dead_value_clears(p, io);
    expect_disjoint_lives(reuse.program, reuse.compiled.schedule, reuse.compiled.allocation, dc.lifetimes);
    // The memory's operands are last read in the mixer: cleared in a later MLP sublayer,
    // and their dims go to later values.
    const size_t mem_op = 1;
    for (size_t i = p.ops().size(); i < reuse.program.ops().size(); ++i) {
      const ValueId cleared = reuse.program.ops()[i].writes()[0];
      if (cleared == kb[0]) {
        EXPECT_GT(reuse.compiled.schedule.sublayer[i], plain.schedule.sublayer[mem_op]);
      }
    }
    std::vector<int64_t> d = reuse.compiled.allocation.dim_of_value;
    std::sort(d.begin(), d.end());
    EXPECT_LT(std::unique(d.begin(), d.end()) - d.begin(), p.num_values()) << seed;
    // Mutation as above: the same dims without the clears.
    Program no_clears = reuse.program;
    no_clears.mutable_ops().resize(p.ops().size());
    Schedule sn = reuse.compiled.schedule;
    sn.sublayer.resize(p.ops().size());
    const io::Qwen35Weights bad_w = emit(no_clears, sn, allocate(no_clears, sn, dc.lifetimes), io, eo);
    HostSim a(plain.weights, seed), b(reuse.compiled.weights, seed + 77), bad(bad_w, seed + 99),
        c(sunk.compiled.weights, seed + 55);
    const auto V = static_cast<size_t>(io.vocab_size);
    std::vector<float> la(V), lb(V), lbad(V), ha(static_cast<size_t>(plain.weights.config.hidden_size)),
        hb(static_cast<size_t>(reuse.compiled.weights.config.hidden_size)), hbad(hb.size()),
        lc(V), hc(static_cast<size_t>(sunk.compiled.weights.config.hidden_size));
    bool differs = false;
    for (int t = 0; t < 80; ++t) {
      const auto token = static_cast<int64_t>(rng() % static_cast<uint64_t>(io.vocab_size));
      a.forward(token, la, ha);
      b.forward(token, lb, hb);
      bad.forward(token, lbad, hbad);
      c.forward(token, lc, hc);
      for (size_t o = 0; o < 3; ++o) {
        EXPECT_EQ(float_bits(la[o]), float_bits(lb[o])) << "seed " << seed << " token " << t << " out " << o;
        EXPECT_EQ(float_bits(la[o]), float_bits(lc[o])) << "sunk: seed " << seed << " token " << t << " out " << o;
        nonzero += la[o] != 0.0f;
        differs = differs || float_bits(la[o]) != float_bits(lbad[o]);
      }
    }
    broken_without_clears += differs;
  }
  EXPECT_GT(nonzero, 1000);
  EXPECT_GE(broken_without_clears, 10);
  RecordProperty("broken", std::to_string(broken_without_clears) + " of 12, nonzero " + std::to_string(nonzero));
}

// Attention memories (HostSim does not run them): the allocation rules alone. A key
// bit last read by the memory is cleared in the next MLP sublayer and its dim reused.
TEST(DimReuse, AttentionMemoryOperandsAreClearedAfterTheMixer) {
  Program p;
  const ValueId in = p.value("in"), bit = p.value("bit"), d = p.value("d"), out = p.value("out"), late = p.value("late");
  const ValueId e1 = p.value("e1"), e2 = p.value("e2");
  // Four neurons: the clears below fit into MLP 3 beside `late` (the cap on clears).
  p.mlp("bit", {copy_into(bit, {{in, 1.0f}}), copy_into(d, {{in, 2.0f}}), copy_into(e1, {{in, 1.0f}}),
                copy_into(e2, {{in, 0.5f}})});
  AttnMemory m;
  m.key_bits = {bit};
  m.query_bits = {bit};
  m.write_flag = bit;
  m.read_flag = bit;
  m.data = {d};
  m.out = {out};
  p.memory("mem", m);
  p.mlp("late", {copy_into(late, {{out, 1.0f}})});
  Interface io;
  io.inputs = {in};
  io.outputs = {late, e1, e2};
  io.vocab_size = 3;
  io.input_rows = {1.0f, 0.0f, 1.0f};
  const CompiledWithReuse r = compile_reusing_dims(p, io);
  const Schedule& s = r.compiled.schedule;
  // The clears of bit and d (last read in mixer 2) go to MLP 3; out's clear joins its
  // reader in 3 (a clear sees out as it was at the start of 3, like the reader).
  EXPECT_EQ(s.sublayer, (std::vector<int64_t>{1, 2, 3, 3, 3, 3}));
  EXPECT_EQ(r.compiled.allocation.hidden_size, 64);
  // late (first access 3) cannot take a dim cleared in 3.
  const Allocation& a = r.compiled.allocation;
  EXPECT_NE(a.dim(late), a.dim(bit));
  EXPECT_NE(a.dim(late), a.dim(d));
  EXPECT_NE(a.dim(late), a.dim(out));
  const DeadClears dc = add_dead_value_clears(p, io);
  expect_disjoint_lives(r.program, s, a, dc.lifetimes);
}

// Hand-made lives: a value whose first write comes after another's clear takes its dim.
TEST(DimReuse, LinearScanSharesDimsOfDisjointLives) {
  Program p;
  const ValueId in = p.value("in"), a = p.value("a"), b = p.value("b"), c = p.value("c"), dead = p.value("dead"),
                never = p.value("never");
  p.mlp("a", {copy_into(a, {{in, 1.0f}}), copy_into(dead, {{in, 1.0f}})});  // sublayer 1
  p.mlp("b", {copy_into(b, {{a, 1.0f}})});                                   // 3; a cleared in 3
  p.mlp("c", {copy_into(c, {{b, 1.0f}})});                                   // 5: may take a's dim
  Interface io;
  io.inputs = {in};
  io.outputs = {c};
  io.vocab_size = 1;
  io.input_rows = {1.0f};
  const DeadClears dc = add_dead_value_clears(p, io);
  EXPECT_EQ(dc.cleared, (std::vector<ValueId>{a, b}));
  EXPECT_EQ(dc.lifetimes[static_cast<size_t>(in)], Lifetime::Program);
  EXPECT_EQ(dc.lifetimes[static_cast<size_t>(c)], Lifetime::FromFirstAccess);
  EXPECT_EQ(dc.lifetimes[static_cast<size_t>(dead)], Lifetime::FromFirstAccess);  // written, never read
  EXPECT_EQ(dc.lifetimes[static_cast<size_t>(never)], Lifetime::ToLastAccess);
  const Schedule s = schedule(dc.program);
  EXPECT_EQ(s.sublayer, (std::vector<int64_t>{1, 3, 5, 3, 5}));
  const Allocation al = allocate(dc.program, s, dc.lifetimes);
  EXPECT_EQ(al.dim(in), 0);
  EXPECT_EQ(al.dim(c), al.dim(a));  // a ends in 3, c starts in 5
  EXPECT_NE(al.dim(b), al.dim(a));  // b starts in 3, where a still lives
  EXPECT_EQ(al.dim(never), al.dim(b));  // unaccessed: takes a dim that is +0 at the end
  EXPECT_THROW(allocate(dc.program, s, std::vector<Lifetime>(2)), Error);
}

}  // namespace
}  // namespace qpu::compiler
