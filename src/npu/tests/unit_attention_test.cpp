// The nested attention units (npu/unit_attention.h) on the engine, bit for bit against
// C: random cases with fixed seeds, edge cases, and the real values of stories260K's
// greedy "Once upon a time" story (run.c's att_* records from reference/trace.h).
// QPU_NPU_CASES sets the slice: a few thousand random cases in the default build
// (npu_attention_tests), >= 10^5 in the long build (npu_attention_long_tests, "slow").
#include <cmath>
#include <map>
#include <memory>
#include <tuple>

#include <gtest/gtest.h>

#include "common/error.h"
#include "compiler/enable.h"
#include "compiler/schedule.h"
#include "npu/engine_host.h"
#include "npu/expf.h"
#include "npu/expf_model.h"
#include "npu/suite.h"
#include "npu/unit_attention.h"
#include "reference/generate.h"
#include "reference/llama2_checkpoint.h"
#include "reference/sampler.h"
#include "reference/tokenizer.h"
#include "reference/trace.h"

namespace qpu::npu {
namespace {

constexpr int64_t kCases = QPU_NPU_CASES;
// Real positions checked: all 80 of the story's first positions in the long build, two
// of them (8 and 32 keys: one and four blocks) in the default one, which the sanitizer
// run also runs.
constexpr int kGoldenPositions = 80;
constexpr bool kLong = kCases >= 100000;

float rand_float(std::mt19937_64& rng, int emin, int emax) {
  const int e = emin + static_cast<int>(rng() % static_cast<uint64_t>(emax - emin + 1));
  const float m = 1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f;
  const float x = std::ldexp(m, e);
  return (rng() & 1) ? -x : x;
}

SuiteResult run_spec(const PrimitiveSpec& spec, int64_t cases) {
  SuiteOptions o;
  o.cases = cases;
  o.rows = 512;
  o.max_hidden = 1024;  // wider checkpoints cost more than they save (dense layers)
  return run_primitive(spec, engine_host(), o);
}

// run_spec, no mismatch expected, and the unit's cost line.
SuiteResult expect_spec_exact(const PrimitiveSpec& spec, int64_t cases) {
  const SuiteResult r = run_spec(spec, cases);
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  std::printf("%s: %lld cases, %lld sublayers, %lld neurons/lane, %lld values/lane\n", spec.name.c_str(),
              static_cast<long long>(r.cases), static_cast<long long>(r.sublayers),
              static_cast<long long>(r.neurons_per_lane), static_cast<long long>(r.values_per_lane));
  return r;
}

// ---------------------------------------------------------------- golden records

struct HeadRecords {
  std::vector<float> raw, scaled, shifted, exp, prob, out;
  float max = 0.0f, sum = 0.0f;
};
struct Golden {
  int n_heads = 0, head_size = 0, kv_mul = 0, kv_dim = 0, positions = 0, layers = 0;
  // (pos, layer) -> q after RoPE, k after RoPE, v
  std::map<std::pair<int, int>, std::vector<float>> q, k, v;
  std::map<std::tuple<int, int, int>, HeadRecords> heads;  // (pos, layer, head)
};

class Collector : public reference::TraceObserver {
 public:
  explicit Collector(Golden& g) : g_(g) {}
  void record(reference::TraceKind kind, int pos, int layer, int head, std::span<const float> values) override {
    using K = reference::TraceKind;
    std::vector<float> v(values.begin(), values.end());
    switch (kind) {
      case K::q_rope: g_.q[{pos, layer}] = v; break;
      case K::k_rope: g_.k[{pos, layer}] = v; break;
      case K::v: g_.v[{pos, layer}] = v; break;
      case K::att_raw: g_.heads[{pos, layer, head}].raw = v; break;
      case K::att_scaled: g_.heads[{pos, layer, head}].scaled = v; break;
      case K::att_max: g_.heads[{pos, layer, head}].max = v[0]; break;
      case K::att_shifted: g_.heads[{pos, layer, head}].shifted = v; break;
      case K::att_exp: g_.heads[{pos, layer, head}].exp = v; break;
      case K::att_sum: g_.heads[{pos, layer, head}].sum = v[0]; break;
      case K::att_prob: g_.heads[{pos, layer, head}].prob = v; break;
      case K::att_out: g_.heads[{pos, layer, head}].out = v; break;
      default: break;
    }
  }

 private:
  Golden& g_;
};

const Golden& golden() {
  static const Golden g = [] {
    Golden out;
    const std::string dir = std::string(QPU_SHARED_DIR) + "/models/stories260K/";
    const auto ckpt = reference::load_llama2_checkpoint(dir + "stories260K.bin");
    const auto tok = reference::Tokenizer::load(dir + "tok512.bin", 512);
    reference::Transformer tf(ckpt);
    reference::Sampler sampler(512, 0.0f, 0.9f, 42);
    Collector c(out);
    reference::GenerateCallbacks cb;
    cb.trace = &c;
    const auto run = reference::generate(tf, tok, sampler, "Once upon a time", kGoldenPositions, false, cb);
    const auto& cfg = ckpt.config();
    out.n_heads = cfg.n_heads;
    out.head_size = cfg.dim / cfg.n_heads;
    out.kv_mul = cfg.n_heads / cfg.n_kv_heads;
    out.kv_dim = cfg.dim * cfg.n_kv_heads / cfg.n_heads;
    out.positions = run.positions;
    out.layers = cfg.n_layers;
    return out;
  }();
  return g;
}

bool golden_position(int pos) { return kLong || pos == 7 || pos == 31; }

// A spec whose "random" cases are a fixed list, in order (run_primitive draws exactly
// `cases` of them).
void use_case_list(PrimitiveSpec& s, std::shared_ptr<std::vector<std::vector<float>>> list) {
  auto next = std::make_shared<size_t>(0);
  s.random_case = [list, next](std::mt19937_64&, float* in) {
    const auto& c = (*list)[(*next)++ % list->size()];
    std::copy(c.begin(), c.end(), in);
  };
}

// ---------------------------------------------------------------- (a) probabilities

// Inputs: mant, exponent, sum. Output: pm with pm * 2^exponent == fl(e / sum).
PrimitiveSpec probability_spec() {
  PrimitiveSpec s;
  s.name = "attn_probability";
  s.inputs = 3;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    return std::vector<ValueId>{attn_probability(p, in[0], in[1], in[2], attn_sum_reciprocal(p, in[2]))};
  };
  s.reference = [](const float* in, float* out) {
    out[0] = attn_probability_reference(in[0], static_cast<int>(in[1]), in[2]);
  };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    float sum = 1.0f + std::fabs(rand_float(rng, -24, 9)) * ((rng() & 3) ? 1.0f : 0.0f);
    float mant = 0.0f;
    int ex = 0;
    switch (rng() % 4) {
      case 0: {  // expf of a softmax input: what the machine feeds it
        const float x = -static_cast<float>(rng() % 120000000) * 1e-6f;
        const ExpfParts e = expf_reference_parts(x);
        mant = e.mant;
        ex = e.exponent;
        break;
      }
      case 1: {  // any float e in (0, 1], as (mant in [1, 4) or on the subnormal grid, exponent)
        const int b = -149 + static_cast<int>(rng() % 150);
        float e = std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f, b);
        if (b < -126) e = std::ldexp(static_cast<float>(1 + rng() % ((1u << (b + 149)))), -149);
        ex = std::max(std::ilogb(e) - static_cast<int>(rng() % 2), -151);
        if (std::ldexp(e, -ex) >= 4.0f) ++ex;
        mant = std::ldexp(e, -ex);
        break;
      }
      default: {  // quotients near a midpoint of the subnormal grid G = 2^(-149 - ex)
        ex = -151 + static_cast<int>(rng() % 40);
        const double G = std::ldexp(1.0, -149 - ex);
        if (ex <= -126) {  // e = j 2^-149 subnormal: mant = j G, sum = j / (k + 1/2)
          const auto jmax = static_cast<uint64_t>(std::min(std::floor(4.0 / G) - 1.0, 0x1p23 - 1.0));
          const auto j = static_cast<double>(1 + rng() % std::max<uint64_t>(jmax, 1));
          const double k = static_cast<double>(rng() % static_cast<uint64_t>(j)) + 0.5;
          mant = static_cast<float>(j * G);
          sum = static_cast<float>(j / k);
          if (!(sum < 1024.0f)) sum = 1.0f;
          if (rng() & 1) sum = std::nextafter(sum, (rng() & 1) ? 1024.0f : 1.0f);
        } else {  // mant = (k + 1/2) G sum rounded to a float, k < 2^23 (a subnormal quotient)
          const double kmax = std::min(0x1p23, 4.0 / (G * static_cast<double>(sum)));
          const double k = std::floor(static_cast<double>(rng() % (1u << 24)) * 0x1p-24 * kmax) + 0.5;
          mant = static_cast<float>(k * G * static_cast<double>(sum));
          if (mant < 0x1p-23f) mant = 0x1p-23f;
          if (mant >= 4.0f) mant = 0x1.fffffep1f;
          if (rng() & 1) mant = std::nextafter(mant, (rng() & 1) ? 4.0f : 0.0f);
        }
        break;
      }
    }
    if (mant != 0.0f && mant < 0x1p-23f) mant = 0.0f;
    mant = std::ldexp(std::ldexp(mant, ex), -ex);  // the contract: e = mant 2^ex is a float
    in[0] = mant;
    in[1] = static_cast<float>(ex);
    in[2] = sum;
  };
  // Exact ties on the subnormal grid (e = j 2^-149, sum = 2j gives 2^-150: to even, 0),
  // one-ulp neighbours, the smallest normal, the window edges of sum, e = 0 and e = 1.
  s.edge_cases = {{1.0f, 0.0f, 1.0f},         {0.0f, 0.0f, 1.0f},          {0.0f, -140.0f, 3.0f},
                  {2.0f, -150.0f, 2.0f},      {2.0f, -150.0f, 4.0f},       {3.0f, -149.0f, 2.0f},
                  {1.0f, -149.0f, 2.0f},      {3.0f, -149.0f, 6.0f},       {0.5f, -148.0f, 1.0f},
                  {1.0f, -126.0f, 1.0f},      {1.0f, -126.0f, 0x1.000002p0f}, {1.0f, -125.0f, 2.0f},
                  {1.0f, 0.0f, 0x1.fffffep9f}, {0x1.fffffep1f, -1.0f, 0x1.fffffep9f}, {1.0f, -94.0f, 512.0f},
                  {0x1p-23f, -94.0f, 512.0f},  {1.5f, -140.0f, 3.0f},      {0x1.8p0f, -148.0f, 1.0f},
                  {1.0f, -135.0f, 0x1.8p0f},   {1.0f, -100.0f, 0x1.000002p0f}, {2.0f, -151.0f, 1.0f},
                  {2.0f, -151.0f, 2.0f},       {3.0f, -151.0f, 2.0f},      {1.0f, -120.0f, 0x1.fffffep9f}};
  return s;
}

TEST(AttnProbability, EngineMatchesC) {
  const PrimitiveSpec s = probability_spec();
  const SuiteResult r = run_spec(s, kCases);
  EXPECT_EQ(r.cases, kCases + static_cast<int64_t>(s.edge_cases.size()));
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  std::printf("attn_probability: %lld cases, %lld sublayers, %lld neurons/lane, %lld values/lane\n",
              static_cast<long long>(r.cases), static_cast<long long>(r.sublayers),
              static_cast<long long>(r.neurons_per_lane), static_cast<long long>(r.values_per_lane));
}

// The C reference's own premise: every golden exp is expf_parts' mant * 2^exponent, and
// every golden probability is what attn_probability_reference gives for it.
TEST(AttnProbability, ReferenceMatchesGoldenRecords) {
  const Golden& g = golden();
  ASSERT_GE(g.positions, 64);
  int64_t n = 0, subnormal = 0, zero = 0;
  for (const auto& [key, h] : g.heads) {
    ASSERT_EQ(h.exp.size(), h.shifted.size());
    for (size_t t = 0; t < h.exp.size(); ++t) {
      const ExpfParts e = expf_reference_parts(h.shifted[t]);
      ASSERT_EQ(std::bit_cast<uint32_t>(expf_from_parts(e)), std::bit_cast<uint32_t>(h.exp[t]));
      const float pm = attn_probability_reference(e.mant, e.exponent, h.sum);
      ASSERT_EQ(std::bit_cast<uint32_t>(std::ldexp(pm, e.exponent)), std::bit_cast<uint32_t>(h.prob[t]));
      ++n;
      subnormal += std::fpclassify(h.prob[t]) == FP_SUBNORMAL;
      zero += h.prob[t] == 0.0f;
    }
  }
  EXPECT_GT(subnormal, 0);  // the story does reach the subnormal grid
  std::printf("golden probabilities: %lld (%lld subnormal, %lld zero)\n", static_cast<long long>(n),
              static_cast<long long>(subnormal), static_cast<long long>(zero));
}

TEST(AttnProbability, EngineMatchesGoldenRecords) {
  const Golden& g = golden();
  auto list = std::make_shared<std::vector<std::vector<float>>>();
  for (const auto& [key, h] : g.heads) {
    if (!golden_position(std::get<0>(key))) continue;
    for (size_t t = 0; t < h.shifted.size(); ++t) {
      const ExpfParts e = expf_reference_parts(h.shifted[t]);
      list->push_back({e.mant, static_cast<float>(e.exponent), h.sum});
    }
  }
  PrimitiveSpec s = probability_spec();
  s.edge_cases.clear();
  use_case_list(s, list);
  const SuiteResult r = run_spec(s, static_cast<int64_t>(list->size()));
  EXPECT_EQ(r.cases, static_cast<int64_t>(list->size()));
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  std::printf("golden probability cases on the engine: %zu\n", list->size());
}

// ---------------------------------------------------------------- (b) scores and max

constexpr int kHs = 8;     // stories260K's head_size
constexpr int kBlock = 8;  // positions per block

// Inputs: q (8), keys (8 x 8), running max. Outputs: 8 scaled scores, the new max.
PrimitiveSpec score_block_spec(bool has_max) {
  PrimitiveSpec s;
  s.name = has_max ? "attn_score_block" : "attn_score_block_first";
  s.inputs = kHs + kBlock * kHs + 1;
  s.outputs = kBlock + 1;
  s.build = [has_max](Program& p, const std::vector<ValueId>& in) {
    std::vector<ValueId> q(in.begin(), in.begin() + kHs);
    std::vector<std::vector<ValueId>> keys;
    for (int r = 0; r < kBlock; ++r) keys.emplace_back(in.begin() + kHs + r * kHs, in.begin() + kHs + (r + 1) * kHs);
    const ScoreBlock b = attn_score_block(p, q, keys, has_max ? in.back() : kNoMax);
    std::vector<ValueId> out = b.scaled;
    out.push_back(b.max);
    return out;
  };
  s.reference = [has_max](const float* in, float* out) {
    out[kBlock] = attn_score_block_reference(in, in + kHs, kBlock, kHs, has_max, in[kHs + kBlock * kHs], out);
  };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    // q and k like the traced ones (binades -24..4), some rows repeated (ties in the max).
    const int spread = static_cast<int>(rng() % 3);
    for (int i = 0; i < kHs; ++i) in[i] = rand_float(rng, spread == 0 ? -6 : -12, 2);
    for (int r = 0; r < kBlock; ++r) {
      for (int i = 0; i < kHs; ++i) in[kHs + r * kHs + i] = rand_float(rng, spread == 2 ? -10 : -4, 2);
      if (r > 0 && rng() % 4 == 0)
        std::copy(in + kHs + (r - 1) * kHs, in + kHs + r * kHs, in + kHs + r * kHs);
    }
    float scaled[kBlock];
    const float m = attn_score_block_reference(in, in + kHs, kBlock, kHs, false, 0.0f, scaled);
    // The running max: above, equal to or below the block's max.
    switch (rng() % 3) {
      case 0: in[kHs + kBlock * kHs] = m; break;
      case 1: in[kHs + kBlock * kHs] = m + std::fabs(rand_float(rng, -20, 3)); break;
      default: in[kHs + kBlock * kHs] = m - std::fabs(rand_float(rng, -20, 3)); break;
    }
  };
  std::vector<float> equal(static_cast<size_t>(s.inputs), 0.5f);  // all scores equal
  std::vector<float> zero_q = equal;
  for (int i = 0; i < kHs; ++i) zero_q[static_cast<size_t>(i)] = 0.0f;  // every score +0
  zero_q.back() = 0.0f;
  std::vector<float> neg = equal;
  for (int i = 0; i < kHs; ++i) neg[static_cast<size_t>(i)] = -1.0f;
  neg.back() = -3.0f;
  s.edge_cases = {equal, zero_q, neg};
  return s;
}

TEST(AttnScoreBlock, EngineMatchesC) {
  for (bool has_max : {true, false}) {
    const PrimitiveSpec s = score_block_spec(has_max);
    expect_spec_exact(s, kCases / 2);
  }
}

// The machine's last block: rows whose invalid bit is 1 (positions past the nested
// position: stale or empty keys) leave the max alone; row 0 is always valid.
PrimitiveSpec masked_score_block_spec() {
  PrimitiveSpec s;
  s.name = "attn_score_block_masked";
  s.inputs = kHs + kBlock * kHs + kBlock;
  s.outputs = kBlock + 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    std::vector<ValueId> q(in.begin(), in.begin() + kHs);
    std::vector<std::vector<ValueId>> keys;
    for (int r = 0; r < kBlock; ++r) keys.emplace_back(in.begin() + kHs + r * kHs, in.begin() + kHs + (r + 1) * kHs);
    const std::vector<ValueId> invalid(in.begin() + kHs + kBlock * kHs, in.end());
    const ScoreBlock b = attn_score_block(p, q, keys, kNoMax, invalid);
    std::vector<ValueId> out = b.scaled;
    out.push_back(b.max);
    return out;
  };
  s.reference = [](const float* in, float* out) {
    const float* invalid = in + kHs + kBlock * kHs;
    attn_score_block_reference(in, in + kHs, kBlock, kHs, false, 0.0f, out);
    float m = out[0];  // run.c's scan over the valid rows only
    for (int r = 1; r < kBlock; ++r)
      if (invalid[r] == 0.0f && out[r] > m) m = out[r];
    out[kBlock] = m;
  };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    for (int i = 0; i < kHs; ++i) in[i] = rand_float(rng, -8, 2);
    for (int r = 0; r < kBlock; ++r)
      for (int i = 0; i < kHs; ++i) in[kHs + r * kHs + i] = rng() % 5 == 0 ? 0.0f : rand_float(rng, -6, 2);
    // The valid rows are a prefix (1..8 rows), as in the machine.
    const int valid = 1 + static_cast<int>(rng() % kBlock);
    for (int r = 0; r < kBlock; ++r) in[kHs + kBlock * kHs + r] = r < valid ? 0.0f : 1.0f;
  };
  // Every valid row scores below an invalid one: the max must ignore the invalid rows.
  std::vector<float> below(static_cast<size_t>(s.inputs), 0.0f);
  for (int i = 0; i < kHs; ++i) below[static_cast<size_t>(i)] = 1.0f;
  for (int r = 0; r < kBlock; ++r)
    for (int i = 0; i < kHs; ++i) below[static_cast<size_t>(kHs + r * kHs + i)] = r < 3 ? -1.0f - static_cast<float>(r) : 2.0f;
  for (int r = 3; r < kBlock; ++r) below[static_cast<size_t>(kHs + kBlock * kHs + r)] = 1.0f;
  std::vector<float> empty_rows = below;  // invalid rows with +0 keys (score +0 > every valid one)
  for (int r = 3; r < kBlock; ++r)
    for (int i = 0; i < kHs; ++i) empty_rows[static_cast<size_t>(kHs + r * kHs + i)] = 0.0f;
  s.edge_cases = {below, empty_rows};
  return s;
}

TEST(AttnScoreBlock, MaskedRowsDoNotTakePartInTheMax) { expect_spec_exact(masked_score_block_spec(), kCases / 2); }

TEST(AttnIntPositive, EveryIntegerAndTheIdleUnit) {
  // Inputs d and enable; the unit's constants become enable (as in the machine).
  PrimitiveSpec s;
  s.name = "attn_int_positive";
  s.inputs = 2;
  s.outputs = 1;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    const size_t first = p.ops().size();
    const ValueId r = attn_int_positive(p, compiler::Lin{{{in[0], 1.0f}}});
    compiler::enable_constants(p, first, in[1]);
    return std::vector<ValueId>{r};
  };
  s.reference = [](const float* in, float* out) { out[0] = in[1] != 0.0f && in[0] >= 1.0f ? 1.0f : 0.0f; };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    in[0] = static_cast<float>(static_cast<int64_t>(rng() % 131073) - 65536);
    in[1] = static_cast<float>(rng() % 2);
  };
  for (int d = -600; d <= 600; ++d)
    for (float e : {0.0f, 1.0f}) s.edge_cases.push_back({static_cast<float>(d), e});
  expect_spec_exact(s, kCases / 2);
}

// Every real head and position, block by block: the scaled scores equal att_scaled and
// the running max after the last block equals att_max.
TEST(AttnScoreBlock, EngineMatchesGoldenRecords) {
  const Golden& g = golden();
  ASSERT_EQ(g.head_size, kHs);
  auto first = std::make_shared<std::vector<std::vector<float>>>();
  auto later = std::make_shared<std::vector<std::vector<float>>>();
  for (const auto& [key, h] : g.heads) {
    const auto [pos, layer, head] = key;
    if (!golden_position(pos)) continue;
    const auto& q = g.q.at({pos, layer});
    float running = 0.0f;
    for (int t0 = 0; t0 <= pos; t0 += kBlock) {
      std::vector<float> c(static_cast<size_t>(kHs + kBlock * kHs + 1), 0.0f);
      std::copy(q.begin() + head * kHs, q.begin() + (head + 1) * kHs, c.begin());
      // Rows past pos repeat row pos (the machine pads a block the same way).
      for (int r = 0; r < kBlock; ++r) {
        const int t = std::min(t0 + r, pos);
        const auto& k = g.k.at({t, layer});
        const int kh = head / g.kv_mul;
        std::copy(k.begin() + kh * kHs, k.begin() + (kh + 1) * kHs, c.begin() + kHs + r * kHs);
      }
      c.back() = running;
      float scaled[kBlock];
      running = attn_score_block_reference(c.data(), c.data() + kHs, kBlock, kHs, t0 > 0, running, scaled);
      for (int r = 0; r < kBlock && t0 + r <= pos; ++r)
        ASSERT_EQ(std::bit_cast<uint32_t>(scaled[r]), std::bit_cast<uint32_t>(h.scaled[static_cast<size_t>(t0 + r)]));
      (t0 > 0 ? later : first)->push_back(c);
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(running), std::bit_cast<uint32_t>(h.max));
  }
  for (bool has_max : {false, true}) {
    auto list = has_max ? later : first;
    if (list->empty()) continue;
    PrimitiveSpec s = score_block_spec(has_max);
    s.edge_cases.clear();
    use_case_list(s, list);
    const SuiteResult r = run_spec(s, static_cast<int64_t>(list->size()));
    EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
    std::printf("golden %s blocks on the engine: %zu\n", s.name.c_str(), list->size());
  }
}

// ---------------------------------------------------------------- (c) exps and the sum

// Random blocks of softmax inputs: scaled scores below or at the max, in styles that reach
// every exp range (1, the tier edge 2^-60, subnormal, 0), and a running acc of each kind.
void random_block(std::mt19937_64& rng, int rows, float* scaled, float* max, float* acc) {
  *max = rand_float(rng, -8, 6);
  const int style = static_cast<int>(rng() % 4);
  for (int t = 0; t < rows; ++t) {
    float gap = 0.0f;  // scaled = max - gap; gap 0 gives expf(0) = 1
    switch (style) {
      case 0: gap = static_cast<float>(rng() % 130000000) * 1e-6f; break;              // any exp, 0 included
      case 1: gap = 41.0f + static_cast<float>(rng() % 64000000) * 1e-6f; break;      // around the tier edge
      case 2: gap = 86.0f + static_cast<float>(rng() % 18000000) * 1e-6f; break;      // subnormal exps
      default: gap = (rng() % 3) ? std::fabs(rand_float(rng, -20, 6)) : 0.0f; break;  // ties with the max
    }
    scaled[t] = *max - gap;
  }
  switch (rng() % 4) {
    case 0: *acc = 0.0f; break;
    case 1: *acc = attn_sum_encode(std::fabs(rand_float(rng, -149, -51)), false); break;
    case 2: *acc = attn_sum_encode(std::ldexp(static_cast<float>(1 + rng() % 4096), -149), false); break;
    default: *acc = attn_sum_encode(std::fabs(rand_float(rng, -61, 8)), true); break;
  }
}

// Inputs: `rows` (mant, exponent) pairs of exps (C's expf_parts of softmax inputs), acc_in.
// Output: the acc after the block.
PrimitiveSpec sum_block_spec(int rows) {
  if (rows < 1) fail("sum_block_spec: rows {}", rows);
  const auto n = static_cast<size_t>(rows);
  PrimitiveSpec s;
  s.name = "attn_sum_block" + std::to_string(rows);
  s.inputs = 2 * rows + 1;
  s.outputs = 1;
  s.build = [n](Program& p, const std::vector<ValueId>& in) {
    const std::vector<ValueId> mant(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n)),
        ex(in.begin() + static_cast<std::ptrdiff_t>(n), in.begin() + static_cast<std::ptrdiff_t>(2 * n));
    return std::vector<ValueId>{attn_sum_block(p, mant, ex, in[2 * n])};
  };
  s.reference = [rows](const float* in, float* out) { out[0] = attn_sum_block_reference(in, in + rows, rows, in[2 * rows]); };
  s.random_case = [rows](std::mt19937_64& rng, float* in) {
    std::vector<float> scaled(static_cast<size_t>(rows));
    float max = 0.0f;
    random_block(rng, rows, scaled.data(), &max, &in[2 * rows]);
    for (int t = 0; t < rows; ++t) {
      const ExpfParts e = expf_reference_parts(scaled[static_cast<size_t>(t)] - max);
      in[t] = e.mant;
      in[rows + t] = static_cast<float>(e.exponent);
    }
  };
  // t* at every position of the block (each slot of the fused chain), after low sums that
  // are absorbed (below 2^-105) or not; all exps 1; every exp 0; all subnormal.
  auto block = [rows](const std::vector<float>& gaps, float acc) {
    std::vector<float> c(static_cast<size_t>(2 * rows + 1));
    for (int t = 0; t < rows; ++t) {
      const ExpfParts e = expf_reference_parts(-gaps[static_cast<size_t>(t)]);
      c[static_cast<size_t>(t)] = e.mant;
      c[static_cast<size_t>(rows + t)] = static_cast<float>(e.exponent);
    }
    c.back() = acc;
    return c;
  };
  for (int star = 0; star < rows; ++star)
    for (float low : {0.0f, 0x1p-149f, 0x1p-110f, 0x1p-90f, 0x1.8p-60f, 0x1p-51f}) {
      std::vector<float> gaps(n);
      for (int t = 0; t < rows; ++t) gaps[static_cast<size_t>(t)] = t == star ? 30.0f : 95.0f + static_cast<float>(t);
      s.edge_cases.push_back(block(gaps, attn_sum_encode(low, false)));
    }
  s.edge_cases.push_back(block(std::vector<float>(n, 0.0f), 0.0f));
  s.edge_cases.push_back(block(std::vector<float>(n, 0.0f), attn_sum_encode(511.0f, true)));
  s.edge_cases.push_back(block(std::vector<float>(n, 300.0f), attn_sum_encode(1.0f, true)));
  s.edge_cases.push_back(block(std::vector<float>(n, 300.0f), 0.0f));
  s.edge_cases.push_back(block(std::vector<float>(n, 90.0f), 0.0f));
  s.edge_cases.push_back(block(std::vector<float>(n, 90.0f), attn_sum_encode(0x1p-61f, true)));
  return s;
}

TEST(AttnSumBlock, EngineMatchesC) {
  for (int rows : {8, 7}) {
    const PrimitiveSpec s = sum_block_spec(rows);
    expect_spec_exact(s, kCases);
  }
}

#if QPU_NPU_CASES >= 100000
// The whole unit (scaled scores and max -> exps -> sum) for one row: expf_parts' lanes
// are big, so the engine test keeps one row per lane; the chain is tested above. Long
// build only: a 139-sublayer checkpoint takes ~50 s to build and run under ASan, and its
// parts (expf, attn_sum_block) are in the short slice.
TEST(AttnExpSumBlock, EngineMatchesC) {
  PrimitiveSpec s;
  s.name = "attn_exp_sum_block1";
  s.inputs = 3;
  s.outputs = 3;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    const ExpSumBlock b = attn_exp_sum_block(p, {in[0]}, in[1], in[2]);
    return std::vector<ValueId>{b.mant[0], b.exponent[0], b.acc};
  };
  s.reference = [](const float* in, float* out) { out[2] = attn_exp_sum_block_reference(in, 1, in[1], in[2], out, out + 1); };
  s.random_case = [](std::mt19937_64& rng, float* in) { random_block(rng, 1, &in[0], &in[1], &in[2]); };
  expect_spec_exact(s, kCases / 20);  // 139 MLP sublayers per case
}
#endif

// Every real head and position, block by block from acc = 0: C's exps (checked against
// att_exp) into the engine's sum unit, and the sum after the last block equals att_sum.
TEST(AttnSumBlock, EngineMatchesGoldenRecords) {
  const Golden& g = golden();
  auto list = std::make_shared<std::vector<std::vector<float>>>();
  int64_t low_blocks = 0;
  for (const auto& [key, h] : g.heads) {
    const int pos = std::get<0>(key);
    if (!golden_position(pos)) continue;
    float acc = 0.0f;
    for (int t0 = 0; t0 <= pos; t0 += kBlock) {
      std::vector<float> c(2 * kBlock + 1, 0.0f);
      // Rows past pos hold exp 0 (mant 0, exponent 0): C's sum is unchanged by + 0.
      for (int r = 0; r < kBlock && t0 + r <= pos; ++r) {
        const auto t = static_cast<size_t>(t0 + r);
        const ExpfParts e = expf_reference_parts(h.shifted[t]);
        ASSERT_EQ(std::bit_cast<uint32_t>(expf_from_parts(e)), std::bit_cast<uint32_t>(h.exp[t]));
        c[static_cast<size_t>(r)] = e.mant;
        c[static_cast<size_t>(kBlock + r)] = static_cast<float>(e.exponent);
      }
      c.back() = acc;
      low_blocks += acc <= 0.0f && t0 > 0;
      acc = attn_sum_block_reference(c.data(), c.data() + kBlock, kBlock, acc);
      list->push_back(c);
    }
    bool high = false;
    ASSERT_EQ(std::bit_cast<uint32_t>(attn_sum_decode(acc, &high)), std::bit_cast<uint32_t>(h.sum));
    ASSERT_TRUE(high);
  }
  PrimitiveSpec s = sum_block_spec(kBlock);
  s.edge_cases.clear();
  use_case_list(s, list);
  const SuiteResult r = run_spec(s, static_cast<int64_t>(list->size()));
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  std::printf("golden sum blocks on the engine: %zu (%lld entered in the low tier)\n", list->size(),
              static_cast<long long>(low_blocks));
}

// ---------------------------------------------------------------- (d) weighted sum (model)

float c_weighted_sum(const float* prob, const float* v, int rows, int stride) {
  float xb = 0.0f;
  for (int t = 0; t < rows; ++t) xb += prob[t] * v[t * stride];
  return xb;
}

// The fast path's claim: when `unsafe` is false, flushing probabilities below 2^-80 gives C's
// xb bit for bit. Adversarial random rows: tiny probabilities first, cancellations, sums
// that stay tiny.
TEST(AttnWeightedSumModel, SafeMeansExact) {
  std::mt19937_64 rng(77);
  int64_t safe = 0, unsafe = 0;
  std::vector<float> prob(64), v(64);
  for (int64_t c = 0; c < 40 * kCases; ++c) {
    const int rows = 1 + static_cast<int>(rng() % 64);
    for (int t = 0; t < rows; ++t) {
      const auto ut = static_cast<size_t>(t);
      switch (rng() % 4) {
        case 0: prob[ut] = std::ldexp(static_cast<float>(rng() % 4096), -149 - static_cast<int>(rng() % 4)); break;
        case 1: prob[ut] = std::fabs(rand_float(rng, -126, -60)); break;
        case 2: prob[ut] = std::fabs(rand_float(rng, -30, 0)); break;
        default: prob[ut] = 0.0f; break;
      }
      v[ut] = rand_float(rng, -24, 4);
      if (t > 0 && rng() % 5 == 0) {  // cancel the previous product
        prob[ut] = prob[ut - 1];
        v[ut] = -v[ut - 1];
      }
    }
    const WeightedSumModel m = attn_weighted_sum_fast_model(prob.data(), v.data(), rows, 1);
    if (m.unsafe) {
      ++unsafe;
      continue;
    }
    ++safe;
    ASSERT_EQ(std::bit_cast<uint32_t>(0.0f + m.xb), std::bit_cast<uint32_t>(0.0f + c_weighted_sum(prob.data(), v.data(), rows, 1)));
  }
  EXPECT_GT(safe, 0);
  EXPECT_GT(unsafe, 0);
  std::printf("weighted-sum model: %lld safe (all exact), %lld unsafe\n", static_cast<long long>(safe),
              static_cast<long long>(unsafe));
}

// On the real story: C's xb equals att_out, and how often the fast path would need the
// slow path.
TEST(AttnWeightedSumModel, GoldenRecords) {
  const Golden& g = golden();
  int64_t lanes = 0, unsafe = 0, flushed_heads = 0, wrong = 0;
  for (const auto& [key, h] : g.heads) {
    const auto [pos, layer, head] = key;
    std::vector<float> vs(static_cast<size_t>((pos + 1) * g.head_size));
    const int kh = head / g.kv_mul;
    for (int t = 0; t <= pos; ++t) {
      const auto& vt = g.v.at({t, layer});
      std::copy(vt.begin() + kh * g.head_size, vt.begin() + (kh + 1) * g.head_size, vs.begin() + t * g.head_size);
    }
    bool any_tiny = false;
    for (int i = 0; i < g.head_size; ++i) {
      const float c = c_weighted_sum(h.prob.data(), vs.data() + i, pos + 1, g.head_size);
      ASSERT_EQ(std::bit_cast<uint32_t>(c), std::bit_cast<uint32_t>(h.out[static_cast<size_t>(i)]));
      const WeightedSumModel m = attn_weighted_sum_fast_model(h.prob.data(), vs.data() + i, pos + 1, g.head_size);
      ++lanes;
      unsafe += m.unsafe;
      wrong += std::bit_cast<uint32_t>(0.0f + m.xb) != std::bit_cast<uint32_t>(0.0f + c);
      if (!m.unsafe) {
        ASSERT_EQ(std::bit_cast<uint32_t>(0.0f + m.xb), std::bit_cast<uint32_t>(0.0f + c));
      }
      for (int t = 0; t <= pos; ++t) {
        const float prod = h.prob[static_cast<size_t>(t)] * vs[static_cast<size_t>(t * g.head_size + i)];
        any_tiny |= prod != 0.0f && h.prob[static_cast<size_t>(t)] < 0x1p-80f;
      }
    }
    flushed_heads += any_tiny;
  }
  std::printf("golden weighted sums: %lld lanes, %lld unsafe (%lld of them really differ from C); %lld heads with a "
              "flushed product\n",
              static_cast<long long>(lanes), static_cast<long long>(unsafe), static_cast<long long>(wrong),
              static_cast<long long>(flushed_heads));
  EXPECT_LE(wrong, unsafe);  // a difference is always flagged
}

// ---------------------------------------------------------------- (d) fast-path block unit

constexpr int kDims = 8;  // head_size: xb values per head

// Inputs: pm[8], exponent[8], v[8 x 8], xb_in[8] (times 2^26). Outputs: xb[8] (times 2^26).
PrimitiveSpec wsum_spec() {
  PrimitiveSpec s;
  s.name = "attn_wsum_block";
  s.inputs = 2 * kBlock + kBlock * kDims + kDims;
  s.outputs = kDims;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    const std::vector<ValueId> pm(in.begin(), in.begin() + kBlock), ex(in.begin() + kBlock, in.begin() + 2 * kBlock);
    std::vector<std::vector<ValueId>> v;
    for (int t = 0; t < kBlock; ++t)
      v.emplace_back(in.begin() + 2 * kBlock + t * kDims, in.begin() + 2 * kBlock + (t + 1) * kDims);
    const std::vector<ValueId> xb(in.begin() + 2 * kBlock + kBlock * kDims, in.end());
    return attn_wsum_block(p, pm, ex, v, xb);
  };
  s.reference = [](const float* in, float* out) {
    float prob[kBlock], xb[kDims];
    for (int t = 0; t < kBlock; ++t) prob[t] = std::ldexp(in[t], static_cast<int>(in[kBlock + t]));
    for (int i = 0; i < kDims; ++i) xb[i] = in[2 * kBlock + kBlock * kDims + i] / kWsumScale;
    attn_wsum_block_reference(prob, in + 2 * kBlock, kBlock, kDims, xb);
    for (int i = 0; i < kDims; ++i) out[i] = xb[i] * kWsumScale;
  };
  // Probabilities of every size (flushed ones, the 2^-80 edge, up to 1), v in the traced
  // binades (and 0), xb_in 0 or in the tier; cases whose C chain leaves the tier (a partial
  // sum in (0, 2^-104): the unsafe case the fast path must detect) are drawn again.
  s.random_case = [](std::mt19937_64& rng, float* in) {
    for (;;) {
      for (int t = 0; t < kBlock; ++t) {
        float x = 0.0f;
        switch (rng() % 3) {
          case 0: x = -static_cast<float>(rng() % 110000000) * 1e-6f; break;
          case 1: x = -50.0f - static_cast<float>(rng() % 10000000) * 1e-6f; break;  // p near 2^-80
          default: x = -static_cast<float>(rng() % 8000000) * 1e-6f; break;
        }
        const ExpfParts e = expf_reference_parts(x);
        const float sum = 1.0f + static_cast<float>(rng() % 512);
        in[t] = e.mant == 0.0f ? 0.0f : attn_probability_reference(e.mant, e.exponent, sum);
        in[kBlock + t] = static_cast<float>(e.exponent);
        for (int i = 0; i < kDims; ++i) in[2 * kBlock + t * kDims + i] = (rng() % 16) ? rand_float(rng, -24, 4) : 0.0f;
      }
      for (int i = 0; i < kDims; ++i)
        in[2 * kBlock + kBlock * kDims + i] = (rng() % 3) ? rand_float(rng, -30, 3) * kWsumScale : 0.0f;
      // The chain must stay in the tier.
      bool ok = true;
      for (int i = 0; i < kDims && ok; ++i) {
        float xb = in[2 * kBlock + kBlock * kDims + i] / kWsumScale;
        for (int t = 0; t < kBlock; ++t) {
          const float prob = std::ldexp(in[t], static_cast<int>(in[kBlock + t]));
          if (prob < 0x1p-80f) continue;
          xb += prob * in[2 * kBlock + t * kDims + i];
          if (xb != 0.0f && std::fabs(xb) < 0x1p-104f) ok = false;
        }
      }
      if (ok) return;
    }
  };
  // All zero; every probability flushed; p exactly 2^-80 (kept) and its predecessor
  // (flushed); products that cancel exactly.
  std::vector<float> zero(static_cast<size_t>(s.inputs), 0.0f);
  std::vector<float> edge = zero;
  for (int t = 0; t < kBlock; ++t) {
    edge[static_cast<size_t>(t)] = (t % 2) ? 1.0f : 0x1.fffffep-1f;
    edge[static_cast<size_t>(kBlock + t)] = -80.0f;
    for (int i = 0; i < kDims; ++i) edge[static_cast<size_t>(2 * kBlock + t * kDims + i)] = (i % 2) ? 0.75f : -3.0f;
  }
  std::vector<float> cancel = zero;
  for (int t = 0; t < kBlock; ++t) {
    cancel[static_cast<size_t>(t)] = 0.375f;
    for (int i = 0; i < kDims; ++i) cancel[static_cast<size_t>(2 * kBlock + t * kDims + i)] = (t % 2) ? -1.5f : 1.5f;
  }
  s.edge_cases = {zero, edge, cancel};
  return s;
}

TEST(AttnWsumBlock, EngineMatchesC) {
  const PrimitiveSpec s = wsum_spec();
  expect_spec_exact(s, kCases);
}

// Every real head, block by block from xb = 0 (probabilities as (pm, exponent) from C's
// expf parts and division): the engine equals the fast-path chain, and that chain equals
// att_out on every head whose 8 lanes the model calls safe.
TEST(AttnWsumBlock, EngineMatchesGoldenRecords) {
  const Golden& g = golden();
  auto list = std::make_shared<std::vector<std::vector<float>>>();
  int64_t heads = 0, safe_heads = 0;
  for (const auto& [key, h] : g.heads) {
    const auto [pos, layer, head] = key;
    if (!golden_position(pos)) continue;
    const int kh = head / g.kv_mul;
    float xb[kDims] = {};
    std::vector<float> vs(static_cast<size_t>((pos + 1) * kDims));
    for (int t0 = 0; t0 <= pos; t0 += kBlock) {
      std::vector<float> c(static_cast<size_t>(2 * kBlock + kBlock * kDims + kDims), 0.0f);
      float prob[kBlock] = {};
      for (int r = 0; r < kBlock && t0 + r <= pos; ++r) {
        const auto t = static_cast<size_t>(t0 + r);
        const ExpfParts e = expf_reference_parts(h.shifted[t]);
        const float pm = attn_probability_reference(e.mant, e.exponent, h.sum);
        prob[r] = std::ldexp(pm, e.exponent);
        ASSERT_EQ(std::bit_cast<uint32_t>(prob[r]), std::bit_cast<uint32_t>(h.prob[t]));
        c[static_cast<size_t>(r)] = pm;
        c[static_cast<size_t>(kBlock + r)] = static_cast<float>(e.exponent);
        const auto& vt = g.v.at({t0 + r, layer});
        for (int i = 0; i < kDims; ++i) {
          c[static_cast<size_t>(2 * kBlock + r * kDims + i)] = vt[static_cast<size_t>(kh * kDims + i)];
          vs[t * kDims + static_cast<size_t>(i)] = vt[static_cast<size_t>(kh * kDims + i)];
        }
      }
      for (int i = 0; i < kDims; ++i) c[static_cast<size_t>(2 * kBlock + kBlock * kDims + i)] = xb[i] * kWsumScale;
      attn_wsum_block_reference(prob, c.data() + 2 * kBlock, kBlock, kDims, xb);
      list->push_back(c);
    }
    bool safe = true;
    for (int i = 0; i < kDims; ++i)
      safe &= !attn_weighted_sum_fast_model(h.prob.data(), vs.data() + i, pos + 1, kDims).unsafe;
    ++heads;
    if (safe) {
      ++safe_heads;
      for (int i = 0; i < kDims; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(0.0f + xb[i]), std::bit_cast<uint32_t>(0.0f + h.out[static_cast<size_t>(i)]));
    }
  }
  PrimitiveSpec s = wsum_spec();
  s.edge_cases.clear();
  use_case_list(s, list);
  const SuiteResult r = run_spec(s, static_cast<int64_t>(list->size()));
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  std::printf("golden weighted-sum blocks on the engine: %zu; heads %lld, safe (fast path = att_out) %lld\n",
              list->size(), static_cast<long long>(heads), static_cast<long long>(safe_heads));
}

// ---------------------------------------------------------------- (d) the unsafe bit in the block unit

// Inputs: pm[8], exponent[8], v[8 x 8], xb_in[8] (times 2^26), unsafe_in[8], pending_in[8].
// Outputs: xb[8] (times 2^26, only with `with_xb`), unsafe[8], pending[8], each lane run
// through attn_wsum_lane_step (the C model).
constexpr int kWIn = 2 * kBlock + kBlock * kDims + 3 * kDims;
constexpr int kWv = 2 * kBlock, kWxb = kWv + kBlock * kDims, kWun = kWxb + kDims, kWpe = kWun + kDims;

void wsum_checked_reference(const float* in, float* out, bool with_xb) {
  for (int i = 0; i < kDims; ++i) {
    WsumLane lane{in[kWxb + i] / kWsumScale, in[kWpe + i] != 0.0f, in[kWun + i] != 0.0f};
    for (int t = 0; t < kBlock; ++t)
      attn_wsum_lane_step(lane, std::ldexp(in[t], static_cast<int>(in[kBlock + t])), in[kWv + t * kDims + i]);
    const int o = with_xb ? kDims : 0;
    if (with_xb) out[i] = lane.xb * kWsumScale;
    out[o + i] = lane.unsafe ? 1.0f : 0.0f;
    out[o + kDims + i] = lane.pending ? 1.0f : 0.0f;
  }
}

// Does C's chain (flushed, from xb_in) leave the tier in some lane?
bool leaves_tier(const float* in) {
  for (int i = 0; i < kDims; ++i) {
    float xb = in[kWxb + i] / kWsumScale;
    for (int t = 0; t < kBlock; ++t) {
      const float prob = std::ldexp(in[t], static_cast<int>(in[kBlock + t]));
      if (prob < kWsumFlushP) continue;
      xb += prob * in[kWv + t * kDims + i];
      if (xb != 0.0f && std::fabs(xb) < kWsumTiny) return true;
    }
  }
  return false;
}

// One adversarial block: probabilities of every kind (0, flushed normal and subnormal,
// both sides of 2^-80, mid, large; realistic (pm, exponent) from expf parts and C's
// division), rows repeating the previous probability with v negated (exact cancellation
// back to the earlier partial sum, so xb returns to 0 and flushed rows then set pending)
// or negated and nudged by a few ulps (cancellation to a tiny partial sum: the tier is
// left when `tier_left`), xb_in 0 / small (< 2^-40) / at the 2^-40 edge / large, pending_in
// only with xb_in = 0 (the model's invariant), unsafe_in sometimes set.
void random_wsum_checked(std::mt19937_64& rng, float* in, bool tier_left) {
  const int style = static_cast<int>(rng() % 4);  // 0: mixed, 1: mostly flushed, 2: mostly cancelling, 3: near 2^-80
  for (int t = 0; t < kBlock; ++t) {
    const bool repeat = t > 0 && rng() % (style == 2 ? 2 : 5) == 0;
    if (repeat) {
      in[t] = in[t - 1];
      in[kBlock + t] = in[kBlock + t - 1];
    } else {
      float x = 0.0f;
      int kind = static_cast<int>(rng() % 6);
      if (style == 1 && rng() % 2) kind = 3;
      if (style == 3 && rng() % 2) kind = 1;
      switch (kind) {
        case 0: x = -static_cast<float>(rng() % 110000000) * 1e-6f; break;                 // any
        case 1: x = -47.0f - static_cast<float>(rng() % 12000000) * 1e-6f; break;          // p near 2^-80
        case 2: x = -static_cast<float>(rng() % 8000000) * 1e-6f; break;                   // large
        case 3: x = -60.0f - static_cast<float>(rng() % 44000000) * 1e-6f; break;          // flushed, down to subnormal
        case 4: x = -100.0f - static_cast<float>(rng() % 4000000) * 1e-6f; break;          // subnormal / 0
        default: x = -1000.0f; break;                                                       // exp 0: p = 0
      }
      const ExpfParts e = expf_reference_parts(x);
      const float sum = 1.0f + static_cast<float>(rng() % 512);
      in[t] = e.mant == 0.0f ? 0.0f : attn_probability_reference(e.mant, e.exponent, sum);
      in[kBlock + t] = static_cast<float>(e.exponent);
    }
    for (int i = 0; i < kDims; ++i) {
      float& v = in[kWv + t * kDims + i];
      v = (rng() % 16) ? rand_float(rng, -24, 4) : 0.0f;
      if (repeat && rng() % 4 != 0) {
        const float prev = in[kWv + (t - 1) * kDims + i];
        v = -prev;
        if (tier_left && prev != 0.0f && rng() % 2) {  // a few ulps off: a tiny difference of products
          const int k = 1 + static_cast<int>(rng() % 3);
          for (int j = 0; j < k; ++j) v = std::nextafter(v, (rng() % 2) ? 32.0f : -32.0f);
        }
      }
    }
  }
  for (int i = 0; i < kDims; ++i) {
    float xb = 0.0f;
    switch (rng() % 6) {
      case 0: case 1: xb = 0.0f; break;
      case 2: xb = rand_float(rng, -104, -41); break;                                     // small, in the tier
      case 3: xb = (rng() % 2 ? 1.0f : -1.0f) * ((rng() % 2) ? kWsumSafe : std::nextafter(kWsumSafe, 0.0f)); break;
      default: xb = rand_float(rng, -40, 3); break;
    }
    in[kWxb + i] = xb * kWsumScale;
    in[kWpe + i] = (xb == 0.0f && rng() % 2) ? 1.0f : 0.0f;
    in[kWun + i] = (rng() % 4 == 0) ? 1.0f : 0.0f;
  }
}

PrimitiveSpec wsum_checked_spec(bool with_xb) {
  PrimitiveSpec s;
  s.name = with_xb ? "attn_wsum_block_checked" : "attn_wsum_block_checked(bits)";
  s.inputs = kWIn;
  s.outputs = (with_xb ? 3 : 2) * kDims;
  s.build = [with_xb](Program& p, const std::vector<ValueId>& in) {
    const std::vector<ValueId> pm(in.begin(), in.begin() + kBlock), ex(in.begin() + kBlock, in.begin() + 2 * kBlock);
    std::vector<std::vector<ValueId>> v;
    for (int t = 0; t < kBlock; ++t) v.emplace_back(in.begin() + kWv + t * kDims, in.begin() + kWv + (t + 1) * kDims);
    auto part = [&](int at) { return std::vector<ValueId>(in.begin() + at, in.begin() + at + kDims); };
    const WsumChecked w = attn_wsum_block_checked(p, pm, ex, v, part(kWxb), part(kWun), part(kWpe));
    std::vector<ValueId> out = with_xb ? w.xb : std::vector<ValueId>{};
    out.insert(out.end(), w.unsafe.begin(), w.unsafe.end());
    out.insert(out.end(), w.pending.begin(), w.pending.end());
    return out;
  };
  s.reference = [with_xb](const float* in, float* out) { wsum_checked_reference(in, out, with_xb); };
  // With xb: cases whose chain leaves the tier are drawn again (the engine's xb is exact
  // only inside the window); bits only: those cases are the point.
  s.random_case = [with_xb](std::mt19937_64& rng, float* in) {
    for (;;) {
      random_wsum_checked(rng, in, !with_xb);
      if (!with_xb || !leaves_tier(in)) return;
    }
  };
  // Idle: all zero (every output +0). Forced cases, one per lane pattern:
  //  A: xb_in 0, row 0 flushed nonzero (t = 0 tiny probability), rows 1..7 zero: pending out;
  //  B: xb_in 0, row 0 flushed, row 1 kept with a large product: pending cleared, safe;
  //  C: xb_in 0, row 0 flushed, row 1 kept with a small product (|xb| < 2^-40): unsafe;
  //  D: xb_in small nonzero, a flushed row: unsafe; xb_in = 2^-40 exactly: safe;
  //  E: kept products that cancel exactly to 0, then a flushed row: pending.
  std::vector<float> zero(static_cast<size_t>(kWIn), 0.0f);
  s.edge_cases = {zero};
  auto set_row = [](std::vector<float>& c, int t, float pm, int ex) {
    c[static_cast<size_t>(t)] = pm;
    c[static_cast<size_t>(kBlock + t)] = static_cast<float>(ex);
  };
  auto set_v = [](std::vector<float>& c, int t, float v) {
    for (int i = 0; i < kDims; ++i) c[static_cast<size_t>(kWv + t * kDims + i)] = v;
  };
  {
    std::vector<float> a = zero;  // A
    set_row(a, 0, 1.0f, -120);
    set_v(a, 0, 0.5f);
    s.edge_cases.push_back(a);
    std::vector<float> b = a;  // B
    set_row(b, 1, 1.0f, -3);
    set_v(b, 1, 1.5f);
    s.edge_cases.push_back(b);
    std::vector<float> c = a;  // C
    set_row(c, 1, 1.0f, -70);
    set_v(c, 1, 0x1p-20f);
    s.edge_cases.push_back(c);
    std::vector<float> d = zero;  // D: lanes alternate 2^-40 (safe) and 2^-50 (unsafe), and both signs
    set_row(d, 3, 3.0f, -100);
    set_v(d, 3, -2.0f);
    for (int i = 0; i < kDims; ++i)
      d[static_cast<size_t>(kWxb + i)] = ((i % 2) ? kWsumSafe : 0x1p-50f) * ((i / 2) % 2 ? -1.0f : 1.0f) * kWsumScale;
    s.edge_cases.push_back(d);
    std::vector<float> e = zero;  // E
    set_row(e, 0, 1.25f, -30);
    set_v(e, 0, 0.75f);
    set_row(e, 1, 1.25f, -30);
    set_v(e, 1, -0.75f);
    set_row(e, 2, 2.0f, -90);
    set_v(e, 2, 1.0f);
    s.edge_cases.push_back(e);
  }
  if (!with_xb) {
    // F: cancellation to 2^-110: products p v and -p v' with v' one ulp off.
    std::vector<float> f = zero;
    set_row(f, 0, 1.0f, -80);
    set_v(f, 0, 0x1p-24f);
    set_row(f, 1, 1.0f, -80);
    set_v(f, 1, -0x1.000002p-24f);  // xb = -2^-127 after row 1
    s.edge_cases.push_back(f);
    // G: the same, then tiny (flushed) products after the cancelled partial sum.
    std::vector<float> g = f;
    set_row(g, 2, 1.0f, -110);
    set_v(g, 2, 1.0f);
    s.edge_cases.push_back(g);
  }
  return s;
}

TEST(AttnWsumChecked, EngineMatchesModel) {
  for (bool with_xb : {true, false}) {
    const PrimitiveSpec s = wsum_checked_spec(with_xb);
    expect_spec_exact(s, kCases / 2);
  }
}

// The random generator really reaches every branch of the model (so the test above can
// fail): count the lanes where each condition decides.
TEST(AttnWsumChecked, RandomCasesReachEveryBranch) {
  std::mt19937_64 rng(5);
  int64_t pend_out = 0, unsafe_new = 0, tier = 0, tried = 0;
  std::vector<float> in(static_cast<size_t>(kWIn)), out(static_cast<size_t>(2 * kDims));
  for (int c = 0; c < 2000; ++c) {
    random_wsum_checked(rng, in.data(), true);
    tier += leaves_tier(in.data());
    wsum_checked_reference(in.data(), out.data(), false);
    for (int i = 0; i < kDims; ++i) {
      ++tried;
      unsafe_new += out[static_cast<size_t>(i)] != 0.0f && in[static_cast<size_t>(kWun + i)] == 0.0f;
      pend_out += out[static_cast<size_t>(kDims + i)] != 0.0f;
    }
  }
  EXPECT_GT(pend_out, tried / 100);
  EXPECT_GT(unsafe_new, tried / 100);
  EXPECT_GT(tier, 20);
  std::printf("wsum checked generator: %lld lanes, %lld newly unsafe, %lld pending out; %lld blocks leave the tier\n",
              static_cast<long long>(tried), static_cast<long long>(unsafe_new), static_cast<long long>(pend_out),
              static_cast<long long>(tier));
}

// Every real head, block by block from xb = unsafe = pending = 0 (the model's state crossing
// between blocks): the engine's xb, unsafe and pending equal the model's, and after the
// last block unsafe OR pending is attn_weighted_sum_fast_model's bit. The short slice takes
// positions 7 and 31 and every head up to position 31 with an unsafe lane.
TEST(AttnWsumChecked, EngineMatchesGoldenRecords) {
  const Golden& g = golden();
  auto list = std::make_shared<std::vector<std::vector<float>>>();
  int64_t heads = 0, unsafe_lanes = 0, unsafe_heads = 0, checked_unsafe = 0;
  for (const auto& [key, h] : g.heads) {
    const auto [pos, layer, head] = key;
    const int kh = head / g.kv_mul;
    std::vector<float> vs(static_cast<size_t>((pos + 1) * kDims));
    for (int t = 0; t <= pos; ++t) {
      const auto& vt = g.v.at({t, layer});
      std::copy(vt.begin() + kh * kDims, vt.begin() + (kh + 1) * kDims, vs.begin() + t * kDims);
    }
    bool any_unsafe = false;
    std::vector<bool> lane_unsafe(kDims);
    for (int i = 0; i < kDims; ++i) {
      lane_unsafe[static_cast<size_t>(i)] =
          attn_weighted_sum_fast_model(h.prob.data(), vs.data() + i, pos + 1, kDims).unsafe;
      any_unsafe |= lane_unsafe[static_cast<size_t>(i)];
      unsafe_lanes += lane_unsafe[static_cast<size_t>(i)];
    }
    ++heads;
    unsafe_heads += any_unsafe;
    if (!golden_position(pos) && !(any_unsafe && pos <= 31)) continue;
    checked_unsafe += any_unsafe;
    std::vector<float> state(static_cast<size_t>(3 * kDims), 0.0f);  // xb (scaled), unsafe, pending
    for (int t0 = 0; t0 <= pos; t0 += kBlock) {
      std::vector<float> c(static_cast<size_t>(kWIn), 0.0f);
      for (int r = 0; r < kBlock && t0 + r <= pos; ++r) {
        const auto t = static_cast<size_t>(t0 + r);
        const ExpfParts e = expf_reference_parts(h.shifted[t]);
        const float pm = attn_probability_reference(e.mant, e.exponent, h.sum);
        ASSERT_EQ(std::bit_cast<uint32_t>(std::ldexp(pm, e.exponent)), std::bit_cast<uint32_t>(h.prob[t]));
        c[static_cast<size_t>(r)] = pm;
        c[static_cast<size_t>(kBlock + r)] = static_cast<float>(e.exponent);
        for (int i = 0; i < kDims; ++i) c[static_cast<size_t>(kWv + r * kDims + i)] = vs[t * kDims + static_cast<size_t>(i)];
      }
      std::copy(state.begin(), state.end(), c.begin() + kWxb);
      wsum_checked_reference(c.data(), state.data(), true);
      list->push_back(c);
    }
    for (int i = 0; i < kDims; ++i) {
      const bool end_unsafe = state[static_cast<size_t>(kDims + i)] != 0.0f || state[static_cast<size_t>(2 * kDims + i)] != 0.0f;
      ASSERT_EQ(end_unsafe, lane_unsafe[static_cast<size_t>(i)]);
      if (!end_unsafe) {  // the fast path's claim on the real values
        ASSERT_EQ(std::bit_cast<uint32_t>(0.0f + state[static_cast<size_t>(i)] / kWsumScale),
                  std::bit_cast<uint32_t>(0.0f + h.out[static_cast<size_t>(i)]));
      }
    }
  }
  EXPECT_GT(checked_unsafe, 0);
  PrimitiveSpec s = wsum_checked_spec(true);
  s.edge_cases.clear();
  use_case_list(s, list);
  const SuiteResult r = run_spec(s, static_cast<int64_t>(list->size()));
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  std::printf("golden checked weighted-sum blocks on the engine: %zu; heads %lld, with an unsafe lane %lld (%lld lanes), "
              "checked %lld of them\n",
              list->size(), static_cast<long long>(heads), static_cast<long long>(unsafe_heads),
              static_cast<long long>(unsafe_lanes), static_cast<long long>(checked_unsafe));
}

// ---------------------------------------------------------------- (d) slow path: two-tier addition

float two_tier_decode(const float* x) { return x[2] != 0.0f ? x[0] / kWsumScale : x[1] / kWsumLowScale; }

// A float of the weighted sum's range (|x| <= 2^9) of a random kind: 0, subnormal, tiny
// normal, the overlap of the tiers, large, or a tier edge (2^-104, 2^-36 and neighbours).
float random_wsum_value(std::mt19937_64& rng) {
  switch (rng() % 7) {
    case 0: return 0.0f;
    case 1: return ((rng() & 1) ? -1.0f : 1.0f) * std::ldexp(static_cast<float>(1 + rng() % (1u << 23)), -149);
    case 2: return rand_float(rng, -126, -100);
    case 3: return rand_float(rng, -106, -34);
    case 4: return rand_float(rng, -40, 9);
    default: {
      float e = (rng() & 1) ? kWsumTiny : kWsumLowMax;
      if (rng() % 3 == 0) e = std::nextafter(e, 0.0f);
      else if (rng() % 2 == 0) e = std::nextafter(e, 1.0f);
      return (rng() & 1) ? -e : e;
    }
  }
}

// Inputs: a lane's xb (at kWsumScale) and pending bit (pending: xb = 0). Outputs: the carry
// and the lane back from it.
PrimitiveSpec wsum_carry_spec() {
  PrimitiveSpec s;
  s.name = "attn_wsum_carry + attn_wsum_uncarry";
  s.inputs = 3;  // xb, pending, enable
  s.outputs = 3;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    const ValueId c = attn_wsum_carry(p, in[0], in[1], in[2]);
    const WsumCarried back = attn_wsum_uncarry(p, c, in[2]);
    return std::vector<ValueId>{c, back.xb, back.pending};
  };
  s.reference = [](const float* in, float* out) {
    out[0] = 0.0f + in[0] + (in[1] != 0.0f ? kWsumPendingMark : 0.0f);
    out[1] = 0.0f + in[0];
    out[2] = in[1];
  };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    in[1] = rng() % 4 == 0 ? 1.0f : 0.0f;
    in[0] = in[1] != 0.0f ? 0.0f : random_wsum_value(rng) * kWsumScale;
    if (std::fabs(in[0]) >= 0x1p31f || (in[0] != 0.0f && std::fabs(in[0]) < 0x1p-78f)) in[0] = 0.0f;
    in[2] = 1.0f;
  };
  // Idle; pending; the largest xb either side; the smallest.
  s.edge_cases = {{0.0f, 0.0f, 0.0f}, {0.0f, 1.0f, 1.0f},  {0x1.fffffep30f, 0.0f, 1.0f},
                  {-0x1.fffffep30f, 0.0f, 1.0f}, {0x1p-78f, 0.0f, 1.0f}, {-0x1p-78f, 0.0f, 1.0f}};
  return s;
}

// A lane's state crosses as one value and comes back bit for bit, pending lanes included.
TEST(AttnWsumCarry, LaneStateComesBack) { expect_spec_exact(wsum_carry_spec(), 4 * kCases); }

// Inputs: x's hi and lo. Output: x in two-tier form (big recovered from hi).
PrimitiveSpec two_tier_rejoin_spec() {
  PrimitiveSpec s;
  s.name = "attn_two_tier_rejoin";
  s.inputs = 2;
  s.outputs = 3;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    const TwoTier r = attn_two_tier_rejoin(p, in[0], in[1]);
    return std::vector<ValueId>{r.hi, r.lo, r.big};
  };
  s.reference = [](const float* in, float* out) {
    out[0] = in[0];
    out[1] = in[1];
    out[2] = in[0] != 0.0f && std::fabs(in[0]) > kWsumLowMax * kWsumScale ? 1.0f : 0.0f;
  };
  auto encoded = [](float x) {
    std::vector<float> c(3);
    attn_two_tier_encode(x, &c[0], &c[1], &c[2]);
    return std::vector<float>{c[0], c[1]};
  };
  s.random_case = [encoded](std::mt19937_64& rng, float* in) {
    const std::vector<float> c = encoded(random_wsum_value(rng));
    in[0] = c[0];
    in[1] = c[1];
  };
  // The tier edges: 2^-36 (big from the next float up), its neighbours, 2^-104, both signs.
  s.edge_cases = {encoded(0.0f), encoded(0x1p-36f), encoded(0x1.000002p-36f), encoded(-0x1.000002p-36f),
                  encoded(0x1.fffffep-37f), encoded(0x1p-104f), encoded(0x1.fffffep-105f), encoded(0x1p9f),
                  encoded(-0x1p-149f)};
  return s;
}

// The rejoined form is the encoding's, big included, for every value of the chain's range.
TEST(AttnTwoTierRejoin, EngineMatchesTheEncoding) {
  const PrimitiveSpec s = two_tier_rejoin_spec();
  expect_spec_exact(s, 4 * kCases);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 100000; ++i) {
    const float x = random_wsum_value(rng);
    float c[3], r[3];
    attn_two_tier_encode(x, &c[0], &c[1], &c[2]);
    s.reference(c, r);
    ASSERT_EQ(r[2], c[2]) << x;  // the reference's rule is the encoding's big
  }
}

// Inputs: a (hi, lo, big), b (hi, lo, big). Output: fl(a + b) in two-tier form.
PrimitiveSpec two_tier_add_spec() {
  PrimitiveSpec s;
  s.name = "attn_two_tier_add";
  s.inputs = 6;
  s.outputs = 3;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    const TwoTier r = attn_two_tier_add(p, TwoTier{in[0], in[1], in[2]}, TwoTier{in[3], in[4], in[5]});
    return std::vector<ValueId>{r.hi, r.lo, r.big};
  };
  s.reference = [](const float* in, float* out) {
    const float r = two_tier_decode(in) + two_tier_decode(in + 3);  // run.c: xb[i] += product
    attn_two_tier_encode(r, &out[0], &out[1], &out[2]);
  };
  // b independent, or cancelling a: exactly (-a: C gives +0), to a few ulps (tiny sums, on
  // the subnormal grid for small a), or to land next to a tier edge.
  s.random_case = [](std::mt19937_64& rng, float* in) {
    const float a = random_wsum_value(rng);
    float b = random_wsum_value(rng);
    switch (rng() % 5) {
      case 0: b = -a; break;
      case 1: {
        b = -a;
        for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k) b = std::nextafter(b, (rng() & 1) ? 1e3f : -1e3f);
        break;
      }
      case 2: {
        const double edge = (rng() & 1) ? 0x1p-104 : 0x1p-36;
        b = static_cast<float>(((rng() & 1) ? edge : -edge) - static_cast<double>(a));
        break;
      }
      default: break;
    }
    attn_two_tier_encode(a, &in[0], &in[1], &in[2]);
    attn_two_tier_encode(b, &in[3], &in[4], &in[5]);
  };
  auto pair = [](float a, float b) {
    std::vector<float> c(6);
    attn_two_tier_encode(a, &c[0], &c[1], &c[2]);
    attn_two_tier_encode(b, &c[3], &c[4], &c[5]);
    return c;
  };
  // Idle (all 0); subnormal sums (exact) and a cancellation to 2^-149; 2^-104 and 2^-36 sums
  // from both sides; a tiny operand absorbed by a large one and one not absorbed (overlap);
  // cancellation of large values to 0 and to 2^-110.
  s.edge_cases = {std::vector<float>(6, 0.0f),
                  pair(0x1p-149f, 0x1p-149f),
                  pair(0x1.000002p-125f, -0x1p-125f),
                  pair(0x1p-105f, 0x1p-105f),
                  pair(0x1.fffffep-37f, 0x1p-60f),
                  pair(0x1p-37f, 0x1p-37f),
                  pair(1.5f, 0x1p-120f),
                  pair(0x1p-100f, 0x1p-110f),
                  pair(0.75f, -0.75f),
                  pair(0x1.000002p-87f, -0x1p-87f),
                  pair(-0x1p-36f, 0x1p-104f),
                  pair(0x1p9f, 0x1p9f)};
  return s;
}

TEST(AttnTwoTierAdd, EngineMatchesC) {
  const PrimitiveSpec s = two_tier_add_spec();
  expect_spec_exact(s, 4 * kCases);
}

// The generator reaches the interesting sums: subnormal results, results in (0, 2^-104)
// from larger operands, and results that leave or enter the low tier.
TEST(AttnTwoTierAdd, RandomCasesReachEveryBranch) {
  const PrimitiveSpec s = two_tier_add_spec();
  std::mt19937_64 rng(9);
  int64_t subnormal = 0, cancelled_tiny = 0, up = 0, down = 0;
  float in[6];
  for (int c = 0; c < 10000; ++c) {
    s.random_case(rng, in);
    const float a = two_tier_decode(in), b = two_tier_decode(in + 3), r = a + b;
    subnormal += std::fpclassify(r) == FP_SUBNORMAL;
    cancelled_tiny += r != 0.0f && std::fabs(r) < kWsumTiny && std::fabs(a) >= kWsumTiny;
    up += std::fabs(r) > kWsumLowMax && in[2] == 0.0f && in[5] == 0.0f;
    down += std::fabs(r) <= kWsumLowMax && (in[2] != 0.0f || in[5] != 0.0f);
  }
  EXPECT_GT(subnormal, 100);
  EXPECT_GT(cancelled_tiny, 20);
  EXPECT_GT(up, 20);
  EXPECT_GT(down, 100);
  std::printf("two-tier add generator: %lld subnormal sums, %lld cancelled below 2^-104, %lld low->high, %lld high->low\n",
              static_cast<long long>(subnormal), static_cast<long long>(cancelled_tiny), static_cast<long long>(up),
              static_cast<long long>(down));
}

// ---------------------------------------------------------------- (d) slow path: products

// A probability as (pm, exponent) of a random kind: 0; realistic (expf parts divided by a
// sum, all ranges); any float in [2^-149, 1] in one of its (pm, exponent) forms; a
// subnormal j 2^-149 or a power of two there (for exact ties).
void random_prob(std::mt19937_64& rng, float* pm, float* ex) {
  switch (rng() % 5) {
    case 0: *pm = 0.0f; *ex = 0.0f; return;
    case 1: {
      const ExpfParts e = expf_reference_parts(-static_cast<float>(rng() % 110000000) * 1e-6f);
      *pm = e.mant == 0.0f ? 0.0f : attn_probability_reference(e.mant, e.exponent, 1.0f + static_cast<float>(rng() % 512));
      *ex = static_cast<float>(e.exponent);
      return;
    }
    default: {
      float x = 0.0f;
      if (rng() % 3 == 0) x = std::ldexp(static_cast<float>(1 + rng() % (1u << 23)), -149);
      else if (rng() % 2 == 0) x = std::ldexp(1.0f, -149 + static_cast<int>(rng() % 60));
      else x = std::fabs(rand_float(rng, -126, -1));
      int e = std::max(std::ilogb(x) - static_cast<int>(rng() % 3), -151);
      if (std::ldexp(x, -e) >= 4.0f) e += 1;
      if (std::ldexp(x, -e) < 0x1p-54f) e = std::ilogb(x);
      *pm = std::ldexp(x, -e);
      *ex = static_cast<float>(e);
      return;
    }
  }
}

// v for a probability p: any (traced binades, 0), or forcing p v next to / onto a midpoint
// of C's subnormal grid (v ~ (k + 1/2) 2^-149 / p: exact ties when p is a power of two).
float random_v_for(std::mt19937_64& rng, float prob) {
  if (rng() % 3 != 0 || prob == 0.0f || prob >= 0x1p-102f) return (rng() % 12) ? rand_float(rng, -24, 4) : 0.0f;
  const double P = std::ldexp(static_cast<double>(prob), 149);  // p on the subnormal grid
  const double kmin = std::ceil(P * 0x1p-24), kmax = std::min(std::floor(32.0 * P) - 1.0, 0x1p22);
  if (kmin > kmax) return rand_float(rng, -24, 4);
  const double k = kmin + static_cast<double>(rng() % static_cast<uint64_t>(kmax - kmin + 1.0)) + 0.5;
  float v = static_cast<float>(k * 0x1p-149 / static_cast<double>(prob));
  if (!(std::fabs(v) >= 0x1p-24f && std::fabs(v) < 32.0f)) return rand_float(rng, -24, 4);
  if (rng() % 2) v = std::nextafter(v, (rng() & 1) ? 32.0f : 0.0f);
  return (rng() & 1) ? -v : v;
}

// Inputs: pm, exponent, v. Output: C's fl(p v) in two-tier form.
PrimitiveSpec two_tier_product_spec() {
  PrimitiveSpec s;
  s.name = "attn_two_tier_products";
  s.inputs = 3;
  s.outputs = 3;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    const TwoTier r = attn_two_tier_products(p, in[0], in[1], {in[2]})[0];
    return std::vector<ValueId>{r.hi, r.lo, r.big};
  };
  s.reference = [](const float* in, float* out) {
    const float prod = std::ldexp(in[0], static_cast<int>(in[1])) * in[2];  // run.c: a * v[i]
    attn_two_tier_encode(prod, &out[0], &out[1], &out[2]);
  };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    random_prob(rng, &in[0], &in[1]);
    in[2] = random_v_for(rng, std::ldexp(in[0], static_cast<int>(in[1])));
  };
  // Idle; exact ties on the subnormal grid (2^-149 * 0.5 -> 0; 2^-148 * 0.75 and
  // 2^-140 * 1.5 2^-9, both 1.5 2^-149 -> 2^-148, to even); p = 1, 2^-80, pred(2^-80),
  // 2^-102, pred(2^-102), the smallest p with the largest and smallest v (0.75 2^-149 -> 2^-149).
  s.edge_cases = {{0.0f, 0.0f, 0.0f},          {1.0f, -149.0f, 0.5f},        {1.0f, -148.0f, 0.75f},
                  {1.0f, -140.0f, 0x1.8p-9f},  {1.0f, 0.0f, -0x1.fffffep4f}, {1.0f, -80.0f, 0x1p-24f},
                  {0x1.fffffep-1f, -80.0f, -3.0f}, {1.0f, -102.0f, 0x1p-24f}, {0x1.fffffep-1f, -102.0f, 0x1p-24f},
                  {1.0f, -149.0f, 0x1.fffffep4f}, {1.0f, -149.0f, 0x1p-24f}, {2.0f, -150.0f, -0.75f}};
  return s;
}

TEST(AttnTwoTierProducts, EngineMatchesC) {
  const PrimitiveSpec s = two_tier_product_spec();
  expect_spec_exact(s, kCases);
}

TEST(AttnTwoTierProducts, RandomCasesReachEveryBranch) {
  const PrimitiveSpec s = two_tier_product_spec();
  std::mt19937_64 rng(11);
  int64_t subnormal = 0, midpoint = 0, r2 = 0, r1 = 0;
  float in[3];
  for (int c = 0; c < 10000; ++c) {
    s.random_case(rng, in);
    const float prob = std::ldexp(in[0], static_cast<int>(in[1]));
    const float prod = prob * in[2];
    subnormal += std::fpclassify(prod) == FP_SUBNORMAL;
    // the double-rounding trap: the 24-bit product of p 2^110 and v is a grid midpoint
    const float q = std::ldexp(prob, 110) * in[2];
    midpoint += prob < 0x1p-102f && std::fabs(q) < 0x1p-16f && std::fmod(std::ldexp(q, 40), 2.0f) != 0.0f &&
                std::ldexp(q, 40) == std::trunc(std::ldexp(q, 40));
    r2 += prob >= 0x1p-102f && prob < 0x1p-80f;
    r1 += prob >= 0x1p-80f;
  }
  EXPECT_GT(subnormal, 500);
  EXPECT_GT(midpoint, 50);
  EXPECT_GT(r2, 200);
  EXPECT_GT(r1, 1000);
  std::printf("two-tier product generator: %lld subnormal products, %lld on a grid midpoint, %lld in [2^-102, 2^-80), %lld kept\n",
              static_cast<long long>(subnormal), static_cast<long long>(midpoint), static_cast<long long>(r2),
              static_cast<long long>(r1));
}

// ---------------------------------------------------------------- (d) slow path: the block

// The slow block is products (above) + C's chain of two-tier additions. A whole block
// compiled as one test checkpoint exceeds the test machine's memory (> 10 GB for one dim:
// the harness holds dense layer matrices, 90 MLP sublayers deep), so the engine runs it in
// its two stages, each compared bit for bit: the products, and the chain below with C's
// products as inputs. Inputs: xb_in (hi, lo, big), then 8 products (hi, lo, big). Output:
// xb after the 8 additions.
constexpr int kCIn = 3 + 3 * kBlock;

void slow_chain_reference(const float* in, float* out) {
  float xb = two_tier_decode(in);
  for (int t = 0; t < kBlock; ++t) xb += two_tier_decode(in + 3 + 3 * t);  // run.c: xb[i] += a * v[i]
  attn_two_tier_encode(xb, &out[0], &out[1], &out[2]);
}

PrimitiveSpec slow_chain_spec() {
  PrimitiveSpec s;
  s.name = "attn_two_tier_add x 8";
  s.inputs = kCIn;
  s.outputs = 3;
  s.build = [](Program& p, const std::vector<ValueId>& in) {
    TwoTier acc{in[0], in[1], in[2]};
    for (int t = 0; t < kBlock; ++t) acc = attn_two_tier_add(p, acc, TwoTier{in[3 + 3 * t], in[4 + 3 * t], in[5 + 3 * t]});
    return std::vector<ValueId>{acc.hi, acc.lo, acc.big};
  };
  s.reference = slow_chain_reference;
  // C products of the checked unit's adversarial blocks (one lane: cancellations to 0 and
  // to tiny sums, flushed and subnormal probabilities) with rows of the product generator
  // mixed in (subnormal products on grid midpoints), xb_in of every kind.
  s.random_case = [](std::mt19937_64& rng, float* in) {
    std::vector<float> c(static_cast<size_t>(kWIn));
    random_wsum_checked(rng, c.data(), true);
    const int lane = static_cast<int>(rng() % kDims);
    const float x = (rng() % 2) ? c[static_cast<size_t>(kWxb + lane)] / kWsumScale : random_wsum_value(rng) * 0x1p-5f;
    attn_two_tier_encode(x, &in[0], &in[1], &in[2]);
    for (int t = 0; t < kBlock; ++t) {
      float pm = c[static_cast<size_t>(t)], ex = c[static_cast<size_t>(kBlock + t)], v = c[static_cast<size_t>(kWv + t * kDims + lane)];
      if (rng() % 3 == 0) {
        random_prob(rng, &pm, &ex);
        v = random_v_for(rng, std::ldexp(pm, static_cast<int>(ex)));
      }
      const float prod = std::ldexp(pm, static_cast<int>(ex)) * v;
      attn_two_tier_encode(prod, &in[3 + 3 * t], &in[4 + 3 * t], &in[5 + 3 * t]);
    }
  };
  // The fast path's forced unsafe cases, now exact: t = 0 tiny probability (a subnormal
  // product held alone) then a small kept product; cancellation to -2^-127 and tiny
  // products after it; the same from a subnormal xb_in; idle.
  auto block = [](float xb, std::initializer_list<float> prods) {
    std::vector<float> c(static_cast<size_t>(kCIn), 0.0f);
    attn_two_tier_encode(xb, &c[0], &c[1], &c[2]);
    size_t t = 0;
    for (float q : prods) {
      attn_two_tier_encode(q, &c[3 + 3 * t], &c[4 + 3 * t], &c[5 + 3 * t]);
      ++t;
    }
    return c;
  };
  s.edge_cases = {std::vector<float>(static_cast<size_t>(kCIn), 0.0f),
                  block(0.0f, {0.75f * 0x1p-130f, 0x1p-90f}),
                  block(0.0f, {0x1p-104f, -0x1.000002p-104f, 0x1p-110f, -0x1.8p-149f, 0x1p-140f}),
                  block(0x1p-147f, {0x1p-104f, -0x1.000002p-104f, 0x1p-110f, -0x1.8p-149f, 0x1p-140f}),
                  block(0x1p-40f, {-0x1p-40f, 0x1p-149f, 3.0f, -3.0f, 0x1p-120f})};
  // The machine's rows past POS (p = 0): C's products fl(0 v) = +0 or -0 (v < 0), added
  // to every kind of xb (+0, subnormal, low tier, the tier edges, high tier, negative),
  // after real products (POS inside the block) or alone (a block past POS).
  for (const float xb : {0.0f, 0x1p-147f, -0x1.8p-149f, 0x1p-110f, 0x1p-104f, -0x1p-36f, 0x1.000002p-36f, 3.0f, -0x1.234p-7f}) {
    s.edge_cases.push_back(block(xb, {0.0f, -0.0f, -0.0f, 0.0f, -0.0f, -0.0f, 0.0f, -0.0f}));
    s.edge_cases.push_back(block(xb, {0x1p-130f, -0x1p-90f, 0x1.8p-3f, -0.0f, 0.0f, -0.0f, -0.0f, 0.0f}));
  }
  return s;
}

// The claim SLOW's chain over the rows past POS rests on (attention_stages.cpp, build_slow):
// C's xb, started at +0, is never -0, and adding +-0 leaves every such xb as it is, so
// the chain with the p = 0 rows is C's chain without them, bit for bit.
TEST(AttnWsumSlowBlock, ZeroProductsLeaveCsXbUnchanged) {
  std::mt19937_64 rng(20261130);
  for (int n = 0; n < 100000; ++n) {
    float xb = 0.0f;  // run.c: xb starts at 0 (memset)
    const int rows = 1 + static_cast<int>(rng() % 16);
    for (int t = 0; t < rows; ++t) {
      float pm = 0.0f, ex = 0.0f;
      random_prob(rng, &pm, &ex);
      const float prod = std::ldexp(pm, static_cast<int>(ex)) * random_v_for(rng, std::ldexp(pm, static_cast<int>(ex)));
      xb += rng() % 8 == 0 ? -xb : rng() % 4 == 0 ? -prod : prod;  // exact cancellations too
      ASSERT_FALSE(xb == 0.0f && std::signbit(xb)) << "case " << n;
      for (const float zero : {0.0f, -0.0f}) ASSERT_EQ(std::bit_cast<uint32_t>(xb + zero), std::bit_cast<uint32_t>(xb)) << "case " << n;
    }
  }
}

TEST(AttnWsumSlowBlock, ChainMatchesC) {
  const PrimitiveSpec s = slow_chain_spec();
  expect_spec_exact(s, kCases);
}

// Every lane of every real head whose lanes the fast path calls unsafe, block by block
// from xb = 0: every product (pm, exponent, v) and every block's chain on the engine, and
// the C composition of the two stages (wsum_slow_reference's chain) equals run.c's att_out.
// The short slice runs the heads up to position 31.
TEST(AttnWsumSlowBlock, EngineMatchesGoldenRecords) {
  const Golden& g = golden();
  auto prods = std::make_shared<std::vector<std::vector<float>>>();
  auto chains = std::make_shared<std::vector<std::vector<float>>>();
  int64_t unsafe_heads = 0, heads = 0;
  for (const auto& [key, h] : g.heads) {
    const auto [pos, layer, head] = key;
    const int kh = head / g.kv_mul;
    std::vector<float> vs(static_cast<size_t>((pos + 1) * kDims));
    for (int t = 0; t <= pos; ++t) {
      const auto& vt = g.v.at({t, layer});
      std::copy(vt.begin() + kh * kDims, vt.begin() + (kh + 1) * kDims, vs.begin() + t * kDims);
    }
    bool unsafe = false;
    for (int i = 0; i < kDims; ++i) unsafe |= attn_weighted_sum_fast_model(h.prob.data(), vs.data() + i, pos + 1, kDims).unsafe;
    unsafe_heads += unsafe;
    if (!unsafe || (!kLong && pos > 31)) continue;
    ++heads;
    for (int i = 0; i < kDims; ++i) {
      float state[3] = {};
      for (int t0 = 0; t0 <= pos; t0 += kBlock) {
        std::vector<float> c(static_cast<size_t>(kCIn), 0.0f);
        std::copy(state, state + 3, c.begin());
        for (int r = 0; r < kBlock && t0 + r <= pos; ++r) {
          const auto t = static_cast<size_t>(t0 + r);
          const ExpfParts e = expf_reference_parts(h.shifted[t]);
          const float pm = attn_probability_reference(e.mant, e.exponent, h.sum);
          const float v = vs[t * kDims + static_cast<size_t>(i)];
          prods->push_back({pm, static_cast<float>(e.exponent), v});
          attn_two_tier_encode(std::ldexp(pm, e.exponent) * v, &c[static_cast<size_t>(3 + 3 * r)],
                               &c[static_cast<size_t>(4 + 3 * r)], &c[static_cast<size_t>(5 + 3 * r)]);
        }
        slow_chain_reference(c.data(), state);
        chains->push_back(c);
      }
      ASSERT_EQ(std::bit_cast<uint32_t>(two_tier_decode(state)), std::bit_cast<uint32_t>(0.0f + h.out[static_cast<size_t>(i)]));
    }
  }
  EXPECT_GT(heads, 0);
  PrimitiveSpec sp = two_tier_product_spec(), sc = slow_chain_spec();
  sp.edge_cases.clear();
  sc.edge_cases.clear();
  use_case_list(sp, prods);
  use_case_list(sc, chains);
  const SuiteResult rp = run_spec(sp, static_cast<int64_t>(prods->size()));
  EXPECT_EQ(rp.mismatches, 0) << rp.first_mismatch;
  const SuiteResult rc = run_spec(sc, static_cast<int64_t>(chains->size()));
  EXPECT_EQ(rc.mismatches, 0) << rc.first_mismatch;
  std::printf("golden slow path: %lld of %lld unsafe heads, %zu products and %zu lane blocks on the engine\n",
              static_cast<long long>(heads), static_cast<long long>(unsafe_heads), prods->size(), chains->size());
}

// ---------------------------------------------------------------- costs (for the plan)

struct Cost {
  int64_t neurons = 0, nonzeros = 0;
};
Cost cost_of(const Program& p, size_t first_op) {
  Cost c;
  for (size_t i = first_op; i < p.ops().size(); ++i)
    for (const auto& n : p.ops()[i].neurons) {
      ++c.neurons;
      c.nonzeros += static_cast<int64_t>(n.gate.terms.size() + n.up.terms.size() + n.down.size());
    }
  return c;
}

// Neurons and nonzero weights (gate + up + down terms) of each unit, the numbers the
// cycle plan in docs/npu-attention.md uses. Also checks that the counts are sane.
TEST(AttnCosts, PerUnit) {
  Program p;
  const auto in = p.values("in", 80);
  auto report = [&](const char* name, size_t first) {
    const Cost c = cost_of(p, first);
    std::printf("cost %-34s %6lld neurons %7lld nonzeros\n", name, static_cast<long long>(c.neurons),
                static_cast<long long>(c.nonzeros));
    EXPECT_GT(c.neurons, 0);
    return p.ops().size();
  };
  size_t at = p.ops().size();
  expf_parts(p, in[0]);
  at = report("expf_parts (1 lane)", at);
  const ValueId y = attn_sum_reciprocal(p, in[1]);
  at = report("attn_sum_reciprocal (1 per head)", at);
  attn_probability(p, in[2], in[3], in[1], y);
  at = report("attn_probability (1 dividend)", at);
  std::vector<std::vector<ValueId>> keys;
  for (int r = 0; r < kBlock; ++r) keys.emplace_back(in.begin() + 8 + 8 * r, in.begin() + 16 + 8 * r);
  attn_score_block(p, std::vector<ValueId>(in.begin(), in.begin() + 8), keys, in[79]);
  at = report("attn_score_block (8 rows)", at);
  attn_sum_block(p, std::vector<ValueId>(in.begin(), in.begin() + 8), std::vector<ValueId>(in.begin() + 8, in.begin() + 16), in[79]);
  at = report("attn_sum_block (8 rows)", at);
  attn_wsum_block(p, std::vector<ValueId>(in.begin(), in.begin() + 8), std::vector<ValueId>(in.begin() + 8, in.begin() + 16),
                  keys, std::vector<ValueId>(in.begin() + 70, in.begin() + 78));
  at = report("attn_wsum_block (8 rows x 8 dims)", at);
  attn_wsum_block_checked(p, std::vector<ValueId>(in.begin(), in.begin() + 8), std::vector<ValueId>(in.begin() + 8, in.begin() + 16),
                          keys, std::vector<ValueId>(in.begin() + 70, in.begin() + 78),
                          std::vector<ValueId>(in.begin() + 16, in.begin() + 24), std::vector<ValueId>(in.begin() + 24, in.begin() + 32));
  at = report("attn_wsum_block_checked (8 x 8)", at);
  attn_two_tier_add(p, TwoTier{in[0], in[1], in[2]}, TwoTier{in[3], in[4], in[5]});
  at = report("attn_two_tier_add (1 C addition)", at);
  attn_two_tier_products(p, in[0], in[8], std::vector<ValueId>(in.begin() + 16, in.begin() + 24));
  at = report("attn_two_tier_products (1 row x 8)", at);
  Program slow;
  const auto sin = slow.values("in", 80);
  std::vector<std::vector<ValueId>> sv;
  for (int r = 0; r < kBlock; ++r) sv.emplace_back(sin.begin() + 8 + 8 * r, sin.begin() + 16 + 8 * r);
  std::vector<TwoTier> sxb;
  for (int i = 0; i < kDims; ++i) sxb.push_back(TwoTier{sin[72 + i], sin[72 + i], sin[72 + i]});
  attn_wsum_slow_block(slow, std::vector<ValueId>(sin.begin(), sin.begin() + 8), std::vector<ValueId>(sin.begin() + 8, sin.begin() + 16),
                       sv, sxb);
  const Cost c = cost_of(slow, 0);
  std::printf("cost %-34s %6lld neurons %7lld nonzeros, critical path %lld MLP sublayers\n", "attn_wsum_slow_block (8 x 8)",
              static_cast<long long>(c.neurons), static_cast<long long>(c.nonzeros),
              static_cast<long long>(compiler::critical_path(slow)));
  EXPECT_GT(c.neurons, 0);
}


// The depth of one head's weighted sum when its blocks chain in one cycle (section 7.2):
// the fast path's xb chain alone vs the checked unit (xb, unsafe and pending crossing from
// block to block). The bits trail the chain by a constant, not by a per-block amount:
// pending and unsafe enter each block one step before its outputs.
TEST(AttnCosts, ChainedDepth) {
  for (int blocks : {1, 4, 32}) {
    int64_t depth[2] = {};
    for (int checked = 0; checked < 2; ++checked) {
      Program p;
      std::vector<ValueId> xb = p.values("xb", kDims), un = p.values("un", kDims), pe = p.values("pe", kDims);
      for (int b = 0; b < blocks; ++b) {
        const std::vector<ValueId> pm = p.values("pm", kBlock), ex = p.values("ex", kBlock);
        std::vector<std::vector<ValueId>> v;
        for (int t = 0; t < kBlock; ++t) v.push_back(p.values("v", kDims));
        if (checked) {
          const WsumChecked w = attn_wsum_block_checked(p, pm, ex, v, xb, un, pe);
          xb = w.xb;
          un = w.unsafe;
          pe = w.pending;
        } else {
          xb = attn_wsum_block(p, pm, ex, v, xb);
        }
      }
      depth[checked] = compiler::critical_path(p);
    }
    std::printf("weighted sum, %d chained blocks: critical path %lld MLP sublayers fast, %lld checked\n", blocks,
                static_cast<long long>(depth[0]), static_cast<long long>(depth[1]));
    EXPECT_LE(depth[1], depth[0] + 16);  // a constant tail, whatever the number of blocks
  }
}

}  // namespace
}  // namespace qpu::npu
