// The float RAM (npu/float_ram.h): floats of either sign stored in GDN memory rows and
// read back bit for bit, on the engine (skip-zero and dense GDN recurrences), on
// HostSim with random summation orders, and in stock transformers; plus stories260K's
// FFN products (run.c's ffn_prod records of the greedy story) through the RAM.
// QPU_NPU_CASES scales the random streams (host tokens per configuration).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <omp.h>
#include <unistd.h>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/host_sim.h"
#include "engine/model.h"
#include "npu/engine_host.h"
#include "npu/export.h"
#include "npu/float_ram.h"
#include "transformers_gdn_run.h"
#include "unit_harness.h"

namespace qpu::npu {
namespace {

using compiler::GdnLayout;
using compiler::ValueId;

constexpr int64_t kCases = QPU_NPU_CASES;

// The engine's per-token parallel regions cost far more than they save on the shared,
// loaded 2-core test machine (npu-gdn-memory.md): one thread.
class OneThread : public ::testing::Environment {
  void SetUp() override { omp_set_num_threads(1); }
};
[[maybe_unused]] const auto* const kOneThread = ::testing::AddGlobalTestEnvironment(new OneThread);

HostFactory dense_engine() {
  return [](const io::Qwen35Weights& w) -> Forward {
    engine::ModelOptions options;
    options.gdn = engine::GdnRecurrence::Dense;
    auto model = std::make_shared<engine::Model>(w, options);
    auto state = std::make_shared<engine::State>(model->new_state());
    auto logits = std::make_shared<std::vector<float>>(static_cast<size_t>(w.config.vocab_size));
    return [model, state, logits](int64_t token, std::span<float> hidden) {
      model->forward(token, *state, *logits, hidden);
    };
  };
}

HostFactory sim_host(uint64_t seed) {
  return [seed](const io::Qwen35Weights& w) -> Forward {
    auto sim = std::make_shared<compiler::HostSim>(w, seed);
    auto logits = std::make_shared<std::vector<float>>(static_cast<size_t>(w.config.vocab_size));
    return [sim, logits](int64_t token, std::span<float> hidden) { sim->forward(token, *logits, hidden); };
  };
}

// The window's edges: +-0, +-2^low, +-(the largest float below 2^(low + 37)), their
// neighbours inside, and a power of two and an all-ones mantissa in the middle.
std::vector<float> edge_floats(int low) {
  const float lo = std::ldexp(1.0f, low), hi = std::ldexp(0x1.fffffep0f, low + 36);
  std::vector<float> e = {0.0f, -0.0f, lo, -lo, hi, -hi, std::nextafter(lo, 1.0f), -std::nextafter(lo, 1.0f),
                          std::nextafter(hi, 0.0f), -std::nextafter(hi, 0.0f), std::ldexp(1.0f, low + 18),
                          -std::ldexp(0x1.fffffep0f, low + 18)};
  return e;
}

// A float of the window: a uniform binade low .. low + 36, a uniform mantissa, a random
// sign; 1/32 of them +-0 and 1/32 edges.
float window_float(std::mt19937_64& rng, int low) {
  const uint64_t kind = rng() % 64;
  if (kind < 2) return kind ? -0.0f : 0.0f;
  if (kind < 4) {
    const auto e = edge_floats(low);
    return e[rng() % e.size()];
  }
  return unit_testing::rand_float(rng, low, low + FloatRamWindow::kBinades - 1);
}

// One RAM: heads of `floats` floats each; a wipeable head is refilled (wipe + write)
// when it has no free row, the others stop writing when full.
struct HeadSpec {
  int64_t floats = 0;
  bool wipeable = true;
  bool own_negation = false;  // the embedding sets -x (FloatRamHead::negated), no negation neuron
};

struct RamOptions {
  int64_t key_dim = 16, value_dim = 64;
  int low = -33;
  std::vector<HeadSpec> heads;
  int64_t tokens = 100;
  double write = 0.6, read = 0.7, idle = 0.08, extra_wipe = 0.01;
  uint64_t seed = 1;
  // Every head's write side reads `enable` instead of the rail (FloatRamHead::write_enable:
  // the key bits and write flag are 0 on the idle tokens, where enable is 0).
  bool write_enables = false;
};

struct RamCase {
  compiler::Compiled compiled;
  int64_t tokens = 0;
  std::vector<int64_t> out_dims, neg_dims;
  std::vector<float> expected;  // [tokens, out_dims.size()]: the float read, +0 where nothing is read
  std::vector<char> idle;       // per token: every input 0 (enable 0)
  int64_t floats_written = 0, floats_read = 0, read_from_written = 0, negative_read = 0, zero_read = 0;
  int64_t edges_read = 0, wipes = 0, refills = 0, idle_tokens = 0, same_token_reads = 0, reads_after_10 = 0;
};

RamCase build_ram_case(const RamOptions& o) {
  const GdnLayout g = GdnLayout::for_dims(o.key_dim, o.value_dim);
  const int bits = std::countr_zero(static_cast<uint64_t>(o.key_dim));
  const int64_t rows = g.rows();
  const FloatRamWindow window{o.low};
  compiler::Program p;
  compiler::Interface io;
  std::vector<FloatRamHead> heads;
  const ValueId enable = p.value("enable");
  for (size_t h = 0; h < o.heads.size(); ++h) {
    const std::string pre = "h" + std::to_string(h) + ".";
    FloatRamHead r;
    r.data = p.values(pre + "x", static_cast<int>(o.heads[h].floats));
    if (o.heads[h].own_negation) r.negated = p.values(pre + "nx", static_cast<int>(o.heads[h].floats));
    r.key_bits = p.values(pre + "key", bits);
    r.write_flag = p.value(pre + "write");
    r.wipe_flag = o.heads[h].wipeable ? p.value(pre + "wipe") : compiler::kNever;
    r.query_bits = p.values(pre + "query", bits);
    r.read_flag = p.value(pre + "read");
    r.out = p.values(pre + "out", static_cast<int>(o.heads[h].floats));
    if (o.write_enables) r.write_enable = enable;
    heads.push_back(r);
  }
  float_ram(p, window, heads, enable, "ram");
  // Interface: per head x, (nx), key, write, wipe, query, read (in this order), then enable.
  std::vector<size_t> first(heads.size());
  for (size_t h = 0; h < heads.size(); ++h) {
    const FloatRamHead& r = heads[h];
    first[h] = io.inputs.size();
    io.inputs.insert(io.inputs.end(), r.data.begin(), r.data.end());
    io.inputs.insert(io.inputs.end(), r.negated.begin(), r.negated.end());
    io.inputs.insert(io.inputs.end(), r.key_bits.begin(), r.key_bits.end());
    io.inputs.push_back(r.write_flag);
    if (r.wipe_flag != compiler::kNever) io.inputs.push_back(r.wipe_flag);
    io.inputs.insert(io.inputs.end(), r.query_bits.begin(), r.query_bits.end());
    io.inputs.push_back(r.read_flag);
    io.outputs.insert(io.outputs.end(), r.out.begin(), r.out.end());
  }
  const size_t enable_input = io.inputs.size();
  io.inputs.push_back(enable);
  const size_t width = io.inputs.size(), n_out = io.outputs.size();
  io.vocab_size = std::max<int64_t>(o.tokens, static_cast<int64_t>(n_out));  // token t = embedding row t
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * width, 0.0f);

  RamCase c;
  c.tokens = o.tokens;
  c.expected.assign(static_cast<size_t>(o.tokens) * n_out, 0.0f);
  c.idle.assign(static_cast<size_t>(o.tokens), 0);
  // The model: rows[h][a] = the floats of row a (empty: never written since the last
  // wipe), written_at[h][a] = the token that wrote it.
  std::vector<std::vector<std::vector<float>>> model(heads.size(), std::vector<std::vector<float>>(static_cast<size_t>(rows)));
  std::vector<std::vector<int64_t>> written_at(heads.size(), std::vector<int64_t>(static_cast<size_t>(rows), -1));
  const std::vector<float> edges = edge_floats(o.low);
  size_t next_edge = 0;
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  for (int64_t t = 0; t < o.tokens; ++t) {
    float* in = &io.input_rows[static_cast<size_t>(t) * width];
    if (t > 0 && coin(rng) < o.idle) {  // an idle cycle: all inputs 0, reads +0, state unchanged
      c.idle[static_cast<size_t>(t)] = 1;
      ++c.idle_tokens;
      continue;
    }
    in[enable_input] = 1.0f;
    size_t out_base = static_cast<size_t>(t) * n_out;
    for (size_t h = 0; h < heads.size(); ++h) {
      auto& rows_h = model[h];
      const int64_t floats = o.heads[h].floats;
      const bool wipeable = o.heads[h].wipeable;
      float* x = in + first[h];
      float* nx = o.heads[h].own_negation ? x + floats : nullptr;
      float* key = x + (nx ? 2 : 1) * floats;
      float* write_flag = key + bits;
      float* wipe_flag = wipeable ? write_flag + 1 : nullptr;
      float* query = write_flag + (wipeable ? 2 : 1);
      float* read_flag = query + bits;
      auto set_bits = [&](float* b, int64_t a) {
        for (int j = 0; j < bits; ++j) b[j] = static_cast<float>((a >> j) & 1);
      };
      std::vector<int64_t> free_rows;
      for (int64_t a = 0; a < rows; ++a)
        if (rows_h[static_cast<size_t>(a)].empty()) free_rows.push_back(a);
      bool write = coin(rng) < o.write && (wipeable || !free_rows.empty());
      bool wipe = wipeable && coin(rng) < o.extra_wipe;
      if (write && free_rows.empty()) {  // refill: wipe and write in the same token
        wipe = true;
        ++c.refills;
      }
      if (wipe) {
        *wipe_flag = 1.0f;
        for (auto& r : rows_h) r.clear();
        ++c.wipes;
        free_rows.clear();
        for (int64_t a = 0; a < rows; ++a) free_rows.push_back(a);
      }
      // Junk data and key when not writing (flag 0 must change nothing).
      for (int64_t d = 0; d < floats; ++d) x[d] = window_float(rng, o.low);
      set_bits(key, static_cast<int64_t>(rng() % static_cast<uint64_t>(rows)));
      if (write) {
        const int64_t a = free_rows[rng() % free_rows.size()];
        set_bits(key, a);
        *write_flag = 1.0f;
        for (int64_t d = 0; d < floats && next_edge < edges.size(); ++d) x[d] = edges[next_edge++];
        rows_h[static_cast<size_t>(a)].assign(x, x + floats);
        written_at[h][static_cast<size_t>(a)] = t;
        c.floats_written += floats;
      }
      if (nx)
        for (int64_t d = 0; d < floats; ++d) nx[d] = -x[d];
      // Two-hot reads are exact from the second token on (npu-gdn-memory.md).
      set_bits(query, static_cast<int64_t>(rng() % static_cast<uint64_t>(rows)));
      if (coin(rng) < o.read && (t > 0 || !g.two_hot)) {
        std::vector<int64_t> full;
        for (int64_t a = 0; a < rows; ++a)
          if (!rows_h[static_cast<size_t>(a)].empty()) full.push_back(a);
        const int64_t a = !full.empty() && coin(rng) < 0.85 ? full[rng() % full.size()]
                                                            : static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
        set_bits(query, a);
        *read_flag = 1.0f;
        const auto& row = rows_h[static_cast<size_t>(a)];
        c.floats_read += floats;
        if (!row.empty()) {
          c.read_from_written += floats;
          const int64_t lag = t - written_at[h][static_cast<size_t>(a)];
          c.same_token_reads += lag == 0 ? floats : 0;
          c.reads_after_10 += lag >= 10 ? floats : 0;
          for (int64_t d = 0; d < floats; ++d) {
            const float v = row[static_cast<size_t>(d)];
            c.expected[out_base + static_cast<size_t>(d)] = 0.0f + v;  // -0 reads back as +0
            c.negative_read += v < 0.0f;
            c.zero_read += v == 0.0f;
            c.edges_read += std::fabs(v) == std::ldexp(1.0f, o.low) || std::fabs(v) == edges[4];
          }
        }
      }
      out_base += static_cast<size_t>(floats);
    }
  }
  compiler::EmitOptions eo;
  eo.gdn_key_head_dim = o.key_dim;
  eo.gdn_value_head_dim = o.value_dim;
  c.compiled = compiler::compile(p, io, {}, eo);
  for (ValueId v : io.outputs) c.out_dims.push_back(c.compiled.allocation.dim(v));
  for (const compiler::Op& op : p.ops())
    if (op.kind == compiler::OpKind::Mlp)
      for (const auto& n : op.neurons) c.neg_dims.push_back(c.compiled.allocation.dim(n.down[0].value));
  return c;
}

struct RamRun {
  int64_t mismatches = 0, idle_nonzero = 0;
  std::string first_mismatch;
};

RamRun run_ram_case(const RamCase& c, const HostFactory& host) {
  const Forward forward = host(c.compiled.weights);
  std::vector<float> hidden(static_cast<size_t>(c.compiled.weights.config.hidden_size));
  const size_t n_out = c.out_dims.size();
  RamRun r;
  for (int64_t t = 0; t < c.tokens; ++t) {
    forward(t, hidden);
    for (size_t i = 0; i < n_out; ++i) {
      const float want = c.expected[static_cast<size_t>(t) * n_out + i];
      const float got = hidden[static_cast<size_t>(c.out_dims[i])];
      if (float_bits(got) != float_bits(want) && r.mismatches++ == 0)
        r.first_mismatch = "token " + std::to_string(t) + " out " + std::to_string(i) + ": expected " +
                           describe_float(want) + " got " + describe_float(got);
    }
    // An idle cycle writes only +-0 (the negations; the outs are checked above).
    if (c.idle[static_cast<size_t>(t)])
      for (int64_t d : c.neg_dims) r.idle_nonzero += hidden[static_cast<size_t>(d)] != 0.0f;
  }
  return r;
}

// Returns the host's wall time.
double expect_exact(const RamCase& c, const HostFactory& host, const std::string& what) {
  SCOPED_TRACE(what);
  const auto t0 = std::chrono::steady_clock::now();
  const RamRun r = run_ram_case(c, host);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  EXPECT_EQ(r.idle_nonzero, 0);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The configurations: Qwen3.5's 128 x 128 (two-hot, 63 floats per row), 16 x 64 (31),
// 64 x 16 (7), 32 x 32 (two-hot, 15); full and partial rows, never-wiped heads, heads
// that bring their own -x (all of them in 32 x 32: no MLP op), and windows at both
// ends of the allowed range.
std::vector<RamOptions> configurations(int64_t tokens) {
  std::vector<RamOptions> v;
  RamOptions a;  // stories260K's products
  a.key_dim = 16;
  a.value_dim = 64;
  a.low = -33;
  a.heads = {{31, true}, {31, false}, {5, true, true}};
  a.tokens = tokens;
  a.seed = 1;
  v.push_back(a);
  RamOptions b;
  b.key_dim = 128;
  b.value_dim = 128;
  b.low = -53;
  b.heads = {{63, true}, {20, true}};
  b.tokens = tokens;
  b.write = 0.9;  // wrap the 127 rows
  b.seed = 2;
  v.push_back(b);
  RamOptions c;
  c.key_dim = 64;
  c.value_dim = 16;
  c.low = -1;
  c.heads = {{7, true}, {7, false}, {3, true}, {1, true, true}};
  c.tokens = tokens;
  c.seed = 3;
  v.push_back(c);
  RamOptions d;
  d.key_dim = 32;
  d.value_dim = 32;
  d.low = -20;
  d.heads = {{15, true, true}, {15, true, true}};
  d.tokens = tokens;
  d.seed = 4;
  v.push_back(d);
  return v;
}

std::string describe(const RamOptions& o) {
  return std::to_string(o.key_dim) + "x" + std::to_string(o.value_dim) + " low " + std::to_string(o.low);
}

TEST(FloatRam, FloatsPerRow) {
  EXPECT_EQ(floats_per_row(GdnLayout::for_dims(16, 64)), 31);     // 64 - 1 rail = 63 columns
  EXPECT_EQ(floats_per_row(GdnLayout::for_dims(128, 128)), 63);   // 128 - 2 rails = 126
  EXPECT_EQ(floats_per_row(GdnLayout::for_dims(64, 16)), 7);      // 15 columns
  EXPECT_EQ(floats_per_row(GdnLayout::for_dims(32, 32)), 15);     // 30 columns
  const FloatRamWindow w{-33};
  EXPECT_EQ(w.data_exponent(), 40);
  EXPECT_TRUE(w.holds(0.0f));
  EXPECT_TRUE(w.holds(-0.0f));
  EXPECT_TRUE(w.holds(0x1p-33f));
  EXPECT_TRUE(w.holds(-0x1.fffffep3f));
  EXPECT_FALSE(w.holds(0x1.fffffep-34f));
  EXPECT_FALSE(w.holds(-16.0f));
}

// Random streams on the engine (default skip-zero and dense GDN recurrences) and, shorter
// (HostSim's cost per token grows with the vocabulary = the tokens), on HostSim.
TEST(FloatRam, RandomStreamsReadBackEveryBit) {
  const int64_t tokens = std::max<int64_t>(60, kCases * 3 / 10), sim_tokens = std::max<int64_t>(60, kCases / 40);
  int64_t written = 0, read = 0, from_written = 0, negative = 0, zeros = 0, edges = 0, refills = 0, idle = 0;
  int64_t same = 0, later = 0, sim_written = 0, sim_from_written = 0;
  for (const RamOptions& o : configurations(tokens)) {
    const RamCase c = build_ram_case(o);
    // negate (MLP of layer 0), memory (mixer of layer 1); with every head's own -x: the mixer of layer 0.
    const bool negate = std::any_of(o.heads.begin(), o.heads.end(), [](const HeadSpec& h) { return !h.own_negation; });
    EXPECT_EQ(c.compiled.weights.config.num_hidden_layers, negate ? 2 : 1) << describe(o);
    const double engine_s = expect_exact(c, engine_host(), "engine " + describe(o));
    const double dense_s = expect_exact(c, dense_engine(), "dense engine " + describe(o));
    RamOptions short_o = o;
    short_o.tokens = sim_tokens;
    const RamCase short_c = build_ram_case(short_o);
    const double sim_s = expect_exact(short_c, sim_host(o.seed + 100), "HostSim " + describe(o));
    sim_written += short_c.floats_written;
    sim_from_written += short_c.read_from_written;
    std::printf("float ram %s, %zu heads, hidden %lld: engine %.2f s, dense %.2f s (%lld tokens), HostSim %.2f s (%lld)\n",
                describe(o).c_str(), o.heads.size(), static_cast<long long>(c.compiled.weights.config.hidden_size),
                engine_s, dense_s, static_cast<long long>(tokens), sim_s, static_cast<long long>(sim_tokens));
    written += c.floats_written;
    read += c.floats_read;
    from_written += c.read_from_written;
    negative += c.negative_read;
    zeros += c.zero_read;
    edges += c.edges_read;
    refills += c.refills;
    idle += c.idle_tokens;
    same += c.same_token_reads;
    later += c.reads_after_10;
  }
  std::printf("float ram (engine streams): 4 configurations x %lld tokens: %lld floats written, %lld read (%lld of written "
              "rows: %lld negative, %lld zeros, %lld window edges; %lld in the write's token, %lld >= 10 tokens "
              "later), %lld refills, %lld idle tokens\n",
              static_cast<long long>(tokens), static_cast<long long>(written), static_cast<long long>(read),
              static_cast<long long>(from_written), static_cast<long long>(negative), static_cast<long long>(zeros),
              static_cast<long long>(edges), static_cast<long long>(same), static_cast<long long>(later),
              static_cast<long long>(refills), static_cast<long long>(idle));
  std::printf("float ram (HostSim streams): 4 configurations x %lld tokens: %lld floats written, %lld read from written rows\n",
              static_cast<long long>(sim_tokens), static_cast<long long>(sim_written),
              static_cast<long long>(sim_from_written));
  EXPECT_GT(from_written, read / 2);
  EXPECT_GT(negative, from_written / 3);
  EXPECT_GT(zeros, 0);
  EXPECT_GT(edges, 0);
  EXPECT_GT(refills, 0);
  EXPECT_GT(idle, 0);
  EXPECT_GT(same, 0);
  EXPECT_GT(later, 0);
}

// The same streams with every head's write side on `enable` (and the read side on the
// read flag, as always): the constants of beta, the rails and the key's address complement
// move off the rail, and the memory reads no rail dim at all. Junk key bits and data
// with a write flag 0 still change nothing (enable is 1 on those tokens), idle tokens
// (everything 0) touch no row; and the engine skips the mixer on idle tokens once the
// conv history has drained (every read dim +-0).
TEST(FloatRam, WriteEnablesReadBackEveryBitAndLeaveTheRail) {
  const int64_t tokens = std::max<int64_t>(60, kCases * 3 / 10), sim_tokens = std::max<int64_t>(60, kCases / 40);
  int64_t from_written = 0, idle = 0;
  for (RamOptions o : configurations(tokens)) {
    o.write_enables = true;
    o.idle = 0.5;  // runs of idle tokens: the mixer sleeps after kernel - 1 of them
    const RamCase c = build_ram_case(o);
    // No in_proj column of the rail holds a weight: an idle token reads only +-0 dims.
    const auto& w = c.compiled.weights;
    const int64_t hidden = w.config.hidden_size, rail = c.compiled.allocation.rail_dims[0];
    for (const auto& layer : w.layers) {
      if (layer.type != io::LayerType::LinearAttention) continue;
      for (const auto* m : {&layer.linear.in_proj_qkv, &layer.linear.in_proj_z, &layer.linear.in_proj_b,
                            &layer.linear.in_proj_a}) {
        int64_t on_rail = 0;
        for (size_t i = static_cast<size_t>(rail); i < m->size(); i += static_cast<size_t>(hidden))
          on_rail += (*m)[i] != 0.0f;
        EXPECT_EQ(on_rail, 0) << describe(o);
      }
    }
    expect_exact(c, engine_host(), "engine " + describe(o));
    expect_exact(c, dense_engine(), "dense engine " + describe(o));
    {
      engine::Model model(w);
      engine::State state = model.new_state();
      std::vector<float> logits(static_cast<size_t>(w.config.vocab_size));
      for (int64_t t = 0; t < c.tokens; ++t) model.forward(t, state, logits);
      EXPECT_GT(model.skipped_sublayers().gdn, 0) << describe(o);
    }
    RamOptions short_o = o;
    short_o.tokens = sim_tokens;
    expect_exact(build_ram_case(short_o), sim_host(o.seed + 200), "HostSim " + describe(o));
    from_written += c.read_from_written;
    idle += c.idle_tokens;
  }
  EXPECT_GT(from_written, 0);
  EXPECT_GT(idle, 0);
}

// Why one read has exactly one live term: the memory's own silu keeps the positive one
// of x 2^e and -x 2^e and makes the other -0 (cells >= 128). Here the two columns of
// every float decode into separate values: the x column must read exactly max(x, 0)
// as +0 or x, the nx column exactly x for x < 0 and +0 otherwise. (A tiny nonzero
// silu(-c), e.g. -64 sigmoid(-64) with the exponent one lower, would still round away in
// the one-value read; this check does not let it pass.)
TEST(FloatRam, EachFloatHasExactlyOneLiveColumn) {
  for (const int low : {-53, -33, -1}) {
    const FloatRamWindow window{low};
    compiler::Program p;
    FloatRamHead h;
    const int64_t floats = 31;
    h.data = p.values("x", floats);
    h.key_bits = p.values("key", 4);
    h.query_bits = p.values("query", 4);
    h.out = p.values("out", floats);
    const std::vector<ValueId> split = p.values("out_nx", floats);
    const auto negated = float_ram_negations(p, {h}, compiler::kOne, "ram");
    compiler::GdnMemory m = float_ram_memory(window, h, negated[0]);
    for (size_t i = 0; i < static_cast<size_t>(floats); ++i) m.out[2 * i + 1] = split[i];  // the nx columns apart
    p.gdn_memory("ram", m);
    compiler::Interface io;
    io.inputs = h.data;
    io.inputs.insert(io.inputs.end(), h.key_bits.begin(), h.key_bits.end());
    io.inputs.insert(io.inputs.end(), h.query_bits.begin(), h.query_bits.end());
    io.outputs = h.out;
    io.outputs.insert(io.outputs.end(), split.begin(), split.end());
    // Token t writes and reads row t % 16 (write and read flags are the constant 1):
    // every row is written once (16 tokens).
    const int64_t tokens = 16;
    io.vocab_size = std::max<int64_t>(tokens, static_cast<int64_t>(io.outputs.size()));
    io.input_rows.assign(static_cast<size_t>(io.vocab_size) * io.inputs.size(), 0.0f);
    std::mt19937_64 rng(static_cast<uint64_t>(77 - low));
    std::vector<float> xs;
    for (float e : edge_floats(low)) xs.push_back(e);
    while (xs.size() < static_cast<size_t>(tokens * floats)) xs.push_back(window_float(rng, low));
    for (int64_t t = 0; t < tokens; ++t) {
      float* in = &io.input_rows[static_cast<size_t>(t) * io.inputs.size()];
      for (int64_t d = 0; d < floats; ++d) in[d] = xs[static_cast<size_t>(t * floats + d)];
      for (int b = 0; b < 4; ++b) in[floats + b] = in[floats + 4 + b] = static_cast<float>((t >> b) & 1);
    }
    compiler::EmitOptions eo;
    eo.gdn_key_head_dim = 16;
    eo.gdn_value_head_dim = 64;
    const compiler::Compiled c = compiler::compile(p, io, {}, eo);
    for (const auto& [host, name] : {std::pair{engine_host(), "engine"}, std::pair{sim_host(9), "HostSim"}}) {
      const Forward fwd = host(c.weights);
      std::vector<float> hidden(static_cast<size_t>(c.weights.config.hidden_size));
      int64_t bad = 0;
      for (int64_t t = 0; t < tokens; ++t) {
        fwd(t, hidden);
        for (size_t d = 0; d < static_cast<size_t>(floats); ++d) {
          const float x = xs[static_cast<size_t>(t * floats) + d];
          const float want_x = x > 0.0f ? x : 0.0f, want_nx = x < 0.0f ? x : 0.0f;
          const float got_x = hidden[static_cast<size_t>(c.allocation.dim(h.out[d]))];
          const float got_nx = hidden[static_cast<size_t>(c.allocation.dim(split[d]))];
          if ((float_bits(got_x) != float_bits(want_x) || float_bits(got_nx) != float_bits(want_nx)) && bad++ < 3)
            ADD_FAILURE() << name << " low " << low << " x = " << describe_float(x) << ": columns read "
                          << describe_float(got_x) << " and " << describe_float(got_nx);
        }
      }
      EXPECT_EQ(bad, 0) << name << " low " << low;
    }
  }
}

// Conv taps: key and data from token t - 2, query from t - 1, the wipe at t (it has no
// conv). Token s's embedding carries the write of effective token s + 2 and the query
// of s + 1; the model applies, at each token t: wipe(t), write(inputs of t - 2),
// read(inputs of t - 1).
TEST(FloatRam, TapsDelayTheWriteAndTheRead) {
  constexpr int64_t kFloats = 31, kRows = 16;
  const int low = -33;
  compiler::Program p;
  FloatRamHead h;
  h.data = p.values("x", kFloats);
  h.key_bits = p.values("key", 4);
  h.write_flag = p.value("write");
  h.wipe_flag = p.value("wipe");
  h.query_bits = p.values("query", 4);
  h.read_flag = p.value("read");
  h.out = p.values("out", kFloats);
  h.key_tap = h.data_tap = 2;
  h.query_tap = 1;
  const ValueId enable = p.value("enable");
  float_ram(p, FloatRamWindow{low}, {h}, enable, "ram");
  compiler::Interface io;
  io.inputs = h.data;  // x, key, write, wipe, query, read, enable
  io.inputs.insert(io.inputs.end(), h.key_bits.begin(), h.key_bits.end());
  for (ValueId v : {h.write_flag, h.wipe_flag}) io.inputs.push_back(v);
  io.inputs.insert(io.inputs.end(), h.query_bits.begin(), h.query_bits.end());
  for (ValueId v : {h.read_flag, enable}) io.inputs.push_back(v);
  io.outputs = h.out;
  const int64_t tokens = std::max<int64_t>(80, kCases / 50);
  const size_t width = io.inputs.size();
  io.vocab_size = tokens;
  io.input_rows.assign(static_cast<size_t>(tokens) * width, 0.0f);
  std::vector<float> expected(static_cast<size_t>(tokens * kFloats), 0.0f);
  std::vector<std::vector<float>> rows(kRows);
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  int64_t read_from_written = 0;
  auto at = [&](int64_t t, size_t i) -> float& { return io.input_rows[static_cast<size_t>(t) * width + i]; };
  for (int64_t t = 0; t < tokens; ++t) {
    at(t, width - 1) = 1.0f;  // enable
    for (int64_t d = 0; d < kFloats; ++d) at(t, static_cast<size_t>(d)) = window_float(rng, low);  // junk unless written
    std::vector<int64_t> free_rows;
    for (int64_t a = 0; a < kRows; ++a)
      if (rows[static_cast<size_t>(a)].empty()) free_rows.push_back(a);
    const bool write = t >= 2 && coin(rng) < 0.7;
    if (write && (free_rows.empty() || coin(rng) < 0.02)) {  // wipe at t, before t's write
      at(t, kFloats + 5) = 1.0f;
      for (auto& r : rows) r.clear();
      free_rows.clear();
      for (int64_t a = 0; a < kRows; ++a) free_rows.push_back(a);
    }
    if (write) {  // inputs at t - 2
      const int64_t a = free_rows[rng() % free_rows.size()];
      for (int b = 0; b < 4; ++b) at(t - 2, static_cast<size_t>(kFloats + b)) = static_cast<float>((a >> b) & 1);
      at(t - 2, kFloats + 4) = 1.0f;
      auto& row = rows[static_cast<size_t>(a)];
      for (int64_t d = 0; d < kFloats; ++d) row.push_back(at(t - 2, static_cast<size_t>(d)));
    }
    if (t >= 1 && coin(rng) < 0.8) {  // query inputs at t - 1
      std::vector<int64_t> full;
      for (int64_t r = 0; r < kRows; ++r)
        if (!rows[static_cast<size_t>(r)].empty()) full.push_back(r);
      const int64_t a = !full.empty() && coin(rng) < 0.85 ? full[rng() % full.size()] : static_cast<int64_t>(rng() % kRows);
      for (int b = 0; b < 4; ++b) at(t - 1, static_cast<size_t>(kFloats + 6 + b)) = static_cast<float>((a >> b) & 1);
      at(t - 1, kFloats + 10) = 1.0f;
      const auto& row = rows[static_cast<size_t>(a)];
      read_from_written += row.empty() ? 0 : 1;
      for (int64_t d = 0; d < kFloats && !row.empty(); ++d)
        expected[static_cast<size_t>(t * kFloats + d)] = 0.0f + row[static_cast<size_t>(d)];
    }
  }
  compiler::EmitOptions eo;
  eo.gdn_key_head_dim = 16;
  eo.gdn_value_head_dim = 64;
  const compiler::Compiled c = compiler::compile(p, io, {}, eo);
  for (const auto& [host, name] : {std::pair{engine_host(), "engine"}, std::pair{sim_host(13), "HostSim"}}) {
    const Forward fwd = host(c.weights);
    std::vector<float> hidden(static_cast<size_t>(c.weights.config.hidden_size));
    int64_t bad = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      fwd(t, hidden);
      for (size_t d = 0; d < static_cast<size_t>(kFloats); ++d) {
        const float want = expected[static_cast<size_t>(t * kFloats) + d];
        const float got = hidden[static_cast<size_t>(c.allocation.dim(h.out[d]))];
        if (float_bits(got) != float_bits(want) && bad++ < 3)
          ADD_FAILURE() << name << " token " << t << " out " << d << ": expected " << describe_float(want) << " got "
                        << describe_float(got);
      }
    }
    EXPECT_EQ(bad, 0) << name;
  }
  EXPECT_GT(read_from_written, tokens / 2);
}

// stories260K's FFN products (run.c's silu(hb) * hb2, ffn_prod: binades -32..3 over
// all 134 traced runs, docs/trace-ranges.md, so low = -33) of the greedy story: record
// (pos, layer) = 172 floats is written by one token into one row of three 128 x 128
// heads (63 + 63 + 46 floats) and read back 5 tokens later; blocks of 120 records, the
// first write of a block wipes the heads (refill).
TEST(FloatRam, StoriesFfnProductsReadBackEveryBit) {
  const auto& gold = unit_testing::golden();
  const auto& cfg = unit_testing::stories260k().config();
  const int positions = kCases >= 20000 ? gold.positions : 8;
  std::vector<std::vector<float>> records;
  for (int pos = 0; pos < positions; ++pos)
    for (int l = 0; l < cfg.n_layers; ++l) records.push_back(gold.at(reference::TraceKind::ffn_prod, pos, l));
  const int64_t n = cfg.hidden_dim;
  ASSERT_EQ(n, 172);
  const FloatRamWindow window{-33};
  int lo_binade = 100, hi_binade = -100;
  for (const auto& r : records)
    for (float v : r) {
      ASSERT_TRUE(window.holds(v)) << v;
      if (v != 0.0f) {
        lo_binade = std::min(lo_binade, std::ilogb(v));
        hi_binade = std::max(hi_binade, std::ilogb(v));
      }
    }
  compiler::Program p;
  const std::vector<ValueId> x = p.values("prod", static_cast<int>(n)), out = p.values("out", static_cast<int>(n));
  const std::vector<ValueId> key = p.values("key", 7), query = p.values("query", 7);
  const ValueId write = p.value("write"), wipe = p.value("wipe"), read = p.value("read"), enable = p.value("enable");
  std::vector<FloatRamHead> heads;
  for (int64_t begin = 0; begin < n; begin += 63) {
    FloatRamHead h;
    const int64_t end = std::min(n, begin + 63);
    h.data.assign(x.begin() + begin, x.begin() + end);
    h.out.assign(out.begin() + begin, out.begin() + end);
    h.key_bits = key;
    h.query_bits = query;
    h.write_flag = write;
    h.wipe_flag = wipe;
    h.read_flag = read;
    heads.push_back(h);
  }
  ASSERT_EQ(heads.size(), 3u);
  float_ram(p, window, heads, enable, "ffn ram");
  compiler::Interface io;
  io.inputs = x;
  io.inputs.insert(io.inputs.end(), key.begin(), key.end());
  io.inputs.insert(io.inputs.end(), query.begin(), query.end());
  for (ValueId v : {write, wipe, read, enable}) io.inputs.push_back(v);
  io.outputs = out;
  // The stream: per block of up to 120 records, token j writes record j into row j and
  // reads row j - 5; then 5 tokens read the last rows.
  constexpr int64_t kBlock = 120, kLag = 5;
  std::vector<std::vector<float>> rows_in;  // per token: the input row
  std::vector<int64_t> read_record;         // per token: record read, or -1
  const size_t width = io.inputs.size();
  for (int64_t first = 0; first < static_cast<int64_t>(records.size()); first += kBlock) {
    const int64_t count = std::min<int64_t>(kBlock, static_cast<int64_t>(records.size()) - first);
    for (int64_t j = 0; j < count + kLag; ++j) {
      std::vector<float> in(width, 0.0f);
      in[width - 1] = 1.0f;  // enable
      if (j < count) {
        std::copy(records[static_cast<size_t>(first + j)].begin(), records[static_cast<size_t>(first + j)].end(), in.begin());
        for (int b = 0; b < 7; ++b) in[static_cast<size_t>(n + b)] = static_cast<float>((j >> b) & 1);
        in[width - 4] = 1.0f;                   // write
        in[width - 3] = j == 0 ? 1.0f : 0.0f;   // wipe with the first write of a block
      }
      const int64_t r = j - kLag;
      if (r >= 0) {
        for (int b = 0; b < 7; ++b) in[static_cast<size_t>(n + 7 + b)] = static_cast<float>((r >> b) & 1);
        in[width - 2] = 1.0f;  // read
      }
      rows_in.push_back(in);
      read_record.push_back(r >= 0 ? first + r : -1);
    }
  }
  const auto tokens = static_cast<int64_t>(rows_in.size());
  io.vocab_size = std::max<int64_t>(tokens, n);
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * width, 0.0f);
  for (int64_t t = 0; t < tokens; ++t)
    std::copy(rows_in[static_cast<size_t>(t)].begin(), rows_in[static_cast<size_t>(t)].end(),
              io.input_rows.begin() + t * static_cast<int64_t>(width));
  const compiler::Compiled c = compiler::compile(p, io);  // Qwen3.5's 128 x 128 GDN heads (the default)
  // HostSim (~50 ms per token here) runs the first block and the refill of the second.
  const int64_t sim_tokens = std::min(tokens, kBlock + kLag + 10);
  for (const auto& [host, name, run] : {std::tuple{engine_host(), "engine", tokens}, std::tuple{sim_host(5), "HostSim", sim_tokens}}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Forward fwd = host(c.weights);
    std::vector<float> hidden(static_cast<size_t>(c.weights.config.hidden_size));
    int64_t mismatches = 0, compared = 0, negative = 0, records_read = 0;
    for (int64_t t = 0; t < run; ++t) {
      fwd(t, hidden);
      const int64_t r = read_record[static_cast<size_t>(t)];
      for (int64_t i = 0; i < n; ++i) {
        const float want = r < 0 ? 0.0f : records[static_cast<size_t>(r)][static_cast<size_t>(i)];
        const float got = hidden[static_cast<size_t>(c.allocation.dim(out[static_cast<size_t>(i)]))];
        negative += r >= 0 && want < 0.0f;
        compared += r >= 0;
        records_read += r >= 0 && i == 0;
        if (float_bits(got) != float_bits(want) && mismatches++ < 3)
          ADD_FAILURE() << name << " token " << t << " record " << r << " product " << i << ": expected "
                        << describe_float(want) << " got " << describe_float(got);
      }
    }
    std::printf("float ram, stories260K ffn_prod on the %s: %lld of %zu records (%d positions x %d layers) = %lld floats "
                "(%lld negative, binades %d..%d) written and read back 5 tokens later over %lld tokens: %lld mismatches "
                "(%.1f s)\n",
                name, static_cast<long long>(records_read), records.size(), positions, cfg.n_layers,
                static_cast<long long>(compared), static_cast<long long>(negative), lo_binade, hi_binade,
                static_cast<long long>(run),
                static_cast<long long>(mismatches),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    EXPECT_EQ(mismatches, 0) << name;
    EXPECT_EQ(compared, records_read * n) << name;
    if (run == tokens) {
      EXPECT_EQ(records_read, static_cast<int64_t>(records.size())) << name;
    }
  }
}

// The idle contract beyond the values: with zero operands the negation writes -0
// even with a constant gate (silu(128) * 0), but its gate must be 128 * enable (0 when
// idle) so that an idle unit's neurons are all-zero and the input-sparse engine skips
// them. One neuron per distinct data value: a value stored by two heads is negated once.
TEST(FloatRam, NegationReadsEnableNotTheConstant) {
  compiler::Program p;
  FloatRamHead a, b;
  a.data = p.values("x", 3);
  b.data = {a.data[1], p.value("y")};
  a.out = p.values("out_a", 3);
  b.out = p.values("out_b", 2);
  const ValueId enable = p.value("enable");
  float_ram(p, FloatRamWindow{-33}, {a, b}, enable, "ram");
  ASSERT_EQ(p.ops().size(), 3u);  // negate, head 0, head 1
  const compiler::Op& neg = p.ops()[0];
  ASSERT_EQ(neg.kind, compiler::OpKind::Mlp);
  EXPECT_EQ(neg.neurons.size(), 4u);
  for (const compiler::Neuron& n : neg.neurons) {
    ASSERT_EQ(n.gate.terms.size(), 1u);
    EXPECT_EQ(n.gate.terms[0].value, enable);
    EXPECT_EQ(n.gate.terms[0].weight, 128.0f);
    for (const compiler::Term& t : n.up.terms) EXPECT_NE(t.value, compiler::kOne);
    ASSERT_EQ(n.down.size(), 1u);
    EXPECT_EQ(n.down[0].weight, -1.0f);
  }
  EXPECT_EQ(p.ops()[1].gdn.data[3], p.ops()[2].gdn.data[1]);  // the shared value's -x
  EXPECT_EQ(p.ops()[1].gdn.data_exponent, 40);
  EXPECT_EQ(p.ops()[1].gdn.out_weights, (std::vector<float>{1, -1, 1, -1, 1, -1}));
}

TEST(FloatRam, RejectsUnusableHeadsAndWindows) {
  compiler::Program p;
  FloatRamHead h;
  h.data = p.values("x", 2);
  h.key_bits = p.values("key", 2);
  h.query_bits = p.values("query", 2);
  h.out = p.values("out", 2);
  auto message = [&](const FloatRamWindow& w, const std::vector<FloatRamHead>& heads) -> std::string {
    try {
      float_ram(p, w, heads, compiler::kOne, "t");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message({-54}, {h}).find("low binade -54 outside [-53, -1]"), std::string::npos);
  EXPECT_NE(message({0}, {h}).find("low binade 0"), std::string::npos);
  EXPECT_NE(message({-33}, {}).find("no heads"), std::string::npos);
  FloatRamHead bad = h;
  bad.out.pop_back();
  EXPECT_NE(message({-33}, {h, bad}).find("head 1: 2 data values but 1 out values"), std::string::npos);
  bad = h;
  bad.query_bits.pop_back();
  EXPECT_NE(message({-33}, {bad}).find("2 key bits but 1 query bits"), std::string::npos);
  bad = h;
  bad.data.clear();
  bad.out.clear();
  EXPECT_NE(message({-33}, {bad}).find("no data values"), std::string::npos);
  bad = h;
  bad.data[1] = compiler::kOne;
  EXPECT_NE(message({-33}, {bad}).find("data -1 is not a value"), std::string::npos);
  EXPECT_NE(message({-33}, {h, h}).find("head 1: out value"), std::string::npos);  // shared outs
  bad = h;
  bad.out[0] = bad.data[1];
  EXPECT_NE(message({-33}, {bad}).find("is also an operand"), std::string::npos);
  // A head with more floats than a row holds fails at compile time, naming the op.
  compiler::Program q;
  FloatRamHead big;
  big.data = q.values("x", 32);
  big.out = q.values("out", 32);
  float_ram(q, {-33}, {big}, compiler::kOne, "big");
  compiler::Interface io;
  io.inputs = big.data;
  io.outputs = big.out;
  io.vocab_size = 32;
  io.input_rows.assign(32 * 32, 0.0f);
  compiler::EmitOptions eo;
  eo.gdn_key_head_dim = 16;
  eo.gdn_value_head_dim = 64;
  try {
    compiler::compile(q, io, {}, eo);
    ADD_FAILURE() << "64 columns compiled into a row of 63";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'big head 0' stores 64 values; a row holds 63"), std::string::npos) << e.what();
  }
}

// Stock transformers 5.24.0 (fp32 CPU, one token per forward with the cache): the
// 16 x 64 configuration's stream, every logit (= every out value) bit for bit; the
// same stream again with the write sides on `enable` (WriteEnables above).
TEST(FloatRamTransformers, ReadsMatchWrittenBits) {
  const std::string python = QPU_PYTHON;
  if (python.empty()) GTEST_SKIP() << "QPU_PYTHON not set";
  for (const bool enables : {false, true}) {
    SCOPED_TRACE(enables ? "write enables" : "write sides on the rail");
    RamOptions o = configurations(240)[0];
    o.write_enables = enables;
    const RamCase c = build_ram_case(o);
    for (const auto& type : c.compiled.weights.config.layer_types) ASSERT_EQ(type, io::LayerType::LinearAttention);
    const int64_t mismatches = testing::transformers_gdn_mismatches(
        c.compiled.weights, c.tokens, static_cast<int64_t>(c.out_dims.size()), c.expected, "float_ram");
    std::printf("float ram, transformers: %lld tokens, %lld floats written, %lld read from written rows (%lld negative), "
                "%lld refills, %lld idle tokens: %lld mismatches\n",
                static_cast<long long>(c.tokens), static_cast<long long>(c.floats_written),
                static_cast<long long>(c.read_from_written), static_cast<long long>(c.negative_read),
                static_cast<long long>(c.refills), static_cast<long long>(c.idle_tokens), static_cast<long long>(mismatches));
    EXPECT_EQ(mismatches, 0);
    EXPECT_GT(c.read_from_written, 4000);
    EXPECT_GT(c.negative_read, 1000);
    EXPECT_GT(c.refills, 0);
  }
}

}  // namespace
}  // namespace qpu::npu
