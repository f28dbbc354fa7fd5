// The QKV block (npu/block_qkv.h) against run.c's rmsnorm -> wq, wk, wv -> RoPE, bit for
// bit: q and k after RoPE and v for every layer of stories260K fed with the golden
// records of the greedy story (x_in at pos -> q_rope, k_rope, v), random x and positions
// with fixed seeds, a slice under HostSim's random summation orders, a small synthetic
// checkpoint (dimensions from its header only), the idle check, the compiled shape
// under the v1 width budget, and the argument checks.
//
// How it runs. The block is planned ONCE as the machine would compile it: dim reuse
// (compiler::plan_dim_reuse with the block's add_dead_clear_enables) under the width
// budget's limits (1,024 neurons per MLP sublayer, sink). Its hidden size is then small
// (<= 1,024 + rails) but it has ~150 host layers, so the tests do not emit one dense
// checkpoint (~0.8 GB of MLP weights): compiler::LayerEmitter builds the plan's layers
// a few at a time (the same bits as emit's layers), and the residual stream of every case is carried
// from one group of layers to the next through the token embedding (a forward is a
// function of the embedding row and the layers only: the block has no memory op, its
// mixers are idle; the rails are carried as they are).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/clear_dead.h"
#include "compiler/emit.h"
#include "compiler/host_sim.h"
#include "compiler/schedule.h"
#include "npu/block_qkv.h"
#include "npu/engine_host.h"
#include "npu/unit_rope.h"
#include "reference/run_c_ops.h"
#include "unit_harness.h"

namespace qpu::npu {
namespace {

using compiler::ValueId;
using unit_testing::rand_float;
using unit_testing::random_checkpoint;
using unit_testing::budget_limits;
using unit_testing::kBudgetHidden;
using unit_testing::kBudgetNeurons;
using K = reference::TraceKind;

constexpr int64_t kCases = QPU_NPU_CASES;
constexpr bool kLong = kCases >= 100000;
// The greedy story's positions for the golden records (the longest trace the project
// keeps: shared/models/stories260K/greedy-once-upon-a-time-256.txt).
constexpr int kGoldenPositions = 256;

// run.c's QKV of layer l at pos: rmsnorm, the three matmuls, RoPE; returns q, k, v.
std::vector<float> run_c_qkv(const reference::Llama2Checkpoint& ck, int l, int pos, const std::vector<float>& x) {
  const auto& cfg = ck.config();
  const auto w = ck.weights();
  const auto dim = static_cast<size_t>(cfg.dim), kv_dim = static_cast<size_t>(cfg.kv_dim());
  const auto ul = static_cast<size_t>(l);
  std::vector<float> xb(dim), q(dim), k(kv_dim), v(kv_dim);
  reference::rmsnorm(xb, x, w.rms_att.subspan(ul * dim, dim));
  reference::matmul(q, xb, w.wq.subspan(ul * dim * dim, dim * dim), cfg.dim, cfg.dim);
  reference::matmul(k, xb, w.wk.subspan(ul * kv_dim * dim, kv_dim * dim), cfg.dim, cfg.kv_dim());
  reference::matmul(v, xb, w.wv.subspan(ul * kv_dim * dim, kv_dim * dim), cfg.dim, cfg.kv_dim());
  rope_reference(cfg, pos, q.data(), k.data());
  std::vector<float> out = q;
  out.insert(out.end(), k.begin(), k.end());
  out.insert(out.end(), v.begin(), v.end());
  return out;
}


// A block as planned: inputs x (dim), the layer flags, pos; outputs q, k (after RoPE), v.
struct Block {
  compiler::Program program;
  std::vector<ValueId> x, flags, inputs, outputs;
  ValueId pos = 0;
  QkvBlock qkv;
  compiler::ReusePlan plan;
};

std::unique_ptr<Block> build_block(const reference::Llama2Checkpoint& ck, const MatvecOptions& options = {},
                                   int row_blocks = kQkvRowBlocks, const compiler::ScheduleLimits& limits = budget_limits(),
                                   bool clear_enables = true) {
  auto b = std::make_unique<Block>();
  b->x = b->program.values("x", ck.config().dim);
  b->flags = b->program.values("layer", ck.config().n_layers);
  b->pos = b->program.value("pos");
  b->inputs = b->x;
  b->inputs.insert(b->inputs.end(), b->flags.begin(), b->flags.end());
  b->inputs.push_back(b->pos);
  b->qkv = qkv_block(b->program, ck, b->x, b->flags, b->pos, options, row_blocks);
  for (const auto* part : {&b->qkv.q, &b->qkv.k, &b->qkv.v}) b->outputs.insert(b->outputs.end(), part->begin(), part->end());
  compiler::Interface io;
  io.inputs = b->inputs;
  io.outputs = b->outputs;
  io.vocab_size = static_cast<int64_t>(io.outputs.size());
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * io.inputs.size(), 0.0f);
  compiler::DeadClearOptions clears;
  if (clear_enables) add_dead_clear_enables(b->qkv, clears);
  b->plan = compiler::plan_dim_reuse(b->program, io, limits, clears);
  return b;
}

// One case: the block's input row (x, flags, pos).
std::vector<float> case_row(int n_layers, const std::vector<float>& x, int layer, float pos) {
  std::vector<float> row = x;
  for (int l = 0; l < n_layers; ++l) row.push_back(l == layer ? 1.0f : 0.0f);
  row.push_back(pos);
  return row;
}

struct LayerRun {
  std::vector<std::vector<float>> out;  // per case: the block's outputs
  std::string idle_nonzero;             // the first nonzero owned dim of an idle case
  double seconds = 0;                   // forwards only, all groups, all cases: wall clock
  double cpu_seconds = 0;               // the same forwards: CPU time of the process
};

double cpu_now() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Runs every case through the planned block, `group` host layers per emission (see the
// file comment), on the engine or (sim) on HostSim with seed + case. After every group,
// every dim of cases [0, idle_cases) but the rails and the pos input must be +-0.
LayerRun run_layers(const Block& b, const std::vector<std::vector<float>>& cases, int64_t group, size_t idle_cases = 0,
                    bool sim = false, uint64_t seed = 1) {
  // One engine thread: the layers are small, and on the shared 2-core machine two
  // threads spend a forward in OpenMP barriers (block_ffn_test measured it). Same bits.
  omp_set_num_threads(1);
  const compiler::Allocation& alloc = b.plan.allocation;
  const int64_t H = alloc.hidden_size, L = alloc.num_layers;
  compiler::Interface io;
  io.inputs = b.inputs;
  io.outputs = b.outputs;
  io.vocab_size = std::max(static_cast<int64_t>(cases.size()), static_cast<int64_t>(b.outputs.size()));
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * io.inputs.size(), 0.0f);
  for (size_t c = 0; c < cases.size(); ++c)
    std::copy(cases[c].begin(), cases[c].end(), io.input_rows.begin() + static_cast<std::ptrdiff_t>(c * io.inputs.size()));
  const compiler::LayerEmitter emitter(b.plan.program, b.plan.schedule, alloc, io);
  io::Qwen35Weights w = emitter.globals();
  const io::Qwen35Config full = w.config;
  std::vector<std::vector<float>> hidden(cases.size());
  for (size_t c = 0; c < cases.size(); ++c)
    hidden[c].assign(w.embed_tokens.begin() + static_cast<std::ptrdiff_t>(c * static_cast<size_t>(H)),
                     w.embed_tokens.begin() + static_cast<std::ptrdiff_t>((c + 1) * static_cast<size_t>(H)));
  std::vector<bool> skip(static_cast<size_t>(H), false);  // rails and pos: not owned, may be nonzero when idle
  for (int64_t d : alloc.rail_dims) skip[static_cast<size_t>(d)] = true;
  skip[static_cast<size_t>(alloc.dim(b.pos))] = true;

  LayerRun r;
  std::vector<float> logits(static_cast<size_t>(io.vocab_size)), row(static_cast<size_t>(H));
  for (int64_t l0 = 0; l0 < L; l0 += group) {
    const int64_t l1 = std::min(L, l0 + group);
    w.layers.clear();
    for (int64_t l = l0; l < l1; ++l) w.layers.push_back(emitter.layer(l));
    w.config.num_hidden_layers = l1 - l0;
    w.config.layer_types.assign(full.layer_types.begin() + l0, full.layer_types.begin() + l1);
    for (size_t c = 0; c < cases.size(); ++c)
      std::copy(hidden[c].begin(), hidden[c].end(), w.embed_tokens.begin() + static_cast<std::ptrdiff_t>(c * static_cast<size_t>(H)));
    std::unique_ptr<compiler::HostSim> hs;
    Forward fwd;
    if (sim)
      hs = std::make_unique<compiler::HostSim>(w, seed + static_cast<uint64_t>(l0));
    else
      fwd = engine_host()(w);
    for (size_t c = 0; c < cases.size(); ++c) {
      const auto t0 = std::chrono::steady_clock::now();
      const double cpu0 = cpu_now();
      if (sim)
        hs->forward(static_cast<int64_t>(c), logits, row);
      else
        fwd(static_cast<int64_t>(c), row);
      r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      r.cpu_seconds += cpu_now() - cpu0;
      hidden[c] = row;
    }
    for (size_t c = 0; c < idle_cases && r.idle_nonzero.empty(); ++c)
      for (int64_t d = 0; d < H; ++d)
        if (!skip[static_cast<size_t>(d)] && hidden[c][static_cast<size_t>(d)] != 0.0f) {
          r.idle_nonzero = "case " + std::to_string(c) + " dim " + std::to_string(d) + " = " +
                           describe_float(hidden[c][static_cast<size_t>(d)]) + " after layer " + std::to_string(l1);
          break;
        }
  }
  for (const auto& h : hidden) {
    std::vector<float> o;
    for (ValueId v : b.outputs) o.push_back(h[static_cast<size_t>(alloc.dim(v))]);
    r.out.push_back(std::move(o));
  }
  return r;
}

// Cases with run.c's q, k, v (expect) and a name per case for the first mismatch.
struct Cases {
  std::vector<std::vector<float>> rows, expect;
  std::vector<std::string> names;
  void add(const reference::Llama2Checkpoint& ck, const std::vector<float>& x, int layer, int pos, std::string name) {
    rows.push_back(case_row(ck.config().n_layers, x, layer, static_cast<float>(pos)));
    expect.push_back(run_c_qkv(ck, layer, pos, x));
    names.push_back(std::move(name));
  }
};

struct Checked {
  int64_t cases = 0, mismatches = 0;
  std::string first;
};

// Every output bit for bit equal to C's (the residual stream holds c + 0: -0 reads +0).
Checked compare(const Cases& k, const LayerRun& run) {
  Checked r;
  for (size_t c = 0; c < k.rows.size(); ++c) {
    ++r.cases;
    for (size_t i = 0; i < k.expect[c].size(); ++i) {
      const float want = 0.0f + k.expect[c][i];
      if (float_bits(run.out[c][i]) != float_bits(want)) {
        if (r.mismatches == 0)
          r.first = k.names[c] + " output " + std::to_string(i) + ": expected " + describe_float(want) + " got " +
                    describe_float(run.out[c][i]);
        ++r.mismatches;
        break;
      }
    }
  }
  return r;
}

const Block& stories_block() {
  static const std::unique_ptr<Block> b = build_block(unit_testing::stories260k());
  return *b;
}

// x in stories260K's range (docs/trace-ranges.md, x_in: binades -24..3 as x_att_res),
// a random top binade per case, 1/16 zeros.
std::vector<float> random_x(std::mt19937_64& rng, int dim) {
  const int top = -2 + static_cast<int>(rng() % 6);  // -2..3
  std::vector<float> x(static_cast<size_t>(dim));
  for (auto& v : x) v = (rng() % 16) ? rand_float(rng, std::max(-24, top - 1 - static_cast<int>(rng() % 20)), top) : 0.0f;
  return x;
}

// The golden records: x_in at (pos, layer) -> q_rope, k_rope, v, every layer, at the
// positions `positions` (all of them when empty). The test's C reproduces each record.
Cases golden_cases(const std::vector<int>& positions) {
  const auto& ck = unit_testing::stories260k();
  const auto& gold = unit_testing::golden(kGoldenPositions);
  EXPECT_EQ(gold.positions, kGoldenPositions);
  Cases k;
  for (int pos = 0; pos < gold.positions; ++pos) {
    if (!positions.empty() && std::find(positions.begin(), positions.end(), pos) == positions.end()) continue;
    for (int l = 0; l < ck.config().n_layers; ++l) {
      const std::vector<float>& x = gold.at(K::x_in, pos, l);
      std::vector<float> want = gold.at(K::q_rope, pos, l);
      for (K kind : {K::k_rope, K::v}) {
        const auto& r = gold.at(kind, pos, l);
        want.insert(want.end(), r.begin(), r.end());
      }
      k.add(ck, x, l, pos, "golden pos " + std::to_string(pos) + " layer " + std::to_string(l));
      EXPECT_EQ(k.expect.back(), want) << k.names.back();  // the C reference reproduces the record
    }
  }
  return k;
}

// (a) Every layer at many positions of the greedy story (long: all 256; short: 0, 1,
// 100 and the last, 255).
TEST(QkvBlockGolden, EveryLayerMatchesTheStory) {
  const Cases g = golden_cases(kLong ? std::vector<int>{} : std::vector<int>{0, 1, 100, kGoldenPositions - 1});
  const LayerRun run = run_layers(stories_block(), g.rows, 8);
  const Checked k = compare(g, run);
  EXPECT_EQ(k.cases, static_cast<int64_t>(g.rows.size()));
  EXPECT_EQ(k.mismatches, 0) << k.first;
  const auto n = static_cast<double>(std::max<size_t>(g.rows.size(), 1));
  std::printf("qkv block golden: %lld records, %lld mismatches; engine %.2f ms (CPU %.2f ms) per block forward\n",
              static_cast<long long>(k.cases), static_cast<long long>(k.mismatches), 1000.0 * run.seconds / n,
              1000.0 * run.cpu_seconds / n);
}

// (b) Random x with fixed seeds (1000 + layer), every layer, random positions in
// [0, seq_len) plus 0 and seq_len - 1 for every layer.
TEST(QkvBlockRandom, EveryLayerMatchesRunC) {
  const auto& ck = unit_testing::stories260k();
  const auto& cfg = ck.config();
  const int64_t per_layer = kLong ? 200 : 4;
  Cases k;
  for (int l = 0; l < cfg.n_layers; ++l) {
    std::mt19937_64 rng(1000 + static_cast<uint64_t>(l));
    for (int64_t c = 0; c < per_layer; ++c) {
      const int pos = c == 0 ? 0 : c == 1 ? cfg.seq_len - 1 : static_cast<int>(rng() % static_cast<uint64_t>(cfg.seq_len));
      k.add(ck, random_x(rng, cfg.dim), l, pos, "random layer " + std::to_string(l) + " case " + std::to_string(c));
    }
  }
  const Checked r = compare(k, run_layers(stories_block(), k.rows, 8));
  EXPECT_EQ(r.cases, per_layer * cfg.n_layers);
  EXPECT_EQ(r.mismatches, 0) << r.first;
  std::printf("qkv block random: %lld cases, %lld mismatches\n", static_cast<long long>(r.cases),
              static_cast<long long>(r.mismatches));
}

// (c) A slice under HostSim (random summation order of every sum, per layer group and
// case): the golden records of one position (long: five), every layer. ~1.5 s of CPU
// per record (HostSim sums every dot product of the ~830-wide layers in a random order).
TEST(QkvBlockSim, GoldenSliceMatchesUnderRandomSummationOrders) {
  const Cases g = golden_cases(kLong ? std::vector<int>{0, 3, 64, 128, kGoldenPositions - 1} : std::vector<int>{200});
  const LayerRun run = run_layers(stories_block(), g.rows, 8, 0, true, 31);
  const Checked k = compare(g, run);
  EXPECT_EQ(k.cases, static_cast<int64_t>(g.rows.size()));
  EXPECT_EQ(k.mismatches, 0) << k.first;
  std::printf("qkv block HostSim: %lld records, %lld mismatches (%.1f s, CPU %.1f s)\n", static_cast<long long>(k.cases),
              static_cast<long long>(k.mismatches), run.seconds, run.cpu_seconds);
}

// (d) Idle: every flag 0 and x = 0, with pos 0, 1, 300, seq_len - 1 and 4,096 (the
// block's contract: any position, block_qkv.h): every dim but the rails and pos is +-0
// after every host layer. An active case beside them (layer 3, pos 300) comes out as C's.
TEST(QkvBlock, IdleWritesOnlyZerosWhateverThePosition) {
  const auto& ck = unit_testing::stories260k();
  const auto& cfg = ck.config();
  const std::vector<float> zero(static_cast<size_t>(cfg.dim), 0.0f);
  std::vector<std::vector<float>> rows;
  for (int pos : {0, 1, 300, cfg.seq_len - 1, 4096}) rows.push_back(case_row(cfg.n_layers, zero, -1, static_cast<float>(pos)));
  const size_t idle = rows.size();
  std::mt19937_64 rng(78);
  Cases active;
  active.add(ck, random_x(rng, cfg.dim), 3, 300, "active layer 3 pos 300");
  rows.push_back(active.rows[0]);
  const LayerRun run = run_layers(stories_block(), rows, 1, idle);
  EXPECT_EQ(run.idle_nonzero, "");
  for (size_t c = 0; c < idle; ++c)
    for (float v : run.out[c]) EXPECT_EQ(float_bits(v), 0u) << "idle case " << c;
  LayerRun last;
  last.out = {run.out.back()};
  const Checked k = compare(active, last);
  EXPECT_EQ(k.mismatches, 0) << k.first;
  std::printf("qkv block idle: %zu idle cases checked after each of %lld host layers\n", idle,
              static_cast<long long>(stories_block().plan.allocation.num_layers));
}

// (e) The compiled shape under the width budget: 1 to 4 row blocks, with and without
// the matvec's lane groups (kBudgetMaxOpNeurons). The chosen form (kQkvRowBlocks,
// default options) must fit H <= 1,024 live values (+ rails) and I <= 1,024 neurons per
// MLP sublayer.
TEST(QkvBlock, CompiledShapeFitsTheWidthBudget) {
  const auto& ck = unit_testing::stories260k();
  auto shape = [](const std::string& what, const Block& b) {
    const auto& a = b.plan.allocation;
    std::printf("qkv block %s: sublayers %lld, host layers %lld, hidden %lld (%zu rails), intermediate %lld, critical path %lld\n",
                what.c_str(), static_cast<long long>(b.plan.schedule.num_sublayers), static_cast<long long>(a.num_layers),
                static_cast<long long>(a.hidden_size), a.rail_dims.size(), static_cast<long long>(a.intermediate_size),
                static_cast<long long>(compiler::critical_path(b.program)));
  };
  for (int blocks : {1, 2, 3, 4})
    for (int limit : {0, kBudgetMaxOpNeurons}) {
      if (blocks == kQkvRowBlocks && limit == 0) continue;  // stories_block(), below
      const auto b = build_block(ck, MatvecOptions{limit}, blocks);
      shape(std::to_string(blocks) + " row block(s), max_op_neurons " + std::to_string(limit), *b);
    }
  const auto plain = build_block(ck, {}, kQkvRowBlocks, budget_limits(), false);
  shape(std::to_string(kQkvRowBlocks) + " row blocks without add_dead_clear_enables", *plain);
  const Block& b = stories_block();
  shape(std::to_string(kQkvRowBlocks) + " row blocks (the chosen form)", b);
  const auto& a = b.plan.allocation;
  EXPECT_LE(a.hidden_size - static_cast<int64_t>(a.rail_dims.size()), kBudgetHidden);
  EXPECT_LE(a.intermediate_size, kBudgetNeurons);
  // The chain: rmsnorm (102 MLP sublayers), per row block a matvec of 1 + ceil((dim - 1)/3)
  // and (not the first) the ordering edge to the block before, which critical_path
  // counts as one step; RoPE's rotation after the last block.
  const auto& cfg = ck.config();
  const int64_t critical = compiler::critical_path(b.program);
  const int64_t chain = 102 + kQkvRowBlocks * (1 + (cfg.dim + 1) / 3) + (kQkvRowBlocks - 1) + 1;
  EXPECT_LE(critical, chain);
  EXPECT_GE(critical, chain - 2 * kQkvRowBlocks);
  EXPECT_GE(a.num_layers, critical);
}

// A synthetic checkpoint whose dims come only from its header: dim 6 (the rmsnorm's
// divide_const path), 3 heads of 2, 1 KV head (kv_dim 2: RoPE rotates k in the first
// pair only), seq_len 5, 3 layers; random weights, random x and positions, every layer,
// with 1 and 3 row blocks (3: 3, 3 and 4 rows), and the idle check after every layer.
TEST(QkvBlockSmall, SyntheticCheckpointMatchesRunC) {
  reference::Llama2Config cfg;
  cfg.dim = 6;
  cfg.hidden_dim = 4;
  cfg.n_layers = 3;
  cfg.n_heads = 3;
  cfg.n_kv_heads = 1;
  cfg.vocab_size = 8;
  cfg.seq_len = 5;
  std::mt19937_64 rng(707);
  const reference::Llama2Checkpoint ck = random_checkpoint(cfg, rng, {&reference::Llama2Layout::rms_att});
  for (int blocks : {1, 3}) {
    const auto b = build_block(ck, {}, blocks);
    Cases k;
    for (int c = 0; c < (kLong ? 600 : 30); ++c)
      k.add(ck, random_x(rng, cfg.dim), c % cfg.n_layers, (c / cfg.n_layers) % cfg.seq_len, "synthetic case " + std::to_string(c));
    const Checked r = compare(k, run_layers(*b, k.rows, 4));
    EXPECT_EQ(r.mismatches, 0) << blocks << " row blocks: " << r.first;
    EXPECT_EQ(r.cases, static_cast<int64_t>(k.rows.size()));
    const std::vector<float> zero(static_cast<size_t>(cfg.dim), 0.0f);
    const LayerRun idle = run_layers(*b, {case_row(cfg.n_layers, zero, -1, 3.0f)}, 1, 1);
    EXPECT_EQ(idle.idle_nonzero, "") << blocks << " row blocks";
  }
}

TEST(QkvBlock, RejectsWrongSizes) {
  const auto& ck = unit_testing::stories260k();
  compiler::Program p;
  const auto x = p.values("x", ck.config().dim);
  const auto f = p.values("f", ck.config().n_layers);
  const ValueId pos = p.value("pos");
  const int rows = ck.config().dim + 2 * ck.config().kv_dim();
  EXPECT_THROW(qkv_block(p, ck, std::vector<ValueId>(x.begin(), x.end() - 1), f, pos), Error);
  EXPECT_THROW(qkv_block(p, ck, x, std::vector<ValueId>(f.begin(), f.end() - 1), pos), Error);
  EXPECT_THROW(qkv_block(p, ck, x, f, -1), Error);
  EXPECT_THROW(qkv_block(p, ck, x, f, static_cast<ValueId>(p.num_values())), Error);
  EXPECT_THROW(qkv_block(p, ck, x, f, pos, {}, 0), Error);
  EXPECT_THROW(qkv_block(p, ck, x, f, pos, {}, rows + 1), Error);
  EXPECT_THROW(qkv_block(p, ck, x, f, pos, MatvecOptions{3}), Error);  // matvec_unit's own check
}

}  // namespace
}  // namespace qpu::npu
