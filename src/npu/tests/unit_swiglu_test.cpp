// The SwiGLU unit (npu/unit_swiglu.h) against run.c's C code: random cases in the
// window and edge cases on the engine and under the order-adversarial HostSim, every
// real (hb, hb2) pair of the greedy "Once upon a time" story against the golden trace's
// silu and ffn_prod records, and the idle property (enable 0: only exact zeros).
// QPU_NPU_CASES random cases (100,000 in npu_units_b_tests, 300 in the smoke build).
#include <math.h>  // glibc's expf, as run.c

#include <cmath>
#include <map>
#include <memory>

#include <gtest/gtest.h>

#include "common/float_bits.h"
#include "compiler/host_sim.h"
#include "npu/engine_host.h"
#include "npu/expf_model.h"
#include "npu/suite.h"
#include "npu/unit_swiglu.h"
#include "unit_harness.h"
#include "reference/generate.h"
#include "reference/trace.h"

namespace qpu::npu {
namespace {

using unit_testing::rand_float;

using compiler::ValueId;

// run.c's loop body, for one lane.
void run_c_swiglu(float hb, float hb2, float* silu, float* out) {
  float val = hb;
  val *= (1.0f / (1.0f + expf(-val)));
  *silu = val;
  val *= hb2;
  *out = val;
}

bool in_window(float y) { return y == 0.0f || (std::fabs(y) >= 0x1p-78f && std::fabs(y) <= 0x1p36f); }

// An hb inside the unit's window (unit_swiglu.h), drawn from several regions.
float random_hb(std::mt19937_64& rng) {
  switch (rng() % 8) {
    case 0: case 1: case 2: return rand_float(rng, -25, 2);                          // stories260K's range
    case 3: return -static_cast<float>(rng() % 43000000) * 1e-6f;                    // [-43, 0]: every exponent of t
    case 4: return static_cast<float>(rng() % 40000000) * 1e-6f;                     // [0, 40]
    case 5: { const float x = rand_float(rng, -55, 36); return x < -43.0f ? -x : x; }  // all binades
    case 6: return -88.7228394f - static_cast<float>(rng() % 1000000) * 1e-3f;      // expf overflows
    default: {  // around the places where e (floor(k/32)) steps: -hb = 22.18 m
      const float x = -0.69314718f * static_cast<float>(1 + rng() % 62);
      return std::nextafter(x, (rng() & 1) ? 1e30f : -1e30f) + static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0x1p-18f;
    }
  }
}

PrimitiveSpec swiglu_spec() {
  PrimitiveSpec s;
  s.name = "swiglu";
  s.inputs = 3;  // hb, hb2, enable
  s.outputs = 2;
  s.build = [](compiler::Program& p, const std::vector<ValueId>& in) {
    const SwigluResult r = swiglu(p, in[0], in[1], in[2]);
    return std::vector<ValueId>{r.silu, r.out};
  };
  s.reference = [](const float* in, float* out) {
    if (in[2] == 0.0f) {  // idle
      out[0] = out[1] = 0.0f;
      return;
    }
    run_c_swiglu(in[0], in[1], &out[0], &out[1]);
  };
  s.random_case = [](std::mt19937_64& rng, float* in) {
    in[2] = 1.0f;
    for (;;) {
      in[0] = random_hb(rng);
      in[1] = (rng() % 4) ? rand_float(rng, -25, 2) : rand_float(rng, -40, 30);
      if (rng() % 64 == 0) in[1] = 0.0f;
      float silu = 0.0f, out = 0.0f;
      run_c_swiglu(in[0], in[1], &silu, &out);
      if (in_window(silu) && in_window(out)) return;
    }
  };
  const float over = -0x1.62e430p+6f;  // -hb just above expf's overflow threshold 0x1.62e42ep+6
  s.edge_cases = {{0.0f, 0.0f, 1.0f},         {-0.0f, 1.0f, 1.0f},          {0.0f, -3.0f, 1.0f},
                  {0x1p-55f, 1.0f, 1.0f},      {-0x1p-55f, 0x1p20f, 1.0f},    {0x1p-26f, -1.0f, 1.0f},
                  {1.0f, 1.0f, 1.0f},          {-1.0f, 1.0f, 1.0f},           {6.54703f, 6.12262f, 1.0f},
                  {-6.54703f, -6.12262f, 1.0f}, {-43.0f, 0x1p20f, 1.0f},      {-18.0f, 1.0f, 1.0f},
                  {-17.3286800f, 1.0f, 1.0f},  {16.6355324f, 1.0f, 1.0f},     {17.0f, 2.0f, 1.0f},
                  {0x1p36f, 0x1p-40f, 1.0f},   {-8.3177662f, 1.0f, 1.0f},     {over, 5.0f, 1.0f},
                  {-100.0f, 1.0f, 1.0f},       {-0x1p36f, -7.0f, 1.0f},       {-0.69314718f, 1.0f, 1.0f},
                  {-0.6931472f, 3.0f, 1.0f},   {2.0f, 0.0f, 1.0f},            {0.0f, 0.0f, 0.0f}};
  s.short_divisor = 1;
  return s;
}

// Engine: QPU_NPU_CASES random cases + the edge cases.
TEST(UnitSwiglu, EngineMatchesRunC) {
  const PrimitiveSpec spec = swiglu_spec();
  SuiteOptions o;
  o.cases = QPU_NPU_CASES;
  o.rows = 4096;
  o.seed = 2026;
  const SuiteResult r = run_primitive(spec, engine_host(), o);
  EXPECT_EQ(r.cases, o.cases + static_cast<int64_t>(spec.edge_cases.size()));
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  std::printf("swiglu: %lld cases, %lld layers, %lld neurons/lane, %lld values/lane\n", static_cast<long long>(r.cases),
              static_cast<long long>(r.layers), static_cast<long long>(r.neurons_per_lane),
              static_cast<long long>(r.values_per_lane));
}

// HostSim: a fresh random summation order for every dot product (slow: ~100x the engine).
TEST(UnitSwiglu, HostSimMatchesRunC) {
  PrimitiveSpec spec = swiglu_spec();
  // ~2.5 s per case (170 layers, every dot product summed in a fresh random order): the
  // smoke build keeps 1 edge case (the trace's largest |hb|) and 1 random one.
  if (QPU_NPU_CASES < 100000) spec.edge_cases = {spec.edge_cases[8]};
  SuiteOptions o;
  o.cases = QPU_NPU_CASES >= 100000 ? 40 : 1;
  o.rows = 64;
  o.seed = 7;
  const HostFactory sim = [](const io::Qwen35Weights& w) -> Forward {
    auto s = std::make_shared<compiler::HostSim>(w, 11);
    auto logits = std::make_shared<std::vector<float>>(1);
    return [s, logits](int64_t token, std::span<float> hidden) { s->forward(token, *logits, hidden); };
  };
  const SuiteResult r = run_primitive(spec, sim, o);
  EXPECT_EQ(r.cases, o.cases + static_cast<int64_t>(spec.edge_cases.size()));
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
}

// The window's premise: d' = fl(1 + expf(-hb)) * 2^-max(e, 0) in [0.5, 4) (the division's
// window), checked in C over the edge cases' neighbourhood and many random hb.
TEST(UnitSwiglu, ScaledDenominatorStaysInDivisionWindow) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 2000000; ++i) {
    const float hb = random_hb(rng);
    const ExpfParts t = expf_reference_parts(-hb);
    if (t.overflow) continue;
    const int s = t.exponent > 0 ? t.exponent : 0;
    const float d = 1.0f + expf(-hb);
    const float dp = std::ldexp(d, -s);
    ASSERT_GE(dp, 0.5f) << hb;
    ASSERT_LT(dp, 4.0f) << hb;
    ASSERT_LE(t.exponent, 62) << hb;
  }
}

// Every (hb, hb2) pair of the story through the unit, against the trace's next records.
struct SwigluRecords final : reference::TraceObserver {
  std::vector<float> hb, hb2, silu, prod;
  int max_pos = 0;
  void record(reference::TraceKind kind, int pos, int, int, std::span<const float> v) override {
    if (pos >= max_pos) return;
    using K = reference::TraceKind;
    std::vector<float>* dst = kind == K::hb ? &hb : kind == K::hb2 ? &hb2 : kind == K::silu ? &silu : kind == K::ffn_prod ? &prod : nullptr;
    if (dst) dst->insert(dst->end(), v.begin(), v.end());
  }
};

TEST(UnitSwiglu, GoldenStoryPairsMatchTrace) {
  const auto ckpt = reference::load_llama2_checkpoint(QPU_SHARED_DIR "/models/stories260K/stories260K.bin");
  const auto tok = reference::Tokenizer::load(QPU_SHARED_DIR "/models/stories260K/tok512.bin", 512);
  reference::Transformer tf(ckpt);
  reference::Sampler sampler(512, 0.0f, 0.9f, 1);
  SwigluRecords rec;
  rec.max_pos = QPU_NPU_CASES >= 100000 ? 64 : 2;  // the fast slice: positions 0 and 1
  reference::GenerateCallbacks cb;
  cb.trace = &rec;
  const auto run = reference::generate(tf, tok, sampler, "Once upon a time", rec.max_pos, false, cb);
  if (QPU_NPU_CASES >= 100000) {
    ASSERT_GE(run.positions, 64);
  }
  ASSERT_EQ(rec.hb.size(), rec.hb2.size());
  ASSERT_EQ(rec.hb.size(), rec.prod.size());
  ASSERT_EQ(rec.hb.size(), rec.silu.size());
  // The expected outputs are the trace's own records (looked up by input bits).
  auto expected = std::make_shared<std::map<std::pair<uint32_t, uint32_t>, std::pair<float, float>>>();
  PrimitiveSpec spec = swiglu_spec();
  spec.edge_cases.clear();
  for (size_t i = 0; i < rec.hb.size(); ++i) {
    const auto key = std::make_pair(float_bits(rec.hb[i]), float_bits(rec.hb2[i]));
    const auto [it, fresh] = expected->emplace(key, std::make_pair(rec.silu[i], rec.prod[i]));
    if (!fresh) {
      ASSERT_EQ(float_bits(it->second.second), float_bits(rec.prod[i]));
    }
    spec.edge_cases.push_back({rec.hb[i], rec.hb2[i], 1.0f});
  }
  spec.reference = [expected](const float* in, float* out) {
    const auto& e = expected->at({float_bits(in[0]), float_bits(in[1])});
    out[0] = e.first;
    out[1] = e.second;
  };
  SuiteOptions o;
  o.cases = 0;
  o.rows = 4096;
  const SuiteResult r = run_primitive(spec, engine_host(), o);
  EXPECT_EQ(r.cases, static_cast<int64_t>(rec.hb.size()));
  EXPECT_EQ(r.mismatches, 0) << r.first_mismatch;
  std::printf("swiglu golden: %lld pairs over %d positions, %lld mismatches\n", static_cast<long long>(r.cases),
              std::min(rec.max_pos, run.positions), static_cast<long long>(r.mismatches));
}

// Idle: enable 0 and all-zero operands leave every value of the unit at exactly 0 (the
// residual holds +0 or -0 nowhere else); enable 1 on the same checkpoint computes.
TEST(UnitSwiglu, IdleWritesOnlyZeros) {
  compiler::Program p;
  const auto in = p.values("in", 3);
  const SwigluResult r = swiglu(p, in[0], in[1], in[2]);
  compiler::Interface io;
  io.inputs = in;
  io.vocab_size = 2;
  io.input_rows = {0.0f, 0.0f, 0.0f, -2.5f, 1.5f, 1.0f};
  const compiler::Compiled c = compiler::compile(p, io);
  const Forward fwd = engine_host()(c.weights);
  std::vector<float> hidden(static_cast<size_t>(c.weights.config.hidden_size));
  fwd(0, hidden);
  for (ValueId v = 0; v < p.num_values(); ++v)
    ASSERT_EQ(hidden[static_cast<size_t>(c.allocation.dim(v))], 0.0f) << p.name(v);
  fwd(1, hidden);
  float silu = 0.0f, out = 0.0f;
  run_c_swiglu(-2.5f, 1.5f, &silu, &out);
  EXPECT_EQ(float_bits(hidden[static_cast<size_t>(c.allocation.dim(r.out))]), float_bits(out));
  EXPECT_EQ(float_bits(hidden[static_cast<size_t>(c.allocation.dim(r.silu))]), float_bits(silu));
}

// Cost of one lane as built (printed for docs/npu-units.md; the depth is the schedule's).
TEST(UnitSwiglu, Cost) {
  compiler::Program p;
  const auto in = p.values("in", 3);
  swiglu(p, in[0], in[1], in[2]);
  const compiler::Schedule s = compiler::schedule(p);
  int64_t neurons = 0, mlp = 0;
  for (const compiler::Op& op : p.ops()) neurons += static_cast<int64_t>(op.neurons.size());
  for (int64_t sub = 1; sub < s.num_sublayers; sub += 2) ++mlp;
  std::printf("swiglu lane: %lld MLP sublayers (critical path %lld), %lld neurons, %lld values\n",
              static_cast<long long>(mlp), static_cast<long long>(compiler::critical_path(p)),
              static_cast<long long>(neurons), static_cast<long long>(p.num_values()));
}

}  // namespace
}  // namespace qpu::npu
