// Zero false positives: checkpoints of ordinary weights -- Gaussian, heavy-tailed,
// uniform, bf16-quantized-then-F32, stored F32/BF16/F16, default, small and wide
// shapes, many seeds -- must come out "learned" in every layer and tensor, with no
// compiled or unusual evidence at all. And things that are odd but not compiled
// (a rescaled layer, NaN, pruning, ternary values) must be "unusual", never
// "compiled".
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "tools/audit.h"
#include "synthetic_models.h"

namespace qpu::tools {
namespace {

using namespace testing;

struct OrdinaryCase {
  Fill fill;
  io::DType dtype;
  uint64_t seed;
  const char* shape;
  bool trained_vectors;
};

Shape shape_named(const std::string& name) {
  Shape s;
  if (name == "small") {
    s.vocab = 16, s.hidden = 8, s.inter = 12, s.layers = 4;
    s.nk = 1, s.nv = 2, s.dk = 4, s.dv = 4, s.heads = 1, s.kv = 1, s.hd = 8;
  } else if (name == "wide") {
    s.vocab = 64, s.hidden = 16, s.inter = 4096, s.layers = 5;
    s.nk = 1, s.nv = 2, s.dk = 8, s.dv = 8, s.heads = 1, s.kv = 1, s.hd = 16;
  }
  return s;
}

std::vector<Tensor> ordinary_model(const Shape& s, const OrdinaryOptions& base, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Tensor> tensors = ordinary_globals(s, rng, base);
  for (int64_t i = 0; i < s.layers; ++i) {
    OrdinaryOptions o = base;
    o.scale = std::pow(1.25, static_cast<double>(i));  // trained layers drift in scale
    append(tensors, ordinary_layer(s, i, rng, o));
  }
  return tensors;
}

class OrdinaryCheckpoint : public ::testing::TestWithParam<OrdinaryCase> {};

TEST_P(OrdinaryCheckpoint, IsLearnedEverywhere) {
  const OrdinaryCase& c = GetParam();
  const Shape s = shape_named(c.shape);
  ScratchDir dir;
  write_checkpoint(dir.path(), ordinary_model(s, {c.fill, c.dtype, 1.0, c.trained_vectors}, c.seed),
                   qwen35_config(s));
  const AuditReport report = audit_checkpoint(dir.path());
  EXPECT_EQ(report.summary.verdict, "learned") << report.summary.message << "\n" << format_audit(report, true);
  ASSERT_EQ(report.layers.size(), static_cast<size_t>(s.layers));
  for (const LayerAudit& l : report.layers) {
    EXPECT_EQ(l.verdict, Verdict::Learned) << l.id;
    EXPECT_EQ(l.type, s.full(l.index) ? "full_attention" : "linear_attention") << l.id;
  }
  for (const TensorAudit& t : report.tensors) {
    EXPECT_TRUE(t.verdict == Verdict::Learned || t.verdict == Verdict::Zero) << t.name << ": " << verdict_name(t.verdict);
    for (const Evidence& e : t.evidence)
      EXPECT_EQ(e.strength, Strength::Note) << t.name << " [" << e.code << "] " << e.message;
  }
  EXPECT_TRUE(report.warnings.empty()) << report.warnings.front();
}

std::vector<OrdinaryCase> ordinary_cases() {
  std::vector<OrdinaryCase> cases;
  const Fill fills[] = {Fill::Gaussian, Fill::StudentT3, Fill::Cauchy, Fill::Laplace, Fill::Uniform, Fill::Bf16InF32};
  const io::DType dtypes[] = {io::DType::F32, io::DType::BF16, io::DType::F16};
  for (const char* shape : {"default", "small", "wide"}) {
    for (Fill fill : fills) {
      for (io::DType dtype : dtypes) {
        // F16 cannot hold a Cauchy's tail (values beyond 65504 become inf).
        if (fill == Fill::Cauchy && dtype == io::DType::F16) continue;
        for (uint64_t seed : {1u, 2u}) cases.push_back({fill, dtype, seed * 100 + static_cast<uint64_t>(fill), shape, seed == 2});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Many, OrdinaryCheckpoint, ::testing::ValuesIn(ordinary_cases()),
                         [](const ::testing::TestParamInfo<OrdinaryCase>& param_info) {
                           return std::string(param_info.param.shape) + "_" + fill_name(param_info.param.fill) + "_" +
                                  io::dtype_name(param_info.param.dtype) + "_" + std::to_string(param_info.param.seed);
                         });

// A Llama-family checkpoint (names, no config) with several trained-like layers.
TEST(OrdinaryCheckpoint, LlamaNamesWithoutConfig) {
  std::mt19937_64 rng(42);
  std::vector<Tensor> t;
  t.push_back({"model.embed_tokens.weight", {128, 64}, gaussian(rng, 128 * 64, 0.02), io::DType::BF16});
  for (int i = 0; i < 4; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* name : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                             "self_attn.o_proj.weight"})
      t.push_back({p + name, {64, 64}, laplace(rng, 64 * 64, 0.02), io::DType::BF16});
    t.push_back({p + "mlp.gate_proj.weight", {172, 64}, student_t(rng, 172 * 64, 4.0, 0.03), io::DType::BF16});
    t.push_back({p + "mlp.up_proj.weight", {172, 64}, student_t(rng, 172 * 64, 4.0, 0.03), io::DType::BF16});
    t.push_back({p + "mlp.down_proj.weight", {64, 172}, student_t(rng, 172 * 64, 4.0, 0.03), io::DType::BF16});
    std::vector<float> norm = gaussian(rng, 64, 0.05);
    for (auto& x : norm) x += 1.0f;
    t.push_back({p + "input_layernorm.weight", {64}, norm, io::DType::BF16});
  }
  t.push_back({"lm_head.weight", {128, 64}, gaussian(rng, 128 * 64, 0.02), io::DType::BF16});
  ScratchDir dir;
  write_checkpoint(dir.path(), t);
  const AuditReport r = audit_checkpoint(dir.path());
  EXPECT_EQ(r.summary.verdict, "learned") << format_audit(r, true);
  EXPECT_EQ(r.layers.size(), 4u);
}

// --- odd but not compiled -------------------------------------------------

AuditReport audit_with(const std::function<void(std::vector<Tensor>&)>& edit, io::DType dtype = io::DType::BF16) {
  const Shape s;
  std::vector<Tensor> tensors = ordinary_model(s, {Fill::Gaussian, dtype, 1.0, true}, 9);
  edit(tensors);
  ScratchDir dir;
  write_checkpoint(dir.path(), tensors, qwen35_config(s));
  return audit_checkpoint(dir.path());
}

Tensor& find(std::vector<Tensor>& tensors, const std::string& name) {
  for (auto& t : tensors) {
    if (t.name == name) return t;
  }
  throw std::runtime_error("no tensor " + name);
}

const LayerAudit& layer(const AuditReport& r, int64_t index) {
  for (const auto& l : r.layers) {
    if (l.index == index) return l;
  }
  throw std::runtime_error("no layer");
}

bool has_code(const std::vector<Evidence>& evidence, const std::string& code) {
  for (const auto& e : evidence) {
    if (e.code == code) return true;
  }
  return false;
}

void expect_only_layer_unusual(const AuditReport& r, int64_t index, const std::string& code) {
  EXPECT_EQ(r.summary.verdict, "unusual") << format_audit(r, false);
  for (const LayerAudit& l : r.layers) {
    EXPECT_EQ(l.verdict, l.index == index ? Verdict::Unusual : Verdict::Learned) << l.id << "\n" << format_audit(r, false);
  }
  EXPECT_TRUE(has_code(layer(r, index).evidence, code)) << format_audit(r, false);
}

TEST(UnusualNotCompiled, ALayerScaledByTwoToTheTwelve) {
  const auto r = audit_with([](std::vector<Tensor>& t) {
    for (auto& x : find(t, "model.layers.2.mlp.up_proj.weight").values) x *= 4096.0f;
  });
  expect_only_layer_unusual(r, 2, "neighbours");
}

TEST(UnusualNotCompiled, AFullPrecisionLayerAmongBf16Layers) {
  const auto r = audit_with([](std::vector<Tensor>& t) {
    std::mt19937_64 rng(1);
    Tensor& up = find(t, "model.layers.1.mlp.up_proj.weight");
    up.values = gaussian(rng, up.values.size(), 0.1);
    up.dtype = io::DType::F32;
  });
  expect_only_layer_unusual(r, 1, "neighbours");
}

TEST(UnusualNotCompiled, PrunedToFortyPercent) {
  const auto r = audit_with([](std::vector<Tensor>& t) {
    std::mt19937_64 rng(2);
    std::bernoulli_distribution keep(0.4);
    for (auto& x : find(t, "model.layers.4.mlp.down_proj.weight").values) {
      if (!keep(rng)) x = 0;
    }
  });
  expect_only_layer_unusual(r, 4, "sparse");
}

TEST(UnusualNotCompiled, NanAndOneOutlier) {
  const auto r = audit_with([](std::vector<Tensor>& t) {
    find(t, "model.layers.0.mlp.gate_proj.weight").values[17] = NAN;
    find(t, "model.layers.5.mlp.gate_proj.weight").values[99] = 0x1p70f;
  });
  EXPECT_EQ(r.summary.verdict, "unusual");
  EXPECT_EQ(layer(r, 0).verdict, Verdict::Unusual);
  EXPECT_TRUE(has_code(layer(r, 0).evidence, "nonfinite"));
  EXPECT_EQ(layer(r, 5).verdict, Verdict::Unusual);
  EXPECT_TRUE(has_code(layer(r, 5).evidence, "extreme_values"));
}

// Ternary weights (BitNet-like, scale 0.5): every value short, but dense, with no
// structure: low precision, not computation.
TEST(UnusualNotCompiled, TernaryWeights) {
  const auto r = audit_with([](std::vector<Tensor>& t) {
    std::mt19937_64 rng(3);
    std::uniform_int_distribution<int> v(-1, 1);
    for (auto& x : find(t, "model.layers.3.mlp.up_proj.weight").values) x = 0.5f * static_cast<float>(v(rng));
  });
  expect_only_layer_unusual(r, 3, "low_bit_values");
}

}  // namespace
}  // namespace qpu::tools
