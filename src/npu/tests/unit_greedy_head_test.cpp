// The greedy head (npu/unit_greedy_head.h) against run.c: the classifier matmul and
// sample_argmax. The head is one straight program of ~56K neurons over ~11K values; as a
// single dense checkpoint that is tens of GB, so the tests run it in segments of
// consecutive ops, each compiled alone, the values crossing between segments through the
// token embedding (exact: a value is a float). Program order is the IR's meaning and the
// scheduler keeps it, so this is the same computation op for op. A wide op (a chain
// step: 4 neurons per row) is first cut into independent parts (split_op).
// Cases: every position of the greedy "Once upon a time" story with the real
// stories260K classifier (final x -> the trace's logits and token), random x vectors,
// small classifiers with duplicated rows (exact ties), HostSim orders, and idle.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/clear_dead.h"
#include "compiler/host_sim.h"
#include "npu/engine_host.h"
#include "npu/unit_greedy_head.h"
#include "reference/generate.h"
#include "reference/sampler.h"
#include "reference/trace.h"

namespace qpu::npu {
namespace {

using compiler::Program;
using compiler::ValueId;

constexpr bool kLong = QPU_NPU_CASES >= 100000;

// The neurons of an MLP op in groups of about `max_neurons` that may run as consecutive
// ops: neurons writing one value, or reading a value the op writes and its writers, stay
// in one group (union-find), so every value's down sum keeps all its live terms in one
// group and every group reads only values no other group writes: each sees the values
// as they were at the start of the op, as the one op does. (A group then lacks the +-0
// terms of the other groups' neurons, as any segment lacks those of other ops.)
std::vector<std::vector<compiler::Neuron>> split_op(const compiler::Op& op, size_t max_neurons) {
  if (op.kind != compiler::OpKind::Mlp) fail("split_op: '{}' is not an MLP op", op.label);
  const size_t n = op.neurons.size();
  std::vector<size_t> parent(n);
  for (size_t i = 0; i < n; ++i) parent[i] = i;
  auto root = [&](size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  std::map<ValueId, size_t> writer;
  for (size_t i = 0; i < n; ++i)
    for (const compiler::Term& t : op.neurons[i].down)
      if (const auto [it, fresh] = writer.emplace(t.value, i); !fresh) parent[root(i)] = root(it->second);
  for (size_t i = 0; i < n; ++i)
    for (const compiler::Lin* form : {&op.neurons[i].gate, &op.neurons[i].up})
      for (const compiler::Term& t : form->terms)
        if (const auto it = writer.find(t.value); it != writer.end()) parent[root(i)] = root(it->second);
  std::map<size_t, std::vector<compiler::Neuron>> parts;  // by root; a root is its part's first neuron
  for (size_t i = 0; i < n; ++i) parts[root(i)].push_back(op.neurons[i]);
  std::vector<std::vector<compiler::Neuron>> groups(1);
  for (auto& [r, part] : parts) {
    if (!groups.back().empty() && groups.back().size() + part.size() > max_neurons) groups.emplace_back();
    groups.back().insert(groups.back().end(), part.begin(), part.end());
  }
  return groups;
}

// A segment's size: a dense checkpoint costs ~ neurons x touched values to build.
constexpr int64_t kSegmentNeurons = 384;
constexpr size_t kSegmentValues = 1024;

// Runs `prog` for every case (values of `inputs`) and returns every value per case.
std::vector<std::vector<float>> run_segmented(const Program& whole, const std::vector<ValueId>& inputs,
                                              const std::vector<std::vector<float>>& cases, const HostFactory& host,
                                              int64_t max_rows = 1024) {
  const auto nv = static_cast<size_t>(whole.num_values());
  std::vector<std::vector<float>> state(cases.size(), std::vector<float>(nv, 0.0f));
  for (size_t c = 0; c < cases.size(); ++c)
    for (size_t k = 0; k < inputs.size(); ++k) state[c][static_cast<size_t>(inputs[k])] = cases[c][k];
  Program prog = whole;  // the same values; wide ops cut by split_op
  prog.mutable_ops().clear();
  for (const compiler::Op& op : whole.ops())
    for (auto& group : split_op(op, static_cast<size_t>(kSegmentNeurons))) prog.mlp(op.label, std::move(group));
  const auto& ops = prog.ops();
  std::vector<int64_t> local(nv, -1);
  size_t a = 0;
  while (a < ops.size()) {
    // Grow the segment while it stays small (a single large op is a segment of its own).
    std::vector<ValueId> touched;
    int64_t neurons = 0;
    size_t b = a;
    while (b < ops.size()) {
      std::vector<ValueId> t = touched;
      for (ValueId v : ops[b].reads()) t.push_back(v);
      for (ValueId v : ops[b].writes()) t.push_back(v);
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      const auto n = static_cast<int64_t>(ops[b].neurons.size());
      if (b > a && (neurons + n > kSegmentNeurons || t.size() > kSegmentValues)) break;
      touched = std::move(t);
      neurons += n;
      ++b;
    }
    Program sub;
    for (ValueId v : touched) local[static_cast<size_t>(v)] = sub.value(prog.name(v));
    auto remap = [&](ValueId v) { return v == compiler::kOne ? v : static_cast<ValueId>(local[static_cast<size_t>(v)]); };
    for (size_t o = a; o < b; ++o) {
      auto neurons_copy = ops[o].neurons;
      for (auto& nr : neurons_copy) {
        for (auto& t : nr.gate.terms) t.value = remap(t.value);
        for (auto& t : nr.up.terms) t.value = remap(t.value);
        for (auto& t : nr.down) t.value = remap(t.value);
      }
      sub.mlp(ops[o].label, std::move(neurons_copy));
    }
    std::vector<ValueId> written;
    for (size_t o = a; o < b; ++o)
      for (ValueId v : ops[o].writes()) written.push_back(v);
    for (size_t first = 0; first < cases.size(); first += static_cast<size_t>(max_rows)) {
      const size_t count = std::min(cases.size() - first, static_cast<size_t>(max_rows));
      compiler::Interface io;
      for (ValueId v : touched) io.inputs.push_back(remap(v));
      io.vocab_size = static_cast<int64_t>(count);
      for (size_t c = first; c < first + count; ++c)
        for (ValueId v : touched) io.input_rows.push_back(state[c][static_cast<size_t>(v)]);
      const compiler::Compiled cc = compiler::compile(sub, io);
      const Forward fwd = host(cc.weights);
      std::vector<float> hidden(static_cast<size_t>(cc.weights.config.hidden_size));
      for (size_t c = first; c < first + count; ++c) {
        fwd(static_cast<int64_t>(c - first), hidden);
        for (ValueId v : written) state[c][static_cast<size_t>(v)] = hidden[static_cast<size_t>(cc.allocation.dim(remap(v)))];
      }
    }
    for (ValueId v : touched) local[static_cast<size_t>(v)] = -1;
    a = b;
  }
  return state;
}

// run.c's matmul row and sample_argmax.
std::vector<float> c_logits(std::span<const float> wcls, int vocab, const std::vector<float>& x) {
  const size_t n = x.size();
  std::vector<float> out(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) {
    float val = 0.0f;
    for (size_t j = 0; j < n; ++j) val += wcls[static_cast<size_t>(i) * n + j] * x[j];
    out[static_cast<size_t>(i)] = val;
  }
  return out;
}

struct Head {
  Program p;
  std::vector<ValueId> inputs;  // x..., enable
  GreedyHead h;
};
std::unique_ptr<Head> build_head(std::span<const float> wcls, int vocab, int dim) {
  auto hd = std::make_unique<Head>();
  hd->inputs = hd->p.values("x", dim + 1);
  const std::vector<ValueId> x(hd->inputs.begin(), hd->inputs.end() - 1);
  hd->h = greedy_head(hd->p, x, wcls, vocab, hd->inputs.back());
  return hd;
}

// The row-block form (greedy_head_blocks) of the same head.
std::unique_ptr<Head> build_block_head(std::span<const float> wcls, int vocab, int dim, int block_rows) {
  auto hd = std::make_unique<Head>();
  hd->inputs = hd->p.values("x", dim + 1);
  const std::vector<ValueId> x(hd->inputs.begin(), hd->inputs.end() - 1);
  GreedyBlockOptions o;
  o.block_rows = block_rows;
  o.matvec.max_op_neurons = kBudgetMaxOpNeurons;
  hd->h = greedy_head_blocks(hd->p, x, wcls, vocab, hd->inputs.back(), o);
  return hd;
}

// Compares every output of the head for one case with run.c; returns a description of
// the first difference ("" when equal). `logits` is what C computed (or the trace holds).
std::string compare_case(const Head& hd, const std::vector<float>& st, const std::vector<float>& logits, int vocab) {
  const int token = reference::sample_argmax(logits);
  auto val = [&](ValueId v) { return st[static_cast<size_t>(v)]; };
  for (int i = 0; i < vocab; ++i) {
    const float got = val(hd.h.logits[static_cast<size_t>(i)]), want = 0.0f + logits[static_cast<size_t>(i)];
    if (float_bits(got) != float_bits(want)) return "logit " + std::to_string(i) + ": " + describe_float(got) + " vs " + describe_float(want);
    const float hot = val(hd.h.onehot[static_cast<size_t>(i)]);
    if (float_bits(hot) != float_bits(i == token ? 1.0f : 0.0f)) return "onehot " + std::to_string(i) + " = " + describe_float(hot);
  }
  if (val(hd.h.token) != static_cast<float>(token)) return "token " + describe_float(val(hd.h.token)) + " vs " + std::to_string(token);
  if (float_bits(val(hd.h.max)) != float_bits(0.0f + logits[static_cast<size_t>(token)])) return "max";
  return "";
}

struct StoryRecords final : reference::TraceObserver {
  std::vector<std::vector<float>> x, logits;
  std::vector<int> next;
  std::vector<bool> forced;  // next came from the prompt
  void record(reference::TraceKind kind, int, int, int, std::span<const float> v) override {
    using K = reference::TraceKind;
    if (kind == K::final_rms_out) x.emplace_back(v.begin(), v.end());
    if (kind == K::logits) logits.emplace_back(v.begin(), v.end());
    if (kind == K::next_token) {
      next.push_back(static_cast<int>(v[0]));
      forced.push_back(v[1] != 0.0f);
    }
  }
};

struct Story {
  reference::Llama2Checkpoint ckpt = reference::load_llama2_checkpoint(QPU_SHARED_DIR "/models/stories260K/stories260K.bin");
  StoryRecords rec;
  int positions = 0;
  Story() {
    const auto tok = reference::Tokenizer::load(QPU_SHARED_DIR "/models/stories260K/tok512.bin", 512);
    reference::Transformer tf(ckpt);
    reference::Sampler sampler(512, 0.0f, 0.9f, 1);
    reference::GenerateCallbacks cb;
    cb.trace = &rec;
    positions = reference::generate(tf, tok, sampler, "Once upon a time", kLong ? 256 : 8, false, cb).positions;
  }
};
const Story& story() {
  static const Story s;
  return s;
}

// Every final x of the story through the head with the real classifier: logits, one-hot
// and token equal the trace's logits record and run.c's greedy choice.
TEST(UnitGreedyHead, GoldenStoryMatchesTrace) {
  const Story& s = story();
  const auto& cfg = s.ckpt.config();
  ASSERT_EQ(s.rec.x.size(), static_cast<size_t>(s.positions));
  ASSERT_EQ(s.rec.logits.size(), s.rec.x.size());
  if (kLong) {
    ASSERT_GE(s.positions, 64);
  }
  const auto hd = build_head(s.ckpt.weights().wcls, cfg.vocab_size, cfg.dim);
  const size_t n = kLong ? s.rec.x.size() : 4;
  std::vector<std::vector<float>> cases;
  for (size_t pos = 0; pos < n; ++pos) {
    cases.push_back(s.rec.x[pos]);
    cases.back().push_back(1.0f);
  }
  const auto st = run_segmented(hd->p, hd->inputs, cases, engine_host());
  int sampled = 0;
  for (size_t pos = 0; pos < n; ++pos) {
    ASSERT_EQ(compare_case(*hd, st[pos], s.rec.logits[pos], cfg.vocab_size), "") << "pos " << pos;
    // Where the sampler chose (the prompt is over), its choice is the head's token.
    if (!s.rec.forced[pos]) {
      ++sampled;
      ASSERT_EQ(st[pos][static_cast<size_t>(hd->h.token)], static_cast<float>(s.rec.next[pos])) << "pos " << pos;
    }
  }
  if (kLong) {
    EXPECT_GE(sampled, 60);
  }
  std::printf("greedy head golden: %zu positions of %d (%d sampled), 0 mismatches\n", n, s.positions, sampled);
}

// Random x vectors with the real classifier (x in the traced range of final_rms_out).
TEST(UnitGreedyHead, RandomXMatchesRunC) {
  const Story& s = story();
  const auto& cfg = s.ckpt.config();
  const auto hd = build_head(s.ckpt.weights().wcls, cfg.vocab_size, cfg.dim);
  std::mt19937_64 rng(4711);
  std::vector<std::vector<float>> cases;
  const int n = kLong ? 8192 : 8;
  for (int c = 0; c < n; ++c) {
    std::vector<float> x(static_cast<size_t>(cfg.dim) + 1, 1.0f);
    for (int j = 0; j < cfg.dim; ++j) {
      const int e = -24 + static_cast<int>(rng() % 29);
      const float v = std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f, e >= 4 ? e - 10 : e);
      x[static_cast<size_t>(j)] = (rng() & 1) ? -v : v;
    }
    if (c % 16 == 0) std::fill(x.begin(), x.end() - 1, 0.0f);  // all logits 0: token 0
    cases.push_back(x);
  }
  const auto st = run_segmented(hd->p, hd->inputs, cases, engine_host());
  for (int c = 0; c < n; ++c) {
    const std::vector<float> x(cases[static_cast<size_t>(c)].begin(), cases[static_cast<size_t>(c)].end() - 1);
    ASSERT_EQ(compare_case(*hd, st[static_cast<size_t>(c)], c_logits(s.ckpt.weights().wcls, cfg.vocab_size, x), cfg.vocab_size), "")
        << "case " << c;
  }
}

// Small classifiers (every remainder of the fused chain: dim 5, 6, 7, 64) with
// duplicated rows, so that exact ties decide the token (first index wins), and zero
// weights. Many random x per classifier.
TEST(UnitGreedyHead, TiesAndShapesMatchRunC) {
  std::mt19937_64 rng(77);
  int64_t total = 0;
  for (int dim : {5, 6, 7, 64}) {
    const int vocab = 24;
    std::vector<float> w(static_cast<size_t>(vocab * dim));
    for (float& v : w) v = (rng() % 8 == 0) ? 0.0f : std::ldexp(static_cast<float>(static_cast<int>(rng() % 2001) - 1000), -9);
    for (int i = 16; i < vocab; ++i)  // rows 16..23 repeat rows 0..7: about half the maxima are ties
      for (int j = 0; j < dim; ++j) w[static_cast<size_t>(i * dim + j)] = w[static_cast<size_t>((i - 16) * dim + j)];
    const auto hd = build_head(w, vocab, dim);
    std::vector<std::vector<float>> cases;
    const int n = kLong ? 25000 : 64;
    for (int c = 0; c < n; ++c) {
      std::vector<float> x(static_cast<size_t>(dim) + 1, 1.0f);
      for (int j = 0; j < dim; ++j) x[static_cast<size_t>(j)] = std::ldexp(static_cast<float>(static_cast<int>(rng() % 4001) - 2000), -8 - static_cast<int>(rng() % 4));
      cases.push_back(x);
    }
    const auto st = run_segmented(hd->p, hd->inputs, cases, engine_host(), 4096);
    int ties = 0;
    for (int c = 0; c < n; ++c) {
      const std::vector<float> x(cases[static_cast<size_t>(c)].begin(), cases[static_cast<size_t>(c)].end() - 1);
      const auto lg = c_logits(w, vocab, x);
      const int t = reference::sample_argmax(lg);
      ties += static_cast<int>(std::count(lg.begin(), lg.end(), lg[static_cast<size_t>(t)]) > 1);
      ASSERT_EQ(compare_case(*hd, st[static_cast<size_t>(c)], lg, vocab), "") << "dim " << dim << " case " << c;
    }
    EXPECT_GT(ties, n / 5) << "dim " << dim;  // the duplicated rows make ties common
    total += n;
  }
  std::printf("greedy head ties/shapes: %lld cases\n", static_cast<long long>(total));
}

// Under the order-adversarial HostSim: a few story positions.
TEST(UnitGreedyHead, HostSimGoldenPositions) {
  const Story& s = story();
  const auto& cfg = s.ckpt.config();
  const auto hd = build_head(s.ckpt.weights().wcls, cfg.vocab_size, cfg.dim);
  const size_t n = kLong ? 16 : 1;
  std::vector<std::vector<float>> cases;
  for (size_t pos = 0; pos < n; ++pos) {
    cases.push_back(s.rec.x[pos * 7 % s.rec.x.size()]);
    cases.back().push_back(1.0f);
  }
  const HostFactory sim = [](const io::Qwen35Weights& w) -> Forward {
    auto h = std::make_shared<compiler::HostSim>(w, 5);
    auto logits = std::make_shared<std::vector<float>>(1);
    return [h, logits](int64_t token, std::span<float> hidden) { h->forward(token, *logits, hidden); };
  };
  const auto st = run_segmented(hd->p, hd->inputs, cases, sim);
  for (size_t c = 0; c < n; ++c)
    ASSERT_EQ(compare_case(*hd, st[c], s.rec.logits[c * 7 % s.rec.x.size()], cfg.vocab_size), "") << "case " << c;
}

// Idle: x = 0 and enable = 0 leave every value of the head at exactly 0 (with x = 0 and
// enable = 1 the head would choose token 0: one-hot 1 at 0).
TEST(UnitGreedyHead, IdleWritesOnlyZeros) {
  const Story& s = story();
  const auto& cfg = s.ckpt.config();
  const auto hd = build_head(s.ckpt.weights().wcls, cfg.vocab_size, cfg.dim);
  std::vector<std::vector<float>> cases(2, std::vector<float>(static_cast<size_t>(cfg.dim) + 1, 0.0f));
  cases[1].back() = 1.0f;
  const auto st = run_segmented(hd->p, hd->inputs, cases, engine_host());
  for (ValueId v = 0; v < hd->p.num_values(); ++v) ASSERT_EQ(st[0][static_cast<size_t>(v)], 0.0f) << hd->p.name(v);
  EXPECT_EQ(st[1][static_cast<size_t>(hd->h.onehot[0])], 1.0f);
  EXPECT_EQ(st[1][static_cast<size_t>(hd->h.token)], 0.0f);
}

// Cost of the head as one straight program (no segments): depth from the scheduler.
TEST(UnitGreedyHead, Cost) {
  const Story& s = story();
  const auto& cfg = s.ckpt.config();
  const auto hd = build_head(s.ckpt.weights().wcls, cfg.vocab_size, cfg.dim);
  const compiler::Schedule sc = compiler::schedule(hd->p);
  std::vector<int64_t> per_sub(static_cast<size_t>(sc.num_sublayers), 0);
  int64_t neurons = 0, down_terms = 0;
  for (size_t i = 0; i < hd->p.ops().size(); ++i) {
    const auto& op = hd->p.ops()[i];
    neurons += static_cast<int64_t>(op.neurons.size());
    per_sub[static_cast<size_t>(sc.sublayer[i])] += static_cast<int64_t>(op.neurons.size());
    for (const auto& nr : op.neurons) down_terms += static_cast<int64_t>(nr.down.size());
  }
  const int64_t widest = *std::max_element(per_sub.begin(), per_sub.end());
  const int64_t depth = compiler::critical_path(hd->p);
  EXPECT_EQ(depth, 1 + 21 + 45 + 1);  // products (+ enable), 21 fused steps, 9 argmax levels, one-hot
  EXPECT_EQ(sc.num_sublayers / 2, depth);
  std::printf("greedy head: %lld MLP sublayers (critical path %lld), %lld neurons (widest sublayer %lld), %lld down terms, %lld values\n",
              static_cast<long long>(sc.num_sublayers / 2), static_cast<long long>(depth), static_cast<long long>(neurons),
              static_cast<long long>(widest), static_cast<long long>(down_terms), static_cast<long long>(hd->p.num_values()));
}

// Width with dim reuse (schedule + allocation of compile_reusing_dims; the weights would
// be tens of GB). The allocation's hidden size is 64 q for the smallest q with
// live + q <= 64 q, live = the most values live in one sublayer.
int64_t hidden_for(int64_t live) { return 64 * ((live + 62) / 63); }

TEST(UnitGreedyHead, HiddenSizeWithDimReuse) {
  const Story& s = story();
  const auto& cfg = s.ckpt.config();
  const auto hd = build_head(s.ckpt.weights().wcls, cfg.vocab_size, cfg.dim);
  compiler::Interface io;  // inputs x and enable; outputs every GreedyHead value
  io.inputs = hd->inputs;
  io.outputs = hd->h.logits;
  io.outputs.insert(io.outputs.end(), hd->h.onehot.begin(), hd->h.onehot.end());
  io.outputs.push_back(hd->h.token);
  io.outputs.push_back(hd->h.max);
  io.vocab_size = static_cast<int64_t>(io.outputs.size());
  const int64_t plain = compiler::allocate(hd->p, compiler::schedule(hd->p)).hidden_size;
  const compiler::ReusePlan bare = compiler::plan_dim_reuse(hd->p, io);
  compiler::DeadClearOptions options;
  add_dead_clear_enables(hd->h, options);
  const compiler::ReusePlan plan = compiler::plan_dim_reuse(hd->p, io, {}, options);
  const int64_t narrow = plan.allocation.hidden_size, V = cfg.vocab_size, D = cfg.dim;
  // The widest point is the classifier: per row p0 and 3 sets of 3 rotating values
  // (10 V), then x, the enable and the matvec's enable. The argmax tree needs less: its
  // first level holds at most 7 values per pair of rows at once (the difference, the 5
  // scale values and their sum: 3.5 V) besides the logits.
  EXPECT_LE(narrow, hidden_for(10 * V + D + 2));
  // Without the enables, the matvec's own clears (gated by its enable) are not seen: its
  // 9 V rotating values keep their dims to the end, through the argmax's peak.
  EXPECT_LE(bare.allocation.hidden_size, hidden_for(9 * V + 7 * V / 2 + D + 2));
  EXPECT_EQ(plan.allocation.num_layers, 68);  // dim reuse adds no layer
  // Sinking the ops first (schedule.h) writes each product set just before its first
  // reader: p0 is dead before the third set is written, so 9 values per row at most.
  compiler::ScheduleLimits sink;
  sink.sink = true;
  const compiler::ReusePlan sunk = compiler::plan_dim_reuse(hd->p, io, sink, options);
  EXPECT_LE(sunk.allocation.hidden_size, hidden_for(9 * V + D + 2));
  EXPECT_EQ(sunk.allocation.num_layers, 68);
  std::printf("greedy head hidden: %lld one dim per value, %lld compile_reusing_dims, %lld with add_dead_clear_enables, "
              "%lld also sunk\n",
              static_cast<long long>(plain), static_cast<long long>(bare.allocation.hidden_size), static_cast<long long>(narrow),
              static_cast<long long>(sunk.allocation.hidden_size));
}

}  // namespace
}  // namespace qpu::npu

namespace qpu::npu {
namespace {

// The row-block head (greedy_head_blocks) on the story's final x and random x with the
// real classifier, blocks of 64 rows (8 blocks) and of 100 (the last one 12 rows): every
// logit, the one-hot, the token and the max equal run.c's (and so the one-program head's,
// which GoldenStoryMatchesTrace / RandomXMatchesRunC hold to the same values).
TEST(UnitGreedyHeadBlocks, GoldenStoryAndRandomXMatchRunC) {
  const Story& s = story();
  const auto& cfg = s.ckpt.config();
  for (const int rows : {64, 100}) {
    const auto hd = build_block_head(s.ckpt.weights().wcls, cfg.vocab_size, cfg.dim, rows);
    EXPECT_EQ(hd->h.blocks.size(), static_cast<size_t>((cfg.vocab_size + rows - 1) / rows));
    std::vector<std::vector<float>> cases;
    std::vector<std::vector<float>> want;
    const size_t golden = std::min<size_t>(s.rec.x.size(), kLong ? s.rec.x.size() : 8);
    for (size_t pos = 0; pos < golden; ++pos) {
      cases.push_back(s.rec.x[pos]);
      cases.back().push_back(1.0f);
      want.push_back(s.rec.logits[pos]);
    }
    std::mt19937_64 rng(9001 + static_cast<uint64_t>(rows));
    const int n = kLong ? 4096 : 24;
    for (int c = 0; c < n; ++c) {
      std::vector<float> x(static_cast<size_t>(cfg.dim) + 1, 1.0f);
      for (int j = 0; j < cfg.dim; ++j) {
        const int e = -24 + static_cast<int>(rng() % 29);
        const float v = std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f, e >= 4 ? e - 10 : e);
        x[static_cast<size_t>(j)] = (rng() & 1) ? -v : v;
      }
      if (c % 8 == 0) std::fill(x.begin(), x.end() - 1, 0.0f);  // all logits 0: token 0, a tie across every block
      cases.push_back(x);
      want.push_back(c_logits(s.ckpt.weights().wcls, cfg.vocab_size, std::vector<float>(x.begin(), x.end() - 1)));
    }
    const auto st = run_segmented(hd->p, hd->inputs, cases, engine_host());
    std::set<int> tokens;
    for (size_t c = 0; c < cases.size(); ++c) {
      ASSERT_EQ(compare_case(*hd, st[c], want[c], cfg.vocab_size), "") << "rows " << rows << " case " << c;
      tokens.insert(reference::sample_argmax(want[c]));
    }
    EXPECT_GE(tokens.size(), 4u);  // winners in several blocks, not one lucky index
    std::printf("greedy head, blocks of %d rows: %zu golden + %d random cases, %zu distinct tokens, 0 mismatches\n", rows,
                golden, n, tokens.size());
  }
}

// Ties across block boundaries decide the token: small classifiers whose rows repeat
// rows of earlier blocks, blocks of 5 and 7 rows (ragged last blocks), many random x.
TEST(UnitGreedyHeadBlocks, TiesAcrossBlocksMatchRunC) {
  std::mt19937_64 rng(78);
  for (const int rows : {5, 7}) {
    const int vocab = 24, dim = 6;
    std::vector<float> w(static_cast<size_t>(vocab * dim));
    for (float& v : w) v = (rng() % 8 == 0) ? 0.0f : std::ldexp(static_cast<float>(static_cast<int>(rng() % 2001) - 1000), -9);
    for (int i = 12; i < vocab; ++i)  // rows 12..23 repeat rows 0..11, in later blocks
      for (int j = 0; j < dim; ++j) w[static_cast<size_t>(i * dim + j)] = w[static_cast<size_t>((i - 12) * dim + j)];
    const auto hd = build_block_head(w, vocab, dim, rows);
    const int n = kLong ? 25000 : 256;
    std::vector<std::vector<float>> cases;
    for (int c = 0; c < n; ++c) {
      std::vector<float> x(static_cast<size_t>(dim) + 1, 1.0f);
      for (int j = 0; j < dim; ++j)
        x[static_cast<size_t>(j)] = std::ldexp(static_cast<float>(static_cast<int>(rng() % 4001) - 2000), -8 - static_cast<int>(rng() % 4));
      cases.push_back(x);
    }
    const auto st = run_segmented(hd->p, hd->inputs, cases, engine_host(), 4096);
    int ties = 0;
    for (int c = 0; c < n; ++c) {
      const auto lg = c_logits(w, vocab, std::vector<float>(cases[static_cast<size_t>(c)].begin(), cases[static_cast<size_t>(c)].end() - 1));
      const int t = reference::sample_argmax(lg);
      ties += static_cast<int>(std::count(lg.begin(), lg.end(), lg[static_cast<size_t>(t)]) > 1);
      ASSERT_EQ(compare_case(*hd, st[static_cast<size_t>(c)], lg, vocab), "") << "rows " << rows << " case " << c;
    }
    EXPECT_GT(ties, n / 5) << "rows " << rows;
  }
}

// Idle: x = 0 and enable = 0 leave every value of the block head at exactly 0.
TEST(UnitGreedyHeadBlocks, IdleWritesOnlyZeros) {
  const Story& s = story();
  const auto& cfg = s.ckpt.config();
  const auto hd = build_block_head(s.ckpt.weights().wcls, cfg.vocab_size, cfg.dim, 64);
  std::vector<std::vector<float>> cases(1, std::vector<float>(static_cast<size_t>(cfg.dim) + 1, 0.0f));
  const auto st = run_segmented(hd->p, hd->inputs, cases, engine_host());
  for (ValueId v = 0; v < hd->p.num_values(); ++v) ASSERT_EQ(st[0][static_cast<size_t>(v)], 0.0f) << hd->p.name(v);
}

// Width under the budget (1,024 neurons per MLP sublayer, sunk): the block head with
// dim reuse fits H <= 1,024; the one-program head does not (~4,800).
TEST(UnitGreedyHeadBlocks, FitsTheWidthBudget) {
  const Story& s = story();
  const auto& cfg = s.ckpt.config();
  for (const int rows : {64, 86}) {
    const auto hd = build_block_head(s.ckpt.weights().wcls, cfg.vocab_size, cfg.dim, rows);
    compiler::Interface io;
    io.inputs = hd->inputs;
    io.outputs = hd->h.onehot;
    io.outputs.push_back(hd->h.token);
    io.outputs.push_back(hd->h.max);
    io.vocab_size = static_cast<int64_t>(io.outputs.size());
    compiler::DeadClearOptions options;
    add_dead_clear_enables(hd->h, options);
    compiler::ScheduleLimits limits;
    limits.max_neurons_per_mlp = 1024;
    limits.sink = true;
    const compiler::ReusePlan plan = compiler::plan_dim_reuse(hd->p, io, limits, options);
    const int64_t widest =
        *std::max_element(plan.allocation.neurons_per_layer.begin(), plan.allocation.neurons_per_layer.end());
    EXPECT_LE(plan.allocation.hidden_size, 1024) << "rows " << rows;
    EXPECT_LE(widest, 1024) << "rows " << rows;
    std::printf("greedy head, blocks of %d rows: %lld layers, hidden %lld, widest MLP sublayer %lld neurons\n", rows,
                static_cast<long long>(plan.allocation.num_layers), static_cast<long long>(plan.allocation.hidden_size),
                static_cast<long long>(widest));
  }
}

}  // namespace
}  // namespace qpu::npu
