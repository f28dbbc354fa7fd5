// run.c's sampler on its temperature path (npu/unit_sample.h) on the engine and under
// HostSim's random summation orders, bit for bit against C: real logits of stories260K
// (the greedy "Once upon a time" story, random token prompts, and run.c's own sampled
// runs), temperatures 1.0, 0.8, 0.5, 1.3 and random ones, coins of several seeds and
// adversarial ones (0, 1 - 2^-24, on and one step around a cdf value, above the final
// cdf: run.c's fallback n - 1), plus random blocks of every kind.
// First the C composition: the block references chained over the 512 logits equal
// run.c's sample() (reference::Sampler, reference::softmax, sample_mult) in every
// intermediate and the index. Then every stage's unit on the engine with C's inputs for
// every block of the cases: the units' outputs equal C's block by block, so the chain
// of units computes run.c's index.
// QPU_NPU_CASES sets the slice (default / sanitizer runs: a few cases; >= 10^5: long).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include <gtest/gtest.h>

#include "common/error.h"
#include "compiler/host_sim.h"
#include "compiler/schedule.h"
#include "npu/engine_host.h"
#include "npu/expf_model.h"
#include "npu/suite.h"
#include "npu/unit_sample.h"
#include "unit_harness.h"
#include "reference/generate.h"
#include "reference/run_c_ops.h"
#include "reference/sampler.h"
#include "reference/tokenizer.h"

namespace qpu::npu {
namespace {

constexpr int64_t kCases = QPU_NPU_CASES;
constexpr bool kLong = kCases >= 100000;
constexpr int kVocab = 512;
constexpr int kBlock = 8;

using unit_testing::host_sim;
using unit_testing::rand_float;

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

// ---------------------------------------------------------------- real logits and cases

struct LogitSource {
  std::vector<std::vector<float>> logits;  // real forward outputs of stories260K
  // run.c's own sampled runs (temperature, topp 1: sample_mult): the logits of every
  // sampled position, its coin (the k-th draw of the seed) and the token run.c chose.
  struct Sampled {
    std::vector<float> logits;
    float temperature, coin;
    int next;
  };
  std::vector<Sampled> sampled;
};

const LogitSource& logit_source() {
  static const LogitSource src = [] {
    LogitSource s;
    const auto& ckpt = unit_testing::stories260k();
    const auto tok = reference::Tokenizer::load(unit_testing::model_dir() + "tok512.bin", kVocab);
    {  // the greedy story
      reference::Transformer tf(ckpt);
      reference::Sampler greedy(kVocab, 0.0f, 0.9f, 42);
      const auto run = reference::generate(tf, tok, greedy, "Once upon a time", kLong ? 96 : 24, true);
      for (int pos = 0; pos < run.positions; ++pos)
        s.logits.emplace_back(run.logits.begin() + pos * kVocab, run.logits.begin() + (pos + 1) * kVocab);
    }
    std::mt19937_64 rng(2026);
    for (int prompt = 0; prompt < (kLong ? 8 : 2); ++prompt) {  // random token prompts
      reference::Transformer tf(ckpt);
      const int len = kLong ? 24 : 6;
      for (int pos = 0; pos < len; ++pos) {
        const int token = pos == 0 ? 1 : 3 + static_cast<int>(rng() % (kVocab - 3));
        const auto l = tf.forward(token, pos);
        s.logits.emplace_back(l.begin(), l.end());
      }
    }
    // run.c's runs: -t 1.0 -s 42 and -t 0.8 -s 7 -i "Lily" with topp 1 (sample_mult),
    // and two more temperatures.
    struct Run {
      float t;
      uint64_t seed;
      const char* prompt;
    };
    for (const Run r : {Run{1.0f, 42, ""}, Run{0.8f, 7, "Lily"}, Run{0.5f, 1234, "Once upon"}, Run{1.3f, 99, ""}}) {
      reference::Transformer tf(ckpt);
      reference::Sampler sampler(kVocab, r.t, 1.0f, r.seed);
      uint64_t coins = r.seed;  // the same draws, one per sampled position
      reference::GenerateCallbacks cb;
      cb.on_step = [&](const reference::GenerateStep& st) {
        if (st.forced) return;
        s.sampled.push_back({std::vector<float>(st.logits.begin(), st.logits.end()), r.t,
                             reference::random_f32(coins), st.next});
      };
      reference::generate(tf, tok, sampler, r.prompt, kLong ? 64 : 12, false, cb);
    }
    return s;
  }();
  return src;
}

struct SampleCase {
  std::vector<float> logits;
  float temperature = 1.0f, coin = 0.0f;
};

// A coin on the 2^-24 grid at or next to a cdf value: the largest coin <= cdf, and one
// step above or below it (coin == cdf exactly where cdf is on the grid, cdf >= 2^-1 always).
float coin_near(float cdf, int step) {
  const double k = std::floor(static_cast<double>(cdf) * 0x1p24) + step;
  return static_cast<float>(std::clamp(k, 0.0, 0x1p24 - 1.0) * 0x1p-24);
}

// Every real logit vector with temperatures 1.0, 0.8, 0.5, 1.3 or random ones, coins of
// seeds 42, 7 and others, and the adversarial coins; then run.c's sampled positions with
// their own coins. Every 9th case gets the coin just above its final cdf (when the cdf
// ends below 1: run.c's fallback) and every 7th coin 0.
std::vector<SampleCase> sample_cases() {
  const LogitSource& src = logit_source();
  std::vector<SampleCase> out;
  std::mt19937_64 rng(77);
  uint64_t seeds[] = {42, 7, 1, 0x9e3779b97f4a7c15ull};
  const float temps[] = {1.0f, 0.8f, 0.5f, 1.3f};
  size_t k = 0;
  for (const auto& l : src.logits) {
    for (int rep = 0; rep < 2; ++rep, ++k) {
      SampleCase c;
      c.logits = l;
      c.temperature = k % 5 < 4 ? temps[k % 5] : 0.05f + static_cast<float>(rng() % 3000000) * 1e-6f;
      c.coin = reference::random_f32(seeds[k % 4]);
      const SampleTrace tr = sample_reference(c.logits, c.temperature, c.coin);
      if (k % 7 == 3) c.coin = 0.0f;
      else if (k % 7 == 5) c.coin = 0x1.fffffep-1f;
      else if (k % 9 == 4 && tr.cdf.back() < 1.0f) c.coin = coin_near(tr.cdf.back(), 0);
      else if (k % 3 == 1) c.coin = coin_near(tr.cdf[rng() % kVocab], static_cast<int>(rng() % 3) - 1);
      out.push_back(std::move(c));
    }
  }
  // Low temperatures with coin 0: the early probabilities underflow to 0 or subnormals,
  // so the first nonzero one (C's pick for coin 0) lies past index 0, in the low tier.
  for (size_t i = 0; i < src.logits.size(); i += 6) {
    out.push_back({src.logits[i], 0.05f, 0.0f});
    out.push_back({src.logits[i], 0.02f, 0.0f});
  }
  for (const auto& s : src.sampled) out.push_back({s.logits, s.temperature, s.coin});
  return out;
}

// The short slice's cases: a few of each kind (the engine stages are the costly part).
// The long build: ~100 cases (51,200 rows per stage), the short one 5.
std::vector<SampleCase> engine_cases() {
  std::vector<SampleCase> all = sample_cases();
  std::vector<SampleCase> some;
  const size_t step = std::max<size_t>(1, all.size() / (kLong ? 100 : 5));
  for (size_t i = 0; i < all.size(); i += step) some.push_back(all[i]);
  return some;
}

// ---------------------------------------------------------------- the block references chained

// Each block of every stage in C, with the state crossing between blocks; the per-block
// inputs and outputs are what the engine tests below feed and expect.
struct Blocks {
  std::vector<std::vector<float>> temp_first, temp_next;  // TEMP: logits, t, [running max], enable
  std::vector<std::vector<float>> exp_rows;               // EXP + SUM, one row: scaled, max, acc_in, enable
  std::vector<std::vector<float>> sum_blocks;             // SUM, a block: mant x8, exponent x8, acc_in
  std::vector<std::vector<float>> prob_rows;              // PROB, one row: mant, exponent, acc (final), enable
  std::vector<std::vector<float>> cdf_next, cdf_final;    // CDF: pm x8, exponent x8, acc, seen, crossed, count, coin, enable
};

// Runs the block references over one case, checks every intermediate against run.c's
// sample() (sample_reference, itself checked against reference::Sampler), and appends
// the blocks' inputs. Returns the index.
int chain_reference(const SampleCase& c, Blocks* out) {
  const SampleTrace tr = sample_reference(c.logits, c.temperature, c.coin);
  // TEMP
  float running = 0.0f;
  for (int b = 0; b < kVocab / kBlock; ++b) {
    std::vector<float> in(c.logits.begin() + b * kBlock, c.logits.begin() + (b + 1) * kBlock);
    in.push_back(c.temperature);
    if (b > 0) in.push_back(running);
    in.push_back(1.0f);
    for (int r = 0; r < kBlock; ++r) {
      const float x = in[static_cast<size_t>(r)] / c.temperature;
      EXPECT_EQ(bits(x), bits(tr.scaled[static_cast<size_t>(b * kBlock + r)]));
      running = (b == 0 && r == 0) || x > running ? x : running;
    }
    if (out) (b == 0 ? out->temp_first : out->temp_next).push_back(std::move(in));
  }
  EXPECT_EQ(bits(running), bits(tr.max));
  // EXP + SUM
  std::vector<float> mant(kVocab), ex(kVocab);
  float acc = 0.0f;
  for (int b = 0; b < kVocab / kBlock; ++b) {
    std::vector<float> blk(2 * kBlock + 1);
    blk.back() = acc;
    for (int r = 0; r < kBlock; ++r) {
      const auto q = static_cast<size_t>(b * kBlock + r);
      float m = 0.0f, e = 0.0f;
      const float acc_in = acc;
      acc = attn_exp_sum_block_reference(&tr.scaled[q], 1, tr.max, acc, &m, &e);
      EXPECT_EQ(bits(std::ldexp(m, static_cast<int>(e))), bits(tr.e[q]));
      mant[q] = m;
      ex[q] = e;
      blk[static_cast<size_t>(r)] = m;
      blk[static_cast<size_t>(kBlock + r)] = e;
      if (out) out->exp_rows.push_back({tr.scaled[q], tr.max, acc_in, 1.0f});
    }
    if (out) out->sum_blocks.push_back(std::move(blk));
  }
  bool high = false;
  EXPECT_EQ(bits(attn_sum_decode(acc, &high)), bits(tr.sum));
  EXPECT_TRUE(high);
  // PROB
  std::vector<float> pm(kVocab);
  for (int q = 0; q < kVocab; ++q) {
    const auto i = static_cast<size_t>(q);
    pm[i] = attn_probability_reference(mant[i], static_cast<int>(ex[i]), tr.sum);
    EXPECT_EQ(bits(std::ldexp(pm[i], static_cast<int>(ex[i]))), bits(tr.prob[i]));
    if (out) out->prob_rows.push_back({mant[i], ex[i], acc, 1.0f});
  }
  // CDF
  float cacc = 0.0f, seen = 0.0f, crossed = 0.0f, count = 0.0f, token = -1.0f;
  for (int b = 0; b < kVocab / kBlock; ++b) {
    const auto q0 = static_cast<size_t>(b * kBlock);
    const bool final_row = b + 1 == kVocab / kBlock;
    std::vector<float> in(pm.begin() + static_cast<std::ptrdiff_t>(q0), pm.begin() + static_cast<std::ptrdiff_t>(q0 + kBlock));
    in.insert(in.end(), ex.begin() + static_cast<std::ptrdiff_t>(q0), ex.begin() + static_cast<std::ptrdiff_t>(q0 + kBlock));
    in.insert(in.end(), {cacc, seen, crossed, count, c.coin, 1.0f});
    const SampleCdfReference r = sample_cdf_block_reference(&pm[q0], &ex[q0], kBlock, c.coin, cacc, seen, crossed, count, final_row);
    for (int t = 0; t < kBlock; ++t) {
      const auto q = q0 + static_cast<size_t>(t);
      float cdf = attn_sum_decode(r.cdf_encoded[static_cast<size_t>(t)], &high);
      EXPECT_EQ(bits(cdf), bits(tr.cdf[q])) << q;
      EXPECT_EQ(r.lt[static_cast<size_t>(t)], static_cast<float>(tr.lt[q])) << q;
      EXPECT_EQ(r.onehot[static_cast<size_t>(t)], static_cast<int>(q) == tr.index ? 1.0f : 0.0f) << q;
    }
    cacc = r.acc;
    seen = r.seen;
    crossed = r.crossed;
    count = r.count;
    token = r.token;
    if (out) (final_row ? out->cdf_final : out->cdf_next).push_back(std::move(in));
  }
  EXPECT_EQ(token, static_cast<float>(tr.index));
  return tr.index;
}

// run.c's sample() itself, for the same logits, temperature and coin: Sampler's division
// and softmax, then sample_mult.
int run_c_index(const SampleCase& c, std::vector<float>* probs) {
  std::vector<float> l = c.logits;
  for (float& x : l) x /= c.temperature;
  reference::softmax(l);
  if (probs) *probs = l;
  return reference::sample_mult(l, c.coin);
}

TEST(SampleReference, ChainedBlocksEqualRunCSampler) {
  const LogitSource& src = logit_source();
  // run.c's own runs: the sampler's coins and choices.
  int64_t sampled = 0;
  for (const auto& s : src.sampled) {
    SampleCase c{s.logits, s.temperature, s.coin};
    EXPECT_EQ(chain_reference(c, nullptr), s.next);
    ++sampled;
  }
  // Every case: every probability and the index equal run.c's, the fallback reached.
  int64_t cases = 0, fallback = 0, coin0 = 0, coin0_later = 0, zero_probs = 0, subnormal_probs = 0;
  for (const SampleCase& c : sample_cases()) {
    std::vector<float> probs;
    const int want = run_c_index(c, &probs);
    const SampleTrace tr = sample_reference(c.logits, c.temperature, c.coin);
    for (int q = 0; q < kVocab; ++q) {
      ASSERT_EQ(bits(tr.prob[static_cast<size_t>(q)]), bits(probs[static_cast<size_t>(q)]));
      zero_probs += probs[static_cast<size_t>(q)] == 0.0f;
      subnormal_probs += probs[static_cast<size_t>(q)] != 0.0f && probs[static_cast<size_t>(q)] < 0x1p-126f;
    }
    ASSERT_EQ(chain_reference(c, nullptr), want);
    fallback += !(c.coin < tr.cdf.back());
    coin0 += c.coin == 0.0f;
    coin0_later += c.coin == 0.0f && want > 0;
    ++cases;
  }
  EXPECT_GT(fallback, 0);
  EXPECT_GT(coin0_later, 0);
  EXPECT_GT(subnormal_probs, 0);
  std::printf("sampler C chain: %lld cases (%lld fallbacks to n - 1, %lld with coin 0, %lld of them past index 0; %lld "
              "zero and %lld subnormal probabilities), %lld of run.c's sampled positions\n",
              static_cast<long long>(cases), static_cast<long long>(fallback), static_cast<long long>(coin0),
              static_cast<long long>(coin0_later),
              static_cast<long long>(zero_probs), static_cast<long long>(subnormal_probs),
              static_cast<long long>(sampled));
}

// ---------------------------------------------------------------- engine specs

SuiteResult run_spec(const PrimitiveSpec& spec, int64_t cases, const HostFactory& host = engine_host()) {
  SuiteOptions o;
  o.cases = cases;
  o.rows = 512;
  o.max_hidden = 1024;
  return run_primitive(spec, host, o);
}

SuiteResult expect_spec_exact(const PrimitiveSpec& spec, int64_t cases, const HostFactory& host = engine_host()) {
  const SuiteResult r = run_spec(spec, cases, host);
  EXPECT_EQ(r.mismatches, 0) << spec.name << ": " << r.first_mismatch;
  std::printf("%s: %lld cases, %lld sublayers, %lld neurons/lane, %lld values/lane\n", spec.name.c_str(),
              static_cast<long long>(r.cases), static_cast<long long>(r.sublayers),
              static_cast<long long>(r.neurons_per_lane), static_cast<long long>(r.values_per_lane));
  return r;
}


// A spec whose cases are a fixed list (random_case draws them in order).
void use_case_list(PrimitiveSpec& s, std::shared_ptr<std::vector<std::vector<float>>> list) {
  auto next = std::make_shared<size_t>(0);
  s.random_case = [list, next](std::mt19937_64&, float* in) {
    const auto& c = (*list)[(*next)++ % list->size()];
    std::copy(c.begin(), c.end(), in);
  };
}

std::vector<ValueId> slice(const std::vector<ValueId>& in, size_t from, size_t count) {
  return {in.begin() + static_cast<std::ptrdiff_t>(from), in.begin() + static_cast<std::ptrdiff_t>(from + count)};
}

// TEMP: inputs logits x rows, t, [running max], enable; outputs scaled x rows, max.
PrimitiveSpec temp_spec(int rows, bool first) {
  const auto n = static_cast<size_t>(rows);
  PrimitiveSpec s;
  s.name = std::string("sample_scale_block") + (first ? "_first" : "") + std::to_string(rows);
  s.inputs = rows + (first ? 2 : 3);
  s.outputs = rows + 1;
  s.build = [n, first](Program& p, const std::vector<ValueId>& in) {
    const ValueId t = in[n], enable = in.back();
    const ValueId recip = sample_temperature_reciprocal(p, t, enable);
    const SampleScaleBlock b = sample_scale_block(p, slice(in, 0, n), t, recip, first ? kNoMax : in[n + 1], enable);
    std::vector<ValueId> o = b.scaled;
    o.push_back(b.max);
    return o;
  };
  s.reference = [rows, first](const float* in, float* out) {
    const float t = in[rows];
    float m = first ? 0.0f : in[rows + 1];
    for (int r = 0; r < rows; ++r) {
      out[r] = in[r] / t;  // run.c: logits[q] /= temperature
      if ((first && r == 0) || out[r] > m) m = out[r];
    }
    out[rows] = m;
  };
  // Random logits of the traced range and beyond, random temperatures of the window's
  // middle, equal logits (ties for the max), a running max above, equal to or below.
  s.random_case = [rows, first](std::mt19937_64& rng, float* in) {
    const float t = (rng() & 1) ? std::fabs(rand_float(rng, -4, 3)) : 0.05f + static_cast<float>(rng() % 3000000) * 1e-6f;
    for (int r = 0; r < rows; ++r) in[r] = (rng() % 5 == 0 && r > 0) ? in[rng() % static_cast<uint64_t>(r)] : rand_float(rng, -23, 4);
    in[rows] = t;
    if (!first) {
      const float some = in[rng() % static_cast<uint64_t>(rows)] / t;
      in[rows + 1] = (rng() % 3 == 0) ? some : rand_float(rng, -20, 8);
    }
    in[rows + (first ? 1 : 2)] = 1.0f;  // enable
  };
  return s;
}

// EXP + SUM, one row per lane (expf_parts is ~130 sublayers and ~1,100 neurons a row):
// inputs scaled, max, acc_in, enable; outputs mant, exponent, acc.
PrimitiveSpec exp_row_spec() {
  PrimitiveSpec s;
  s.name = "sample_exp_sum_block1";
  s.inputs = 4;
  s.outputs = 3;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    const ExpSumBlock b = sample_exp_sum_block(p, {in[0]}, in[1], in[2], in[3]);
    return std::vector<ValueId>{b.mant[0], b.exponent[0], b.acc};
  };
  s.reference = [](const float* in, float* out) { out[2] = attn_exp_sum_block_reference(in, 1, in[1], in[2], out, out + 1); };
  return s;
}

// SUM over a block of the sampler's exps (attn_sum_block as it is): mant x8, exponent x8,
// acc_in -> acc.
PrimitiveSpec sum_block_spec() {
  PrimitiveSpec s;
  s.name = "attn_sum_block8 (sampler exps)";
  s.inputs = 2 * kBlock + 1;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    return std::vector<ValueId>{attn_sum_block(p, slice(in, 0, kBlock), slice(in, kBlock, kBlock), in[2 * kBlock])};
  };
  s.reference = [](const float* in, float* out) { out[0] = attn_sum_block_reference(in, in + kBlock, kBlock, in[2 * kBlock]); };
  return s;
}

// PROB, one row per lane: mant, exponent, acc (the final sum, tier-encoded), enable -> pm.
PrimitiveSpec prob_row_spec() {
  PrimitiveSpec s;
  s.name = "sample_prob_block1";
  s.inputs = 4;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) { return sample_prob_block(p, {in[0]}, {in[1]}, in[2], in[3]); };
  s.reference = [](const float* in, float* out) {
    bool high = false;
    out[0] = attn_probability_reference(in[0], static_cast<int>(in[1]), attn_sum_decode(in[2], &high));
  };
  return s;
}

// A probability in attn_probability's form (pm, exponent) as the machine makes it: the
// expf parts of x <= 0 divided by a sum in [1, 2^10). Kinds: any, near the sum's tier edge
// (exponent around -60), subnormal quotients, exactly 0, exactly 1 (sum 1).
std::pair<float, float> random_probability(std::mt19937_64& rng) {
  float x = 0.0f;
  switch (rng() % 6) {
    case 0: x = -static_cast<float>(rng() % 110000000) * 1e-6f; break;
    case 1: x = -40.0f - static_cast<float>(rng() % 6000000) * 1e-6f; break;
    case 2: x = -80.0f - static_cast<float>(rng() % 25000000) * 1e-6f; break;
    case 3: x = -120.0f; break;  // expf gives 0
    case 4: x = 0.0f; break;
    default: x = -static_cast<float>(rng() % 8000000) * 1e-6f; break;
  }
  const ExpfParts e = expf_reference_parts(x);
  const float sum = (rng() % 4 == 0) ? 1.0f : 1.0f + std::fabs(rand_float(rng, -20, 9));
  return {attn_probability_reference(e.mant, e.exponent, sum), static_cast<float>(e.exponent)};
}

// CDF: inputs pm x rows, exponent x rows, acc, seen, crossed, count, coin, enable; outputs
// cdf x rows (tier-encoded), lt x rows, onehot x rows, acc, seen, crossed, count, [token].
PrimitiveSpec cdf_spec(int rows, bool final_row) {
  const auto n = static_cast<size_t>(rows);
  PrimitiveSpec s;
  s.name = std::string("sample_cdf_block") + (final_row ? "_final" : "") + std::to_string(rows);
  s.inputs = 2 * rows + 6;
  s.outputs = 3 * rows + 4 + (final_row ? 1 : 0);
  s.build = [n, final_row](Program& p, const std::vector<ValueId>& in) {
    const SampleCdfState st{in[2 * n], in[2 * n + 1], in[2 * n + 2], in[2 * n + 3]};
    const SampleCdf c = sample_cdf_block(p, slice(in, 0, n), slice(in, n, n), in[2 * n + 4], st, final_row, in[2 * n + 5]);
    std::vector<ValueId> o = c.cdf;
    o.insert(o.end(), c.lt.begin(), c.lt.end());
    o.insert(o.end(), c.onehot.begin(), c.onehot.end());
    o.insert(o.end(), {c.out.acc, c.out.seen, c.out.crossed, c.out.count});
    if (final_row) o.push_back(c.token);
    return o;
  };
  s.reference = [rows, final_row](const float* in, float* out) {
    const float* st = in + 2 * rows;
    const SampleCdfReference r =
        sample_cdf_block_reference(in, in + rows, rows, st[4], st[0], st[1], st[2], st[3], final_row);
    std::copy(r.cdf_encoded.begin(), r.cdf_encoded.end(), out);
    std::copy(r.lt.begin(), r.lt.end(), out + rows);
    std::copy(r.onehot.begin(), r.onehot.end(), out + 2 * rows);
    float* o = out + 3 * rows;
    o[0] = r.acc;
    o[1] = r.seen;
    o[2] = r.crossed;
    o[3] = r.count;
    if (final_row) o[4] = r.token;
  };
  // Random blocks: probabilities of every kind, an incoming cdf of each tier (0, low:
  // subnormal to 2^-51, high: 2^-69 to 1.1), the coin 0, 1 - 2^-24, random, or on / one
  // step around the incoming cdf or one of the block's own cdf values.
  s.random_case = [rows](std::mt19937_64& rng, float* in) {
    const int style = static_cast<int>(rng() % 3);  // 0: mixed rows, 1: all tiny, 2: all large
    for (int r = 0; r < rows; ++r) {
      auto [pm, ex] = random_probability(rng);
      if (style == 1 && ex > -61.0f) std::tie(pm, ex) = std::pair{0.0f, 0.0f};
      if (style == 2 && ex < -30.0f) std::tie(pm, ex) = std::pair{1.0f, -4.0f};
      in[r] = pm;
      in[rows + r] = ex;
    }
    float cdf = 0.0f;
    bool high = false;
    switch (rng() % 4) {
      case 0: break;
      case 1: cdf = std::fabs(rand_float(rng, -149, -51)); break;
      case 2: cdf = std::ldexp(static_cast<float>(1 + rng() % 4096), -149); break;
      default: cdf = (rng() & 1) ? std::fabs(rand_float(rng, -69, 0)) : static_cast<float>(rng() % 1100000) * 1e-6f + 1e-6f; high = true; break;
    }
    float coin = 0.0f;
    std::vector<float> cdfs = {cdf};
    {
      float c = cdf;
      for (int r = 0; r < rows; ++r) cdfs.push_back(c += std::ldexp(in[r], static_cast<int>(in[rows + r])));
    }
    switch (rng() % 5) {
      case 0: coin = 0.0f; break;
      case 1: coin = 0x1.fffffep-1f; break;
      case 2: coin = static_cast<float>(rng() % (1u << 24)) * 0x1p-24f; break;
      default: coin = coin_near(cdfs[rng() % cdfs.size()], static_cast<int>(rng() % 3) - 1); break;
    }
    float* st = in + 2 * rows;
    st[0] = attn_sum_encode(cdf, high);
    st[1] = cdf > 0.0f ? 1.0f : 0.0f;
    st[2] = coin < cdf ? 1.0f : 0.0f;
    st[3] = static_cast<float>(rng() % 500);
    st[4] = coin;
    st[5] = 1.0f;
  };
  // Edges: every probability 0 (coin 0 and not: nothing crosses), coin 0 with the first
  // nonzero probability (2^-149) at each slot, the coin exactly on a cdf value at each
  // slot (nothing crosses there: coin < cdf is false) and one step below (crosses).
  auto block = [](const std::vector<std::pair<float, float>>& probs, float acc, float seen, float crossed, float coin) {
    std::vector<float> c;
    for (const auto& pr : probs) c.push_back(pr.first);
    for (const auto& pr : probs) c.push_back(pr.second);
    c.insert(c.end(), {acc, seen, crossed, 7.0f, coin, 1.0f});  // count_in 7
    return c;
  };
  const std::vector<std::pair<float, float>> zeros(n, {0.0f, 0.0f});
  s.edge_cases.push_back(block(zeros, 0.0f, 0.0f, 0.0f, 0.0f));
  s.edge_cases.push_back(block(zeros, 0.0f, 0.0f, 0.0f, 0.5f));
  s.edge_cases.push_back(block(zeros, attn_sum_encode(0.75f, true), 1.0f, 0.0f, 0.75f));
  s.edge_cases.push_back(block(zeros, attn_sum_encode(0.75f, true), 1.0f, 1.0f, 0.5f));
  for (int slot = 0; slot < rows; ++slot) {
    std::vector<std::pair<float, float>> probs = zeros;
    probs[static_cast<size_t>(slot)] = {2.0f, -150.0f};  // 2^-149, C's smallest probability
    if (slot + 1 < rows) probs[static_cast<size_t>(slot + 1)] = {1.0f, -3.0f};
    s.edge_cases.push_back(block(probs, 0.0f, 0.0f, 0.0f, 0.0f));
    s.edge_cases.push_back(block(probs, 0.0f, 0.0f, 0.0f, 0x1p-24f));
    // cdf 0.5 + (slot + 1) / 16 after the slot: the coin on it, and one step below.
    std::vector<std::pair<float, float>> sixteenths(n, {0.0f, 0.0f});
    for (int r = 0; r < rows; ++r) sixteenths[static_cast<size_t>(r)] = {1.0f, -4.0f};
    const float at = 0.5f + static_cast<float>(slot + 1) / 16.0f;
    s.edge_cases.push_back(block(sixteenths, attn_sum_encode(0.5f, true), 1.0f, 0.0f, at));
    s.edge_cases.push_back(block(sixteenths, attn_sum_encode(0.5f, true), 1.0f, 0.0f, at - 0x1p-24f));
  }
  return s;
}

int64_t count_cases(const std::vector<std::vector<float>>& l) { return static_cast<int64_t>(l.size()); }

// Every case's blocks, with the C chain checked (computed once).
const Blocks& engine_blocks() {
  static const Blocks b = [] {
    Blocks out;
    for (const SampleCase& c : engine_cases()) chain_reference(c, &out);
    return out;
  }();
  return b;
}

void expect_list_exact(PrimitiveSpec s, const std::vector<std::vector<float>>& list, const HostFactory& host = engine_host()) {
  s.edge_cases.clear();
  use_case_list(s, std::make_shared<std::vector<std::vector<float>>>(list));
  expect_spec_exact(s, count_cases(list), host);
}

// ---------------------------------------------------------------- the chain on the engine

// A unit (one lane of a spec) compiled once; run() sets the inputs of each case as an
// embedding row (rows per checkpoint copy) and returns every case's outputs as the
// engine delivers them.
class EngineUnit {
 public:
  EngineUnit(const PrimitiveSpec& s, int64_t rows) : rows_(rows) {
    in_ = p_.values("in", s.inputs);
    out_ = s.build(p_, in_);
    compiler::Interface io;
    io.inputs = in_;
    io.outputs = out_;
    io.vocab_size = std::max<int64_t>(rows, static_cast<int64_t>(out_.size()));
    io.input_rows.assign(static_cast<size_t>(io.vocab_size) * in_.size(), 0.0f);
    rows_ = io.vocab_size;
    compiled_ = compiler::compile(p_, io);
  }
  std::vector<std::vector<float>> run(const std::vector<std::vector<float>>& cases) const {
    std::vector<std::vector<float>> out;
    for (size_t first = 0; first < cases.size(); first += static_cast<size_t>(rows_)) {
      const size_t batch = std::min(cases.size() - first, static_cast<size_t>(rows_));
      auto w = std::make_shared<io::Qwen35Weights>(compiled_.weights);
      const int64_t H = w->config.hidden_size;
      for (size_t r = 0; r < batch; ++r)
        for (size_t i = 0; i < in_.size(); ++i)
          w->embed_tokens[r * static_cast<size_t>(H) + static_cast<size_t>(compiled_.allocation.dim(in_[i]))] =
              cases[first + r][i];
      const Forward fwd = engine_host()(*w);
      std::vector<float> hidden(static_cast<size_t>(H));
      for (size_t r = 0; r < batch; ++r) {
        fwd(static_cast<int64_t>(r), hidden);
        std::vector<float> o;
        for (ValueId v : out_) o.push_back(hidden[static_cast<size_t>(compiled_.allocation.dim(v))]);
        out.push_back(std::move(o));
      }
    }
    return out;
  }

 private:
  Program p_;
  std::vector<ValueId> in_, out_;
  int64_t rows_;
  compiler::Compiled compiled_;
};

PrimitiveSpec max_tree_spec() {
  PrimitiveSpec s;
  s.name = "sample_max_tree";
  s.inputs = kVocab / kBlock + 1;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    return std::vector<ValueId>{sample_max_tree(p, slice(in, 0, kVocab / kBlock), in.back())};
  };
  return s;
}

PrimitiveSpec exp_row_only_spec() {
  PrimitiveSpec s;
  s.name = "sample_exp_block1";
  s.inputs = 3;
  s.outputs = 2;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    const SampleExpBlock b = sample_exp_block(p, {in[0]}, in[1], in[2]);
    return std::vector<ValueId>{b.mant[0], b.exponent[0]};
  };
  return s;
}

// The machine's stage order on the engine, each stage's engine outputs feeding the next
// (no C value in between): TEMP per block (block maxima) -> MAX -> EXP per position ->
// SUM block after block -> PROB per position -> CDF block after block; every intermediate
// and the sampled index equal run.c's (sample_reference, itself equal to
// reference::Sampler; for run.c's sampled positions the token run.c chose).
TEST(SampleChain, EngineStagesChainedEqualRunC) {
  const LogitSource& src = logit_source();
  std::vector<SampleCase> cases;
  std::vector<int> run_c_next;
  for (size_t i = 0; i < src.sampled.size(); i += src.sampled.size() / (kLong ? 8 : 1)) {
    cases.push_back({src.sampled[i].logits, src.sampled[i].temperature, src.sampled[i].coin});
    run_c_next.push_back(src.sampled[i].next);
  }
  const std::vector<SampleCase> all = sample_cases();
  int with_coin0 = 0, with_fallback = 0;
  for (const SampleCase& c : all) {  // cases with coin 0 (picking past index 0) and falling back to n - 1
    const SampleTrace tr = sample_reference(c.logits, c.temperature, c.coin);
    const bool coin0 = c.coin == 0.0f && tr.index > 0, fallback = !(c.coin < tr.cdf.back());
    if ((coin0 && with_coin0 < (kLong ? 3 : 1)) || (fallback && with_fallback < (kLong ? 3 : 1))) {
      cases.push_back(c);
      run_c_next.push_back(run_c_index(c, nullptr));
      with_coin0 += coin0;
      with_fallback += fallback;
    }
  }
  ASSERT_GT(with_coin0, 0);
  ASSERT_GT(with_fallback, 0);
  const size_t C = cases.size(), NB = kVocab / kBlock;
  std::vector<SampleTrace> tr;
  for (const SampleCase& c : cases) tr.push_back(sample_reference(c.logits, c.temperature, c.coin));
  auto expect_bits = [](float got, float want, const std::string& what) {
    EXPECT_EQ(bits(got), bits(0.0f + want)) << what << ": " << describe_float(got) << " vs " << describe_float(want);
  };
  // TEMP: every block, each with its own max (kNoMax); MAX over the 64 block maxima.
  std::vector<std::vector<float>> in;
  for (const SampleCase& c : cases)
    for (size_t b = 0; b < NB; ++b) {
      std::vector<float> r(c.logits.begin() + static_cast<std::ptrdiff_t>(b * kBlock),
                           c.logits.begin() + static_cast<std::ptrdiff_t>((b + 1) * kBlock));
      r.insert(r.end(), {c.temperature, 1.0f});
      in.push_back(std::move(r));
    }
  const auto temp = EngineUnit(temp_spec(kBlock, true), 512).run(in);
  std::vector<std::vector<float>> scaled(C, std::vector<float>(kVocab));
  in.clear();
  for (size_t c = 0; c < C; ++c) {
    std::vector<float> maxima;
    for (size_t b = 0; b < NB; ++b) {
      for (size_t r = 0; r < kBlock; ++r) scaled[c][b * kBlock + r] = temp[c * NB + b][r];
      maxima.push_back(temp[c * NB + b][kBlock]);
    }
    for (size_t q = 0; q < kVocab; ++q) expect_bits(scaled[c][q], tr[c].scaled[q], "scaled " + std::to_string(q));
    maxima.push_back(1.0f);
    in.push_back(std::move(maxima));
  }
  const auto maxes = EngineUnit(max_tree_spec(), 64).run(in);
  for (size_t c = 0; c < C; ++c) expect_bits(maxes[c][0], tr[c].max, "max");
  // EXP per position.
  in.clear();
  for (size_t c = 0; c < C; ++c)
    for (size_t q = 0; q < kVocab; ++q) in.push_back({scaled[c][q], maxes[c][0], 1.0f});
  const auto exps = EngineUnit(exp_row_only_spec(), 512).run(in);
  for (size_t c = 0; c < C; ++c)
    for (size_t q = 0; q < kVocab; ++q) {
      const auto& e = exps[c * kVocab + q];
      expect_bits(std::ldexp(e[0], static_cast<int>(e[1])), tr[c].e[q], "e " + std::to_string(q));
    }
  // SUM: block after block, the engine's acc carried.
  const EngineUnit sum_unit(sum_block_spec(), 64);
  std::vector<float> acc(C, 0.0f);
  for (size_t b = 0; b < NB; ++b) {
    in.clear();
    for (size_t c = 0; c < C; ++c) {
      std::vector<float> r(2 * kBlock + 1);
      for (size_t t = 0; t < kBlock; ++t) {
        r[t] = exps[c * kVocab + b * kBlock + t][0];
        r[kBlock + t] = exps[c * kVocab + b * kBlock + t][1];
      }
      r.back() = acc[c];
      in.push_back(std::move(r));
    }
    const auto o = sum_unit.run(in);
    for (size_t c = 0; c < C; ++c) acc[c] = o[c][0];
  }
  for (size_t c = 0; c < C; ++c) {
    bool high = false;
    expect_bits(attn_sum_decode(acc[c], &high), tr[c].sum, "sum");
  }
  // PROB per position.
  in.clear();
  for (size_t c = 0; c < C; ++c)
    for (size_t q = 0; q < kVocab; ++q) in.push_back({exps[c * kVocab + q][0], exps[c * kVocab + q][1], acc[c], 1.0f});
  const auto pm = EngineUnit(prob_row_spec(), 512).run(in);
  for (size_t c = 0; c < C; ++c)
    for (size_t q = 0; q < kVocab; ++q)
      expect_bits(std::ldexp(pm[c * kVocab + q][0], static_cast<int>(exps[c * kVocab + q][1])), tr[c].prob[q],
                  "p " + std::to_string(q));
  // CDF: block after block, the engine's state carried; the final block gives the index.
  const EngineUnit cdf_next(cdf_spec(kBlock, false), 64), cdf_final(cdf_spec(kBlock, true), 64);
  std::vector<std::array<float, 4>> state(C, {0.0f, 0.0f, 0.0f, 0.0f});
  std::vector<float> token(C, -1.0f);
  for (size_t b = 0; b < NB; ++b) {
    in.clear();
    for (size_t c = 0; c < C; ++c) {
      std::vector<float> r;
      for (size_t t = 0; t < kBlock; ++t) r.push_back(pm[c * kVocab + b * kBlock + t][0]);
      for (size_t t = 0; t < kBlock; ++t) r.push_back(exps[c * kVocab + b * kBlock + t][1]);
      r.insert(r.end(), state[c].begin(), state[c].end());
      r.insert(r.end(), {cases[c].coin, 1.0f});
      in.push_back(std::move(r));
    }
    const bool last = b + 1 == NB;
    const auto o = (last ? cdf_final : cdf_next).run(in);
    for (size_t c = 0; c < C; ++c) {
      for (size_t t = 0; t < kBlock; ++t) {
        const size_t q = b * kBlock + t;
        bool high = false;
        // +0 for a cdf of 0: decoding the low tier's acc +0 gives -0 (C's cdf is never -0;
        // the raw acc is checked as delivered by the block tests).
        expect_bits(0.0f + attn_sum_decode(o[c][t], &high), tr[c].cdf[q], "cdf " + std::to_string(q));
        EXPECT_EQ(o[c][kBlock + t], static_cast<float>(tr[c].lt[q])) << q;
        EXPECT_EQ(o[c][2 * kBlock + t], static_cast<int>(q) == tr[c].index ? 1.0f : 0.0f) << q;
      }
      for (size_t k = 0; k < 4; ++k) state[c][k] = o[c][3 * kBlock + k];
      if (last) token[c] = o[c][3 * kBlock + 4];
    }
  }
  for (size_t c = 0; c < C; ++c) {
    EXPECT_EQ(token[c], static_cast<float>(tr[c].index)) << c;
    EXPECT_EQ(token[c], static_cast<float>(run_c_next[c])) << c;
  }
  std::printf("engine chain: %zu sampled positions (%d with coin 0, %d falling back to n - 1), tokens", C, with_coin0,
              with_fallback);
  for (float t : token) std::printf(" %g", static_cast<double>(t));
  std::printf("\n");
}

// ---------------------------------------------------------------- tests

TEST(SampleScaleBlock, EngineMatchesC) {
  for (bool first : {true, false}) expect_spec_exact(temp_spec(kBlock, first), kCases / 2);
}

TEST(SampleScaleBlock, EngineMatchesRealBlocks) {
  const Blocks& b = engine_blocks();
  expect_list_exact(temp_spec(kBlock, true), b.temp_first);
  expect_list_exact(temp_spec(kBlock, false), b.temp_next);
}

TEST(SampleExpSum, EngineMatchesRealRows) {
  const Blocks& b = engine_blocks();
  std::vector<std::vector<float>> rows = b.exp_rows;
  if (!kLong) rows.resize(std::min<size_t>(rows.size(), 1024));  // the first two cases' rows
  expect_list_exact(exp_row_spec(), rows);
  expect_list_exact(sum_block_spec(), b.sum_blocks);
}

TEST(SampleProb, EngineMatchesRealRows) {
  const Blocks& b = engine_blocks();
  std::vector<std::vector<float>> rows = b.prob_rows;
  if (!kLong) rows.resize(std::min<size_t>(rows.size(), 1024));
  expect_list_exact(prob_row_spec(), rows);
}

TEST(SampleCdfBlock, EngineMatchesRealBlocks) {
  const Blocks& b = engine_blocks();
  expect_list_exact(cdf_spec(kBlock, false), b.cdf_next);
  expect_list_exact(cdf_spec(kBlock, true), b.cdf_final);
}

TEST(SampleCdfBlock, EngineMatchesC) {
  for (int rows : {kBlock, 7})
    for (bool final_row : {false, true}) expect_spec_exact(cdf_spec(rows, final_row), kCases / 2);
}

// The random cases reach every branch: crossings at every slot, coin 0 crossings in the
// low tier, nothing crossed, tier changes inside the block (so the tests above can fail).
TEST(SampleCdfBlock, RandomCasesReachEveryBranch) {
  const PrimitiveSpec s = cdf_spec(kBlock, true);
  std::mt19937_64 rng(5);
  std::vector<float> in(static_cast<size_t>(s.inputs)), out(static_cast<size_t>(s.outputs));
  std::vector<int64_t> crossing_at(kBlock, 0);
  int64_t low_crossings = 0, none = 0, tier_changes = 0;
  for (int c = 0; c < 20000; ++c) {
    s.random_case(rng, in.data());
    s.reference(in.data(), out.data());
    const float acc_in = in[2 * kBlock];
    for (int r = 0; r < kBlock; ++r) {
      const float lt = out[static_cast<size_t>(kBlock + r)], prev = r == 0 ? in[2 * kBlock + 2] : out[static_cast<size_t>(kBlock + r - 1)];
      if (lt == 1.0f && prev == 0.0f) {
        ++crossing_at[static_cast<size_t>(r)];
        low_crossings += out[static_cast<size_t>(r)] < 0.0f;
      }
    }
    none += out[static_cast<size_t>(3 * kBlock + 2)] == 0.0f;
    tier_changes += acc_in < 0.0f && out[static_cast<size_t>(3 * kBlock)] > 0.0f;  // a low sum converted
  }
  for (int r = 0; r < kBlock; ++r) EXPECT_GT(crossing_at[static_cast<size_t>(r)], 50) << r;
  EXPECT_GT(low_crossings, 50);
  EXPECT_GT(none, 1000);
  EXPECT_GT(tier_changes, 50);
  std::printf("cdf generator: crossings per slot %lld..%lld, %lld in the low tier (coin 0), %lld none, %lld low -> high\n",
              static_cast<long long>(*std::min_element(crossing_at.begin(), crossing_at.end())),
              static_cast<long long>(*std::max_element(crossing_at.begin(), crossing_at.end())),
              static_cast<long long>(low_crossings), static_cast<long long>(none), static_cast<long long>(tier_changes));
}

// Random summation orders (HostSim: a fresh random order in every dot product; ~100x
// slower than the engine, so a slice).
TEST(SampleUnits, HostSimMatchesC) {
  const int64_t n = kLong ? 300 : 24;
  expect_spec_exact(temp_spec(kBlock, false), n, host_sim(11));
  expect_spec_exact(cdf_spec(kBlock, true), n, host_sim(12));
  expect_spec_exact(cdf_spec(7, false), n, host_sim(13));
  const Blocks& b = engine_blocks();
  std::vector<std::vector<float>> some(b.prob_rows.begin(), b.prob_rows.begin() + std::min<std::ptrdiff_t>(n, 512));
  expect_list_exact(prob_row_spec(), some, host_sim(14));
}

// The exps under HostSim (278 sublayers a case): a few rows, more in the long build.
TEST(SampleUnits, HostSimExpRows) {
  const Blocks& b = engine_blocks();
  std::vector<std::vector<float>> exps(b.exp_rows.begin(), b.exp_rows.begin() + (kLong ? 64 : 4));
  expect_list_exact(exp_row_spec(), exps, host_sim(15));
}

// The idle contract: enable 0 and every input 0 -> every value of the unit +-0 after every
// layer (and the unit with enable 1 is what the tests above ran).
TEST(SampleUnits, IdleWritesOnlyZeros) {
  for (const PrimitiveSpec& s : {temp_spec(kBlock, true), temp_spec(kBlock, false), max_tree_spec(), exp_row_only_spec(),
                                 exp_row_spec(), prob_row_spec(), cdf_spec(kBlock, false), cdf_spec(kBlock, true)}) {
    unit_testing::UnitProgram u;
    u.inputs = u.program.values("in", s.inputs);
    u.outputs = s.build(u.program, u.inputs);
    const unit_testing::UnitHarness h(std::move(u), 1);
    EXPECT_EQ(h.idle_nonzero(kLong ? 1 : 8), "") << s.name;  // every layer in the long build, every 8th here
  }
}

// Costs of the units (printed; the depth checks keep the row shape honest: the partial
// sums cost no depth over the plain sum row).
TEST(SampleUnits, Costs) {
  for (size_t rows : {size_t{8}, size_t{64}, size_t{512}}) {
    Program a, b;
    auto mk = [](Program& p, size_t n) {
      std::vector<ValueId> pm = p.values("pm", static_cast<int>(n)), ex = p.values("ex", static_cast<int>(n));
      return std::pair{pm, ex};
    };
    const auto [pa, ea] = mk(a, rows);
    attn_sum_block(a, pa, ea, a.value("acc"));
    const auto [pb, eb] = mk(b, rows);
    const SampleCdf c = sample_cdf_block(b, pb, eb, b.value("coin"), {b.value("acc"), b.value("seen"), b.value("crossed"), b.value("count")},
                                         true, b.value("enable"));
    const compiler::Schedule sa = compiler::schedule(a), sb = compiler::schedule(b);
    int64_t neurons = 0;
    for (const auto& op : b.ops()) neurons += static_cast<int64_t>(op.neurons.size());
    // Under the machine's width budget (<= 1,024 neurons per MLP sublayer, sunk).
    const compiler::Schedule sbud = compiler::schedule(b, unit_testing::budget_limits());
    std::printf("cdf row of %zu: %lld MLP sublayers (the plain sum row: %lld; %lld within 1,024 neurons a sublayer), "
                "%lld neurons\n", rows, static_cast<long long>(sb.num_sublayers / 2),
                static_cast<long long>(sa.num_sublayers / 2), static_cast<long long>(sbud.num_sublayers / 2),
                static_cast<long long>(neurons));
    EXPECT_LE(sb.num_sublayers / 2, sa.num_sublayers / 2 + 8) << rows;
    EXPECT_EQ(c.onehot.size(), rows);
  }
  // The block stages of 8 positions, as the machine would run them per cycle.
  auto report = [](const char* name, const Program& p) {
    int64_t neurons = 0;
    for (const auto& op : p.ops()) neurons += static_cast<int64_t>(op.neurons.size());
    const compiler::Schedule sc = compiler::schedule(p);
    std::printf("%s: %lld MLP sublayers, %lld neurons\n", name, static_cast<long long>(sc.num_sublayers / 2),
                static_cast<long long>(neurons));
  };
  {
    Program p;
    const std::vector<ValueId> l = p.values("logit", kBlock);
    const ValueId t = p.value("t"), en = p.value("enable");
    sample_scale_block(p, l, t, sample_temperature_reciprocal(p, t, en), p.value("max"), en);
    report("TEMP block of 8 (with the reciprocal of t)", p);
  }
  {
    Program p;
    sample_exp_sum_block(p, p.values("scaled", kBlock), p.value("max"), p.value("acc"), p.value("enable"));
    report("EXP + SUM block of 8", p);
  }
  {
    Program p;
    sample_prob_block(p, p.values("mant", kBlock), p.values("exponent", kBlock), p.value("acc"), p.value("enable"));
    report("PROB block of 8 (with the sum's reciprocal)", p);
  }
  {
    Program p;
    attn_max_tree(p, p.values("block_max", kVocab / kBlock));
    report("MAX tree over 64 block maxima", p);
  }
}

}  // namespace
}  // namespace qpu::npu
