// The KV-cache write address unit (npu/kv_address.h): EVERY position of stories260K's
// seq_len for B = 1, 2, 8 banks on the engine and under HostSim's random summation
// orders, bit for bit against integer arithmetic done here (bit b of pos / B, pos % B
// == k); positions outside the range (the documented aliasing: no bank on); idle cycles
// (enable 0, pos anything: every value the unit writes is +-0); the cost; and one
// end-to-end run: 64 tokens write their position's float into a GdnMemory (float RAM)
// at the computed (bank, row), idle tokens with junk pos in between, then later tokens
// read whole rows (B consecutive positions per cycle) back, bit for bit.
#include "npu/kv_address.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <numeric>
#include <random>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/host_sim.h"
#include "npu/engine_host.h"
#include "npu/float_ram.h"
#include "unit_harness.h"

namespace qpu::npu {
namespace {

using compiler::ValueId;
using unit_testing::UnitHarness;
using unit_testing::UnitProgram;

struct Shape {
  int banks = 1, row_bits = 0;
  int64_t positions() const { return int64_t{banks} << row_bits; }
};

// The row bits stories260K's seq_len needs with B banks (seq_len / B rows).
Shape stories_shape(int banks) {
  const int64_t seq_len = unit_testing::stories260k().config().seq_len;
  EXPECT_TRUE(std::has_single_bit(static_cast<uint64_t>(seq_len)));
  Shape s{banks, 0};
  while (s.positions() < seq_len) ++s.row_bits;
  return s;
}

UnitProgram build(const Shape& s, KvAddress* out = nullptr) {
  UnitProgram u;
  auto& p = u.program;
  const ValueId enable = p.value("enable"), pos = p.value("pos");
  u.inputs = {enable, pos};
  const KvAddress a = kv_address(p, pos, enable, s.banks, s.row_bits);
  u.outputs = a.row_bits;
  u.outputs.insert(u.outputs.end(), a.bank.begin(), a.bank.end());
  if (out) *out = a;
  return u;
}

// Integer arithmetic, independent of the unit: the address of pos as the outputs
// (row bits LSB first, then the bank one-hot). Out of range: the documented aliasing.
void add_case(const Shape& s, float enable, int64_t pos, std::vector<float>& in, std::vector<float>& expect) {
  in.insert(in.end(), {enable, static_cast<float>(pos)});
  const bool on = enable != 0.0f;
  const bool in_range = pos >= 0 && pos < s.positions();
  const int64_t row = !in_range ? (pos < 0 ? 0 : (int64_t{1} << s.row_bits) - 1) : pos / s.banks;
  for (int b = 0; b < s.row_bits; ++b) expect.push_back(on ? static_cast<float>((row >> b) & 1) : 0.0f);
  for (int k = 0; k < s.banks; ++k) expect.push_back(on && in_range && pos % s.banks == k ? 1.0f : 0.0f);
}

std::vector<Shape> stories_shapes() { return {stories_shape(1), stories_shape(2), stories_shape(8)}; }

std::string describe(const Shape& s) {
  return "B = " + std::to_string(s.banks) + ", row bits = " + std::to_string(s.row_bits);
}

TEST(KvAddress, StoriesShapesCoverSeqLen) {
  // 512 positions: 9, 8 and 6 row bits (the brief's B = 8 example).
  EXPECT_EQ(stories_shape(1).row_bits, 9);
  EXPECT_EQ(stories_shape(2).row_bits, 8);
  EXPECT_EQ(stories_shape(8).row_bits, 6);
}

// Every position, enabled: the engine and three HostSim summation-order seeds.
TEST(KvAddress, EveryPositionOnEngineAndSimulator) {
  for (const Shape& s : stories_shapes()) {
    SCOPED_TRACE(describe(s));
    std::vector<float> in, expect;
    for (int64_t pos = 0; pos < s.positions(); ++pos) add_case(s, 1.0f, pos, in, expect);
    const UnitHarness h(build(s), s.positions());
    const auto engine = h.run(in, expect, false);
    EXPECT_EQ(engine.cases, s.positions());
    EXPECT_EQ(engine.mismatches, 0) << engine.first_mismatch;
    for (uint64_t seed : {11u, 12u, 13u}) {
      const auto sim = h.run(in, expect, true, seed);
      EXPECT_EQ(sim.mismatches, 0) << "seed " << seed << ": " << sim.first_mismatch;
    }
  }
}

// Small shapes, every position including the edges B = 1 with no row bits (bank 0 is
// the enable) and 2^16 positions' worth of row bits for B = 1 would be slow: B in {1,
// 2, 4, 8, 16} x row bits in {0, 1, 3}.
TEST(KvAddress, EveryPositionOfSmallShapes) {
  for (int banks : {1, 2, 4, 8, 16})
    for (int rows : {0, 1, 3}) {
      const Shape s{banks, rows};
      SCOPED_TRACE(describe(s));
      std::vector<float> in, expect;
      for (int64_t pos = 0; pos < s.positions(); ++pos) add_case(s, 1.0f, pos, in, expect);
      const UnitHarness h(build(s), s.positions());
      const auto engine = h.run(in, expect, false);
      EXPECT_EQ(engine.mismatches, 0) << engine.first_mismatch;
      const auto sim = h.run(in, expect, true, 7);
      EXPECT_EQ(sim.mismatches, 0) << sim.first_mismatch;
    }
}

// Outside [0, B 2^rows): row bits saturate (all 1 above, all 0 below) and no bank is on,
// so the GDN memory is not written. Near both ends of the range and at |pos| = 2^16.
TEST(KvAddress, OutOfRangePositionsWriteNoBank) {
  for (const Shape& s : stories_shapes()) {
    SCOPED_TRACE(describe(s));
    std::vector<float> in, expect;
    const int64_t n = s.positions();
    for (int64_t d = 0; d < 3 * s.banks + 5; ++d) {
      add_case(s, 1.0f, n + d, in, expect);
      add_case(s, 1.0f, -1 - d, in, expect);
    }
    for (int64_t pos : {int64_t{65535}, int64_t{65536}, int64_t{-65535}, int64_t{-65536}, 2 * n - 1, -n})
      add_case(s, 1.0f, pos, in, expect);
    const int64_t cases = static_cast<int64_t>(in.size() / 2);
    const UnitHarness h(build(s), cases);
    const auto engine = h.run(in, expect, false);
    EXPECT_EQ(engine.cases, cases);
    EXPECT_EQ(engine.mismatches, 0) << engine.first_mismatch;
    const auto sim = h.run(in, expect, true, 5);
    EXPECT_EQ(sim.mismatches, 0) << sim.first_mismatch;
  }
}

// Idle: enable 0 with pos anything (in range, 0, out of range, negative): every value of
// the program except the pos input is +-0 after the last layer; and with every input 0,
// after every layer (the harness's check).
TEST(KvAddress, IdleWritesOnlyZerosWhateverPosHolds) {
  const std::vector<int64_t> junk = {0, 1, 5, 7, 8, 63, 100, 255, 256, 511, 512, 4000, 65536, -1, -9, -65536};
  for (const Shape& s : stories_shapes()) {
    SCOPED_TRACE(describe(s));
    const UnitHarness h(build(s), static_cast<int64_t>(junk.size()));
    EXPECT_EQ(h.idle_nonzero(), "");
    // The harness's embedding rows hold its inputs: set (0, pos) in row r by hand.
    io::Qwen35Weights weights = h.compiled().weights;
    std::vector<float> hidden(static_cast<size_t>(weights.config.hidden_size));
    const auto& alloc = h.compiled().allocation;
    const ValueId enable = 0, pos = 1;  // build()'s first two values
    const int64_t H = weights.config.hidden_size;
    for (size_t r = 0; r < junk.size(); ++r) {
      weights.embed_tokens[r * static_cast<size_t>(H) + static_cast<size_t>(alloc.dim(enable))] = 0.0f;
      weights.embed_tokens[r * static_cast<size_t>(H) + static_cast<size_t>(alloc.dim(pos))] =
          static_cast<float>(junk[r]);
    }
    const Forward idle = engine_host()(weights);
    int64_t checked = 0;
    for (size_t r = 0; r < junk.size(); ++r) {
      idle(static_cast<int64_t>(r), hidden);
      ASSERT_EQ(hidden[static_cast<size_t>(alloc.dim(pos))], static_cast<float>(junk[r]));  // the input is there
      for (int64_t v = 0; v < h.program().num_values(); ++v) {
        if (v == pos) continue;
        const float x = hidden[static_cast<size_t>(alloc.dim(static_cast<ValueId>(v)))];
        EXPECT_EQ(x, 0.0f) << "pos " << junk[r] << ": value '" << h.program().name(static_cast<ValueId>(v))
                           << "' = " << describe_float(x);
        ++checked;
      }
    }
    EXPECT_EQ(checked, static_cast<int64_t>(junk.size()) * (h.program().num_values() - 1));
    // The same rows with enable 1 do address (the check above is not vacuous).
    std::vector<float> in, expect;
    for (int64_t p : junk) add_case(s, 1.0f, p, in, expect);
    const auto on = h.run(in, expect, false);
    EXPECT_EQ(on.mismatches, 0) << on.first_mismatch;
  }
}

// The cost: row_bits + 2 MLP sublayers, 1 + 2 row_bits + B + 2 neurons (kv_address.h).
TEST(KvAddress, CostIsRowBitsPlusTwoSublayers) {
  for (const Shape& s : stories_shapes()) {
    const UnitProgram u = build(s);
    int64_t ops = 0, neurons = 0;
    for (const compiler::Op& op : u.program.ops())
      if (op.kind == compiler::OpKind::Mlp) {
        ++ops;
        neurons += static_cast<int64_t>(op.neurons.size());
      }
    const UnitHarness h(build(s), 1);
    std::printf("kv_address %s: %lld MLP ops, %lld neurons; compiled: %lld layers, %lld neurons, hidden %lld\n",
                describe(s).c_str(), static_cast<long long>(ops), static_cast<long long>(neurons),
                static_cast<long long>(h.layers()), static_cast<long long>(h.neurons()),
                static_cast<long long>(h.hidden()));
    EXPECT_EQ(ops, s.row_bits + 2);
    EXPECT_EQ(neurons, 1 + 2 * s.row_bits + s.banks + 2);
    EXPECT_EQ(h.layers(), s.row_bits + 2);
  }
}

TEST(KvAddress, RejectsBadShapes) {
  compiler::Program p;
  const ValueId enable = p.value("enable"), pos = p.value("pos");
  EXPECT_THROW(kv_address(p, pos, enable, 0, 3), Error);
  EXPECT_THROW(kv_address(p, pos, enable, 3, 3), Error);
  EXPECT_THROW(kv_address(p, pos, enable, -4, 3), Error);
  EXPECT_THROW(kv_address(p, pos, enable, 8, -1), Error);
  EXPECT_THROW(kv_address(p, pos, enable, 8, 14), Error);  // 2^17 positions
  EXPECT_THROW(kv_address(p, pos, pos, 8, 6), Error);
  EXPECT_THROW(kv_address(p, 7, enable, 8, 6), Error);
  EXPECT_THROW(kv_address(p, pos, compiler::kOne, 8, 6), Error);
  EXPECT_EQ(p.ops().size(), 0u);
  EXPECT_NO_THROW(kv_address(p, pos, enable, 1 << 16, 0));
  EXPECT_NO_THROW(kv_address(p, pos, enable, 8, 13));
}

// End to end: B = 4 banks (GDN heads of 16 x 64: 16 rows, 4 key bits), 64 positions.
// Tokens write pos's float (a window float chosen per position) at the computed
// address in a shuffled order, with idle tokens (enable 0, junk pos and data) between
// them; then tokens read whole rows (the same row of the 4 banks: positions 4r .. 4r+3)
// in a shuffled order, every row twice. Engine and HostSim.
TEST(KvAddress, GdnMemoryWrittenAtTheAddressReadsBackEveryPosition) {
  constexpr int kBanks = 4, kRowBits = 4, kPositions = kBanks << kRowBits;
  compiler::Program p;
  compiler::Interface io;
  const ValueId enable = p.value("enable"), pos = p.value("pos"), data = p.value("data"), read = p.value("read");
  const auto query = p.values("query", kRowBits);
  const KvAddress a = kv_address(p, pos, enable, kBanks, kRowBits);
  std::vector<FloatRamHead> heads(kBanks);
  std::vector<ValueId> outs;
  for (int k = 0; k < kBanks; ++k) {
    FloatRamHead& h = heads[static_cast<size_t>(k)];
    h.data = {data};
    h.key_bits = a.row_bits;
    h.write_flag = a.bank[static_cast<size_t>(k)];
    h.query_bits = query;
    h.read_flag = read;
    h.out = {p.value("out" + std::to_string(k))};
    outs.push_back(h.out[0]);
  }
  const FloatRamWindow window{};
  float_ram(p, window, heads, enable, "kv");
  io.inputs = {enable, pos, data, read};
  io.inputs.insert(io.inputs.end(), query.begin(), query.end());
  io.outputs = outs;
  const size_t width = io.inputs.size();

  std::mt19937_64 rng(2026);
  std::vector<float> value(kPositions);  // the float stored for each position
  for (float& v : value) {
    v = unit_testing::rand_float(rng, window.low_binade, window.low_binade + FloatRamWindow::kBinades - 1);
  }
  std::vector<std::vector<float>> rows;      // token rows of the interface
  std::vector<std::vector<float>> expected;  // per token, the outs
  auto token = [&](float en, float ps, float dt, float rd, int64_t q, std::vector<float> out) {
    std::vector<float> r = {en, ps, dt, rd};
    for (int b = 0; b < kRowBits; ++b) r.push_back(static_cast<float>((q >> b) & 1));
    rows.push_back(std::move(r));
    expected.push_back(std::move(out));
  };
  const std::vector<float> nothing(kBanks, 0.0f);
  std::vector<int> order(kPositions);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  int64_t idle = 0;
  for (int t : order) {
    token(1.0f, static_cast<float>(t), value[static_cast<size_t>(t)], 0.0f, static_cast<int64_t>(rng() % 16), nothing);
    if (rng() % 3 == 0) {  // idle: junk pos (in range, out of range) and junk data
      const int64_t junk = static_cast<int64_t>(rng() % (2 * kPositions));
      token(0.0f, static_cast<float>(junk), unit_testing::rand_float(rng, -20, 3), 0.0f,
            static_cast<int64_t>(rng() % 16), nothing);
      ++idle;
    }
  }
  std::vector<int> read_rows;
  for (int rep = 0; rep < 2; ++rep)
    for (int r = 0; r < (1 << kRowBits); ++r) read_rows.push_back(r);
  std::shuffle(read_rows.begin(), read_rows.end(), rng);
  for (int r : read_rows) {
    std::vector<float> out;
    for (int k = 0; k < kBanks; ++k) out.push_back(0.0f + value[static_cast<size_t>(r * kBanks + k)]);
    // The reader is idle for the address unit: junk pos must not write.
    token(0.0f, static_cast<float>(rng() % kPositions), unit_testing::rand_float(rng, -20, 3), 1.0f, r, out);
  }
  EXPECT_GE(idle, 10);
  const auto tokens = static_cast<int64_t>(rows.size());
  io.vocab_size = std::max<int64_t>(tokens, kBanks);
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * width, 0.0f);
  for (size_t t = 0; t < rows.size(); ++t)
    std::copy(rows[t].begin(), rows[t].end(), io.input_rows.begin() + static_cast<std::ptrdiff_t>(t * width));
  compiler::EmitOptions eo;
  eo.gdn_key_head_dim = 16;
  eo.gdn_value_head_dim = 64;
  const compiler::Compiled c = compiler::compile(p, io, {}, eo);
  std::printf("kv_address + float RAM: %lld tokens (%d writes, %lld idle, %zu row reads), %lld layers\n",
              static_cast<long long>(tokens), kPositions, static_cast<long long>(idle), read_rows.size(),
              static_cast<long long>(c.weights.config.num_hidden_layers));

  auto run = [&](const Forward& fwd, const std::string& what) {
    SCOPED_TRACE(what);
    std::vector<float> hidden(static_cast<size_t>(c.weights.config.hidden_size));
    int64_t mismatches = 0, live_reads = 0;
    std::string first;
    for (int64_t t = 0; t < tokens; ++t) {
      fwd(t, hidden);
      for (int k = 0; k < kBanks; ++k) {
        const float got = hidden[static_cast<size_t>(c.allocation.dim(outs[static_cast<size_t>(k)]))];
        const float want = expected[static_cast<size_t>(t)][static_cast<size_t>(k)];
        live_reads += want != 0.0f;
        if (float_bits(got) != float_bits(want) && mismatches++ == 0)
          first = "token " + std::to_string(t) + " bank " + std::to_string(k) + ": expected " + describe_float(want) +
                  " got " + describe_float(got);
      }
    }
    EXPECT_EQ(mismatches, 0) << first;
    EXPECT_EQ(live_reads, 2 * kPositions);  // every position read twice, all nonzero
  };
  run(engine_host()(c.weights), "engine");
  for (uint64_t seed : {3u, 4u}) {
    compiler::HostSim sim(c.weights, seed);
    std::vector<float> logits(static_cast<size_t>(c.weights.config.vocab_size));
    run([&](int64_t t, std::span<float> hidden) { sim.forward(t, logits, hidden); },
        "HostSim seed " + std::to_string(seed));
  }
}

}  // namespace
}  // namespace qpu::npu
