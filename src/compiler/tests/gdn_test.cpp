// The GDN memory in the compiler: layout constants, the float facts its encoding
// rests on (computed here with the spec's fp32 formulas, independently of the
// emitter), scheduling and emission rules.
#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/emit.h"
#include "compiler/gdn_layout.h"

namespace qpu::compiler {
namespace {

// transformers' fp32 formulas (qwen35-spec.md section 7), written out here.
float silu(float x) { return x / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
float l2norm_scale(float sum_of_squares) { return 1.0f / std::sqrt(sum_of_squares + 1e-6f); }

TEST(GdnLayout, ConstantsPerShape) {
  const GdnLayout q = GdnLayout::for_dims(128, 128);
  EXPECT_TRUE(q.two_hot);
  EXPECT_EQ(q.rows(), 127);
  EXPECT_EQ(q.rails, 2);
  EXPECT_EQ(q.read_scale, 0x1p-4f);
  EXPECT_EQ(q.rail_cell, 0x1p61f);  // 2 (2^61 * 2^-4)^2 = 128 * 4^54
  EXPECT_EQ(q.capacity(true), 125);
  EXPECT_EQ(q.capacity(false), 126);
  const GdnLayout p = GdnLayout::for_dims(64, 16);
  EXPECT_FALSE(p.two_hot);
  EXPECT_EQ(p.rows(), 64);
  EXPECT_EQ(p.rails, 1);
  EXPECT_EQ(p.read_scale, 0.125f);
  EXPECT_EQ(p.rail_cell, 0x1p59f);  // (2^59 / 8)^2 = 16 * 4^54
  for (int64_t bad : {0, 8, 48, 96, 100}) EXPECT_THROW(GdnLayout::for_dims(bad, 64), Error) << bad;
  EXPECT_THROW(GdnLayout::for_dims(64, 12), Error);
}

// The rail squares make the gated norm's mean exactly 4^54 and rsqrt exactly 2^-54.
TEST(GdnLayout, RailsFixTheGatedNormScale) {
  for (const auto& [dk, dv] : {std::pair<int64_t, int64_t>{128, 128}, {64, 16}, {16, 32}, {256, 512}}) {
    const GdnLayout g = GdnLayout::for_dims(dk, dv);
    const float o = g.rail_cell * g.read_scale;
    const float mean = static_cast<float>(g.rails) * (o * o) / static_cast<float>(dv) + 1e-6f;
    EXPECT_EQ(1.0f / std::sqrt(mean), 0x1p-54f) << dk << "x" << dv;
    // Data squares up to (2^44 * read_scale)^2 per column stay under half an ulp.
    const float cell = std::nextafter(GdnLayout::kMaxCell, 0.0f) * g.read_scale;
    float sum = static_cast<float>(g.rails) * (o * o);
    for (int64_t c = 0; c < g.capacity(false); ++c) sum = sum + cell * cell;
    EXPECT_EQ(sum, static_cast<float>(g.rails) * (o * o)) << dk << "x" << dv;
  }
}

TEST(GdnFacts, KeyQueryGatesAndDecay) {
  EXPECT_EQ(silu(128.0f), 128.0f);
  EXPECT_EQ(float_bits(silu(-128.0f)), float_bits(-0.0f));
  EXPECT_EQ(silu(0.0f), 0.0f);
  EXPECT_EQ(silu(18.0f), 18.0f);
  EXPECT_EQ(silu(0x1p61f), 0x1p61f);
  // One-hot key: l2norm gives exactly 1 (eps 1e-6 vanishes next to 128^2).
  EXPECT_EQ(128.0f * l2norm_scale(128.0f * 128.0f), 1.0f);
  EXPECT_EQ(0.0f * l2norm_scale(0.0f), 0.0f);
  // Two-hot query over 128 rows: decode path q / sqrt(128) is exactly 2^-4; the
  // chunked first-token path q * 128^-0.5 is not (reads at position 0 are inexact).
  const float q = 128.0f * l2norm_scale(2.0f * 128.0f * 128.0f);
  EXPECT_EQ(q / static_cast<float>(std::sqrt(128.0)), 0x1p-4f);
  EXPECT_EQ(q * static_cast<float>(std::pow(128.0, -0.5)), 0x1.fffffep-5f);
  // One-hot query over 64 rows: both paths give 1/8.
  EXPECT_EQ(1.0f / static_cast<float>(std::sqrt(64.0)), 0.125f);
  EXPECT_EQ(1.0f * static_cast<float>(std::pow(64.0, -0.5)), 0.125f);
  // beta = sigmoid(32) = 1; no decay: softplus(-1000) = 0, exp(-exp(0) * 0) = 1;
  // wipe: softplus(1000) = 1000, exp(-1000) = 0.
  EXPECT_EQ(1.0f / (1.0f + std::exp(-32.0f)), 1.0f);
  EXPECT_EQ(softplus(-1000.0f), 0.0f);
  EXPECT_EQ(std::exp(-std::exp(0.0f) * softplus(-1000.0f)), 1.0f);
  EXPECT_EQ(std::exp(-std::exp(0.0f) * softplus(1000.0f)), 0.0f);
}

GdnMemory small_memory(Program& p, const std::string& name, int bits, int data) {
  GdnMemory m;
  m.key_bits = p.values(name + ".key", bits);
  m.data = p.values(name + ".data", data);
  m.query_bits = p.values(name + ".query", bits);
  m.out = p.values(name + ".out", data);
  return m;
}

TEST(GdnSchedule, GdnAndAttentionMemoriesNeverShareAMixer) {
  Program p;
  AttnMemory a;
  a.key_bits = p.values("ak", 2);
  a.query_bits = p.values("aq", 2);
  a.data = p.values("ad", 1);
  a.out = p.values("ao", 1);
  p.memory("attention", a);
  for (int i = 0; i < 17; ++i) p.gdn_memory("gdn" + std::to_string(i), small_memory(p, "g" + std::to_string(i), 2, 2));
  const Schedule s = schedule(p);
  EXPECT_EQ(s.sublayer[0], 0);
  for (int i = 1; i <= 16; ++i) EXPECT_EQ(s.sublayer[static_cast<size_t>(i)], 2) << i;  // 16 heads per mixer
  EXPECT_EQ(s.sublayer[17], 4);
  const Allocation al = allocate(p, s);
  EXPECT_EQ(al.num_gdn_heads, 16);
  EXPECT_EQ(al.first_neuron[16], 15);
  EXPECT_EQ(al.first_neuron[17], 0);
}

TEST(GdnEmit, WeightsOfAMemoryLayerAndIdleLayers) {
  Program p;
  GdnMemory m = small_memory(p, "m", 4, 3);
  m.offset = 4096.0f;
  const ValueId later = p.value("later");
  p.gdn_memory("m", m);
  // An MLP that reads the memory's output and a second memory that reads its result:
  // layer 0 (memory), layer 1 (idle mixer + MLP), layer 1 or 2 mixer for the second.
  p.mlp("later = out0", {Neuron{Lin{{{kOne, 128.0f}}}, Lin{{{m.out[0], 1.0f / 128}}}, {{later, 1.0f}}}});
  GdnMemory m2 = small_memory(p, "m2", 4, 3);
  m2.data[0] = later;
  p.gdn_memory("m2", m2);
  Interface io;
  io.vocab_size = 1;
  EmitOptions eo;
  eo.gdn_key_head_dim = 16;
  eo.gdn_value_head_dim = 16;
  const Compiled c = compile(p, io, {}, eo);
  const auto& cfg = c.weights.config;
  EXPECT_EQ(cfg.linear_num_key_heads, 1);
  EXPECT_EQ(cfg.linear_key_head_dim, 16);
  EXPECT_EQ(c.schedule.sublayer, (std::vector<int64_t>{0, 1, 2}));
  ASSERT_EQ(cfg.num_hidden_layers, 2);
  const auto& la = c.weights.layers[0].linear;
  const int64_t H = cfg.hidden_size;
  // Key row 5 = 128 * (1 - mismatches with 0b0101): bits 0 and 2 read +128, 1 and 3
  // read -128, the constant (from the rail, which arrives as 8) 128 * (1 - 2) / 8.
  const int64_t key_row = 16 + 5;
  const float k = std::ldexp(128.0f, 48);
  EXPECT_EQ(la.in_proj_qkv[static_cast<size_t>(key_row * H + c.allocation.dim(m.key_bits[0]))], k);
  EXPECT_EQ(la.in_proj_qkv[static_cast<size_t>(key_row * H + c.allocation.dim(m.key_bits[1]))], -k);
  EXPECT_EQ(la.in_proj_qkv[static_cast<size_t>(key_row * H + c.allocation.rail_dims[0])], -128.0f / 8);
  EXPECT_EQ(la.conv1d[static_cast<size_t>(key_row * 4 + 3)], 1.0f);
  EXPECT_EQ(la.conv1d[static_cast<size_t>(key_row * 4 + 2)], 0.0f);
  EXPECT_EQ(la.dt_bias[0], -1000.0f);
  // Layer 1 holds the second memory (mixer sublayer 2): layer types stay GDN.
  EXPECT_EQ(c.weights.layers[1].type, io::LayerType::LinearAttention);
  EXPECT_EQ(c.weights.layers[1].linear.dt_bias[0], -1000.0f);
}

TEST(GdnEmit, RejectsWhatDoesNotFit) {
  EmitOptions eo;
  eo.gdn_key_head_dim = 16;
  eo.gdn_value_head_dim = 16;
  Interface io;
  io.vocab_size = 1;
  {
    Program p;
    p.gdn_memory("too many bits", small_memory(p, "m", 5, 2));  // 32 rows > 16
    EXPECT_THROW(compile(p, io, {}, eo), Error);
  }
  {
    Program p;
    GdnMemory m = small_memory(p, "m", 4, 15);  // 16 - 1 rail - 1 offset column = 14
    m.offset = 4096.0f;
    p.gdn_memory("too wide", m);
    EXPECT_THROW(compile(p, io, {}, eo), Error);
  }
  {
    Program p;
    GdnMemory m = small_memory(p, "m", 4, 2);
    m.offset = 5.0f;  // cells would be below silu's identity window
    p.gdn_memory("bad offset", m);
    EXPECT_THROW(compile(p, io, {}, eo), Error);
  }
  {
    Program p;
    GdnMemory m = small_memory(p, "m", 4, 2);
    m.out.pop_back();
    p.gdn_memory("short out", m);
    EXPECT_THROW(compile(p, io, {}, eo), Error);
  }
}

}  // namespace
}  // namespace qpu::compiler
