// run.c's top-p sampling (npu/unit_topp.h) on the engine (and a HostSim slice), bit for
// bit against reference::sample_topp_trace (run.c's sample_topp, itself checked against
// independent statements in reference_sampler_test): every stage's unit with C's inputs
// for every block of every case, its every output equal to the trace's. Cases: run.c's
// own sampled runs of stories260K with -p 0.9 (-t 1.0 -s 42; -t 0.8 -s 7 -i "Lily": the
// trace's pick is the token run.c chose), their logits again at other topp and
// adversarial coins (0, 1 - 2^-24, r on and around a cumulative sum), synthetic softmaxes
// (ties, one kept entry, up to kToppSlots kept) and raw probability vectors (ties, sums
// that never exceed topp: run.c's last_idx = n0 - 1), with stale RAM rows past n0.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "compiler/schedule.h"
#include "npu/expf_model.h"
#include "npu/unit_attention.h"
#include "npu/unit_sample.h"
#include "npu/unit_topp.h"
#include "reference/generate.h"
#include "reference/sampler.h"
#include "reference/tokenizer.h"
#include "unit_harness.h"

namespace qpu::npu {
namespace {

constexpr int kVocab = 512;
constexpr int kBlock = 8;
constexpr int kSlotBlocks = kToppSlots / kBlock;

using compiler::Program;
using compiler::ValueId;
using unit_testing::UnitHarness;
using unit_testing::UnitProgram;

// ---------------------------------------------------------------- cases

// One top-p call: the probabilities in PROB's form (p = pm 2^exponent), the trace, and
// the stale rows the machine's RAMs may hold past n0 (random kept-like values).
struct Case {
  std::string what;
  std::vector<float> pm, exponent, prob;
  float topp = 0.9f, coin = 0.0f;
  reference::TopPTrace trace;
  std::vector<float> slot_p, sorted_p, sorted_q;  // the kept / sorted RAMs, kToppSlots rows
  std::vector<float> cum;                         // C's running sum over the sorted RAM's rows
};

void finish(Case& c, std::mt19937_64& rng) {
  c.trace = reference::sample_topp_trace(c.prob, c.topp, c.coin);
  const auto n0 = c.trace.kept.size();
  ASSERT_LE(n0, static_cast<size_t>(kToppSlots)) << c.what;
  ASSERT_GE(c.trace.cutoff, kToppCutoffMin) << c.what;
  for (size_t j = 0; j < static_cast<size_t>(kToppSlots); ++j) {
    const float stale = std::ldexp(1.0f + static_cast<float>(rng() % 1024) / 1024.0f, -1 - static_cast<int>(rng() % 20));
    c.slot_p.push_back(j < n0 ? c.trace.kept[j].prob : stale);
    c.sorted_p.push_back(j < n0 ? c.trace.sorted[j].prob : stale);
    c.sorted_q.push_back(static_cast<float>(j < n0 ? c.trace.sorted[j].index : static_cast<int>(rng() % kVocab)));
  }
  float cum = 0.0f;
  for (size_t j = 0; j < static_cast<size_t>(kToppSlots); ++j) {
    cum += c.sorted_p[j];  // C's adds, continued over the stale rows
    c.cum.push_back(cum);
    if (j < n0) {
      ASSERT_EQ(std::bit_cast<uint32_t>(cum), std::bit_cast<uint32_t>(c.trace.cumulative[j])) << c.what;
    }
  }
}

// From logits as the sampler's earlier stages make them: p = fl(e / sum) with e's
// (mant, exponent) from expf's parts, pm = attn_probability's.
Case softmax_case(std::string what, const std::vector<float>& logits, float t, float topp, float coin, std::mt19937_64& rng) {
  Case c;
  c.what = std::move(what);
  c.topp = topp;
  c.coin = coin;
  const SampleTrace s = sample_reference(logits, t, coin);
  for (size_t q = 0; q < logits.size(); ++q) {
    const ExpfParts e = expf_reference_parts(s.scaled[q] - s.max);
    const float pm = attn_probability_reference(e.mant, e.exponent, s.sum);
    EXPECT_EQ(std::bit_cast<uint32_t>(std::ldexp(pm, e.exponent)), std::bit_cast<uint32_t>(s.prob[q])) << c.what;
    c.pm.push_back(pm);
    c.exponent.push_back(static_cast<float>(e.exponent));
    c.prob.push_back(s.prob[q]);
  }
  finish(c, rng);
  return c;
}

// Raw probabilities (not a softmax: the units' contract is on floats), each as pm 2^e
// with a random e in [-3, 0].
Case raw_case(std::string what, const std::vector<float>& prob, float topp, float coin, std::mt19937_64& rng) {
  Case c;
  c.what = std::move(what);
  c.topp = topp;
  c.coin = coin;
  c.prob = prob;
  for (float p : prob) {
    const int e = -static_cast<int>(rng() % 4);
    c.pm.push_back(std::ldexp(p, -e));
    c.exponent.push_back(static_cast<float>(e));
  }
  finish(c, rng);
  return c;
}

float random_coin(std::mt19937_64& rng) { return static_cast<float>(rng() >> 40) * 0x1p-24f; }

const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    std::vector<Case> out;
    std::mt19937_64 rng(2026);
    const auto tok = reference::Tokenizer::load(unit_testing::model_dir() + "tok512.bin", kVocab);
    struct Run {
      float t;
      uint64_t seed;
      const char* prompt;
    };
    std::vector<std::vector<float>> real;
    for (const Run r : {Run{1.0f, 42, ""}, Run{0.8f, 7, "Lily"}}) {  // run.c -t T -p 0.9 -s S [-i P]
      reference::Transformer tf(unit_testing::stories260k());
      reference::Sampler sampler(kVocab, r.t, 0.9f, r.seed);
      uint64_t coins = r.seed;  // the same draws, one per sampled position
      reference::GenerateCallbacks cb;
      int sampled = 0;
      cb.on_step = [&](const reference::GenerateStep& st) {
        if (st.forced) return;
        std::vector<float> logits(st.logits.begin(), st.logits.end());
        Case c = softmax_case("run.c -t " + std::to_string(r.t) + " -p 0.9 -s " + std::to_string(r.seed) + " pos " +
                                  std::to_string(st.pos),
                              logits, r.t, 0.9f, reference::random_f32(coins), rng);
        EXPECT_EQ(c.trace.pick, st.next) << c.what;  // the trace is run.c's sample_topp
        out.push_back(std::move(c));
        if (sampled++ % 4 == 0) real.push_back(std::move(logits));
      };
      reference::generate(tf, tok, sampler, r.prompt, 14, false, cb);
    }
    // The same logits at other topp and coins: 0, the largest, r on / one step around a
    // cumulative sum (coin * cumulative_prob against cdf_k).
    for (size_t i = 0; i < real.size(); ++i) {
      const float t = i % 2 ? 0.8f : 1.0f;
      for (float topp : {0.5f, 0.8f, 0.1f}) out.push_back(softmax_case("real topp " + std::to_string(topp), real[i], t, topp, random_coin(rng), rng));
      const Case base = softmax_case("real", real[i], t, 0.9f, 0.0f, rng);
      for (float coin : {0.0f, 1.0f - 0x1p-24f}) out.push_back(softmax_case("real coin edge", real[i], t, 0.9f, coin, rng));
      for (int k = 0; k <= std::min(base.trace.last_idx, 3); ++k)
        for (int step : {-1, 0, 1}) {
          const double target = std::floor(static_cast<double>(base.trace.cumulative[static_cast<size_t>(k)]) /
                                           static_cast<double>(base.trace.cumulative_prob) * 0x1p24) + step;
          const float coin = static_cast<float>(std::clamp(target, 0.0, 0x1p24 - 1) * 0x1p-24);
          out.push_back(softmax_case("real r near cdf " + std::to_string(k), real[i], t, 0.9f, coin, rng));
        }
    }
    // Synthetic softmaxes: ties (a few logit levels), one kept entry, many kept.
    for (int i = 0; i < 12; ++i) {
      std::vector<float> l(kVocab, -8.0f);
      const int top = 1 + static_cast<int>(rng() % 40);
      for (int j = 0; j < 3 * top; ++j) l[rng() % kVocab] = static_cast<float>(rng() % 3) * 0.75f;
      out.push_back(softmax_case("ties", l, 1.0f, i % 2 ? 0.9f : 0.6f, random_coin(rng), rng));
    }
    {
      std::vector<float> l(kVocab, 0.0f);
      l[137] = 24.0f;
      for (float coin : {0.0f, 0.5f, 1.0f - 0x1p-24f}) out.push_back(softmax_case("one kept", l, 1.0f, 0.9f, coin, rng));
    }
    for (int n0 : {96, 120, kToppSlots}) {
      std::vector<float> l(kVocab, -20.0f);
      std::vector<int> idx(kVocab);
      for (int j = 0; j < kVocab; ++j) idx[static_cast<size_t>(j)] = j;
      std::shuffle(idx.begin(), idx.end(), rng);
      for (int j = 0; j < n0; ++j) l[static_cast<size_t>(idx[static_cast<size_t>(j)])] = static_cast<float>(rng() % 64) / 64.0f;
      for (float topp : {0.99f, 0.9f}) out.push_back(softmax_case("many kept " + std::to_string(n0), l, 1.0f, topp, random_coin(rng), rng));
    }
    // Raw probabilities: few levels (ties), every level kept (cutoff <= 0.1 / 511), sums <=
    // 128 2^-8 < topp (no crossing: last_idx = n0 - 1).
    for (int i = 0; i < 16; ++i) {
      std::vector<float> p(kVocab, 1e-9f);
      const int kept = 1 + static_cast<int>(rng() % kToppSlots);
      const float level[3] = {std::ldexp(1.0f, -8 - static_cast<int>(rng() % 4)), 0.001953125f, 0.0015f};
      for (int j = 0; j < kept; ++j) p[rng() % kVocab] = level[rng() % 3] * (i % 2 ? 1.0f : 0.25f);
      out.push_back(raw_case("raw", p, static_cast<float>(90 + rng() % 9) / 100.0f, random_coin(rng), rng));
    }
    // p exactly at the cutoff (kept: run.c's >=) and one ulp either side.
    for (float topp : {0.9f, 0.75f}) {
      const float cutoff = (1.0f - topp) / static_cast<float>(kVocab - 1);
      std::vector<float> p(kVocab, 1e-9f);
      for (int j = 0; j < 40; ++j) p[static_cast<size_t>(rng() % kVocab)] = 0.01f;
      p[3] = cutoff;
      p[200] = std::nextafter(cutoff, 0.0f);
      p[201] = std::nextafter(cutoff, 1.0f);
      p[511] = cutoff;
      out.push_back(raw_case("at the cutoff", p, topp, random_coin(rng), rng));
    }
    return out;
  }();
  return all;
}

// ---------------------------------------------------------------- units on the engine

using Build = std::function<std::vector<ValueId>(Program&, const std::vector<ValueId>&)>;

UnitHarness make_unit(int inputs, const Build& build) {
  UnitProgram u;
  u.inputs = u.program.values("in", inputs);
  u.outputs = build(u.program, u.inputs);
  return UnitHarness(std::move(u), 256);
}

std::vector<ValueId> slice(const std::vector<ValueId>& v, size_t at, size_t n) {
  return {v.begin() + static_cast<std::ptrdiff_t>(at), v.begin() + static_cast<std::ptrdiff_t>(at + n)};
}

struct Rows {
  std::vector<float> in, out;
  int64_t count = 0;
  void add(const std::vector<float>& i, const std::vector<float>& o) {
    in.insert(in.end(), i.begin(), i.end());
    out.insert(out.end(), o.begin(), o.end());
    ++count;
  }
};

void expect_exact(const UnitHarness& h, const Rows& rows, const char* name, int64_t sim_cases = 0) {
  const unit_testing::UnitRun r = h.run(rows.in, rows.out, false);
  EXPECT_EQ(r.cases, rows.count) << name;
  EXPECT_EQ(r.mismatches, 0) << name << ": " << r.first_mismatch;
  if (sim_cases > 0) {  // the first cases again under HostSim's random summation orders
    const size_t n_in = rows.in.size() / static_cast<size_t>(rows.count), n_out = rows.out.size() / static_cast<size_t>(rows.count);
    const auto k = static_cast<size_t>(std::min(sim_cases, rows.count));
    const std::vector<float> in(rows.in.begin(), rows.in.begin() + static_cast<std::ptrdiff_t>(k * n_in));
    const std::vector<float> out(rows.out.begin(), rows.out.begin() + static_cast<std::ptrdiff_t>(k * n_out));
    const unit_testing::UnitRun s = h.run(in, out, true, 77);
    EXPECT_EQ(s.mismatches, 0) << name << " (HostSim): " << s.first_mismatch;
  }
  std::printf("%s: %lld cases bit-exact on the engine; %lld layers, hidden %lld, %lld neurons\n", name,
              static_cast<long long>(r.cases - r.mismatches), static_cast<long long>(h.layers()),
              static_cast<long long>(h.hidden()), static_cast<long long>(h.neurons()));
}

// The units as the tests run them (inputs and outputs in these orders).
constexpr int kRankSlots = 16;
constexpr int in_base = kBlock, in_slots = kBlock + 1, in_sbase = in_slots + kRankSlots, in_n0 = in_sbase + 1,
              in_rank = in_n0 + 1, in_enable = in_rank + kBlock;

UnitHarness cutoff_unit() {
  return make_unit(2, [](Program& p, const std::vector<ValueId>& in) {
    return std::vector<ValueId>{topp_cutoff(p, in[0], kVocab, in[1])};
  });
}

UnitHarness keep_unit() {
  return make_unit(2 * kBlock + 3, [](Program& p, const std::vector<ValueId>& in) {
    const ToppKeepBlock b = topp_keep_block(p, slice(in, 0, kBlock), slice(in, kBlock, kBlock), in[2 * kBlock],
                                            in[2 * kBlock + 1], in[2 * kBlock + 2]);
    std::vector<ValueId> o = b.prob;
    o.insert(o.end(), b.keep.begin(), b.keep.end());
    o.insert(o.end(), b.slot.begin(), b.slot.end());
    o.push_back(b.count);
    return o;
  });
}

UnitHarness rank_unit() {
  return make_unit(in_enable + 1, [](Program& p, const std::vector<ValueId>& in) {
    const ToppRankBlock b = topp_rank_block(p, slice(in, 0, kBlock), in[in_base], slice(in, in_slots, kRankSlots),
                                            in[in_sbase], in[in_n0], slice(in, in_rank, kBlock), in[in_enable]);
    std::vector<ValueId> o = b.rank;
    o.insert(o.end(), b.valid.begin(), b.valid.end());
    return o;
  });
}

UnitHarness nucleus_unit() {
  return make_unit(kBlock + 8, [](Program& p, const std::vector<ValueId>& in) {
    const ToppNucleusState st{in[kBlock + 3], in[kBlock + 4], in[kBlock + 5], in[kBlock + 6]};
    const ToppNucleusBlock b = topp_nucleus_block(p, slice(in, 0, kBlock), in[kBlock], in[kBlock + 1], in[kBlock + 2], st,
                                                  in[kBlock + 7]);
    std::vector<ValueId> o = b.cum;
    o.insert(o.end(), b.lt.begin(), b.lt.end());
    o.insert(o.end(), b.onehot.begin(), b.onehot.end());
    o.insert(o.end(), {b.out.cum, b.out.crossed, b.out.count, b.out.selected});
    return o;
  });
}

UnitHarness r_unit() {
  return make_unit(3, [](Program& p, const std::vector<ValueId>& in) {
    return std::vector<ValueId>{topp_r(p, in[0], in[1], in[2])};
  });
}

UnitHarness pick_unit() {
  return make_unit(2 * kBlock + 6, [](Program& p, const std::vector<ValueId>& in) {
    const auto at = [&](int i) { return in[static_cast<size_t>(2 * kBlock + i)]; };
    const ToppPickBlock b =
        topp_pick_block(p, slice(in, 0, kBlock), slice(in, kBlock, kBlock), at(0), at(1), at(2), at(3), at(4), at(5));
    std::vector<ValueId> o = b.lt;
    o.insert(o.end(), b.onehot.begin(), b.onehot.end());
    o.insert(o.end(), {b.crossed, b.token});
    return o;
  });
}

TEST(ToppCases, CoverEveryBranch) {
  int one = 0, many = 0, ties = 0, no_cross = 0, fallback_pick = 0, low_exp = 0, at_cutoff = 0;
  size_t n0_max = 0;
  for (const Case& c : cases()) {
    const size_t n0 = c.trace.kept.size();
    n0_max = std::max(n0_max, n0);
    one += n0 == 1;
    many += n0 > 88;
    for (size_t k = 1; k < n0; ++k) ties += c.trace.sorted[k].prob == c.trace.sorted[k - 1].prob;
    no_cross += c.trace.cumulative.back() <= c.topp;
    fallback_pick += c.trace.r >= c.trace.cumulative_prob;  // only with coin 1 - 2^-24 rounding up, if ever
    for (float e : c.exponent) low_exp += e < static_cast<float>(kToppExpMin);
    for (float p : c.prob) at_cutoff += p == c.trace.cutoff;
  }
  std::printf("%zu cases: n0 max %zu, %d with one kept, %d with > 88 kept, %d tied neighbours, %d never over topp, "
              "%d r >= cumulative, %d exponents below %d, %d p == cutoff\n",
              cases().size(), n0_max, one, many, ties, no_cross, fallback_pick, low_exp, kToppExpMin, at_cutoff);
  EXPECT_EQ(n0_max, static_cast<size_t>(kToppSlots));
  EXPECT_GT(one, 0);
  EXPECT_GT(many, 2);
  EXPECT_GT(ties, 100);
  EXPECT_GT(no_cross, 2);
  EXPECT_GT(low_exp, 1000);
  EXPECT_GT(at_cutoff, 0);
}

TEST(ToppCutoff, EngineMatchesC) {
  const UnitHarness h = cutoff_unit();
  Rows rows;
  for (const Case& c : cases()) rows.add({c.topp, 1.0f}, {c.trace.cutoff});
  std::mt19937_64 rng(3);
  for (int i = 0; i < 2000; ++i) {  // topp over its window: cutoff >= 2^-24
    const float topp = std::min(1.0f - 0x1p-15f, static_cast<float>(rng() >> 40) * 0x1p-24f + 0x1p-24f);
    rows.add({topp, 1.0f}, {(1.0f - topp) / static_cast<float>(kVocab - 1)});
  }
  expect_exact(h, rows, "CUTOFF", 64);
}

TEST(ToppKeep, EngineMatchesTraceEveryBlock) {
  const UnitHarness h = keep_unit();
  Rows rows;
  for (const Case& c : cases()) {
    std::vector<char> kept(kVocab, 0);
    for (const auto& e : c.trace.kept) kept[static_cast<size_t>(e.index)] = 1;
    float count = 0.0f;
    for (int b = 0; b < kVocab / kBlock; ++b) {
      std::vector<float> in, prob, keep, slot;
      for (int r = 0; r < kBlock; ++r) in.push_back(c.pm[static_cast<size_t>(b * kBlock + r)]);
      for (int r = 0; r < kBlock; ++r) in.push_back(c.exponent[static_cast<size_t>(b * kBlock + r)]);
      in.insert(in.end(), {c.trace.cutoff, count, 1.0f});
      for (int r = 0; r < kBlock; ++r) {
        const size_t q = static_cast<size_t>(b * kBlock + r);
        prob.push_back(c.exponent[q] >= static_cast<float>(kToppExpMin) ? c.prob[q] : 0.0f);
        keep.push_back(kept[q]);
        slot.push_back(count);  // the kept RAM's row of q when kept: the trace's position of q
        count += kept[q];
      }
      std::vector<float> out = prob;
      out.insert(out.end(), keep.begin(), keep.end());
      out.insert(out.end(), slot.begin(), slot.end());
      out.push_back(count);
      rows.add(in, out);
    }
    EXPECT_EQ(count, static_cast<float>(c.trace.kept.size()));
  }
  expect_exact(h, rows, "KEEP block of 8", 64);
}

// RANK of a block of 8 against a block of kRankSlots slots, every pair of blocks up to the
// case's n0 (and one all-stale pair): the partial ranks cross from slot block to slot
// block; after the last one each is the trace's rank.

TEST(ToppRank, EngineMatchesTraceEveryBlock) {
  const UnitHarness h = rank_unit();
  Rows rows;
  for (const Case& c : cases()) {
    const int n0 = static_cast<int>(c.trace.kept.size());
    // run.c's order, counted from the definition: j ranks before i.
    auto ahead = [&](int j, int i) {
      const float pj = c.slot_p[static_cast<size_t>(j)], pi = c.slot_p[static_cast<size_t>(i)];
      return j < n0 && i < n0 && (pj > pi || (j < i && pj == pi));
    };
    for (int b = 0; b < kSlotBlocks; ++b) {
      if (b * kBlock > n0 + kBlock && b != kSlotBlocks - 1) continue;  // one all-stale block is enough
      std::vector<float> partial(kBlock, 0.0f), valid(kBlock);
      for (int r = 0; r < kBlock; ++r) valid[static_cast<size_t>(r)] = b * kBlock + r < n0 ? 1.0f : 0.0f;
      for (int sb = 0; sb < kToppSlots / kRankSlots; ++sb) {
        if (sb * kRankSlots > n0 + kRankSlots && sb != kToppSlots / kRankSlots - 1) continue;
        std::vector<float> in(c.slot_p.begin() + b * kBlock, c.slot_p.begin() + (b + 1) * kBlock);
        in.push_back(static_cast<float>(b * kBlock));
        in.insert(in.end(), c.slot_p.begin() + sb * kRankSlots, c.slot_p.begin() + (sb + 1) * kRankSlots);
        in.insert(in.end(), {static_cast<float>(sb * kRankSlots), static_cast<float>(n0)});
        in.insert(in.end(), partial.begin(), partial.end());
        in.push_back(1.0f);
        for (int r = 0; r < kBlock; ++r)
          for (int s = 0; s < kRankSlots; ++s) partial[static_cast<size_t>(r)] += ahead(sb * kRankSlots + s, b * kBlock + r);
        std::vector<float> out = partial;
        out.insert(out.end(), valid.begin(), valid.end());
        rows.add(in, out);
      }
      for (int r = 0; r < kBlock; ++r) {
        if (b * kBlock + r < n0) {
          ASSERT_EQ(partial[static_cast<size_t>(r)], static_cast<float>(c.trace.rank[static_cast<size_t>(b * kBlock + r)]))
              << c.what;
        }
      }
    }
  }
  expect_exact(h, rows, "RANK block of 8 against 16 slots", 8);
}

TEST(ToppNucleus, EngineMatchesTraceEveryBlock) {
  const UnitHarness h = nucleus_unit();
  Rows rows;
  for (const Case& c : cases()) {
    const int n0 = static_cast<int>(c.trace.kept.size()), last = c.trace.last_idx;
    auto lt = [&](int k) { return k >= last ? 1.0f : 0.0f; };  // run.c: ranks past last_idx are cut
    for (int b = 0; b < kSlotBlocks; ++b) {
      const int base = b * kBlock;
      std::vector<float> in(c.sorted_p.begin() + base, c.sorted_p.begin() + base + kBlock);
      const float cum_in = b == 0 ? 0.0f : c.cum[static_cast<size_t>(base - 1)];
      const float crossed_in = b == 0 ? 0.0f : lt(base - 1);
      in.insert(in.end(), {static_cast<float>(base), static_cast<float>(n0), c.topp, cum_in, crossed_in,
                           static_cast<float>(std::min(base, last)), crossed_in != 0.0f ? c.trace.cumulative_prob : 0.0f, 1.0f});
      std::vector<float> out(c.cum.begin() + base, c.cum.begin() + base + kBlock);
      for (int k = 0; k < kBlock; ++k) out.push_back(lt(base + k));
      for (int k = 0; k < kBlock; ++k) out.push_back(base + k == last ? 1.0f : 0.0f);
      const bool crossed = lt(base + kBlock - 1) != 0.0f;
      out.insert(out.end(), {c.cum[static_cast<size_t>(base + kBlock - 1)], crossed ? 1.0f : 0.0f,
                             static_cast<float>(std::min(base + kBlock, last)), crossed ? c.trace.cumulative_prob : 0.0f});
      rows.add(in, out);
    }
  }
  expect_exact(h, rows, "NUCLEUS block of 8", 32);
}

TEST(ToppR, EngineMatchesTrace) {
  const UnitHarness h = r_unit();
  Rows rows;
  for (const Case& c : cases()) rows.add({c.trace.cumulative_prob, c.coin, 1.0f}, {c.trace.r});
  expect_exact(h, rows, "R", 32);
}

TEST(ToppPick, EngineMatchesTraceEveryBlock) {
  const UnitHarness h = pick_unit();
  Rows rows;
  int fallbacks = 0;
  for (const Case& c : cases())
    for (const bool fallback : {false, true}) {
    // run.c's fallback (no r < cdf up to last_idx: probindex[last_idx]) cannot happen with
    // r = coin * cumulative_prob, coin < 1; the unit's contract is on floats, so it also
    // runs with r = cumulative_prob, picked by run.c's second loop.
    const float r = fallback ? c.trace.cumulative_prob : c.trace.r;
    int pick = c.trace.last_idx;
    for (int i = 0; i <= c.trace.last_idx; ++i)
      if (r < c.cum[static_cast<size_t>(i)]) {
        pick = i;
        break;
      }
    if (!fallback) {
      EXPECT_EQ(pick, c.trace.pick_rank) << c.what;
    } else {
      fallbacks += pick == c.trace.last_idx;
    }
    const float token = c.sorted_q[static_cast<size_t>(pick)];
    auto lt = [&](int k) { return k >= pick ? 1.0f : 0.0f; };
    for (int b = 0; b < kSlotBlocks; ++b) {
      const int base = b * kBlock;
      std::vector<float> in(c.cum.begin() + base, c.cum.begin() + base + kBlock);
      in.insert(in.end(), c.sorted_q.begin() + base, c.sorted_q.begin() + base + kBlock);
      const float crossed_in = b == 0 ? 0.0f : lt(base - 1);
      in.insert(in.end(), {static_cast<float>(base), static_cast<float>(c.trace.last_idx), r, crossed_in,
                           crossed_in != 0.0f ? token : 0.0f, 1.0f});
      std::vector<float> out;
      for (int k = 0; k < kBlock; ++k) out.push_back(lt(base + k));
      for (int k = 0; k < kBlock; ++k) out.push_back(base + k == pick ? 1.0f : 0.0f);
      const bool crossed = lt(base + kBlock - 1) != 0.0f;
      out.insert(out.end(), {crossed ? 1.0f : 0.0f, crossed ? token : 0.0f});
      rows.add(in, out);
    }
  }
  EXPECT_GT(fallbacks, 10);
  expect_exact(h, rows, "PICK block of 8 (r = run.c's, and r = cumulative_prob: the fallback)", 32);
}

// The units chained as the machine would chain them, every value from the engine: the
// CUTOFF unit's cutoff into KEEP (the count crossing from block to block), KEEP's slots
// writing a host-side kept RAM (dirty rows past n0), RANK's partial ranks crossing slot
// blocks (the blocks a machine runs: ceil(n0 / 8) x ceil(n0 / 16)), its ranks writing the
// sorted RAM (dirty past n0), NUCLEUS's state block to block, R, PICK's: the last block's
// token is the trace's pick (for run.c's -p 0.9 runs: run.c's token) in every case.
TEST(ToppChain, EngineUnitsChainedGiveRunCPick) {
  const std::vector<Case>& cs = cases();
  const size_t n = cs.size();
  std::mt19937_64 rng(9);
  auto dirty = [&] {
    std::vector<float> v(kToppSlots);
    for (float& x : v) x = std::ldexp(1.0f + static_cast<float>(rng() % 1024) / 1024.0f, -1 - static_cast<int>(rng() % 20));
    return v;
  };
  auto at = [](const std::vector<float>& out, size_t row, size_t width, size_t i) { return out[row * width + i]; };

  std::vector<float> in;
  for (const Case& c : cs) in.insert(in.end(), {c.topp, 1.0f});
  const std::vector<float> cutoff = cutoff_unit().outputs(in);

  const UnitHarness keep = keep_unit();
  std::vector<float> count(n, 0.0f);
  std::vector<std::vector<float>> slot_p(n), slot_q(n);
  for (size_t c = 0; c < n; ++c) slot_p[c] = dirty(), slot_q[c] = dirty();
  for (int b = 0; b < kVocab / kBlock; ++b) {
    in.clear();
    for (size_t c = 0; c < n; ++c) {
      in.insert(in.end(), cs[c].pm.begin() + b * kBlock, cs[c].pm.begin() + (b + 1) * kBlock);
      in.insert(in.end(), cs[c].exponent.begin() + b * kBlock, cs[c].exponent.begin() + (b + 1) * kBlock);
      in.insert(in.end(), {cutoff[c], count[c], 1.0f});
    }
    const std::vector<float> out = keep.outputs(in);
    constexpr size_t w = 3 * kBlock + 1;
    for (size_t c = 0; c < n; ++c) {
      for (size_t r = 0; r < kBlock; ++r) {
        if (at(out, c, w, kBlock + r) != 1.0f) continue;
        const auto slot = static_cast<size_t>(at(out, c, w, 2 * kBlock + r));
        ASSERT_LT(slot, static_cast<size_t>(kToppSlots)) << cs[c].what;
        slot_p[c][slot] = at(out, c, w, r);
        slot_q[c][slot] = static_cast<float>(b * kBlock) + static_cast<float>(r);
      }
      count[c] = at(out, c, w, 3 * kBlock);
    }
  }
  for (size_t c = 0; c < n; ++c) ASSERT_EQ(count[c], static_cast<float>(cs[c].trace.kept.size())) << cs[c].what;

  const UnitHarness rank = rank_unit();
  std::vector<std::vector<float>> partial(n, std::vector<float>(kToppSlots, 0.0f));
  for (int sb = 0; sb < kToppSlots / kRankSlots; ++sb) {
    in.clear();
    std::vector<std::pair<size_t, int>> rows;  // (case, block)
    for (size_t c = 0; c < n; ++c) {
      const int n0 = static_cast<int>(count[c]);
      if (sb * kRankSlots >= n0) continue;
      for (int b = 0; b * kBlock < n0; ++b) {
        rows.push_back({c, b});
        in.insert(in.end(), slot_p[c].begin() + b * kBlock, slot_p[c].begin() + (b + 1) * kBlock);
        in.push_back(static_cast<float>(b * kBlock));
        in.insert(in.end(), slot_p[c].begin() + sb * kRankSlots, slot_p[c].begin() + (sb + 1) * kRankSlots);
        in.insert(in.end(), {static_cast<float>(sb * kRankSlots), count[c]});
        in.insert(in.end(), partial[c].begin() + b * kBlock, partial[c].begin() + (b + 1) * kBlock);
        in.push_back(1.0f);
      }
    }
    if (rows.empty()) break;
    const std::vector<float> out = rank.outputs(in);
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t r = 0; r < kBlock; ++r)
        partial[rows[i].first][static_cast<size_t>(rows[i].second * kBlock) + r] = at(out, i, 2 * kBlock, r);
  }
  std::vector<std::vector<float>> sorted_p(n), sorted_q(n);
  for (size_t c = 0; c < n; ++c) {
    sorted_p[c] = dirty(), sorted_q[c] = dirty();
    for (size_t i = 0; i < static_cast<size_t>(count[c]); ++i) {
      const auto k = static_cast<size_t>(partial[c][i]);
      ASSERT_LT(k, static_cast<size_t>(count[c])) << cs[c].what;
      sorted_p[c][k] = slot_p[c][i];
      sorted_q[c][k] = slot_q[c][i];
    }
  }

  const UnitHarness nucleus = nucleus_unit();
  std::vector<std::array<float, 4>> st(n, {0.0f, 0.0f, 0.0f, 0.0f});
  std::vector<std::vector<float>> cum(n, std::vector<float>(kToppSlots, 0.0f));
  for (int b = 0; b < kSlotBlocks; ++b) {
    in.clear();
    for (size_t c = 0; c < n; ++c) {
      in.insert(in.end(), sorted_p[c].begin() + b * kBlock, sorted_p[c].begin() + (b + 1) * kBlock);
      in.insert(in.end(), {static_cast<float>(b * kBlock), count[c], cs[c].topp});
      in.insert(in.end(), st[c].begin(), st[c].end());
      in.push_back(1.0f);
    }
    const std::vector<float> out = nucleus.outputs(in);
    constexpr size_t w = 3 * kBlock + 4;
    for (size_t c = 0; c < n; ++c) {
      for (size_t k = 0; k < kBlock; ++k) cum[c][static_cast<size_t>(b * kBlock) + k] = at(out, c, w, k);
      for (size_t i = 0; i < 4; ++i) st[c][i] = at(out, c, w, 3 * kBlock + i);
    }
  }
  in.clear();
  for (size_t c = 0; c < n; ++c) {
    ASSERT_EQ(st[c][2], static_cast<float>(cs[c].trace.last_idx)) << cs[c].what;
    ASSERT_EQ(std::bit_cast<uint32_t>(st[c][3]), std::bit_cast<uint32_t>(cs[c].trace.cumulative_prob)) << cs[c].what;
    in.insert(in.end(), {st[c][3], cs[c].coin, 1.0f});
  }
  const std::vector<float> r = r_unit().outputs(in);

  const UnitHarness pick = pick_unit();
  std::vector<float> crossed(n, 0.0f), token(n, 0.0f);
  for (int b = 0; b < kSlotBlocks; ++b) {
    in.clear();
    for (size_t c = 0; c < n; ++c) {
      in.insert(in.end(), cum[c].begin() + b * kBlock, cum[c].begin() + (b + 1) * kBlock);
      in.insert(in.end(), sorted_q[c].begin() + b * kBlock, sorted_q[c].begin() + (b + 1) * kBlock);
      in.insert(in.end(), {static_cast<float>(b * kBlock), st[c][2], r[c], crossed[c], token[c], 1.0f});
    }
    const std::vector<float> out = pick.outputs(in);
    constexpr size_t w = 2 * kBlock + 2;
    for (size_t c = 0; c < n; ++c) crossed[c] = at(out, c, w, 2 * kBlock), token[c] = at(out, c, w, 2 * kBlock + 1);
  }
  int run_c = 0;
  for (size_t c = 0; c < n; ++c) {
    EXPECT_EQ(std::bit_cast<uint32_t>(r[c]), std::bit_cast<uint32_t>(cs[c].trace.r)) << cs[c].what;
    EXPECT_EQ(token[c], static_cast<float>(cs[c].trace.pick)) << cs[c].what;
    run_c += cs[c].what.rfind("run.c", 0) == 0;
  }
  std::printf("chained units: %zu picks equal the trace's (%d of them run.c's -p 0.9 tokens)\n", n, run_c);
}

// The idle contract: enable 0 and every input 0 -> every value of the unit +-0 after
// every 4th layer and the last.
TEST(ToppUnits, IdleWritesOnlyZeros) {
  const std::vector<std::pair<int, Build>> units{
      {2, [](Program& p, const std::vector<ValueId>& in) { return std::vector<ValueId>{topp_cutoff(p, in[0], kVocab, in[1])}; }},
      {2 * kBlock + 3,
       [](Program& p, const std::vector<ValueId>& in) {
         return topp_keep_block(p, slice(in, 0, kBlock), slice(in, kBlock, kBlock), in[16], in[17], in[18]).slot;
       }},
      {2 * kBlock + 16 + 4,
       [](Program& p, const std::vector<ValueId>& in) {
         return topp_rank_block(p, slice(in, 0, kBlock), in[8], slice(in, 9, 16), in[25], in[26], slice(in, 27, kBlock), in[35])
             .rank;
       }},
      {kBlock + 8,
       [](Program& p, const std::vector<ValueId>& in) {
         return topp_nucleus_block(p, slice(in, 0, kBlock), in[8], in[9], in[10], {in[11], in[12], in[13], in[14]}, in[15]).lt;
       }},
      {3, [](Program& p, const std::vector<ValueId>& in) { return std::vector<ValueId>{topp_r(p, in[0], in[1], in[2])}; }},
      {2 * kBlock + 6,
       [](Program& p, const std::vector<ValueId>& in) {
         return topp_pick_block(p, slice(in, 0, kBlock), slice(in, kBlock, kBlock), in[16], in[17], in[18], in[19], in[20],
                                in[21])
             .lt;
       }},
  };
  for (const auto& [inputs, build] : units) {
    const UnitHarness h = make_unit(inputs, build);
    EXPECT_EQ(h.idle_nonzero(4), "") << "unit with " << inputs << " inputs";
  }
}

// The units' shapes (printed for docs/npu-machine.md): MLP sublayers and neurons.
TEST(ToppUnits, Costs) {
  auto report = [](const char* name, const Program& p) {
    int64_t neurons = 0;
    for (const auto& op : p.ops()) neurons += static_cast<int64_t>(op.neurons.size());
    const compiler::Schedule sc = compiler::schedule(p);
    // Under the machine's width budget (<= 1,024 neurons per MLP sublayer, sunk).
    const compiler::Schedule budget = compiler::schedule(p, unit_testing::budget_limits());
    std::printf("%s: %lld MLP sublayers (%lld within 1,024 neurons a sublayer), %lld neurons\n", name,
                static_cast<long long>(sc.num_sublayers / 2), static_cast<long long>(budget.num_sublayers / 2),
                static_cast<long long>(neurons));
    return sc.num_sublayers / 2;
  };
  {
    Program p;
    topp_cutoff(p, p.value("topp"), kVocab, p.value("enable"));
    report("CUTOFF", p);
  }
  {
    Program p;
    topp_keep_block(p, p.values("pm", kBlock), p.values("exponent", kBlock), p.value("cutoff"), p.value("count"),
                    p.value("enable"));
    EXPECT_LE(report("KEEP block of 8", p), 8);
  }
  {
    for (int slots : {8, 16, kToppSlots}) {
      Program p;
      topp_rank_block(p, p.values("block", kBlock), p.value("base"), p.values("slots", slots), p.value("slot_base"),
                      p.value("n0"), p.values("rank", kBlock), p.value("enable"));
      const std::string name = "RANK block of 8 against " + std::to_string(slots) + " slots";
      const int64_t depth = report(name.c_str(), p);
      if (slots == 16) {
        EXPECT_LE(depth, 7);
      }
    }
  }
  {
    Program p;
    topp_nucleus_block(p, p.values("sorted", kBlock), p.value("base"), p.value("n0"), p.value("topp"),
                       {p.value("cum"), p.value("crossed"), p.value("count"), p.value("selected")}, p.value("enable"));
    report("NUCLEUS block of 8", p);
  }
  {
    Program p;
    topp_pick_block(p, p.values("cum", kBlock), p.values("index", kBlock), p.value("base"), p.value("last"), p.value("r"),
                    p.value("crossed"), p.value("token"), p.value("enable"));
    report("PICK block of 8", p);
  }
}

}  // namespace
}  // namespace qpu::npu
