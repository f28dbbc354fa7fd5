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
//
// The split FFN (ffn_chunk_block + ffn_out_block, the machine's SWIGLU and W2 micro-ops)
// is tested the same way: each chunk block compiled once under the v1 width budget, the
// cases run through every chunk, their products gathered in lane order and fed with x
// and the flags to the out block, whose x_out must be run.c's.
//
// The chunk unit (ffn_chunk_unit: SWIGLU(l, c) for every layer and chunk in one unit,
// chosen by the flags) is compiled once under the same budget and run the same way: the
// golden records of every layer through every chunk, its lanes against the trace's
// ffn_prod (the padded lanes of the last chunk +0), random x, the idle row, a HostSim
// slice and the width.
#include <math.h>  // glibc's expf, as run.c

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <ctime>
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <omp.h>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/allocate.h"
#include "compiler/clear_dead.h"
#include "compiler/emit.h"
#include "compiler/host_sim.h"
#include "compiler/schedule.h"
#include "npu/block_ffn.h"
#include "npu/engine_host.h"
#include "reference/run_c_ops.h"
#include "unit_harness.h"

namespace qpu::npu {
namespace {

using compiler::ValueId;
using unit_testing::host_sim;
using unit_testing::rand_float;
using unit_testing::random_checkpoint;
using unit_testing::budget_limits;
using unit_testing::kBudgetHidden;
using unit_testing::kBudgetNeurons;
using K = reference::TraceKind;

constexpr int64_t kCases = QPU_NPU_CASES;
constexpr bool kLong = kCases >= 100000;

// run.c's FFN of layer l up to the SwiGLU loop: the hidden_dim products hb[i] it leaves
// (reference/transformer.cpp's order).
std::vector<float> run_c_products(const reference::Llama2Checkpoint& ck, int l, const std::vector<float>& x) {
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
  return hb;
}

// run.c's FFN half-layer of layer l, in place on x (reference/transformer.cpp's order).
void run_c_ffn(const reference::Llama2Checkpoint& ck, int l, std::vector<float>& x) {
  const auto& cfg = ck.config();
  const auto w = ck.weights();
  const auto dim = static_cast<size_t>(cfg.dim), hidden = static_cast<size_t>(cfg.hidden_dim);
  const std::vector<float> hb = run_c_products(ck, l, x);
  std::vector<float> xb(dim);
  reference::matmul(xb, hb, w.w2.subspan(static_cast<size_t>(l) * dim * hidden, dim * hidden), cfg.hidden_dim, cfg.dim);
  for (size_t i = 0; i < dim; ++i) x[i] += xb[i];
}

// A block as compiled: its input values (one case row each), its outputs, the plan.
struct Block {
  compiler::Program program;
  std::vector<ValueId> x, flags, inputs, outputs;
  FfnBlock ffn;  // build_block only
  FfnChunkUnit unit;                  // build_chunk_unit only
  std::vector<ValueId> chunk_flags;   // build_chunk_unit only
  compiler::ReusePlan plan;
};

// Plans b (program, inputs, outputs set) as compile_reusing_dims does.
void plan_block(Block& b, const compiler::ScheduleLimits& limits = {}) {
  compiler::Interface io;
  io.inputs = b.inputs;
  io.outputs = b.outputs;
  io.vocab_size = static_cast<int64_t>(io.outputs.size());
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * io.inputs.size(), 0.0f);
  b.plan = compiler::plan_dim_reuse(b.program, io, limits);
}

// A block's x (dim) and layer flags; extra: values created between them (inputs in
// that order: x, extra, flags).
std::unique_ptr<Block> start_block(const reference::Llama2Checkpoint& ck, std::vector<ValueId>* extra = nullptr,
                                   int extra_count = 0) {
  auto b = std::make_unique<Block>();
  b->x = b->program.values("x", ck.config().dim);
  b->inputs = b->x;
  if (extra != nullptr) {
    *extra = b->program.values("prod", extra_count);
    b->inputs.insert(b->inputs.end(), extra->begin(), extra->end());
  }
  b->flags = b->program.values("layer", ck.config().n_layers);
  b->inputs.insert(b->inputs.end(), b->flags.begin(), b->flags.end());
  return b;
}

// The whole block: inputs x (dim) then the layer flags, output x_out.
std::unique_ptr<Block> build_block(const reference::Llama2Checkpoint& ck) {
  auto b = start_block(ck);
  b->ffn = ffn_block(b->program, ck, b->x, b->flags);
  b->outputs = b->ffn.x_out;
  plan_block(*b);
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
// `host`: the engine, or an order-adversarial HostSim (host_sim below).
ChunkedRun run_chunked(const Block& b, const std::vector<std::vector<float>>& cases, size_t idle_cases = 0,
                       int64_t chunk_bytes = 1, const HostFactory& host = engine_host()) {
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
    const Forward fwd = host(w);
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

// One block input row per (x, layer) case: x then the one-hot layer flags.
std::vector<std::vector<float>> case_rows(int n_layers, const std::vector<std::vector<float>>& xs, const std::vector<int>& layers) {
  std::vector<std::vector<float>> cases;
  for (size_t c = 0; c < xs.size(); ++c) {
    std::vector<float> row = xs[c];
    for (int l = 0; l < n_layers; ++l) row.push_back(l == layers[c] ? 1.0f : 0.0f);
    cases.push_back(std::move(row));
  }
  return cases;
}

// Per case: b's outputs as the run left them in the residual stream.
std::vector<std::vector<float>> outputs_of(const Block& b, const ChunkedRun& run) {
  std::vector<std::vector<float>> out(run.hidden.size());
  for (size_t c = 0; c < run.hidden.size(); ++c)
    for (ValueId v : b.outputs) out[c].push_back(run.hidden[c][static_cast<size_t>(b.plan.allocation.dim(v))]);
  return out;
}

// Compares x_out (or `what`) per case with run.c's x after the FFN (expect; the engine's
// residual stream holds x + 0, so -0 reads +0). layers: per case, named `tag` in the message.
Checked compare(const std::vector<std::vector<float>>& got, const std::vector<int>& layers,
                const std::vector<std::vector<float>>& expect, const std::string& what = "x_out",
                const std::string& tag = "layer") {
  Checked k;
  for (size_t c = 0; c < got.size(); ++c) {
    ++k.cases;
    for (size_t i = 0; i < expect[c].size(); ++i) {
      const float want = 0.0f + expect[c][i];
      if (i >= got[c].size() || float_bits(got[c][i]) != float_bits(want)) {
        if (k.mismatches == 0)
          k.first = "case " + std::to_string(c) + " (" + tag + " " + std::to_string(layers[c]) + ") " + what + "[" + std::to_string(i) +
                    "]: expected " + describe_float(want) + " got " +
                    (i < got[c].size() ? describe_float(got[c][i]) : std::string("nothing"));
        ++k.mismatches;
        break;
      }
    }
  }
  return k;
}

// Runs (x, layer) cases through the whole block and compares x_out with run.c's.
Checked check_cases(const Block& b, int n_layers, const std::vector<std::vector<float>>& xs, const std::vector<int>& layers,
                    const std::vector<std::vector<float>>& expect, int64_t chunk_bytes = 1) {
  const std::vector<std::vector<float>> cases = case_rows(n_layers, xs, layers);
  const ChunkedRun run = run_chunked(b, cases, 0, chunk_bytes);
  Checked k = compare(outputs_of(b, run), layers, expect);
  k.ms_per_forward = 1000.0 * run.engine_seconds / static_cast<double>(std::max<size_t>(cases.size(), 1));
  k.cpu_ms_per_forward = 1000.0 * run.engine_cpu_seconds / static_cast<double>(std::max<size_t>(cases.size(), 1));
  return k;
}

// The split FFN's micro-ops are compiled with the width budget (unit_testing::budget_limits).
// The SWIGLU micro-op's lanes: the most that fit the budget (CompiledShapeFitsTheWidthBudget
// prints 4, 8, 16: a chunk's hidden grows ~128 dims per lane, and beside the SwiGLU lanes
// it holds the inputs x and the flags for the whole program; 8 lanes need 1,134 + 18 rails).
constexpr int kChunkLanes = 7;

// SWIGLU(l, chunk): inputs x then the flags, outputs the chunk's products.
std::unique_ptr<Block> build_chunk(const reference::Llama2Checkpoint& ck, int first_lane, int lanes) {
  auto b = start_block(ck);
  b->outputs = ffn_chunk_block(b->program, ck, b->x, b->flags, first_lane, lanes).prod;
  plan_block(*b, budget_limits());
  return b;
}

// W2: inputs x, the hidden_dim products, the flags; output x_out. Planned with
// `limits` (the budget's when the w2 matvec's widest op fits 1,024 neurons).
std::unique_ptr<Block> build_out(const reference::Llama2Checkpoint& ck, const compiler::ScheduleLimits& limits) {
  std::vector<ValueId> prod;
  auto b = start_block(ck, &prod, ck.config().hidden_dim);
  b->outputs = ffn_out_block(b->program, ck, b->x, prod, b->flags).x_out;
  plan_block(*b, limits);
  return b;
}

// The FFN as the machine runs it: every chunk compiled once, then the out block.
struct SplitFfn {
  std::vector<std::unique_ptr<Block>> chunks;  // lanes [kChunkLanes k, ...)
  std::unique_ptr<Block> out;
};

std::unique_ptr<SplitFfn> build_split(const reference::Llama2Checkpoint& ck, int chunk_lanes = kChunkLanes) {
  auto s = std::make_unique<SplitFfn>();
  for (int first = 0; first < ck.config().hidden_dim; first += chunk_lanes)
    s->chunks.push_back(build_chunk(ck, first, std::min(chunk_lanes, ck.config().hidden_dim - first)));
  s->out = build_out(ck, budget_limits());
  return s;
}

// Runs the cases (rows: x then the flags) chunk by chunk, gathers each case's
// products in lane order, then runs the out block on x, the products and the flags.
// Returns x_out per case; `idle_cases` as in run_chunked, over every micro-op.
struct SplitRun {
  std::vector<std::vector<float>> x_out;
  std::string idle_nonzero;
  int64_t micro_ops = 0;
};
SplitRun run_split(const SplitFfn& s, int dim, const std::vector<std::vector<float>>& cases, size_t idle_cases = 0) {
  SplitRun r;
  std::vector<std::vector<float>> out_rows(cases.size());
  for (size_t c = 0; c < cases.size(); ++c) out_rows[c].assign(cases[c].begin(), cases[c].begin() + dim);
  for (const auto& chunk : s.chunks) {
    const ChunkedRun run = run_chunked(*chunk, cases, idle_cases);
    if (r.idle_nonzero.empty() && !run.idle_nonzero.empty()) r.idle_nonzero = "chunk " + std::to_string(r.micro_ops) + ": " + run.idle_nonzero;
    const auto prods = outputs_of(*chunk, run);
    for (size_t c = 0; c < cases.size(); ++c) out_rows[c].insert(out_rows[c].end(), prods[c].begin(), prods[c].end());
    ++r.micro_ops;
  }
  for (size_t c = 0; c < cases.size(); ++c) out_rows[c].insert(out_rows[c].end(), cases[c].begin() + dim, cases[c].end());
  const ChunkedRun run = run_chunked(*s.out, out_rows, idle_cases);
  if (r.idle_nonzero.empty() && !run.idle_nonzero.empty()) r.idle_nonzero = "out block: " + run.idle_nonzero;
  r.x_out = outputs_of(*s.out, run);
  ++r.micro_ops;
  return r;
}

Checked check_split_cases(const SplitFfn& s, int dim, int n_layers, const std::vector<std::vector<float>>& xs,
                          const std::vector<int>& layers, const std::vector<std::vector<float>>& expect) {
  return compare(run_split(s, dim, case_rows(n_layers, xs, layers)).x_out, layers, expect);
}

const SplitFfn& stories_split() {
  static const std::unique_ptr<SplitFfn> s = build_split(unit_testing::stories260k());
  return *s;
}

const Block& stories_block() {
  static const std::unique_ptr<Block> b = build_block(unit_testing::stories260k());
  return *b;
}

// The golden cases: x_att_res -> x_ffn_res of every layer at positions of the greedy
// story (the short slice: positions `short_positions`).
struct Cases {
  std::vector<std::vector<float>> xs, expect;
  std::vector<int> layers;
  int positions = 0;
};
Cases golden_cases(const std::vector<int>& short_positions) {
  const auto& ck = unit_testing::stories260k();
  const auto& gold = unit_testing::golden();
  EXPECT_GE(gold.positions, 64);
  Cases k;
  for (int pos = 0; pos < gold.positions; ++pos) {
    if (!kLong && std::find(short_positions.begin(), short_positions.end(), pos) == short_positions.end()) continue;
    ++k.positions;
    for (int l = 0; l < ck.config().n_layers; ++l) {
      std::vector<float> x = gold.at(K::x_att_res, pos, l);
      const std::vector<float>& want = gold.at(K::x_ffn_res, pos, l);
      k.xs.push_back(x);
      run_c_ffn(ck, l, x);  // the C reference of the random cases reproduces the record
      EXPECT_EQ(x, want) << "pos " << pos << " layer " << l;
      k.expect.push_back(want);
      k.layers.push_back(l);
    }
  }
  return k;
}

// x in stories260K's range (docs/trace-ranges.md, x_att_res: binades -24..3), a random
// top binade per case, 1/16 zeros.
std::vector<float> random_x(std::mt19937_64& rng, int dim) {
  const int top = -2 + static_cast<int>(rng() % 6);  // -2..3
  std::vector<float> x(static_cast<size_t>(dim));
  for (auto& v : x) v = (rng() % 16) ? rand_float(rng, std::max(-24, top - 1 - static_cast<int>(rng() % 20)), top) : 0.0f;
  return x;
}

// Random x with fixed seeds (seed 1000 + layer, plus `seed`), per_layer cases of every
// layer, with run.c's x after the FFN.
Cases random_cases(int64_t per_layer, uint64_t seed) {
  const auto& ck = unit_testing::stories260k();
  Cases k;
  for (int l = 0; l < ck.config().n_layers; ++l) {
    std::mt19937_64 rng(seed + 1000 + static_cast<uint64_t>(l));
    for (int64_t c = 0; c < per_layer; ++c) {
      std::vector<float> x = random_x(rng, ck.config().dim);
      k.xs.push_back(x);
      run_c_ffn(ck, l, x);
      k.expect.push_back(x);
      k.layers.push_back(l);
    }
  }
  return k;
}

// The whole block's cases, run through it in ONE pass (emitting its ~350 wide layers is
// what costs, ~45 s in Release on the shared machine, not the cases): row 0 idle (flags 0,
// x = 0, checked after every layer), row 1 an active case (layer 0), then the golden
// records, then the random cases. Tests (a), (b), (c) read their parts.
struct WholeRun {
  Cases golden, random;
  std::vector<float> active_want;  // run.c's x after the FFN for row 1
  ChunkedRun run;
  std::vector<std::vector<float>> x_out;  // per row
};
const WholeRun& stories_whole_run() {
  static const std::unique_ptr<WholeRun> w = [] {
    const auto& ck = unit_testing::stories260k();
    const int n_layers = ck.config().n_layers;
    auto r = std::make_unique<WholeRun>();
    r->golden = golden_cases({5, 53});
    r->random = random_cases(kLong ? 200 : 2, 0);
    std::mt19937_64 rng(77);
    const std::vector<float> x = random_x(rng, ck.config().dim);
    r->active_want = x;
    run_c_ffn(ck, 0, r->active_want);
    std::vector<std::vector<float>> xs{std::vector<float>(x.size(), 0.0f), x};
    std::vector<int> layers{-1, 0};
    for (const Cases* k : {&r->golden, &r->random}) {
      xs.insert(xs.end(), k->xs.begin(), k->xs.end());
      layers.insert(layers.end(), k->layers.begin(), k->layers.end());
    }
    r->run = run_chunked(stories_block(), case_rows(n_layers, xs, layers), 1, 1);  // one layer per chunk
    r->x_out = outputs_of(stories_block(), r->run);
    return r;
  }();
  return *w;
}

// Compares rows [first, first + k.xs.size()) of the whole run with k's expectations.
Checked check_whole(const Cases& k, size_t first) {
  const WholeRun& w = stories_whole_run();
  const auto begin = w.x_out.begin() + static_cast<std::ptrdiff_t>(first);
  Checked c = compare({begin, begin + static_cast<std::ptrdiff_t>(k.xs.size())}, k.layers, k.expect);
  c.ms_per_forward = 1000.0 * w.run.engine_seconds / static_cast<double>(w.x_out.size());
  c.cpu_ms_per_forward = 1000.0 * w.run.engine_cpu_seconds / static_cast<double>(w.x_out.size());
  return c;
}

// (a) Every layer at many positions of the greedy story: x_att_res -> x_ffn_res.
TEST(FfnBlockGolden, EveryLayerMatchesTheStory) {
  const auto& ck = unit_testing::stories260k();
  const Cases& g = stories_whole_run().golden;
  const Checked k = check_whole(g, 2);
  EXPECT_EQ(k.cases, static_cast<int64_t>(g.xs.size()));
  EXPECT_EQ(k.mismatches, 0) << k.first;
  std::printf("ffn block golden: %lld records (%d positions x %d layers), 0 expected mismatches, got %lld; engine %.1f ms (CPU %.1f ms) "
              "per block forward\n",
              static_cast<long long>(k.cases), g.positions, ck.config().n_layers, static_cast<long long>(k.mismatches),
              k.ms_per_forward, k.cpu_ms_per_forward);
}

// (a') The same records through the split FFN: every SWIGLU chunk, then the out block.
TEST(FfnSplitGolden, ChunksThenOutMatchTheStory) {
  const auto& ck = unit_testing::stories260k();
  const Cases g = golden_cases({29});
  const Checked k = check_split_cases(stories_split(), ck.config().dim, ck.config().n_layers, g.xs, g.layers, g.expect);
  EXPECT_EQ(k.cases, static_cast<int64_t>(g.xs.size()));
  EXPECT_EQ(k.mismatches, 0) << k.first;
  std::printf("ffn split golden: %lld records (%d positions x %d layers) through %zu chunks of %d lanes + the out block, "
              "%lld mismatches\n",
              static_cast<long long>(k.cases), g.positions, ck.config().n_layers, stories_split().chunks.size(), kChunkLanes,
              static_cast<long long>(k.mismatches));
}

// (b) Random x with fixed seeds, every layer.
TEST(FfnBlockRandom, EveryLayerMatchesRunC) {
  const WholeRun& w = stories_whole_run();
  const Checked k = check_whole(w.random, 2 + w.golden.xs.size());
  EXPECT_EQ(k.cases, (kLong ? 200 : 2) * unit_testing::stories260k().config().n_layers);
  EXPECT_EQ(k.mismatches, 0) << k.first;
  std::printf("ffn block random: %lld cases, %lld mismatches; engine %.1f ms (CPU %.1f ms) per block forward\n",
              static_cast<long long>(k.cases), static_cast<long long>(k.mismatches), k.ms_per_forward, k.cpu_ms_per_forward);
}

// (b') Random x through the split FFN (other seeds).
TEST(FfnSplitRandom, ChunksThenOutMatchRunC) {
  const auto& cfg = unit_testing::stories260k().config();
  const int64_t per_layer = kLong ? 200 : 2;
  const Cases r = random_cases(per_layer, 500);
  const Checked k = check_split_cases(stories_split(), cfg.dim, cfg.n_layers, r.xs, r.layers, r.expect);
  EXPECT_EQ(k.cases, per_layer * cfg.n_layers);
  EXPECT_EQ(k.mismatches, 0) << k.first;
  std::printf("ffn split random: %lld cases, %lld mismatches\n", static_cast<long long>(k.cases),
              static_cast<long long>(k.mismatches));
}

// (c') Idle through the split FFN: flags 0 and x = 0 leave every non-rail dim at +-0
// after every layer of every chunk and of the out block; an active case beside it
// (layer 2) comes out as C's x.
TEST(FfnSplit, IdleWritesOnlyZeros) {
  const auto& ck = unit_testing::stories260k();
  const auto& cfg = ck.config();
  std::mt19937_64 rng(78);
  const std::vector<float> x = random_x(rng, cfg.dim);
  std::vector<float> want = x;
  run_c_ffn(ck, 2, want);
  const auto rows = case_rows(cfg.n_layers, {std::vector<float>(static_cast<size_t>(cfg.dim), 0.0f), x}, {-1, 2});
  const SplitRun r = run_split(stories_split(), cfg.dim, rows, 1);
  EXPECT_EQ(r.idle_nonzero, "");
  EXPECT_EQ(compare({r.x_out[0]}, {-1}, {std::vector<float>(want.size(), 0.0f)}).mismatches, 0);
  const Checked k = compare({r.x_out[1]}, {2}, {want});
  EXPECT_EQ(k.mismatches, 0) << k.first;
  std::printf("ffn split idle: %lld micro-ops checked after every layer\n", static_cast<long long>(r.micro_ops));
}

// (d') The split's compiled shapes under the v1 width budget, for chunks of 4, 8 and 16
// lanes and the out block: the chosen chunk size and the out block must fit H <= 1,024
// live values (+ rails) and I <= 1,024 neurons per MLP sublayer.
TEST(FfnSplit, CompiledShapeFitsTheWidthBudget) {
  const auto& ck = unit_testing::stories260k();
  auto shape = [](const char* what, const Block& b) {
    const auto& a = b.plan.allocation;
    std::printf("ffn split %s: sublayers %lld, host layers %lld, hidden %lld (%zu rails), intermediate %lld\n", what,
                static_cast<long long>(b.plan.schedule.num_sublayers), static_cast<long long>(a.num_layers),
                static_cast<long long>(a.hidden_size), a.rail_dims.size(), static_cast<long long>(a.intermediate_size));
  };
  for (int lanes : {4, 8, 16}) {
    const auto b = build_chunk(ck, 0, lanes);
    shape(("chunk of " + std::to_string(lanes) + " lanes").c_str(), *b);
  }
  const SplitFfn& s = stories_split();
  for (const auto& chunk : s.chunks) {  // the same shape for every full chunk
    const auto& a = chunk->plan.allocation;
    EXPECT_LE(a.hidden_size - static_cast<int64_t>(a.rail_dims.size()), kBudgetHidden);
    EXPECT_LE(a.intermediate_size, kBudgetNeurons);
  }
  shape(("chunk of " + std::to_string(kChunkLanes) + " lanes").c_str(), *s.chunks.front());
  shape("out block", *s.out);
  const auto& a = s.out->plan.allocation;
  EXPECT_LE(a.hidden_size - static_cast<int64_t>(a.rail_dims.size()), kBudgetHidden);
  EXPECT_LE(a.intermediate_size, kBudgetNeurons);
}

// ---- The chunk unit (ffn_chunk_unit): SWIGLU(l, c) for every layer and chunk in ONE
// compiled unit, chosen by the flags. A case row: x, the layer flags (l one-hot), the
// chunk flags (l * chunks + c one-hot); all zero for the idle row.

// chunks = ceil(hidden_dim / lanes), counted here from the header (not read from the unit).
int chunks_of(const reference::Llama2Config& cfg, int lanes) { return (cfg.hidden_dim + lanes - 1) / lanes; }

// Inputs x, the layer flags, the chunk flags; outputs the unit's `lanes` products.
// Planned with the width budget's limits, as the machine compiles it.
std::unique_ptr<Block> build_chunk_unit(const reference::Llama2Checkpoint& ck, int lanes) {
  const auto& cfg = ck.config();
  auto b = start_block(ck);
  b->chunk_flags = b->program.values("chunk", cfg.n_layers * chunks_of(cfg, lanes));
  b->inputs.insert(b->inputs.end(), b->chunk_flags.begin(), b->chunk_flags.end());
  b->unit = ffn_chunk_unit(b->program, ck, b->x, b->flags, b->chunk_flags, lanes);
  b->outputs = b->unit.prod;
  plan_block(*b, budget_limits());
  return b;
}

const Block& stories_chunk_unit() {
  static const std::unique_ptr<Block> b = build_chunk_unit(unit_testing::stories260k(), kChunkLanes);
  return *b;
}

// The unit's cases: per row, the products expected in its lanes (C's hb[c * lanes + k],
// +0 past hidden_dim: the padded lanes) and the tag l * chunks + c (-1: idle).
struct UnitCases {
  std::vector<std::vector<float>> rows, want;
  std::vector<int> tags;
  int64_t padded_lanes = 0;  // lanes past hidden_dim among the rows
};

void add_idle_row(UnitCases& k, int inputs, int lanes) {
  k.rows.push_back(std::vector<float>(static_cast<size_t>(inputs), 0.0f));
  k.want.push_back(std::vector<float>(static_cast<size_t>(lanes), 0.0f));
  k.tags.push_back(-1);
}

// x with layer l through every chunk c; prod: C's hidden_dim products for (x, l).
void add_every_chunk(UnitCases& k, const reference::Llama2Config& cfg, int lanes, const std::vector<float>& x, int l,
                     const std::vector<float>& prod) {
  const int chunks = chunks_of(cfg, lanes);
  for (int c = 0; c < chunks; ++c) {
    std::vector<float> row = x;
    for (int f = 0; f < cfg.n_layers; ++f) row.push_back(f == l ? 1.0f : 0.0f);
    for (int f = 0; f < cfg.n_layers * chunks; ++f) row.push_back(f == l * chunks + c ? 1.0f : 0.0f);
    std::vector<float> want;
    for (int i = c * lanes; i < (c + 1) * lanes; ++i) {
      want.push_back(i < cfg.hidden_dim ? prod[static_cast<size_t>(i)] : 0.0f);
      if (i >= cfg.hidden_dim) ++k.padded_lanes;
    }
    k.rows.push_back(std::move(row));
    k.want.push_back(std::move(want));
    k.tags.push_back(l * chunks + c);
  }
}

void append_cases(UnitCases& to, const UnitCases& from) {
  to.rows.insert(to.rows.end(), from.rows.begin(), from.rows.end());
  to.want.insert(to.want.end(), from.want.begin(), from.want.end());
  to.tags.insert(to.tags.end(), from.tags.begin(), from.tags.end());
  to.padded_lanes += from.padded_lanes;
}

// The golden records x_att_res (pos, l) through every chunk c, expecting the trace's
// ffn_prod (pos, l) lanes (the test's C products reproduce each record first).
UnitCases golden_unit_cases(const std::vector<int>& positions, int lanes) {
  const auto& ck = unit_testing::stories260k();
  const auto& gold = unit_testing::golden();
  UnitCases k;
  for (int pos : positions)
    for (int l = 0; l < ck.config().n_layers; ++l) {
      const std::vector<float>& x = gold.at(K::x_att_res, pos, l);
      const std::vector<float>& prod = gold.at(K::ffn_prod, pos, l);
      EXPECT_EQ(run_c_products(ck, l, x), prod) << "pos " << pos << " layer " << l;
      add_every_chunk(k, ck.config(), lanes, x, l, prod);
    }
  return k;
}

std::vector<int> unit_golden_positions() {
  std::vector<int> p;
  if (!kLong) return {5, 53};
  for (int pos = 0; pos < unit_testing::golden().positions; ++pos) p.push_back(pos);
  return p;
}

// Checks rows [first, first + k.rows.size()) of `got` against k.
Checked check_unit_rows(const std::vector<std::vector<float>>& got, size_t first, const UnitCases& k) {
  const auto begin = got.begin() + static_cast<std::ptrdiff_t>(first);
  return compare({begin, begin + static_cast<std::ptrdiff_t>(k.rows.size())}, k.tags, k.want, "prod",
                 "chunk flag l * chunks + c =");
}

// One engine pass of the stories unit (its ~300 layers' emission is what costs): row 0
// idle (checked after every layer), then the golden cases, then random x (seeds 2000 + l)
// through every chunk of their layer.
struct UnitWholeRun {
  UnitCases idle, golden, random;
  ChunkedRun run;
  std::vector<std::vector<float>> prod;  // per row
};
const UnitWholeRun& stories_unit_run() {
  static const std::unique_ptr<UnitWholeRun> w = [] {
    const auto& ck = unit_testing::stories260k();
    const auto& cfg = ck.config();
    const Block& b = stories_chunk_unit();
    auto r = std::make_unique<UnitWholeRun>();
    add_idle_row(r->idle, static_cast<int>(b.inputs.size()), kChunkLanes);
    r->golden = golden_unit_cases(unit_golden_positions(), kChunkLanes);
    for (int l = 0; l < cfg.n_layers; ++l) {
      std::mt19937_64 rng(2000 + static_cast<uint64_t>(l));
      for (int i = 0; i < (kLong ? 20 : 1); ++i) {
        const std::vector<float> x = random_x(rng, cfg.dim);
        add_every_chunk(r->random, cfg, kChunkLanes, x, l, run_c_products(ck, l, x));
      }
    }
    UnitCases all = r->idle;
    append_cases(all, r->golden);
    append_cases(all, r->random);
    r->run = run_chunked(b, all.rows, 1, 1);  // one layer per chunk: the idle row after every layer
    r->prod = outputs_of(b, r->run);
    return r;
  }();
  return *w;
}

// (e) Every layer l and every chunk c of the greedy story's records, all n_layers x
// chunks combinations per position: the unit's lanes hold C's products of hidden indices
// c * lanes + k (the trace's ffn_prod), the last chunk's padded lanes +0.
TEST(FfnChunkUnitGolden, EveryLayerAndChunkMatchesTheStory) {
  const auto& cfg = unit_testing::stories260k().config();
  const Block& b = stories_chunk_unit();
  const int chunks = chunks_of(cfg, kChunkLanes);
  EXPECT_EQ(b.unit.chunks, chunks);
  ASSERT_EQ(b.unit.prod.size(), static_cast<size_t>(kChunkLanes));
  const UnitWholeRun& w = stories_unit_run();
  const std::vector<int> positions = unit_golden_positions();
  const Checked k = check_unit_rows(w.prod, 1, w.golden);
  EXPECT_EQ(k.cases, static_cast<int64_t>(positions.size()) * cfg.n_layers * chunks);
  EXPECT_EQ(k.mismatches, 0) << k.first;
  // stories260K's 172 lanes in chunks of 7 leave 3 padded lanes in each last chunk.
  EXPECT_EQ(w.golden.padded_lanes, static_cast<int64_t>(positions.size()) * cfg.n_layers *
                                       (static_cast<int64_t>(chunks) * kChunkLanes - cfg.hidden_dim));
  EXPECT_GT(w.golden.padded_lanes, 0);
  std::printf("ffn chunk unit golden: %lld cases (%zu positions x %d layers x %d chunks of %d lanes, %lld padded lanes), "
              "%lld mismatches; engine %.1f ms (CPU %.1f ms) per forward\n",
              static_cast<long long>(k.cases), positions.size(), cfg.n_layers, chunks, kChunkLanes,
              static_cast<long long>(w.golden.padded_lanes), static_cast<long long>(k.mismatches),
              1000.0 * w.run.engine_seconds / static_cast<double>(w.prod.size()),
              1000.0 * w.run.engine_cpu_seconds / static_cast<double>(w.prod.size()));
}

// (e') Random x (fixed seeds) of every layer through every chunk.
TEST(FfnChunkUnitRandom, EveryLayerAndChunkMatchesRunC) {
  const auto& cfg = unit_testing::stories260k().config();
  const UnitWholeRun& w = stories_unit_run();
  const Checked k = check_unit_rows(w.prod, 1 + w.golden.rows.size(), w.random);
  EXPECT_EQ(k.cases, (kLong ? 20 : 1) * cfg.n_layers * chunks_of(cfg, kChunkLanes));
  EXPECT_EQ(k.mismatches, 0) << k.first;
  std::printf("ffn chunk unit random: %lld cases, %lld mismatches\n", static_cast<long long>(k.cases),
              static_cast<long long>(k.mismatches));
}

// (e'') Idle: every flag 0 and x = 0 leave every non-rail dim +-0 after every layer.
TEST(FfnChunkUnit, IdleWritesOnlyZeros) {
  const UnitWholeRun& w = stories_unit_run();
  EXPECT_EQ(w.run.idle_nonzero, "");
  const Checked k = check_unit_rows(w.prod, 0, w.idle);
  EXPECT_EQ(k.mismatches, 0) << k.first;
  std::printf("ffn chunk unit idle: %lld layers checked\n", static_cast<long long>(w.run.chunks));
}


// (e''') The unit under HostSim (a fresh random summation order in every dot product,
// ~100x the engine's time): the idle row and the golden records of position 17 of every
// layer through its first, middle and last chunk (padded lanes); long: every chunk.
TEST(FfnChunkUnitHostSim, EveryLayerMatchesTheStory) {
  const auto& cfg = unit_testing::stories260k().config();
  const Block& b = stories_chunk_unit();
  const int chunks = chunks_of(cfg, kChunkLanes);
  const UnitCases every = golden_unit_cases({17}, kChunkLanes);  // rows l * chunks + c
  UnitCases k;
  add_idle_row(k, static_cast<int>(b.inputs.size()), kChunkLanes);
  for (size_t r = 0; r < every.rows.size(); ++r) {
    const int c = every.tags[r] % chunks;
    if (!kLong && c != 0 && c != chunks / 2 && c != chunks - 1) continue;
    k.rows.push_back(every.rows[r]);
    k.want.push_back(every.want[r]);
    k.tags.push_back(every.tags[r]);
  }
  const ChunkedRun run = run_chunked(b, k.rows, 1, 1, host_sim(31));
  EXPECT_EQ(run.idle_nonzero, "");
  const Checked got = check_unit_rows(outputs_of(b, run), 0, k);
  EXPECT_EQ(got.cases, 1 + cfg.n_layers * (kLong ? chunks : 3));
  EXPECT_EQ(got.mismatches, 0) << got.first;
  std::printf("ffn chunk unit HostSim: %lld cases (1 idle), %lld mismatches, %lld layers\n",
              static_cast<long long>(got.cases), static_cast<long long>(got.mismatches),
              static_cast<long long>(run.chunks));
}

// (f) The unit's compiled shape under the v1 width budget (the plan the engine tests
// run), against the fixed chunk of as many lanes (ffn_chunk_block). The unit adds
// n_layers x chunks flag inputs, which live through the whole program as every
// interface input does by default (compiler/clear_dead.h; not with clear_inputs, the
// last check below) and so sit beside the SwiGLU lanes at the
// peak: hidden grows by at most those flags rounded up to whole 63-value groups (each 64
// dims holds 63 values and a rail), the intermediate size not at all (the matvec's
// column ops, 3 x n_layers x chunks neurons per step, fit beside the rest). At 7 lanes
// that is 125 flags: hidden 1,152 (18 rails), over the budget; kUnitBudgetLanes fits.
// (6 lanes fitted until `greater` snapped its scales onto a preloaded 2^16: its five scale
// values now live two sublayers longer, and 6 lanes need 1,071 live dims.)
constexpr int kUnitBudgetLanes = 5;
TEST(FfnChunkUnit, CompiledShapeFitsTheWidthBudget) {
  const auto& ck = unit_testing::stories260k();
  const auto& cfg = ck.config();
  auto live = [](const Block& b) {
    return b.plan.allocation.hidden_size - static_cast<int64_t>(b.plan.allocation.rail_dims.size());
  };
  for (int lanes : {4, 5, kUnitBudgetLanes, kChunkLanes, 8}) {
    const auto owned = lanes == kChunkLanes ? nullptr : build_chunk_unit(ck, lanes);
    const Block& u = lanes == kChunkLanes ? stories_chunk_unit() : *owned;
    const auto fixed = build_chunk(ck, 0, lanes);
    const auto& a = u.plan.allocation;
    const int64_t flags = static_cast<int64_t>(cfg.n_layers) * chunks_of(cfg, lanes);
    const bool fits = live(u) <= kBudgetHidden && a.intermediate_size <= kBudgetNeurons;
    std::printf("ffn chunk unit, %d lanes (%d layers x %d chunks): sublayers %lld, host layers %lld, hidden %lld (%zu rails), "
                "intermediate %lld%s; fixed chunk: hidden %lld, intermediate %lld\n",
                lanes, cfg.n_layers, chunks_of(cfg, lanes), static_cast<long long>(u.plan.schedule.num_sublayers),
                static_cast<long long>(a.num_layers), static_cast<long long>(a.hidden_size), a.rail_dims.size(),
                static_cast<long long>(a.intermediate_size), fits ? "" : " -- over the budget",
                static_cast<long long>(fixed->plan.allocation.hidden_size),
                static_cast<long long>(fixed->plan.allocation.intermediate_size));
    EXPECT_EQ(u.inputs.size(), static_cast<size_t>(cfg.dim + cfg.n_layers + flags));
    EXPECT_LE(live(u) - live(*fixed), 63 * ((flags + 62) / 63)) << lanes << " lanes";
    EXPECT_GE(live(u), live(*fixed)) << lanes << " lanes";
    EXPECT_EQ(a.intermediate_size, fixed->plan.allocation.intermediate_size) << lanes << " lanes";
    EXPECT_EQ(u.plan.schedule.num_sublayers, fixed->plan.schedule.num_sublayers) << lanes << " lanes";
    if (lanes == kUnitBudgetLanes) {
      EXPECT_LE(live(u), kBudgetHidden);
      EXPECT_LE(a.intermediate_size, kBudgetNeurons);
    }
  }
  // The same unit with compiler::DeadClearOptions::clear_inputs: x and the flags give
  // their dims back after their last read (the same ops in the same sublayers).
  const Block& u = stories_chunk_unit();
  compiler::Interface io;
  io.inputs = u.inputs;
  io.outputs = u.outputs;
  io.vocab_size = static_cast<int64_t>(io.outputs.size());
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * io.inputs.size(), 0.0f);
  compiler::DeadClearOptions clear_inputs;
  clear_inputs.clear_inputs = true;
  const compiler::ReusePlan cleared = compiler::plan_dim_reuse(u.program, io, budget_limits(), clear_inputs);
  const auto& c = cleared.allocation;
  std::printf("ffn chunk unit, %d lanes, clear_inputs: hidden %lld (%zu rails), was %lld; intermediate %lld, sublayers %lld\n",
              kChunkLanes, static_cast<long long>(c.hidden_size), c.rail_dims.size(),
              static_cast<long long>(u.plan.allocation.hidden_size), static_cast<long long>(c.intermediate_size),
              static_cast<long long>(cleared.schedule.num_sublayers));
  EXPECT_LT(c.hidden_size, u.plan.allocation.hidden_size);
  EXPECT_EQ(c.intermediate_size, u.plan.allocation.intermediate_size);
  EXPECT_EQ(cleared.schedule.num_sublayers, u.plan.schedule.num_sublayers);
}

// (e'''') The unit with the lanes that fit the budget, on the engine: the golden records
// of position 29, every layer through every chunk (the last one padded), and the idle row.
TEST(FfnChunkUnitGolden, BudgetLanesMatchTheStory) {
  const auto& ck = unit_testing::stories260k();
  const auto& cfg = ck.config();
  const auto b = build_chunk_unit(ck, kUnitBudgetLanes);
  UnitCases k;
  add_idle_row(k, static_cast<int>(b->inputs.size()), kUnitBudgetLanes);
  append_cases(k, golden_unit_cases({29}, kUnitBudgetLanes));
  EXPECT_GT(k.padded_lanes, 0);
  const ChunkedRun run = run_chunked(*b, k.rows, 1, 1);
  EXPECT_EQ(run.idle_nonzero, "");
  const Checked got = check_unit_rows(outputs_of(*b, run), 0, k);
  EXPECT_EQ(got.cases, 1 + cfg.n_layers * chunks_of(cfg, kUnitBudgetLanes));
  EXPECT_EQ(got.mismatches, 0) << got.first;
  std::printf("ffn chunk unit, %d lanes: %lld cases (1 idle), %lld mismatches\n", kUnitBudgetLanes,
              static_cast<long long>(got.cases), static_cast<long long>(got.mismatches));
}

// (c) Idle: every flag 0 and x = 0 leave every non-rail dim of the residual stream at
// +-0 after every layer (so every value the block owns, dims being shared).
// The same run carries an active case (layer 0), which must come out as C's x.
TEST(FfnBlock, IdleWritesOnlyZeros) {
  const WholeRun& w = stories_whole_run();
  EXPECT_EQ(w.run.idle_nonzero, "");
  const Checked idle = compare({w.x_out[0]}, {-1}, {std::vector<float>(w.active_want.size(), 0.0f)});
  EXPECT_EQ(idle.mismatches, 0) << idle.first;
  const Checked active = compare({w.x_out[1]}, {0}, {w.active_want});
  EXPECT_EQ(active.mismatches, 0) << active.first;
  std::printf("ffn block idle: %lld layers checked (largest chunk hidden %lld)\n", static_cast<long long>(w.run.chunks),
              static_cast<long long>(w.run.max_chunk_hidden));
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
// x, every layer; the whole block, then the split FFN (chunks of 2 lanes: the last one
// shorter).
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
  const reference::Llama2Checkpoint ck = random_checkpoint(cfg, rng, {&reference::Llama2Layout::rms_ffn});
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

  const auto split = build_split(ck, 2);
  ASSERT_EQ(split->chunks.size(), static_cast<size_t>((cfg.hidden_dim + 1) / 2));
  const Checked s = check_split_cases(*split, cfg.dim, cfg.n_layers, xs, layers, expect);
  EXPECT_EQ(s.mismatches, 0) << s.first;
  EXPECT_EQ(s.cases, static_cast<int64_t>(xs.size()));
  EXPECT_EQ(run_split(*split, cfg.dim, {idle}, 1).idle_nonzero, "");

  // The chunk unit, 2 lanes (the last chunk padded when hidden_dim is odd): every case
  // through every chunk of its layer, then the idle row checked after every layer.
  const auto unit = build_chunk_unit(ck, 2);
  const int chunks = chunks_of(cfg, 2);
  EXPECT_EQ(unit->unit.chunks, chunks);
  UnitCases u;
  add_idle_row(u, static_cast<int>(unit->inputs.size()), 2);
  for (size_t c = 0; c < xs.size(); ++c) add_every_chunk(u, cfg, 2, xs[c], layers[c], run_c_products(ck, layers[c], xs[c]));
  EXPECT_EQ(u.padded_lanes, static_cast<int64_t>(xs.size()) * (2 * chunks - cfg.hidden_dim));
  const ChunkedRun run = run_chunked(*unit, u.rows, 1, 1);
  EXPECT_EQ(run.idle_nonzero, "");
  const Checked uc = check_unit_rows(outputs_of(*unit, run), 0, u);
  EXPECT_EQ(uc.cases, 1 + static_cast<int64_t>(xs.size()) * chunks);
  EXPECT_EQ(uc.mismatches, 0) << uc.first;
}

TEST(FfnBlock, RejectsWrongSizes) {
  const auto& ck = unit_testing::stories260k();
  compiler::Program p;
  const auto x = p.values("x", ck.config().dim);
  const auto f = p.values("f", ck.config().n_layers);
  EXPECT_THROW(ffn_block(p, ck, std::vector<ValueId>(x.begin(), x.end() - 1), f), Error);
  EXPECT_THROW(ffn_block(p, ck, x, std::vector<ValueId>(f.begin(), f.end() - 1)), Error);
  const int hidden = ck.config().hidden_dim;
  EXPECT_THROW(ffn_chunk_block(p, ck, std::vector<ValueId>(x.begin(), x.end() - 1), f, 0, 8), Error);
  EXPECT_THROW(ffn_chunk_block(p, ck, x, std::vector<ValueId>(f.begin(), f.end() - 1), 0, 8), Error);
  EXPECT_THROW(ffn_chunk_block(p, ck, x, f, -1, 8), Error);
  EXPECT_THROW(ffn_chunk_block(p, ck, x, f, 0, 0), Error);
  EXPECT_THROW(ffn_chunk_block(p, ck, x, f, hidden - 7, 8), Error);
  const auto prod = p.values("prod", hidden);
  EXPECT_THROW(ffn_out_block(p, ck, x, std::vector<ValueId>(prod.begin(), prod.end() - 1), f), Error);
  EXPECT_THROW(ffn_out_block(p, ck, std::vector<ValueId>(x.begin(), x.end() - 1), prod, f), Error);
  EXPECT_THROW(ffn_out_block(p, ck, x, prod, std::vector<ValueId>(f.begin(), f.end() - 1)), Error);
  // The attention's output step (wo): xb of dim values.
  EXPECT_THROW(attention_out_block(p, ck, x, std::vector<ValueId>(x.begin(), x.end() - 1), f), Error);
  EXPECT_THROW(attention_out_block(p, ck, x, prod, f), Error);
  EXPECT_THROW(attention_out_block(p, ck, x, x, std::vector<ValueId>(f.begin(), f.end() - 1)), Error);
  // The chunk unit: chunk flags for n_layers x ceil(hidden_dim / lanes), lanes in [1, hidden_dim].
  const int chunks = chunks_of(ck.config(), 7);
  const auto g = p.values("g", ck.config().n_layers * chunks);
  EXPECT_THROW(ffn_chunk_unit(p, ck, x, f, std::vector<ValueId>(g.begin(), g.end() - 1), 7), Error);
  EXPECT_THROW(ffn_chunk_unit(p, ck, x, f, p.values("g2", ck.config().n_layers * chunks + 1), 7), Error);
  EXPECT_THROW(ffn_chunk_unit(p, ck, x, f, g, 8), Error);  // 22 chunks of 8: the flags are for 7
  EXPECT_THROW(ffn_chunk_unit(p, ck, x, f, std::vector<ValueId>(f.begin(), f.end() - 1), 7), Error);
  EXPECT_THROW(ffn_chunk_unit(p, ck, x, std::vector<ValueId>(f.begin(), f.end() - 1), g, 7), Error);
  EXPECT_THROW(ffn_chunk_unit(p, ck, std::vector<ValueId>(x.begin(), x.end() - 1), f, g, 7), Error);
  EXPECT_THROW(ffn_chunk_unit(p, ck, x, f, g, 0), Error);
  EXPECT_THROW(ffn_chunk_unit(p, ck, x, f, p.values("g3", ck.config().n_layers), hidden + 1), Error);
  try {
    ffn_chunk_unit(p, ck, x, f, std::vector<ValueId>(g.begin(), g.end() - 1), 7);
    ADD_FAILURE() << "no throw for the wrong chunk flag count";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chunk flags"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qpu::npu
