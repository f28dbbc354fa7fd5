// Idle sublayers (ModelOptions::idle_sublayers, docs/engine.md "Idle sublayers"): an MLP
// or GDN sublayer whose read residual dims are all +-0 is replaced by x + (+0), and the
// model gives the bits of running it: logits, hidden and every State vector after each
// token, at 1, 2 and 3 threads, on tiny checkpoints whose sublayers read and write a few
// groups of residual dims, so that they go idle and wake up again: -0 in the residual,
// conv histories that drain, decays != 1 with a live state (the GDN skip must not fire),
// every storage format, sparse path, elementwise mode and recurrence. The skip counts are
// asserted (exactly where the token pattern fixes them), so a skip that never fires fails.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/float_bits.h"
#include "engine/model.h"
#include "engine/packed_matrix.h"
#include "idle_wiring.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using io::LayerType;
using testing::TinyRandom;
using testing::TinySpec;
using namespace testing;  // idle_wiring.h

// Runs both models over `tokens` at 1, 2 and 3 threads, comparing logits, hidden and the
// whole State after every token; returns the skipping model's counts of one run.
IdleSublayerCounts expect_skip_gives_compute_bits(const io::Qwen35Weights& weights, ModelOptions base,
                                                  const std::vector<int64_t>& tokens, const std::string& what) {
  ModelOptions compute = base, skip = base;
  compute.idle_sublayers = IdleSublayers::Compute;
  skip.idle_sublayers = IdleSublayers::Skip;
  const Model a(weights, compute), b(weights, skip);
  const io::Qwen35Config& c = weights.config;
  IdleSublayerCounts per_run;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    const IdleSublayerCounts before = b.skipped_sublayers();
    State sa = a.new_state(), sb = b.new_state();
    std::vector<float> la(c.vocab_size), lb(c.vocab_size), ha(c.hidden_size), hb(c.hidden_size);
    for (size_t step = 0; step < tokens.size(); ++step) {
      const std::string at = what + " threads " + std::to_string(threads) + " step " + std::to_string(step);
      a.forward(tokens[step], sa, la, ha);
      b.forward(tokens[step], sb, lb, hb);
      expect_bits(lb, la, at + " logits");
      expect_bits(hb, ha, at + " hidden");
      expect_same_state(sb, sa, at);
      if (::testing::Test::HasFatalFailure()) {
        omp_set_num_threads(1);
        return per_run;
      }
    }
    const IdleSublayerCounts after = b.skipped_sublayers();
    const IdleSublayerCounts run{after.mlp - before.mlp, after.gdn - before.gdn, after.runs - before.runs};
    if (threads == 1) per_run = run;
    EXPECT_EQ(run.mlp, per_run.mlp) << what << " threads " << threads;  // the thread count changes nothing
    EXPECT_EQ(run.gdn, per_run.gdn) << what << " threads " << threads;
    EXPECT_EQ(run.runs, per_run.runs) << what << " threads " << threads;
  }
  omp_set_num_threads(1);
  EXPECT_EQ(a.skipped_sublayers().mlp + a.skipped_sublayers().gdn, 0) << what;  // Compute never skips
  return per_run;
}

// ---- Exact counts: every sublayer reads group 0 only, the GDN mixers write group 3
// (read by no sublayer), the MLPs write group 0. An active token (group 0 live) wakes
// every sublayer; on an idle token every MLP is skipped, and a GDN mixer is skipped once
// its conv history is +0 (kernel - 1 = 3 idle tokens in a row, or a fresh state) and its
// recurrence provably keeps the state: exp(g) = 1 with the SkipZeros recurrence, or a
// state that is still all +0 (no token has woken the layer yet).
constexpr int64_t kActive = 1, kIdle = 2;  // token 1: group 0 live; token 2: all +-0

std::vector<int64_t> exact_pattern() {
  // 3 idle (fresh state: skipped), active, 5 idle (the first 3 drain the conv history),
  // active, 2 idle (still draining).
  return {kIdle, kIdle, kIdle, kActive, kIdle, kIdle, kIdle, kIdle, kIdle, kActive, kIdle, kIdle};
}

io::Qwen35Weights exact_checkpoint(uint64_t seed, bool decay_one) {
  TinySpec spec;
  spec.seed = seed;
  spec.layers = {LayerType::LinearAttention, LayerType::LinearAttention, LayerType::LinearAttention};
  io::Qwen35Weights w = testing::make_tiny_weights(spec);
  Wiring r;
  r.mixer_reads = r.mlp_reads = r.mlp_writes = 0b0001;
  r.mixer_writes = 0b1000;
  r.decay_one = decay_one;
  wire(w, std::vector<Wiring>(spec.layers.size(), r));
  embed_groups(w, seed + 1, [](int64_t t) { return t == kActive ? 0b0001u : t == kIdle ? 0u : 0b1111u; });
  return w;
}

TEST(IdleSublayers, ExactCountsWithDecayOne) {
  const int64_t layers = 3, idle_tokens = 10;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const io::Qwen35Weights w = exact_checkpoint(seed, true);
    const IdleSublayerCounts n =
        expect_skip_gives_compute_bits(w, ModelOptions{}, exact_pattern(), "seed " + std::to_string(seed));
    if (HasFatalFailure()) return;
    EXPECT_EQ(n.mlp, layers * idle_tokens);
    EXPECT_EQ(n.gdn, layers * (3 + 2));  // the 3 fresh ones, the 4th and 5th of the run of 5
  }
}

TEST(IdleSublayers, LiveStateWithDecayNotOneIsNeverSkipped) {
  const int64_t layers = 3, idle_tokens = 10;
  for (uint64_t seed = 5; seed <= 8; ++seed) {
    const io::Qwen35Weights w = exact_checkpoint(seed, false);
    const IdleSublayerCounts n =
        expect_skip_gives_compute_bits(w, ModelOptions{}, exact_pattern(), "seed " + std::to_string(seed));
    if (HasFatalFailure()) return;
    EXPECT_EQ(n.mlp, layers * idle_tokens);
    EXPECT_EQ(n.gdn, layers * 3);  // only before the first active token: the state is still +0
  }
}

// The dense recurrence writes S + 0 * delta into every row (-0 cells become +0; inf
// gives NaN): with a live state the GDN step is not a no-op there, so it is not skipped.
TEST(IdleSublayers, DenseRecurrenceSkipsOnlyAllZeroStates) {
  ModelOptions o;
  o.gdn = GdnRecurrence::Dense;
  o.elementwise = Elementwise::Dense;
  const io::Qwen35Weights w = exact_checkpoint(9, true);
  const IdleSublayerCounts n = expect_skip_gives_compute_bits(w, o, exact_pattern(), "dense");
  EXPECT_EQ(n.mlp, 3 * 10);
  EXPECT_EQ(n.gdn, 3 * 3);
}

// The add of +0 by a skipped sublayer turns -0 into +0: on an idle token from a fresh
// state every sublayer is skipped, and the hidden state is the embedding row (+-0 in
// every dim) plus +0, i.e. +0 in every dim, as the computed adds give.
TEST(IdleSublayers, SkippedSublayerTurnsMinusZeroIntoPlusZero) {
  const io::Qwen35Weights w = exact_checkpoint(3, true);
  const Model skip(w);
  State s = skip.new_state();
  const int64_t h = w.config.hidden_size;
  std::vector<float> logits(w.config.vocab_size), hidden(h);
  skip.forward(kIdle, s, logits, hidden);
  int minus_zeros_in = 0;
  for (int64_t i = 0; i < h; ++i) {
    minus_zeros_in += float_bits(w.embed_tokens[kIdle * h + i]) == 0x80000000u;
    EXPECT_EQ(float_bits(hidden[i]), 0u) << i;
  }
  EXPECT_GT(minus_zeros_in, 10);
  EXPECT_EQ(skip.skipped_sublayers().mlp, 3);
  EXPECT_EQ(skip.skipped_sublayers().gdn, 3);
}

// Every sublayer reads only the last residual dim, and token 1 is live only there: the
// liveness test must see it at every width (a partial 64-dim word, a tail of 1-3 dims
// after the 4-wide steps).
TEST(IdleSublayers, TheLastDimIsRead) {
  for (const int64_t hidden : {64, 65, 67, 70, 72, 127}) {
    TinySpec spec;
    spec.seed = static_cast<uint64_t>(hidden);
    spec.hidden = hidden;
    spec.layers = {LayerType::LinearAttention, LayerType::LinearAttention};
    io::Qwen35Weights w = testing::make_tiny_weights(spec);
    const auto only_last = [&](std::vector<float>& m) {
      for (size_t i = 0; i < m.size(); ++i) {
        if (static_cast<int64_t>(i % static_cast<size_t>(hidden)) != hidden - 1) m[i] = 0.0f;
      }
    };
    for (io::LayerWeights& l : w.layers) {
      for (auto* m : {&l.linear.in_proj_qkv, &l.linear.in_proj_z, &l.linear.in_proj_b, &l.linear.in_proj_a,
                      &l.gate_proj, &l.up_proj}) {
        only_last(*m);
      }
      std::fill(l.linear.dt_bias.begin(), l.linear.dt_bias.end(), -200.0f);
    }
    for (int64_t t = 1; t <= 2; ++t) {
      float* row = w.embed_tokens.data() + t * hidden;
      for (int64_t i = 0; i + 1 < hidden; ++i) row[i] = i % 2 ? -0.0f : 0.0f;
      row[hidden - 1] = t == 1 ? 1.5f : -0.0f;
    }
    const IdleSublayerCounts n =
        expect_skip_gives_compute_bits(w, ModelOptions{}, {2, 1, 2}, "hidden " + std::to_string(hidden));
    if (HasFatalFailure()) return;
    EXPECT_EQ(n.mlp, 2 * 2) << hidden;  // tokens 0 and 2
    EXPECT_EQ(n.gdn, 2 * 1) << hidden;  // token 0 (token 2 drains the conv history)
  }
}


TEST(IdleSublayers, RandomWiringGivesTheComputedBits) {
  IdleSublayerCounts total;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const io::Qwen35Weights w = random_checkpoint(seed);
    const IdleSublayerCounts n = expect_skip_gives_compute_bits(
        w, ModelOptions{}, random_tokens(seed, w.config.vocab_size, 60), "seed " + std::to_string(seed));
    if (HasFatalFailure()) return;
    total.mlp += n.mlp;
    total.gdn += n.gdn;
  }
  // 12 seeds x 60 tokens x 6 sublayers of each kind: a good share of them idle.
  EXPECT_GT(total.mlp, 500);
  EXPECT_GT(total.gdn, 150);
}

// ---- Idle runs (model.cpp's IdleRun: 16 layers skipped with one test): 40 layers (two
// whole runs and a partial one), GDN layers and attention layers whose o_proj is all +0
// (skipped mixers; one real attention layer in some seeds makes its run unusable), random
// wiring and decays, runs of idle tokens. Against the model that computes everything: every
// bit of logits, hidden and State; and whole runs were skipped.
TEST(IdleSublayers, IdleRunsGiveTheComputedBits) {
  IdleSublayerCounts total;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    TinySpec spec = random_spec(seed);
    spec.layers.assign(40, LayerType::LinearAttention);
    for (size_t l = 5; l < spec.layers.size(); l += 9) spec.layers[l] = LayerType::FullAttention;
    io::Qwen35Weights w = random_checkpoint(seed, spec);
    for (size_t l = 5; l < spec.layers.size(); l += 9) {
      // Every attention layer's mixer idle, but layer 23's in odd seeds (its run stays usable only when even).
      if (seed % 2 == 1 && l == 23) continue;
      std::fill(w.layers[l].full.o_proj.begin(), w.layers[l].full.o_proj.end(), 0.0f);
    }
    const IdleSublayerCounts n = expect_skip_gives_compute_bits(
        w, ModelOptions{}, random_tokens(seed, w.config.vocab_size, 40), "idle runs seed " + std::to_string(seed));
    if (HasFatalFailure()) return;
    total.mlp += n.mlp;
    total.gdn += n.gdn;
    total.runs += n.runs;
  }
  EXPECT_GT(total.runs, 30);  // 58 of them
  EXPECT_GT(total.mlp, 16 * total.runs);  // and single sublayers outside them
}

TEST(IdleSublayers, RandomWiringOnEveryPath) {
  IdleSublayerCounts total;
  int run = 0;
  for (const WeightStorage storage : {WeightStorage::Dense, WeightStorage::Sparse}) {
    for (const SparsePath path : {SparsePath::Rows, SparsePath::Columns}) {
      for (const bool plain : {false, true}) {
        ModelOptions o;
        o.storage = storage;
        o.sparse_path = path;
        o.allow_bf16 = plain;
        if (plain) {
          o.elementwise = Elementwise::Dense;
          o.gdn = GdnRecurrence::Dense;
          o.idle_mixers = IdleMixers::Compute;
        }
        const uint64_t seed = 40 + static_cast<uint64_t>(run++);
        const io::Qwen35Weights w = random_checkpoint(seed);
        const IdleSublayerCounts n = expect_skip_gives_compute_bits(
            w, o, random_tokens(seed, w.config.vocab_size, 40), "options run " + std::to_string(run));
        if (HasFatalFailure()) return;
        total.mlp += n.mlp;
        total.gdn += n.gdn;
      }
    }
  }
  EXPECT_GT(total.mlp, 200);
  EXPECT_GT(total.gdn, 30);
}

// ---- The norm's support (docs/engine.md, "Where a 256-position cycle goes in the engine"):
// at hidden 256 (16 groups) a token's few live groups keep the residual sparse enough for
// LiveNorm, which then writes only the blocks that its sublayer's projections store and
// hands what it wrote to the products as their support. Against the plain model (scalar
// norms, the row path, nothing skipped): logits, hidden and every State vector.
TEST(IdleSublayers, NormSupportGivesThePlainModelBits) {
  const int64_t supported_before = PackedMatrix::supported_plans();
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    TinySpec spec = random_spec(seed);
    spec.hidden = seed % 2 == 0 ? 256 : 262;  // 262: a tail of 6 dims after the blocks of 16
    const io::Qwen35Weights w = random_checkpoint(seed, spec);
    ModelOptions plain;
    plain.elementwise = Elementwise::Dense;
    plain.sparse_path = SparsePath::Rows;
    plain.idle_sublayers = IdleSublayers::Compute;
    const Model a(w, plain), b(w);
    State sa = a.new_state(), sb = b.new_state();
    std::vector<float> la(w.config.vocab_size), lb(w.config.vocab_size), ha(spec.hidden), hb(spec.hidden);
    const std::vector<int64_t> tokens = random_tokens(seed, w.config.vocab_size, 60);
    for (size_t step = 0; step < tokens.size(); ++step) {
      const std::string at = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      a.forward(tokens[step], sa, la, ha);
      b.forward(tokens[step], sb, lb, hb);
      expect_bits(lb, la, at + " logits");
      expect_bits(hb, ha, at + " hidden");
      expect_same_state(sb, sa, at);
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GT(PackedMatrix::supported_plans() - supported_before, 100);
}

// The sublayers that run add their output only on the words their output projection can
// write, once x holds no -0. Before that (no sublayer skipped yet), the full add must run:
// it turns the embedding's -0s into +0 in the words the sublayer does not write. Every
// sublayer here reads group 0 (live on every token, so none is skipped) and writes group
// 8 only (another 64-dim word); the plain model's adds run everywhere.
TEST(IdleSublayers, RunSublayersAddEverywhereWhileXMayHoldMinusZero) {
  TinySpec spec;
  spec.seed = 5;
  spec.hidden = 256;
  spec.layers = {LayerType::LinearAttention, LayerType::LinearAttention, LayerType::LinearAttention};
  io::Qwen35Weights w = testing::make_tiny_weights(spec);
  Wiring r;
  r.mixer_reads = r.mlp_reads = 1u << 0;
  r.mixer_writes = r.mlp_writes = 1u << 8;
  wire(w, std::vector<Wiring>(spec.layers.size(), r));
  embed_groups(w, 6, [](int64_t) { return 1u; });  // group 0 live, every other dim +0 or -0
  ModelOptions plain;
  plain.elementwise = Elementwise::Dense;
  plain.idle_sublayers = IdleSublayers::Compute;
  const Model a(w, plain), b(w);
  State sa = a.new_state(), sb = b.new_state();
  std::vector<float> la(w.config.vocab_size), lb(w.config.vocab_size), ha(spec.hidden), hb(spec.hidden);
  for (const int64_t token : {3, 7, 11}) {
    a.forward(token, sa, la, ha);
    b.forward(token, sb, lb, hb);
    expect_bits(hb, ha, "hidden after token " + std::to_string(token));
    expect_bits(lb, la, "logits after token " + std::to_string(token));
  }
  EXPECT_EQ(b.skipped_sublayers().mlp + b.skipped_sublayers().gdn, 0);
  int minus_zeros = 0;
  for (int64_t i = 0; i < spec.hidden; ++i) minus_zeros += float_bits(w.embed_tokens[3 * spec.hidden + i]) == 0x80000000u;
  EXPECT_GT(minus_zeros, 50);
}

// Non-finite residuals never take the skip (rsqrt of a NaN mean, 0 * inf in a dense
// product): an inf in an unread dim of an otherwise idle token, a NaN, a huge value whose
// square overflows; the bits still match, NaN payloads included.
TEST(IdleSublayers, NonFiniteResidualsRunTheSublayer) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    io::Qwen35Weights w = exact_checkpoint(seed, true);
    const int64_t h = w.config.hidden_size;
    float* e = w.embed_tokens.data();
    for (int64_t t : {5, 6, 7}) std::copy_n(e + kIdle * h, h, e + t * h);  // idle rows (all +-0) ...
    e[5 * h + 40] = kInf;                                    // token 5: inf in group 2 (read by nobody)
    e[6 * h + 50] = std::numeric_limits<float>::quiet_NaN();  // token 6: NaN in group 3
    e[7 * h + 33] = 3.0e38f;  // token 7: a huge finite value (its square overflows), no inf
    const std::vector<int64_t> tokens{kIdle, 7, kIdle, kIdle, 5, kIdle, kIdle, kIdle, kIdle, 6, kIdle};
    const IdleSublayerCounts n = expect_skip_gives_compute_bits(w, ModelOptions{}, tokens, "seed " + std::to_string(seed));
    if (HasFatalFailure()) return;
    // Token 7 (finite) is idle for every sublayer; tokens 5 and 6 put inf/NaN into the
    // residual for the whole step, so none of their sublayers is skipped.
    EXPECT_GE(n.mlp, 3 * 2);
    EXPECT_LE(n.mlp, 3 * 9);
    EXPECT_GT(n.gdn, 0);
  }
}

// A state that moves between a skipping and a computing model keeps working: the hints
// are maintained the same way in both modes.
TEST(IdleSublayers, StatesMoveBetweenModes) {
  const io::Qwen35Weights w = random_checkpoint(77);
  ModelOptions compute;
  compute.idle_sublayers = IdleSublayers::Compute;
  const Model skip(w), plain(w, compute);
  State s1 = plain.new_state(), s2 = plain.new_state();
  std::vector<float> l1(w.config.vocab_size), l2(w.config.vocab_size);
  const std::vector<int64_t> tokens = random_tokens(77, w.config.vocab_size, 80);
  for (size_t i = 0; i < tokens.size(); ++i) {
    plain.forward(tokens[i], s1, l1);
    ((i / 5) % 2 == 0 ? skip : plain).forward(tokens[i], s2, l2);
    expect_bits(l2, l1, "step " + std::to_string(i));
    if (HasFatalFailure()) return;
  }
  expect_same_state(s2, s1, "end");
  EXPECT_GT(skip.skipped_sublayers().mlp, 0);
}

}  // namespace
}  // namespace qpu::engine
