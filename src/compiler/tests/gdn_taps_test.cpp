// GDN memories that take their operands from earlier tokens through Qwen3.5's causal
// conv1d taps (ir.h GdnMemory::key_tap / query_tap / data_taps) and decode several
// columns into one out value (out_weights, repeated out ids). Every stream runs on
// HostSim (a fresh random summation order in every projection row, conv window, l2norm,
// state read, read-out and norm) and is compared bit for bit with the op's semantics
// written out below in plain C++ (independent of the emitter).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <map>
#include <random>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/emit.h"
#include "compiler/gdn_layout.h"
#include "compiler/host_sim.h"

namespace qpu::compiler {
namespace {

// A program whose every input value is set per token (token t = vocab row t).
struct Stream {
  Program p;
  std::vector<GdnMemory> ops;
  std::vector<ValueId> inputs;
  std::map<ValueId, size_t> column;
  int64_t tokens = 0;
  std::vector<float> rows;  // [tokens, inputs]

  ValueId input(const std::string& name) {
    const ValueId v = p.value(name);
    column[v] = inputs.size();
    inputs.push_back(v);
    return v;
  }
  std::vector<ValueId> inputs_named(const std::string& name, int n) {
    std::vector<ValueId> v;
    for (int i = 0; i < n; ++i) v.push_back(input(name + std::to_string(i)));
    return v;
  }
  void start(int64_t n) {
    tokens = n;
    rows.assign(static_cast<size_t>(n) * inputs.size(), 0.0f);
  }
  float& at(int64_t t, ValueId v) { return rows[static_cast<size_t>(t) * inputs.size() + column.at(v)]; }
  float get(int64_t t, ValueId v) const { return rows[static_cast<size_t>(t) * inputs.size() + column.at(v)]; }
  void set_bits(int64_t t, const std::vector<ValueId>& bits, int64_t a) {
    for (size_t j = 0; j < bits.size(); ++j) at(t, bits[j]) = static_cast<float>((a >> j) & 1);
  }
};

// A memory with its own inputs: n address bits, D data values (one per column unless
// `data` is given), outs as given.
GdnMemory make_memory(Stream& s, const std::string& name, int n, int D) {
  GdnMemory m;
  m.key_bits = s.inputs_named(name + ".key", n);
  m.write_flag = s.input(name + ".write");
  m.query_bits = s.inputs_named(name + ".query", n);
  m.read_flag = s.input(name + ".read");
  m.wipe_flag = s.input(name + ".wipe");
  m.data = s.inputs_named(name + ".data", D);
  return m;
}

int64_t address(const Stream& s, int64_t t, const std::vector<ValueId>& bits) {
  int64_t a = 0;
  for (size_t j = 0; j < bits.size(); ++j) a |= static_cast<int64_t>(s.get(t, bits[j])) << j;
  return a;
}

// ir.h's semantics: per token, the value of every out id of the op (0 + the decoded
// terms in column order; the contract makes any order give the same bits).
std::vector<std::map<ValueId, float>> model(const Stream& s, const GdnMemory& m, int64_t rows) {
  std::vector<std::vector<float>> state(static_cast<size_t>(rows));  // empty = never written
  std::vector<std::map<ValueId, float>> result;
  for (int64_t t = 0; t < s.tokens; ++t) {
    if (s.get(t, m.wipe_flag) == 1.0f)
      for (auto& r : state) r.clear();
    const int64_t kt = t - m.key_tap;
    if (kt >= 0 && s.get(kt, m.write_flag) == 1.0f) {
      auto& row = state[static_cast<size_t>(address(s, kt, m.key_bits))];
      row.assign(m.data.size(), 0.0f);
      for (size_t c = 0; c < m.data.size(); ++c) {
        const int64_t src = t - m.data_tap(c);
        // Before position 0 the whole projection (constants too) is the zero history.
        row[c] = src < 0 ? 0.0f : std::ldexp(s.get(src, m.data[c]), m.data_exponent) + m.offset;
      }
    }
    std::map<ValueId, float> out;
    for (ValueId v : m.out) out[v] = 0.0f;
    const int64_t qt = t - m.query_tap;
    if (qt >= 0 && s.get(qt, m.read_flag) == 1.0f) {
      const auto& row = state[static_cast<size_t>(address(s, qt, m.query_bits))];
      if (!row.empty())
        for (size_t c = 0; c < m.data.size(); ++c)
          out[m.out[c]] = out[m.out[c]] + m.out_weight(c) * std::ldexp(row[c] - m.offset, -m.data_exponent);
    }
    result.push_back(std::move(out));
  }
  return result;
}

// Compiles the stream's ops into one GDN layer, runs HostSim over every token (seeded
// order), and compares every out value with the model. Returns the number of values
// compared that were read from written rows.
int64_t run_on_host_sim(Stream& s, int64_t dk, int64_t dv, uint64_t seed) {
  Interface io;
  io.inputs = s.inputs;
  io.vocab_size = s.tokens;
  io.input_rows = s.rows;
  EmitOptions eo;
  eo.gdn_key_head_dim = dk;
  eo.gdn_value_head_dim = dv;
  const Compiled c = compile(s.p, io, {}, eo);
  const int64_t rows = GdnLayout::for_dims(dk, dv).rows();
  std::vector<std::vector<std::map<ValueId, float>>> want;
  for (const GdnMemory& m : s.ops) want.push_back(model(s, m, rows));
  HostSim sim(c.weights, seed);
  std::vector<float> logits(1), hidden(static_cast<size_t>(c.weights.config.hidden_size));
  int64_t nonzero = 0;
  for (int64_t t = 0; t < s.tokens; ++t) {
    sim.forward(t, logits, hidden);
    for (const auto& per_op : want)
      for (const auto& [v, x] : per_op[static_cast<size_t>(t)]) {
        const float got = hidden[static_cast<size_t>(c.allocation.dim(v))];
        EXPECT_EQ(float_bits(got), float_bits(x)) << "token " << t << " " << s.p.name(v) << ": expected "
                                                  << describe_float(x) << " got " << describe_float(got);
        nonzero += x != 0.0f ? 1 : 0;
      }
  }
  return nonzero;
}

TEST(GdnTaps, WriteFromTap3IsReadAtLaterTokens) {
  Stream s;
  GdnMemory m = make_memory(s, "m", 4, 2);
  m.key_tap = 3;  // the row and the write flag come from three tokens back
  m.out = s.p.values("out", 2);
  s.ops.push_back(m);
  s.p.gdn_memory("m", m);
  s.start(9);
  // Token 1 names row 5 and sets the write flag; the write happens at token 4 with
  // token 4's data (tap 0). Token 5 reads row 5, token 6 row 4 (empty), token 8 row 5.
  s.set_bits(1, m.key_bits, 5);
  s.at(1, m.write_flag) = 1;
  s.at(1, m.data[0]) = 1000;  // not stored: the data tap is 0
  s.at(4, m.data[0]) = 77;
  s.at(4, m.data[1]) = 0x1p30f;
  for (int64_t t : {5, 6, 8}) {
    s.set_bits(t, m.query_bits, t == 6 ? 4 : 5);
    s.at(t, m.read_flag) = 1;
  }
  const auto want = model(s, m, 16);
  // Hand-written expectations (the model must agree with them too).
  EXPECT_EQ(want[5].at(m.out[0]), 77.0f);
  EXPECT_EQ(want[5].at(m.out[1]), 0x1p30f);
  EXPECT_EQ(float_bits(want[6].at(m.out[0])), float_bits(0.0f));
  EXPECT_EQ(want[8].at(m.out[1]), 0x1p30f);
  EXPECT_EQ(run_on_host_sim(s, 16, 16, 1), 4);
}

TEST(GdnTaps, DataFromMixedTapsAddIntoOneValue) {
  Stream s;
  GdnMemory m = make_memory(s, "m", 5, 3);
  m.key_tap = 3;
  m.data_taps = {2, 1, 0};
  m.data_exponent = 4;
  const ValueId x = s.p.value("x");
  m.out = {x, x, x};
  m.out_weights = {1.0f, -0x1p-8f, 0x1p-16f};
  s.ops.push_back(m);
  s.p.gdn_memory("m", m);
  s.start(7);
  // Token 0: header. Token 1: destination row 9. Tokens 2, 3, 4: three disjoint-bit
  // terms of 1140 = 1152 - 13 + 1, each through its own column, tap and decode weight.
  s.set_bits(1, m.key_bits, 9);
  s.at(1, m.write_flag) = 1;
  s.at(2, m.data[0]) = 1152;   // 0x480 (8 significant bits)
  s.at(3, m.data[1]) = 3328;   // 13 * 256: decoded -13
  s.at(4, m.data[2]) = 65536;  // decoded 1
  s.at(5, m.data[0]) = 5;      // later tokens' data are never written (no key)
  s.set_bits(5, m.query_bits, 9);
  s.at(5, m.read_flag) = 1;
  s.set_bits(6, m.query_bits, 9);
  s.at(6, m.read_flag) = 1;
  const auto want = model(s, m, 31);
  EXPECT_EQ(want[5].at(x), 1152.0f - 13.0f + 1.0f);
  EXPECT_EQ(want[6].at(x), 1140.0f);
  EXPECT_EQ(run_on_host_sim(s, 32, 16, 2), 2);
}

// At host positions 0..3 a tap may reach before the first token: it reads the conv's
// zero initial state, so a key from there is no write and data from there is a 0 cell.
TEST(GdnTaps, TapsBeforeTheFirstTokenReadZero) {
  for (int key_tap = 0; key_tap <= 3; ++key_tap) {
    Stream s;
    GdnMemory m = make_memory(s, "m", 4, 4);
    m.key_tap = key_tap;
    m.query_tap = 1;
    m.data_taps = {0, 1, 2, 3};
    m.out = s.p.values("out", 4);
    s.ops.push_back(m);
    s.p.gdn_memory("m", m);
    const GdnMemory ints = [&] {  // integer cells: a zero-history cell decodes as -offset
      GdnMemory n = make_memory(s, "n", 4, 4);
      n.key_tap = key_tap;
      n.query_tap = 2;
      n.data_taps = {3, 2, 1, 0};
      n.offset = 4096;
      n.out = s.p.values("nout", 4);
      return n;
    }();
    s.ops.push_back(ints);
    s.p.gdn_memory("n", ints);
    s.start(12);
    // Every token at positions 0..3 writes its position as row and flag 1, with data.
    for (int64_t t = 0; t < 4; ++t)
      for (const GdnMemory& g : s.ops) {
        s.set_bits(t, g.key_bits, t);
        s.at(t, g.write_flag) = 1;
        for (size_t d = 0; d < 4; ++d) s.at(t, g.data[d]) = static_cast<float>(100 * (t + 1) + static_cast<int>(d));
      }
    // Reads of rows 0..3 and one never written row, at positions 5..10 (tapped back).
    for (int64_t t = 4; t < 12; ++t)
      for (const GdnMemory& g : s.ops) {
        s.set_bits(t, g.query_bits, t % 5);
        s.at(t, g.read_flag) = 1;
      }
    const auto want = model(s, m, 16);
    const auto want_int = model(s, ints, 16);
    // Position 6 reads (query tap 1) row 0 for m, position 7 (query tap 2) row 0 for n.
    auto outs = [](const std::map<ValueId, float>& o, const GdnMemory& g) {
      std::vector<float> v;
      for (ValueId x : g.out) v.push_back(o.at(x));
      return v;
    };
    if (key_tap == 0) {
      // Row 0 written at position 0: taps 1..3 reach the zero history.
      EXPECT_EQ(outs(want[6], m), (std::vector<float>{100, 0, 0, 0}));
      EXPECT_EQ(outs(want_int[7], ints), (std::vector<float>{-4096, -4096, -4096, 103}));
    } else if (key_tap == 3) {
      // Row 0 written at position 3 (its key from token 0): every tap inside the stream.
      EXPECT_EQ(outs(want[6], m), (std::vector<float>{400, 301, 202, 103}));
      EXPECT_EQ(outs(want_int[7], ints), (std::vector<float>{100, 201, 302, 403}));
    }
    EXPECT_GT(run_on_host_sim(s, 16, 16, 10 + static_cast<uint64_t>(key_tap)), 0) << key_tap;
  }
}

// Random programs: two memories per layer (float cells whose columns add into a few
// out values with +-2^i decode weights; integer cells with an offset), random taps,
// random writes, reads and wipes, every head shape class.
TEST(GdnTaps, RandomProgramsMatchTheSemanticsOnHostSim) {
  const std::pair<int64_t, int64_t> shapes[] = {{16, 16}, {32, 32}, {64, 16}, {16, 32}};
  int64_t compared = 0;
  for (uint64_t seed = 0; seed < 24; ++seed) {
    std::mt19937_64 rng(seed);
    const auto [dk, dv] = shapes[seed % 4];
    const GdnLayout g = GdnLayout::for_dims(dk, dv);
    const int n = std::countr_zero(static_cast<uint64_t>(dk));
    auto tap = [&] { return static_cast<int>(rng() % 4); };
    Stream s;
    // Float cells: integers 0 or [32, 4096) times 2^e; terms w x with w = +-2^(0..8)
    // are integers below 2^20, at most 8 per out value: every partial sum is exact.
    const int D = static_cast<int>(std::min<int64_t>(g.capacity(false), 8));
    GdnMemory a = make_memory(s, "a", n, 0);
    const std::vector<ValueId> pool = s.inputs_named("a.pool", std::max(1, D / 2));
    const std::vector<ValueId> groups = s.p.values("a.out", 1 + static_cast<int>(rng() % 3));
    a.key_tap = tap();
    a.query_tap = tap();
    a.data_exponent = static_cast<int>(rng() % 5);
    for (int c = 0; c < D; ++c) {
      a.data.push_back(pool[rng() % pool.size()]);
      a.data_taps.push_back(tap());
      a.out.push_back(groups[rng() % groups.size()]);
      a.out_weights.push_back(std::ldexp(rng() % 2 ? -1.0f : 1.0f, static_cast<int>(rng() % 9)));
    }
    // Integer cells with offset 4096, one out value per column.
    const int Di = static_cast<int>(std::min<int64_t>(g.capacity(true), 6));
    GdnMemory b = make_memory(s, "b", n, Di);
    b.key_tap = tap();
    b.query_tap = tap();
    b.offset = 4096;
    b.out = s.p.values("b.out", Di);
    for (int c = 0; c < Di; ++c) {
      b.data_taps.push_back(tap());
      b.out_weights.push_back(std::ldexp(rng() % 2 ? -1.0f : 1.0f, static_cast<int>(rng() % 7) - 3));
    }
    s.ops = {a, b};
    s.p.gdn_memory("a", a);
    s.p.gdn_memory("b", b);
    const int64_t T = 100;
    s.start(T);
    const auto rows = static_cast<uint64_t>(g.rows());
    std::uniform_real_distribution<double> coin(0, 1);
    // Addresses mostly from a few rows (so that reads find data), some anywhere.
    auto row = [&] { return static_cast<int64_t>(rng() % (coin(rng) < 0.7 ? std::min<uint64_t>(rows, 6) : rows)); };
    for (int64_t t = 0; t < T; ++t) {
      for (const GdnMemory* m : {&a, &b}) {
        s.set_bits(t, m->key_bits, row());
        s.set_bits(t, m->query_bits, row());
        s.at(t, m->write_flag) = coin(rng) < 0.5 ? 1.0f : 0.0f;
        s.at(t, m->read_flag) = t > 0 && coin(rng) < 0.6 ? 1.0f : 0.0f;  // never read at position 0
        s.at(t, m->wipe_flag) = coin(rng) < 0.03 ? 1.0f : 0.0f;
      }
      for (ValueId v : pool) s.at(t, v) = rng() % 8 == 0 ? 0.0f : static_cast<float>(32 + rng() % 4064);
      for (ValueId v : b.data) s.at(t, v) = static_cast<float>(-4078 + static_cast<int>(rng() % 8174));
    }
    const int64_t nonzero = run_on_host_sim(s, dk, dv, 100 + seed);
    EXPECT_GT(nonzero, 100) << seed;
    compared += nonzero;
  }
  EXPECT_GT(compared, 5000);
}

TEST(GdnTaps, EmitsOneHotConvWeightsAndSignedDecodeWeights) {
  Stream s;
  GdnMemory m = make_memory(s, "m", 4, 3);
  m.key_tap = 3;
  m.query_tap = 1;
  m.data_taps = {2, 0, 3};
  const ValueId x = s.p.value("x");
  m.out = {x, x, s.p.value("y")};
  m.out_weights = {0x1p-8f, -2.0f, 1.0f};
  s.ops.push_back(m);
  s.p.gdn_memory("m", m);
  s.start(1);
  Interface io;
  io.inputs = s.inputs;
  io.vocab_size = 1;
  io.input_rows = s.rows;
  EmitOptions eo;
  eo.gdn_key_head_dim = 16;
  eo.gdn_value_head_dim = 16;
  const Compiled c = compile(s.p, io, {}, eo);
  const auto& la = c.weights.layers[0].linear;
  auto taps = [&](int64_t channel) {
    return std::vector<float>(la.conv1d.begin() + channel * 4, la.conv1d.begin() + channel * 4 + 4);
  };
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(taps(i), (std::vector<float>{0, 0, 1, 0})) << "q row " << i;       // tap 1
    EXPECT_EQ(taps(16 + i), (std::vector<float>{1, 0, 0, 0})) << "k row " << i;  // tap 3
  }
  EXPECT_EQ(taps(32 + 0), (std::vector<float>{0, 1, 0, 0}));  // tap 2
  EXPECT_EQ(taps(32 + 1), (std::vector<float>{0, 0, 0, 1}));  // tap 0
  EXPECT_EQ(taps(32 + 2), (std::vector<float>{1, 0, 0, 0}));  // tap 3
  EXPECT_EQ(taps(32 + 15), (std::vector<float>{0, 0, 0, 1}));  // the rail: tap 0
  // Decode W = 2^54 / (32 * read_scale 1/4) = 2^51 times the column's weight.
  const int64_t vd = 16, dx = c.allocation.dim(x), dy = c.allocation.dim(m.out[2]);
  EXPECT_EQ(la.out_proj[static_cast<size_t>(dx * vd + 0)], 0x1p43f);
  EXPECT_EQ(la.out_proj[static_cast<size_t>(dx * vd + 1)], -0x1p52f);
  EXPECT_EQ(la.out_proj[static_cast<size_t>(dy * vd + 2)], 0x1p51f);
  EXPECT_EQ(la.out_proj[static_cast<size_t>(dx * vd + 2)], 0.0f);
}

TEST(GdnTaps, ValidateRejectsBadTapsAndDecodeWeights) {
  auto rejects = [](const std::function<void(GdnMemory&, Program&)>& edit) {
    Program p;
    GdnMemory m;
    m.key_bits = p.values("k", 2);
    m.query_bits = p.values("q", 2);
    m.data = p.values("d", 2);
    m.out = p.values("o", 2);
    edit(m, p);
    p.gdn_memory("m", m);
    try {
      p.validate();
    } catch (const Error& e) {
      return std::string(e.what()).find("'m'") != std::string::npos;
    }
    return false;
  };
  EXPECT_FALSE(rejects([](GdnMemory& m, Program&) { m.key_tap = 3, m.query_tap = 2, m.data_taps = {0, 3}; }));
  EXPECT_FALSE(rejects([](GdnMemory& m, Program&) { m.out_weights = {-0x1p-100f, 0x1p100f}; }));
  EXPECT_FALSE(rejects([](GdnMemory& m, Program&) { m.out = {m.out[0], m.out[0]}; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.key_tap = 4; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.key_tap = -1; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.query_tap = 4; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.data_taps = {0, 4}; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.data_taps = {-1, 0}; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.data_taps = {1}; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.out_weights = {1.0f}; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.out_weights = {1.0f, 3.0f}; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.out_weights = {1.0f, 0.0f}; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.out_weights = {1.0f, -0.75f}; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.out_weights = {1.0f, INFINITY}; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.out_weights = {1.0f, NAN}; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.out_weights = {1.0f, 0x1p101f}; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.out_weights = {1.0f, 0x1p-101f}; }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.out_weights = {1.0f, 0x1p-140f}; }));  // subnormal
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) {
    m.offset = 4096;
    m.out = {m.out[0], m.out[0]};
  }));
  // Enables stand for the constants of beta and z, which have no conv: tap 0 only.
  EXPECT_FALSE(rejects([](GdnMemory& m, Program& p) { m.key_enable = m.query_enable = p.value("e"); }));
  EXPECT_FALSE(rejects([](GdnMemory& m, Program& p) { m.key_tap = 2, m.query_enable = p.value("e"); }));
  EXPECT_FALSE(rejects([](GdnMemory& m, Program& p) { m.query_tap = 2, m.key_enable = p.value("e"); }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program& p) { m.key_tap = 1, m.key_enable = p.value("e"); }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program& p) { m.data_taps = {0, 1}, m.key_enable = p.value("e"); }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program& p) { m.query_tap = 3, m.query_enable = p.value("e"); }));
  EXPECT_TRUE(rejects([](GdnMemory& m, Program&) { m.key_enable = 1000; }));  // not a value
}

// With enables, the weights the rail held (beta, z, the address complement, rail and
// offset cells) sit in the enables' columns, the same numbers (compiler/enable.h: the rail
// arrives as 8, a value as 2^-k), and the rail's column is empty.
TEST(GdnTaps, EnablesTakeTheRailsWeights) {
  auto build = [](bool enables) {
    Program p;
    GdnMemory m;
    m.key_bits = p.values("k", 2);
    m.write_flag = p.value("w");
    m.query_bits = p.values("q", 2);
    m.read_flag = p.value("r");
    m.data = p.values("d", 2);
    m.out = p.values("o", 2);
    m.offset = 4096;
    m.data_exponent = 4;
    const ValueId we = p.value("we"), re = p.value("re");
    if (enables) m.key_enable = we, m.query_enable = re;
    p.gdn_memory("m", m);
    Interface io;
    io.inputs = {m.key_bits[0], m.key_bits[1], m.write_flag, m.query_bits[0], m.query_bits[1], m.read_flag,
                 m.data[0], m.data[1], we, re};
    io.outputs = m.out;
    io.vocab_size = 2;
    io.input_rows.assign(2 * io.inputs.size(), 0.0f);
    EmitOptions eo;
    eo.gdn_key_head_dim = 16;
    eo.gdn_value_head_dim = 64;
    return std::make_pair(compile(p, io, {}, eo), std::make_pair(we, re));
  };
  const auto plain = build(false).first;
  const auto [gated, enables] = build(true);
  const auto& a = plain.weights.layers[0].linear;
  const auto& b = gated.weights.layers[0].linear;
  const int64_t h = plain.weights.config.hidden_size;
  ASSERT_EQ(h, gated.weights.config.hidden_size);
  const auto rail = static_cast<size_t>(plain.allocation.rail_dims[0]);
  const auto we = static_cast<size_t>(gated.allocation.dim(enables.first));
  const auto re = static_cast<size_t>(gated.allocation.dim(enables.second));
  const float k = 0x1p48f;  // the value scale 2^norm_exponent over the rail's 1/8
  int64_t moved = 0;
  for (const auto& [ma, mb] : {std::pair{&a.in_proj_qkv, &b.in_proj_qkv}, std::pair{&a.in_proj_z, &b.in_proj_z},
                               std::pair{&a.in_proj_b, &b.in_proj_b}}) {
    for (size_t row = 0; row * static_cast<size_t>(h) < ma->size(); ++row) {
      const float on_rail = (*ma)[row * h + rail];
      EXPECT_EQ((*mb)[row * h + rail], 0.0f);
      const float on_enables = (*mb)[row * h + we] + (*mb)[row * h + re];
      EXPECT_EQ(on_enables, on_rail * 8.0f * k) << "row " << row;
      moved += on_rail != 0.0f;
    }
  }
  EXPECT_GT(moved, 8);  // beta, z of 3 columns, 3 offset cells, the rail cell, the complements
}

}  // namespace
}  // namespace qpu::compiler
