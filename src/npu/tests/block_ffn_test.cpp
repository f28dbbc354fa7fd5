// The FFN block (npu/block_ffn.h) against run.c's FFN half-layer, bit for bit: x after
// `x[i] += xb[i]` for every layer of stories260K fed with the golden records of the
// greedy story (x_att_res -> x_ffn_res), random x with fixed seeds, a small synthetic
// checkpoint (dimensions from the header: dim 6, hidden 10, 3 layers), the idle check,
// and the compiled shape.
//
// How it runs on the engine. The block is compiled ONCE with dim reuse
// (compiler::plan_dim_reuse: the schedule and allocation of compile_reusing_dims). As one
// dense checkpoint it is far beyond memory (353 layers x 9,216 x 38,720 x 12 bytes), so
// the tests emit it in chunks of consecutive host layers of THAT schedule and allocation
// (same neuron rows, same weights; one layer per chunk by default), each chunk over the
// dims its ops touch, and carry the residual stream (global dims) from one chunk to the
// next through the token embedding. A forward of the engine is a function of the
// embedding row and the layers only (the block has no memory op; its mixers are idle),
// and the rails make every layer's norm scale exactly 2^-k whatever the hidden size, so
// each chunk computes what those layers of the one checkpoint compute; the engine time
// per block forward is the sum over chunks (run_chunked says the rest).
#include <math.h>  // glibc's expf, as run.c

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <ctime>

#include <gtest/gtest.h>
#include <omp.h>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/allocate.h"
#include "compiler/clear_dead.h"
#include "compiler/emit.h"
#include "compiler/schedule.h"
#include "npu/block_ffn.h"
#include "npu/engine_host.h"
#include "reference/run_c_ops.h"
#include "unit_harness.h"

namespace qpu::npu {
namespace {

using compiler::ValueId;
using unit_testing::rand_float;
using K = reference::TraceKind;

constexpr int64_t kCases = QPU_NPU_CASES;
constexpr bool kLong = kCases >= 100000;

// run.c's FFN half-layer of layer l, in place on x (reference/transformer.cpp's order).
void run_c_ffn(const reference::Llama2Checkpoint& ck, int l, std::vector<float>& x) {
  const auto& cfg = ck.config();
  const auto w = ck.weights();
  const auto dim = static_cast<size_t>(cfg.dim), hidden = static_cast<size_t>(cfg.hidden_dim);
  std::vector<float> xb(dim), hb(hidden), hb2(hidden);
  reference::rmsnorm(xb, x, w.rms_ffn.subspan(static_cast<size_t>(l) * dim, dim));
  reference::matmul(hb, xb, w.w1.subspan(static_cast<size_t>(l) * hidden * dim, hidden * dim), cfg.dim, cfg.hidden_dim);
  reference::matmul(hb2, xb, w.w3.subspan(static_cast<size_t>(l) * hidden * dim, hidden * dim), cfg.dim, cfg.hidden_dim);
  for (size_t i = 0; i < hidden; ++i) {
    float val = hb[i];
    val *= (1.0f / (1.0f + expf(-val)));
    val *= hb2[i];
    hb[i] = val;
  }
  reference::matmul(xb, hb, w.w2.subspan(static_cast<size_t>(l) * dim * hidden, dim * hidden), cfg.hidden_dim, cfg.dim);
  for (size_t i = 0; i < dim; ++i) x[i] += xb[i];
}

// The block as compiled: inputs x (dim) then the layer flags, output x_out.
struct Block {
  compiler::Program program;
  std::vector<ValueId> x, flags, inputs;
  FfnBlock ffn;
  compiler::ReusePlan plan;
};

std::unique_ptr<Block> build_block(const reference::Llama2Checkpoint& ck) {
  auto b = std::make_unique<Block>();
  b->x = b->program.values("x", ck.config().dim);
  b->flags = b->program.values("layer", ck.config().n_layers);
  b->ffn = ffn_block(b->program, ck, b->x, b->flags);
  b->inputs = b->x;
  b->inputs.insert(b->inputs.end(), b->flags.begin(), b->flags.end());
  compiler::Interface io;
  io.inputs = b->inputs;
  io.outputs = b->ffn.x_out;
  io.vocab_size = static_cast<int64_t>(io.outputs.size());
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * io.inputs.size(), 0.0f);
  b->plan = compiler::plan_dim_reuse(b->program, io);
  return b;
}

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct ChunkedRun {
  std::vector<std::vector<float>> hidden;  // per case: the residual stream after the block (global dims)
  double engine_seconds = 0;               // forwards only, all chunks, all cases: wall clock
  double engine_cpu_seconds = 0;           // the same forwards: CPU time of the process (all threads)
  int64_t chunks = 0, max_chunk_hidden = 0;
  std::string idle_nonzero;                // check_idle: the first nonzero non-rail dim found
};

// Runs every case (one row of block inputs each) through the planned block, chunk by
// chunk (see the file comment). A chunk is emitted over the dims its ops touch (its own
// rails, q = ceil(dims / 63) as allocate() counts them): every other dim has no weight in
// those layers, and the rails make the norm scale exactly 2^-k whatever the hidden size
// (emit.h), so the touched dims get the bits the full-width layers give them; the others
// receive the +0 that every full-width sublayer adds (x + 0: -0 becomes +0), done here.
// After every chunk, every non-rail dim of cases [0, idle_cases) must be +-0.
ChunkedRun run_chunked(const Block& b, const std::vector<std::vector<float>>& cases, size_t idle_cases = 0,
                       int64_t chunk_bytes = 1) {
  // One engine thread: a chunk is one small layer, and on the shared machine two threads
  // spend most of a forward in OpenMP barriers (measured: 313 ms of CPU per block forward
  // with two threads, 9.5 ms with one). The bits are the same at every thread count.
  omp_set_num_threads(1);
  const compiler::Schedule& sched = b.plan.schedule;
  const compiler::Allocation& alloc = b.plan.allocation;
  const auto& ops = b.plan.program.ops();
  const int64_t H = alloc.hidden_size, L = alloc.num_layers;
  const compiler::EmitOptions options;
  const float rail = compiler::rail_value(options.norm_exponent);
  std::vector<bool> is_rail(static_cast<size_t>(H), false);
  for (int64_t d : alloc.rail_dims) is_rail[static_cast<size_t>(d)] = true;

  ChunkedRun r;
  r.hidden.assign(cases.size(), std::vector<float>(static_cast<size_t>(H), 0.0f));
  for (size_t c = 0; c < cases.size(); ++c) {  // what emit writes into an embedding row
    for (int64_t d : alloc.rail_dims) r.hidden[c][static_cast<size_t>(d)] = rail;
    for (size_t i = 0; i < b.inputs.size(); ++i) r.hidden[c][static_cast<size_t>(alloc.dim(b.inputs[i]))] = cases[c][i];
  }
  std::vector<std::vector<size_t>> ops_of_layer(static_cast<size_t>(L));
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != compiler::OpKind::Mlp) fail("run_chunked: op '{}' is not an MLP", ops[i].label);
    ops_of_layer[static_cast<size_t>(sched.sublayer[i] / 2)].push_back(i);
  }
  compiler::Program sub = b.plan.program;  // every value; the ops are replaced per chunk
  compiler::Interface io;
  io.vocab_size = static_cast<int64_t>(cases.size());
  std::vector<int64_t> local(static_cast<size_t>(H), -1);
  std::vector<float> row;
  for (int64_t l0 = 0; l0 < L;) {
    // The chunk: layers [l0, l1) and the global dims they touch.
    std::vector<int64_t> dims;
    auto touch = [&](ValueId v) {
      const int64_t d = alloc.dim(v);
      if (local[static_cast<size_t>(d)] < 0) {
        local[static_cast<size_t>(d)] = static_cast<int64_t>(dims.size());
        dims.push_back(d);
      }
    };
    int64_t l1 = l0, width = 1;
    while (l1 < L) {
      const size_t before = dims.size();
      for (size_t i : ops_of_layer[static_cast<size_t>(l1)]) {
        for (ValueId v : ops[i].reads()) touch(v);
        for (ValueId v : ops[i].writes()) touch(v);
      }
      const int64_t w = std::max(width, alloc.neurons_per_layer[static_cast<size_t>(l1)]);
      const auto n = static_cast<int64_t>(dims.size());
      if (l1 > l0 && (l1 + 1 - l0) * w * (n + n / 63 + 64) * 12 > chunk_bytes) {
        for (size_t k = before; k < dims.size(); ++k) local[static_cast<size_t>(dims[k])] = -1;
        dims.resize(before);
        break;
      }
      width = w;
      ++l1;
    }
    compiler::Schedule s;
    compiler::Allocation a;
    const auto nd = static_cast<int64_t>(dims.size());
    const int64_t q = (nd + 62) / 63;
    a.hidden_size = 64 * q;
    for (int64_t k = 0; k < q; ++k) a.rail_dims.push_back(a.hidden_size - q + k);
    a.dim_of_value.assign(alloc.dim_of_value.size(), 0);
    for (size_t v = 0; v < alloc.dim_of_value.size(); ++v) {
      const int64_t ld = local[static_cast<size_t>(alloc.dim_of_value[v])];
      if (ld >= 0) a.dim_of_value[v] = ld;
    }
    auto& sub_ops = sub.mutable_ops();
    sub_ops.clear();
    for (int64_t l = l0; l < l1; ++l)
      for (size_t i : ops_of_layer[static_cast<size_t>(l)]) {
        sub_ops.push_back(ops[i]);
        s.sublayer.push_back(sched.sublayer[i] - 2 * l0);
        a.first_neuron.push_back(alloc.first_neuron[i]);
      }
    s.num_sublayers = 2 * (l1 - l0);
    a.num_layers = l1 - l0;
    a.intermediate_size = width;
    a.layer_has_attention.assign(alloc.layer_has_attention.begin() + l0, alloc.layer_has_attention.begin() + l1);
    a.neurons_per_layer.assign(alloc.neurons_per_layer.begin() + l0, alloc.neurons_per_layer.begin() + l1);
    io::Qwen35Weights w = compiler::emit(sub, s, a, io, options);
    const int64_t HL = a.hidden_size;
    for (size_t c = 0; c < cases.size(); ++c)
      for (int64_t k = 0; k < nd; ++k)
        w.embed_tokens[c * static_cast<size_t>(HL) + static_cast<size_t>(k)] = r.hidden[c][static_cast<size_t>(dims[static_cast<size_t>(k)])];
    const Forward fwd = engine_host()(w);
    row.assign(static_cast<size_t>(HL), 0.0f);
    double seconds = 0;
    for (size_t c = 0; c < cases.size(); ++c) {
      const double cpu0 = cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      fwd(static_cast<int64_t>(c), row);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      r.engine_cpu_seconds += cpu_seconds() - cpu0;
      auto& h = r.hidden[c];
      // The dims this chunk does not touch: +0 added (only an input can be -0, and after
      // the first layer it is +0, so once is enough).
      if (l0 == 0)
        for (int64_t d = 0; d < H; ++d) h[static_cast<size_t>(d)] += 0.0f;
      for (int64_t k = 0; k < nd; ++k) h[static_cast<size_t>(dims[static_cast<size_t>(k)])] = row[static_cast<size_t>(k)];
    }
    r.engine_seconds += seconds;
    ++r.chunks;
    r.max_chunk_hidden = std::max(r.max_chunk_hidden, HL);
    for (int64_t d : dims) local[static_cast<size_t>(d)] = -1;
    if (r.idle_nonzero.empty())
      for (size_t c = 0; c < idle_cases && r.idle_nonzero.empty(); ++c)
        for (int64_t d = 0; d < H; ++d)
          if (!is_rail[static_cast<size_t>(d)] && r.hidden[c][static_cast<size_t>(d)] != 0.0f) {
            r.idle_nonzero = "case " + std::to_string(c) + " dim " + std::to_string(d) + " = " +
                             describe_float(r.hidden[c][static_cast<size_t>(d)]) + " after layer " + std::to_string(l1);
            break;
          }
    l0 = l1;
  }
  return r;
}

struct Checked {
  int64_t cases = 0, mismatches = 0;
  std::string first;
  double ms_per_forward = 0, cpu_ms_per_forward = 0;
};

// Runs (x, layer) cases and compares x_out with run.c's x after the FFN (expect).
Checked check_cases(const Block& b, int n_layers, const std::vector<std::vector<float>>& xs, const std::vector<int>& layers,
                    const std::vector<std::vector<float>>& expect, int64_t chunk_bytes = 1) {
  std::vector<std::vector<float>> cases;
  for (size_t c = 0; c < xs.size(); ++c) {
    std::vector<float> row = xs[c];
    for (int l = 0; l < n_layers; ++l) row.push_back(l == layers[c] ? 1.0f : 0.0f);
    cases.push_back(std::move(row));
  }
  const ChunkedRun run = run_chunked(b, cases, 0, chunk_bytes);
  Checked k;
  k.ms_per_forward = 1000.0 * run.engine_seconds / static_cast<double>(std::max<size_t>(cases.size(), 1));
  k.cpu_ms_per_forward = 1000.0 * run.engine_cpu_seconds / static_cast<double>(std::max<size_t>(cases.size(), 1));
  for (size_t c = 0; c < cases.size(); ++c) {
    ++k.cases;
    for (size_t i = 0; i < b.ffn.x_out.size(); ++i) {
      const float got = run.hidden[c][static_cast<size_t>(b.plan.allocation.dim(b.ffn.x_out[i]))];
      const float want = 0.0f + expect[c][i];
      if (float_bits(got) != float_bits(want)) {
        if (k.mismatches == 0)
          k.first = "case " + std::to_string(c) + " (layer " + std::to_string(layers[c]) + ") x_out[" + std::to_string(i) +
                    "]: expected " + describe_float(want) + " got " + describe_float(got);
        ++k.mismatches;
        break;
      }
    }
  }
  return k;
}

const Block& stories_block() {
  static const std::unique_ptr<Block> b = build_block(unit_testing::stories260k());
  return *b;
}

// (a) Every layer at many positions of the greedy story: x_att_res -> x_ffn_res.
TEST(FfnBlockGolden, EveryLayerMatchesTheStory) {
  const auto& ck = unit_testing::stories260k();
  const auto& gold = unit_testing::golden();
  ASSERT_GE(gold.positions, 64);
  std::vector<std::vector<float>> xs, expect;
  std::vector<int> layers;
  for (int pos = 0; pos < gold.positions; ++pos) {
    if (!kLong && pos % 48 != 5) continue;  // the short slice: positions 5 and 53
    for (int l = 0; l < ck.config().n_layers; ++l) {
      std::vector<float> x = gold.at(K::x_att_res, pos, l);
      const std::vector<float>& want = gold.at(K::x_ffn_res, pos, l);
      xs.push_back(x);
      run_c_ffn(ck, l, x);  // the C reference of the random cases reproduces the record
      EXPECT_EQ(x, want) << "pos " << pos << " layer " << l;
      expect.push_back(want);
      layers.push_back(l);
    }
  }
  const Checked k = check_cases(stories_block(), ck.config().n_layers, xs, layers, expect);
  EXPECT_EQ(k.cases, static_cast<int64_t>(xs.size()));
  EXPECT_EQ(k.mismatches, 0) << k.first;
  std::printf("ffn block golden: %lld records (%d positions x %d layers), 0 expected mismatches, got %lld; engine %.1f ms (CPU %.1f ms) "
              "per block forward\n",
              static_cast<long long>(k.cases), kLong ? gold.positions : static_cast<int>(xs.size()) / ck.config().n_layers,
              ck.config().n_layers, static_cast<long long>(k.mismatches), k.ms_per_forward, k.cpu_ms_per_forward);
}

// x in stories260K's range (docs/trace-ranges.md, x_att_res: binades -24..3), a random
// top binade per case, 1/16 zeros.
std::vector<float> random_x(std::mt19937_64& rng, int dim) {
  const int top = -2 + static_cast<int>(rng() % 6);  // -2..3
  std::vector<float> x(static_cast<size_t>(dim));
  for (auto& v : x) v = (rng() % 16) ? rand_float(rng, std::max(-24, top - 1 - static_cast<int>(rng() % 20)), top) : 0.0f;
  return x;
}

// (b) Random x with fixed seeds, every layer.
TEST(FfnBlockRandom, EveryLayerMatchesRunC) {
  const auto& ck = unit_testing::stories260k();
  const int n_layers = ck.config().n_layers;
  const int64_t per_layer = kLong ? 200 : 2;
  std::vector<std::vector<float>> xs, expect;
  std::vector<int> layers;
  for (int l = 0; l < n_layers; ++l) {
    std::mt19937_64 rng(1000 + static_cast<uint64_t>(l));
    for (int64_t c = 0; c < per_layer; ++c) {
      std::vector<float> x = random_x(rng, ck.config().dim);
      xs.push_back(x);
      run_c_ffn(ck, l, x);
      expect.push_back(x);
      layers.push_back(l);
    }
  }
  const Checked k = check_cases(stories_block(), n_layers, xs, layers, expect);
  EXPECT_EQ(k.cases, per_layer * n_layers);
  EXPECT_EQ(k.mismatches, 0) << k.first;
  std::printf("ffn block random: %lld cases, %lld mismatches; engine %.1f ms (CPU %.1f ms) per block forward\n",
              static_cast<long long>(k.cases), static_cast<long long>(k.mismatches), k.ms_per_forward, k.cpu_ms_per_forward);
}

// (c) Idle: every flag 0 and x = 0 leave every non-rail dim of the residual stream at
// +-0 after every layer (so every value the block owns, dims being shared).
// The same run carries an active case (layer 0), which must come out as C's x.
TEST(FfnBlock, IdleWritesOnlyZeros) {
  const auto& ck = unit_testing::stories260k();
  const Block& b = stories_block();
  std::mt19937_64 rng(77);
  const std::vector<float> x = random_x(rng, ck.config().dim);
  std::vector<float> active = x, want = x;
  active.resize(b.inputs.size(), 0.0f);
  active[x.size()] = 1.0f;
  run_c_ffn(ck, 0, want);
  const ChunkedRun r = run_chunked(b, {std::vector<float>(b.inputs.size(), 0.0f), active}, 1, 1);  // one layer per chunk
  EXPECT_EQ(r.idle_nonzero, "");
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(float_bits(r.hidden[0][static_cast<size_t>(b.plan.allocation.dim(b.ffn.x_out[i]))]), float_bits(0.0f));
    EXPECT_EQ(float_bits(r.hidden[1][static_cast<size_t>(b.plan.allocation.dim(b.ffn.x_out[i]))]), float_bits(0.0f + want[i]));
  }
  std::printf("ffn block idle: %lld layers checked (largest chunk hidden %lld)\n", static_cast<long long>(r.chunks),
              static_cast<long long>(r.max_chunk_hidden));
}

// (d) The compiled shape (compile_reusing_dims = this plan + emit).
TEST(FfnBlock, CompiledShape) {
  const auto& cfg = unit_testing::stories260k().config();
  const Block& b = stories_block();
  const auto& a = b.plan.allocation;
  int64_t neurons = 0;
  for (int64_t n : a.neurons_per_layer) neurons += n;
  const int64_t sublayers = b.plan.schedule.num_sublayers, layers = a.num_layers;
  const int64_t critical = compiler::critical_path(b.program);
  const compiler::ScheduleLimits limits;
  const int64_t plain_hidden = compiler::allocate(b.program, compiler::schedule(b.program, limits)).hidden_size;
  std::printf("ffn block (dim %d, hidden_dim %d, %d layers): sublayers %lld, host layers %lld, hidden %lld, intermediate "
              "%lld, neurons %lld (with %zu dead-value clears), values %lld, critical path %lld ops; hidden without dim reuse %lld\n",
              cfg.dim, cfg.hidden_dim, cfg.n_layers, static_cast<long long>(sublayers), static_cast<long long>(layers),
              static_cast<long long>(a.hidden_size), static_cast<long long>(a.intermediate_size),
              static_cast<long long>(neurons), b.plan.program.ops().size() - b.program.ops().size(),
              static_cast<long long>(b.program.num_values()), static_cast<long long>(critical),
              static_cast<long long>(plain_hidden));
  // Every op is an MLP, so a chain of c dependent ops needs c MLP sublayers = c host layers.
  EXPECT_GE(layers, critical);
  // The units' depths in sequence (rmsnorm 102, matvec n = dim 1 + ceil((dim - 1)/3),
  // SwiGLU 170, matvec n = hidden_dim, residual add 1) bound the critical path; they may
  // overlap by one sublayer at each of the 3 unit boundaries where a unit's enable neuron
  // runs beside its predecessor.
  const int64_t chain = 102 + (1 + (cfg.dim + 1) / 3) + 170 + (1 + (cfg.hidden_dim + 1) / 3) + 1;
  EXPECT_LE(critical, chain);
  EXPECT_GE(critical, chain - 4);
  // The neuron limit delays lanes of wide sublayers (SwiGLU's one-hot: 270 per lane):
  // at most one extra layer per full sublayer of neurons.
  EXPECT_LE(layers, critical + neurons / limits.max_neurons_per_mlp + 1);
  EXPECT_LE(a.intermediate_size, limits.max_neurons_per_mlp);
  // Hidden: at least the inputs and the outputs (plus rails, a multiple of 64), at most
  // every value its own dim.
  EXPECT_GE(a.hidden_size, 2 * cfg.dim + cfg.n_layers);
  EXPECT_EQ(a.hidden_size % 64, 0);
  EXPECT_LT(a.hidden_size, plain_hidden);
}

// A synthetic checkpoint whose dims come only from its header: dim 6 (rmsnorm's
// divide_const path), hidden 10 (3 in the short slice), 3 layers; random weights, random
// x, every layer.
TEST(FfnBlockSmall, SyntheticCheckpointMatchesRunC) {
  reference::Llama2Config cfg;
  cfg.dim = 6;
  cfg.hidden_dim = kLong ? 10 : 3;  // the short slice also runs under the sanitizers: fewer SwiGLU lanes
  cfg.n_layers = 3;
  cfg.n_heads = 2;
  cfg.n_kv_heads = 2;
  cfg.vocab_size = 8;
  cfg.seq_len = 4;
  std::mt19937_64 rng(606);
  std::vector<float> floats(reference::llama2_layout(cfg).total_floats);
  for (auto& f : floats) f = rand_float(rng, -6, -1);
  const auto lay = reference::llama2_layout(cfg);
  for (size_t i = 0; i < lay.rms_ffn.count; ++i) floats[lay.rms_ffn.offset + i] = rand_float(rng, -1, 1);
  const reference::Llama2Checkpoint ck(cfg, floats);
  const auto b = build_block(ck);
  std::vector<std::vector<float>> xs, expect;
  std::vector<int> layers;
  for (int c = 0; c < (kLong ? 600 : 12); ++c) {
    const int l = c % cfg.n_layers;
    std::vector<float> x = random_x(rng, cfg.dim);
    xs.push_back(x);
    run_c_ffn(ck, l, x);
    expect.push_back(x);
    layers.push_back(l);
  }
  // One layer per chunk: the least padding of the chunks' intermediate (cheapest here).
  const Checked k = check_cases(*b, cfg.n_layers, xs, layers, expect, 1);
  EXPECT_EQ(k.mismatches, 0) << k.first;
  EXPECT_EQ(k.cases, static_cast<int64_t>(xs.size()));
  std::vector<float> idle(b->inputs.size(), 0.0f);
  EXPECT_EQ(run_chunked(*b, {idle}, 1, 1).idle_nonzero, "");  // after every layer
}

TEST(FfnBlock, RejectsWrongSizes) {
  const auto& ck = unit_testing::stories260k();
  compiler::Program p;
  const auto x = p.values("x", ck.config().dim);
  const auto f = p.values("f", ck.config().n_layers);
  EXPECT_THROW(ffn_block(p, ck, std::vector<ValueId>(x.begin(), x.end() - 1), f), Error);
  EXPECT_THROW(ffn_block(p, ck, x, std::vector<ValueId>(f.begin(), f.end() - 1)), Error);
}

}  // namespace
}  // namespace qpu::npu
