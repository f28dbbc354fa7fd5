// The streaming emission (compiler::LayerEmitter, emit_streaming): the same tensors,
// bit for bit, as emit's dense checkpoint, one layer at a time, in order, each once,
// and every check done before the first layer is built.
//
// The programs are random mixes of MLP ops, attention memories and GDN memories with
// non-power-of-two weights and repeated terms, so that the weights depend on the order
// of emit's += updates (an emitter that visited a layer's ops in another order, or let
// an op of another layer touch it, would give other bits).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "common/error.h"
#include "compiler/emit.h"

namespace qpu::compiler {
namespace {

constexpr unsigned kMlp = 1, kAttn = 2, kGdn = 4;  // op kinds a program mixes

struct Case {
  Program p;
  Interface io;
  EmitOptions eo;
  ScheduleLimits limits;
};

float weight(std::mt19937_64& rng) {
  // Not powers of two: sums of two of them round, so their order shows in the bits.
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  return static_cast<float>((2.0 * u - 1.0) * 3.0);
}

Case random_case(uint64_t seed, unsigned mix) {
  std::mt19937_64 rng(seed);
  Case c;
  Program& p = c.p;
  c.limits.max_neurons_per_mlp = 5;  // many layers from few ops
  c.limits.max_memories_per_mixer = 2;
  c.limits.max_gdn_memories_per_mixer = 2;
  c.eo.head_dim = rng() % 2 ? 16 : 64;
  c.eo.gdn_key_head_dim = 16;
  c.eo.gdn_value_head_dim = rng() % 2 ? 16 : 32;
  const int ni = 2 + static_cast<int>(rng() % 3);
  const auto in = p.values("in", ni);
  const auto bits = p.values("bit", 6);  // address bits and flags of the memories
  const auto v = p.values("v", 40);
  auto any = [&] { return v[rng() % v.size()]; };
  auto operand = [&]() -> ValueId {
    const uint64_t r = rng() % 8;
    return r == 0 ? kOne : r == 1 ? in[rng() % in.size()] : any();
  };
  auto lin = [&] {
    Lin l;
    const int n = 1 + static_cast<int>(rng() % 3);
    for (int t = 0; t < n; ++t) l.terms.push_back({operand(), weight(rng)});
    if (rng() % 3 == 0) l.terms.push_back({l.terms[0].value, weight(rng)});  // a repeated value: two +=
    return l;
  };
  auto bit_list = [&](int n) {
    std::vector<ValueId> b;
    for (int j = 0; j < n; ++j) b.push_back(bits[rng() % bits.size()]);
    return b;
  };
  std::vector<unsigned> kinds;
  for (unsigned k : {kMlp, kAttn, kGdn})
    if (mix & k) kinds.push_back(k);
  const int n_ops = 12 + static_cast<int>(rng() % 12);
  for (int o = 0; o < n_ops; ++o) {
    const std::string label = "op" + std::to_string(o);
    const unsigned kind = kinds[rng() % kinds.size()];
    if (kind == kMlp) {
      std::vector<Neuron> neurons;
      const int n = 1 + static_cast<int>(rng() % 4);
      for (int j = 0; j < n; ++j) {
        Neuron x{lin(), lin(), {{any(), weight(rng)}}};
        if (rng() % 3 == 0) x.down.push_back({x.down[0].value, weight(rng)});  // two += into one cell
        neurons.push_back(std::move(x));
      }
      p.mlp(label, std::move(neurons));
    } else if (kind == kAttn) {
      AttnMemory m;
      const int n_bits = 1 + static_cast<int>(rng() % 3);
      m.key_bits = bit_list(n_bits);
      m.query_bits = bit_list(n_bits);
      m.write_flag = bits[rng() % bits.size()];
      m.read_flag = rng() % 4 == 0 ? kOne : bits[rng() % bits.size()];
      const int D = 1 + static_cast<int>(rng() % 5);
      for (int d = 0; d < D; ++d) {
        m.data.push_back(rng() % 4 == 0 ? in[rng() % in.size()] : any());
        m.out.push_back(any());
      }
      p.memory(label, m);
    } else {
      GdnMemory m;
      const int n_bits = 1 + static_cast<int>(rng() % 3);
      m.key_bits = bit_list(n_bits);
      m.query_bits = bit_list(n_bits);
      m.write_flag = bits[rng() % bits.size()];
      m.read_flag = bits[rng() % bits.size()];
      m.wipe_flag = rng() % 2 ? kNever : bits[rng() % bits.size()];
      m.data_exponent = static_cast<int>(rng() % 9) - 4;
      m.offset = rng() % 3 == 0 ? 1024.0f : 0.0f;
      m.key_tap = static_cast<int>(rng() % 4);
      m.query_tap = static_cast<int>(rng() % 4);
      const int D = 1 + static_cast<int>(rng() % 6);
      const size_t out0 = rng() % v.size();
      for (int d = 0; d < D; ++d) {
        // Repeated data (two += into one in_proj cell); without an offset repeated outs,
        // with one distinct outs (ir.h).
        m.data.push_back(d > 0 && rng() % 3 == 0 ? m.data[0] : any());
        m.out.push_back(m.offset == 0.0f ? (d > 0 && rng() % 3 == 0 ? m.out[0] : any())
                                         : v[(out0 + static_cast<size_t>(d)) % v.size()]);
        m.data_taps.push_back(static_cast<int>(rng() % 4));
        m.out_weights.push_back(std::ldexp(rng() % 2 ? 1.0f : -1.0f, static_cast<int>(rng() % 7) - 3));
      }
      p.gdn_memory(label, m);
    }
  }
  c.io.inputs = in;
  c.io.outputs = {v[0], v[1], in[0]};
  c.io.vocab_size = 5;
  for (int64_t r = 0; r < c.io.vocab_size * ni; ++r) c.io.input_rows.push_back(weight(rng));
  return c;
}

// Identical float32 bits (and size); names the tensor and the first differing index.
void expect_same(const std::vector<float>& want, const std::vector<float>& got, const std::string& name) {
  ASSERT_EQ(want.size(), got.size()) << name;
  if (want.empty()) return;  // (memcmp must not see the null data() of an empty vector)
  if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0) return;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0) {
      ADD_FAILURE() << name << "[" << i << "]: " << want[i] << " vs " << got[i];
      return;
    }
}

void expect_same_layer(const io::LayerWeights& a, const io::LayerWeights& b, const std::string& n) {
  EXPECT_EQ(a.type, b.type) << n;
  expect_same(a.input_layernorm, b.input_layernorm, n + ".input_layernorm");
  expect_same(a.post_attention_layernorm, b.post_attention_layernorm, n + ".post_attention_layernorm");
  expect_same(a.gate_proj, b.gate_proj, n + ".gate_proj");
  expect_same(a.up_proj, b.up_proj, n + ".up_proj");
  expect_same(a.down_proj, b.down_proj, n + ".down_proj");
  const auto &x = a.linear, &y = b.linear;
  expect_same(x.in_proj_qkv, y.in_proj_qkv, n + ".in_proj_qkv");
  expect_same(x.in_proj_z, y.in_proj_z, n + ".in_proj_z");
  expect_same(x.in_proj_b, y.in_proj_b, n + ".in_proj_b");
  expect_same(x.in_proj_a, y.in_proj_a, n + ".in_proj_a");
  expect_same(x.conv1d, y.conv1d, n + ".conv1d");
  expect_same(x.dt_bias, y.dt_bias, n + ".dt_bias");
  expect_same(x.A_log, y.A_log, n + ".A_log");
  expect_same(x.norm, y.norm, n + ".linear.norm");
  expect_same(x.out_proj, y.out_proj, n + ".out_proj");
  const auto &f = a.full, &g = b.full;
  expect_same(f.q_proj, g.q_proj, n + ".q_proj");
  expect_same(f.k_proj, g.k_proj, n + ".k_proj");
  expect_same(f.v_proj, g.v_proj, n + ".v_proj");
  expect_same(f.o_proj, g.o_proj, n + ".o_proj");
  expect_same(f.q_norm, g.q_norm, n + ".q_norm");
  expect_same(f.k_norm, g.k_norm, n + ".k_norm");
}

void expect_same_config(const io::Qwen35Config& a, const io::Qwen35Config& b) {
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.layer_types, b.layer_types);
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.linear_num_key_heads, b.linear_num_key_heads);
  EXPECT_EQ(a.linear_key_head_dim, b.linear_key_head_dim);
  EXPECT_EQ(a.linear_value_head_dim, b.linear_value_head_dim);
}

TEST(EmitStreaming, SameBitsAsEmitLayersInOrderEachOnce) {
  int64_t layers = 0, attn_layers = 0, gdn_layers = 0;
  for (unsigned mix : {kMlp, kMlp | kAttn, kMlp | kGdn, kMlp | kAttn | kGdn}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      SCOPED_TRACE("mix " + std::to_string(mix) + " seed " + std::to_string(seed));
      const Case c = random_case(seed * 100 + mix, mix);
      const Compiled dense = compile(c.p, c.io, c.limits, c.eo);
      std::vector<int64_t> order;
      std::vector<io::LayerWeights> got;
      const io::Qwen35Weights globals =
          emit_streaming(c.p, dense.schedule, dense.allocation, c.io, c.eo, [&](int64_t l, io::LayerWeights&& w) {
            order.push_back(l);
            got.push_back(std::move(w));
          });
      const int64_t L = dense.weights.config.num_hidden_layers;
      std::vector<int64_t> want_order(static_cast<size_t>(L));
      for (int64_t l = 0; l < L; ++l) want_order[static_cast<size_t>(l)] = l;
      EXPECT_EQ(order, want_order);
      EXPECT_TRUE(globals.layers.empty());
      expect_same_config(dense.weights.config, globals.config);
      expect_same(dense.weights.embed_tokens, globals.embed_tokens, "embed_tokens");
      expect_same(dense.weights.norm, globals.norm, "norm");
      expect_same(dense.weights.lm_head, globals.lm_head, "lm_head");
      ASSERT_EQ(got.size(), dense.weights.layers.size());
      for (size_t l = 0; l < got.size(); ++l) {
        expect_same_layer(dense.weights.layers[l], got[l], "layers." + std::to_string(l));
        const bool attn = got[l].type == io::LayerType::FullAttention;
        attn_layers += attn ? 1 : 0;
        gdn_layers += !attn && dense.allocation.num_gdn_heads > 0 ? 1 : 0;
      }
      layers += L;
    }
  }
  // The programs span many layers of every kind (not one layer each).
  EXPECT_GE(layers, 24 * 6);
  EXPECT_GE(attn_layers, 20);
  EXPECT_GE(gdn_layers, 40);
  RecordProperty("layers", std::to_string(layers) + " (" + std::to_string(attn_layers) + " attention, " +
                               std::to_string(gdn_layers) + " with GDN memories)");
}

// Each layer is built on its own: any order, twice, gives emit's bits.
TEST(EmitStreaming, LayerEmitterBuildsLayersInAnyOrder) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const Case c = random_case(seed * 7 + 3, kMlp | kAttn | kGdn);
    const Compiled dense = compile(c.p, c.io, c.limits, c.eo);
    const LayerEmitter e(c.p, dense.schedule, dense.allocation, c.io, c.eo);
    ASSERT_EQ(e.num_layers(), static_cast<int64_t>(dense.weights.layers.size()));
    ASSERT_GE(e.num_layers(), 3);
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t l = e.num_layers() - 1; l >= 0; --l)
        expect_same_layer(dense.weights.layers[static_cast<size_t>(l)], e.layer(l), "layers." + std::to_string(l));
    EXPECT_THROW(e.layer(e.num_layers()), Error);
    EXPECT_THROW(e.layer(-1), Error);
  }
}

// The dense layer of a layer given as entries (SparseMatrix::dense of every projection).
io::LayerWeights dense_of(io::SparseLayerWeights s) {
  return io::convert_matrices<std::vector<float>>(std::move(s),
                                                  [](io::SparseMatrix&& m, const char*) { return m.dense(); });
}

// sparse_layer(l): the same writes recorded instead of made give emit's bits (the
// programs' repeated terms make two += into one cell, whose order shows in the bits).
TEST(EmitStreaming, SparseLayersHoldTheDenseLayersBits) {
  int64_t layers = 0, entries = 0;
  for (unsigned mix : {kMlp, kMlp | kAttn, kMlp | kGdn, kMlp | kAttn | kGdn}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      SCOPED_TRACE("mix " + std::to_string(mix) + " seed " + std::to_string(seed));
      const Case c = random_case(seed * 100 + mix, mix);
      const Compiled dense = compile(c.p, c.io, c.limits, c.eo);
      const LayerEmitter e(c.p, dense.schedule, dense.allocation, c.io, c.eo);
      for (int64_t l = 0; l < e.num_layers(); ++l) {
        const io::SparseLayerWeights s = e.sparse_layer(l);
        entries += static_cast<int64_t>(s.gate_proj.values.size() + s.down_proj.values.size() +
                                        s.linear.in_proj_qkv.values.size() + s.full.q_proj.values.size());
        expect_same_layer(dense.weights.layers[static_cast<size_t>(l)], dense_of(s), "layers." + std::to_string(l));
        ++layers;
      }
      EXPECT_THROW(e.sparse_layer(e.num_layers()), Error);
    }
  }
  EXPECT_GE(layers, 24 * 6);
  EXPECT_GT(entries, 1000);
}

// A program that cannot be emitted fails before any layer reaches the sink, with the
// message of emit (the bad op is in the last layer).
TEST(EmitStreaming, ChecksEveryOpBeforeTheFirstLayer) {
  struct Bad {
    const char* what;
    std::function<void(Program&, ValueId)> add;
  };
  const std::vector<Bad> bad = {
      {"has 8 address bits",
       [](Program& p, ValueId a) {
         GdnMemory m;
         m.key_bits = m.query_bits = std::vector<ValueId>(8, a);  // 256 rows; a 128 x 128 head has 127
         m.data = m.out = {a};
         p.gdn_memory("bad", m);
       }},
      {"stores 20 values",
       [](Program& p, ValueId a) {
         AttnMemory m;
         m.key_bits = m.query_bits = {a};
         m.data = m.out = std::vector<ValueId>(20, a);
         p.memory("bad", m);
       }},
      {"wipes on every token",
       [](Program& p, ValueId a) {
         GdnMemory m;
         m.key_bits = m.query_bits = {a};
         m.data = m.out = {a};
         m.wipe_flag = kOne;
         p.gdn_memory("bad", m);
       }},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    Program p;
    const ValueId a = p.value("a");
    std::vector<ValueId> chain = p.values("c", 4);
    ValueId prev = a;
    for (ValueId x : chain) {  // four dependent ops: four layers before the bad one
      p.mlp("copy", {Neuron{Lin{{{kOne, 128.0f}}}, Lin{{{prev, 1.0f / 128.0f}}}, {{x, 1.0f}}}});
      prev = x;
    }
    b.add(p, prev);
    Interface io;
    io.vocab_size = 1;
    EmitOptions eo;
    eo.head_dim = 16;
    const Schedule s = schedule(p);
    const Allocation alloc = allocate(p, s);
    ASSERT_GE(alloc.num_layers, 3);
    int64_t calls = 0;
    try {
      emit_streaming(p, s, alloc, io, eo, [&](int64_t, io::LayerWeights&&) { ++calls; });
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'bad'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(b.what), std::string::npos) << e.what();
    }
    EXPECT_EQ(calls, 0);
    EXPECT_THROW(emit(p, s, alloc, io, eo), Error);
  }
}

TEST(EmitStreaming, RejectsAScheduleOfAnotherProgram) {
  const Case c = random_case(5, kMlp);
  const Compiled dense = compile(c.p, c.io, c.limits, c.eo);
  Schedule s = dense.schedule;
  s.sublayer.pop_back();
  EXPECT_THROW(LayerEmitter(c.p, s, dense.allocation, c.io, c.eo), Error);
  s = dense.schedule;
  s.sublayer.back() = 2 * dense.allocation.num_layers + 1;  // past the last layer
  EXPECT_THROW(LayerEmitter(c.p, s, dense.allocation, c.io, c.eo), Error);
  EXPECT_THROW(emit_streaming(c.p, dense.schedule, dense.allocation, c.io, c.eo, LayerSink{}), Error);
}

}  // namespace
}  // namespace qpu::compiler
