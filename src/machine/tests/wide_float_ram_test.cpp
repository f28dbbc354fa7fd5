// The wide float RAM (machine/wide_float_ram.h, the token machine's X1 RAM): floats of the
// uplink's whole window written in one token and read back bit for bit in later ones,
// on the engine and on HostSim (random summation orders). The window's edges and the
// tier bound 2^-12 (both sides, both signs), zeros, random floats of every binade
// -47 .. 19 (fixed seed), idle tokens between writes and reads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/float_bits.h"
#include "compiler/emit.h"
#include "compiler/gdn_layout.h"
#include "compiler/host_sim.h"
#include "machine/wide_float_ram.h"
#include "npu/engine_host.h"
#include "npu/float_ram.h"
#include "npu/tests/unit_harness.h"

namespace qpu::machine {
namespace {

using compiler::ValueId;

constexpr int kFloats = 40;  // two heads per tier (31 floats per row at 16 x 64)

// The edges: the uplink's window ends, the tier bound and its neighbours, each tier's
// window ends, in both signs, and zeros.
std::vector<float> edge_floats() {
  std::vector<float> e = {0.0f, -0.0f};
  for (float m : {0x1p-47f, std::nextafter(0x1p-47f, 1.0f), 0x1p-12f, std::nextafter(0x1p-12f, 0.0f),
                  std::nextafter(0x1p-12f, 1.0f), 0x1p-17f, std::nextafter(0x1p-17f, 0.0f), 0x1p-10f,
                  std::nextafter(0x1p-10f, 0.0f), std::nextafter(0x1p20f, 0.0f), 0x1p19f, 1.0f, 0x1.fffffep-48f * 2.0f})
    for (float s : {1.0f, -1.0f}) e.push_back(s * m);
  return e;
}

struct RamCase {
  compiler::Compiled compiled;
  std::vector<int64_t> out_dims, down_dims;
  std::vector<std::vector<float>> expected;  // per token: the floats read (+0 when nothing is read)
  std::vector<char> idle;                    // per token: every input 0
  int64_t written = 0, zeros = 0, negative = 0, low_tier = 0, edges = 0;
};

// `pairs` writes, each read back 1..3 tokens later (idle tokens between), then written
// over by the next write (wipe and write at once).
RamCase build(int pairs, uint64_t seed) {
  compiler::Program p;
  const std::vector<ValueId> x = p.values("x", kFloats);
  const ValueId enable = p.value("enable"), store = p.value("store"), read = p.value("read");
  const int per_row = static_cast<int>(npu::floats_per_row(compiler::GdnLayout::for_dims(16, 64)));
  const WideFloatRam ram = wide_float_ram(p, x, enable, store, read, per_row, "x1");
  compiler::Interface io;
  io.inputs = x;
  io.inputs.insert(io.inputs.end(), {enable, store, read});
  io.outputs = ram.out;
  const size_t width = io.inputs.size();

  RamCase c;
  std::mt19937_64 rng(seed);
  const std::vector<float> edges = edge_floats();
  size_t next_edge = 0;
  std::vector<std::vector<float>> rows;  // per token: its input row
  auto token = [&](std::vector<float> row, std::vector<float> expected, bool idle) {
    rows.push_back(std::move(row));
    c.expected.push_back(std::move(expected));
    c.idle.push_back(idle ? 1 : 0);
  };
  const std::vector<float> zeros(static_cast<size_t>(kFloats), 0.0f);
  for (int k = 0; k < pairs; ++k) {
    std::vector<float> row(width, 0.0f), stored(static_cast<size_t>(kFloats));
    for (int i = 0; i < kFloats; ++i) {
      float v = 0.0f;
      if (next_edge < edges.size()) {
        v = edges[next_edge++];
        ++c.edges;
      } else if (rng() % 16 == 0) {
        v = (rng() & 1) ? -0.0f : 0.0f;
      } else {
        v = npu::unit_testing::rand_float(rng, -47, 19);
      }
      row[static_cast<size_t>(i)] = v;
      stored[static_cast<size_t>(i)] = 0.0f + v;  // -0 reads back as +0
      c.zeros += v == 0.0f;
      c.negative += v < 0.0f;
      c.low_tier += v != 0.0f && std::fabs(v) <= WideFloatRam::kTierBound;
    }
    c.written += kFloats;
    row[kFloats] = 1.0f;      // enable
    row[kFloats + 1] = 1.0f;  // store
    token(row, zeros, false);
    const int idle = static_cast<int>(rng() % 3);
    for (int j = 0; j < idle; ++j) token(std::vector<float>(width, 0.0f), zeros, true);
    std::vector<float> reader(width, 0.0f);
    reader[kFloats + 2] = 1.0f;  // read: x and enable 0, as on the token machine's SW and FFN cycles
    token(reader, stored, false);
  }
  io.vocab_size = static_cast<int64_t>(rows.size());
  for (const auto& r : rows) io.input_rows.insert(io.input_rows.end(), r.begin(), r.end());
  compiler::EmitOptions eo;
  eo.gdn_key_head_dim = 16;
  eo.gdn_value_head_dim = 64;
  c.compiled = compiler::compile(p, io, {}, eo);
  for (ValueId v : io.outputs) c.out_dims.push_back(c.compiled.allocation.dim(v));
  for (const compiler::Op& op : p.ops())
    if (op.kind == compiler::OpKind::Mlp)
      for (const auto& n : op.neurons) c.down_dims.push_back(c.compiled.allocation.dim(n.down[0].value));
  return c;
}

// Mismatches (the first described in `first`) and nonzero tier values on idle tokens.
std::pair<int64_t, int64_t> run(const RamCase& c, const npu::Forward& forward, std::string& first) {
  std::vector<float> hidden(static_cast<size_t>(c.compiled.weights.config.hidden_size));
  int64_t mismatches = 0, idle_nonzero = 0;
  for (size_t t = 0; t < c.expected.size(); ++t) {
    forward(static_cast<int64_t>(t), hidden);
    for (size_t i = 0; i < c.out_dims.size(); ++i) {
      const float got = hidden[static_cast<size_t>(c.out_dims[i])], want = c.expected[t][i];
      if (float_bits(got) != float_bits(want) && mismatches++ == 0)
        first = "token " + std::to_string(t) + " float " + std::to_string(i) + ": expected " + describe_float(want) +
                " got " + describe_float(got);
    }
    if (c.idle[t])
      for (int64_t d : c.down_dims) idle_nonzero += hidden[static_cast<size_t>(d)] != 0.0f;
  }
  return {mismatches, idle_nonzero};
}

TEST(WideFloatRam, HoldsTheUplinksWindow) {
  EXPECT_TRUE(wide_float_ram_holds(0.0f));
  EXPECT_TRUE(wide_float_ram_holds(-0.0f));
  EXPECT_TRUE(wide_float_ram_holds(0x1p-47f));
  EXPECT_TRUE(wide_float_ram_holds(-std::nextafter(0x1p20f, 0.0f)));
  EXPECT_FALSE(wide_float_ram_holds(std::nextafter(0x1p-47f, 0.0f)));
  EXPECT_FALSE(wide_float_ram_holds(-0x1p20f));
  // The tiers overlap around the bound: each holds its side of it.
  EXPECT_TRUE((npu::FloatRamWindow{WideFloatRam::kLowLowBinade}.holds(WideFloatRam::kTierBound)));
  EXPECT_TRUE((npu::FloatRamWindow{WideFloatRam::kLowLowBinade}.holds(0x1p-47f)));
  EXPECT_TRUE((npu::FloatRamWindow{WideFloatRam::kHighLowBinade}.holds(std::nextafter(WideFloatRam::kTierBound, 1.0f))));
  EXPECT_TRUE((npu::FloatRamWindow{WideFloatRam::kHighLowBinade}.holds(std::nextafter(0x1p20f, 0.0f))));
}

TEST(WideFloatRam, EveryFloatOfTheWindowReadsBackBitForBit) {
  const RamCase c = build(400, 11);
  std::printf("wide float ram: %lld floats written (%lld edges, %lld zeros, %lld negative, %lld in the low tier), "
              "%zu tokens, %lld host layers, hidden %lld\n",
              static_cast<long long>(c.written), static_cast<long long>(c.edges), static_cast<long long>(c.zeros),
              static_cast<long long>(c.negative), static_cast<long long>(c.low_tier), c.expected.size(),
              static_cast<long long>(c.compiled.weights.config.num_hidden_layers),
              static_cast<long long>(c.compiled.weights.config.hidden_size));
  EXPECT_GT(c.zeros, 100);
  EXPECT_GT(c.negative, c.written / 3);
  EXPECT_GT(c.low_tier, c.written / 3);  // binades -47 .. -13 of -47 .. 19
  std::string first;
  const auto [mismatches, idle_nonzero] = run(c, npu::engine_host()(c.compiled.weights), first);
  EXPECT_EQ(mismatches, 0) << first;
  EXPECT_EQ(idle_nonzero, 0);
}

TEST(WideFloatRam, HostSimRandomOrders) {
  const RamCase c = build(25, 12);  // the edges and 760 random floats (HostSim's cost grows with the vocabulary)
  for (uint64_t seed : {1u, 2u, 3u}) {
    compiler::HostSim sim(c.compiled.weights, seed);
    std::vector<float> logits(static_cast<size_t>(c.compiled.weights.config.vocab_size));
    std::string first;
    const auto [mismatches, idle_nonzero] =
        run(c, [&](int64_t t, std::span<float> hidden) { sim.forward(t, logits, hidden); }, first);
    EXPECT_EQ(mismatches, 0) << "HostSim seed " << seed << ": " << first;
    EXPECT_EQ(idle_nonzero, 0);
  }
}

}  // namespace
}  // namespace qpu::machine
