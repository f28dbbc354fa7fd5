// Detection: compiled layers built with the structures of the exactness toolkit
// are flagged, alone, between ordinary layers, merged into learned layers, and
// stored as BF16; the verdict of every layer follows from the construction.
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tools/audit.h"
#include "synthetic_models.h"

namespace qpu::tools {
namespace {

using namespace testing;

const TensorAudit& tensor(const AuditReport& r, const std::string& name) {
  for (const auto& t : r.tensors) {
    if (t.name == name) return t;
  }
  throw std::runtime_error("no tensor " + name);
}

bool has_code(const std::vector<Evidence>& evidence, const std::string& code) {
  for (const auto& e : evidence) {
    if (e.code == code) return true;
  }
  return false;
}

std::vector<Verdict> layer_verdicts(const AuditReport& r) {
  std::vector<Verdict> v;
  for (const auto& l : r.layers) v.push_back(l.verdict);
  return v;
}

std::string names(const std::vector<Verdict>& v) {
  std::string s;
  for (Verdict x : v) s += std::string(verdict_name(x)) + " ";
  return s;
}

TEST(CompiledCheckpoint, EveryKindOfCompiledLayer) {
  Shape s;
  s.layers = 6;
  std::mt19937_64 rng(1);
  std::vector<Tensor> t = compiled_globals(s);
  append(t, compiled_mul_layer(s, 0, 30));
  append(t, compiled_scale_layer(s, 1, rng));
  append(t, compiled_dyadic_layer(s, 2));
  append(t, compiled_memory_layer(s, 3));  // layer 3 is a full-attention layer
  append(t, compiled_mul_layer(s, 4, 64, io::DType::BF16));
  append(t, compiled_dyadic_layer(s, 5));
  ScratchDir dir;
  write_checkpoint(dir.path(), t, qwen35_config(s));
  const AuditReport r = audit_checkpoint(dir.path());
  const std::string text = format_audit(r, true);
  EXPECT_EQ(r.summary.verdict, "compiled") << text;
  EXPECT_EQ(layer_verdicts(r), std::vector<Verdict>(6, Verdict::Compiled)) << names(layer_verdicts(r)) << text;
  EXPECT_EQ(r.summary.compiled_layers.size(), 6u);
  for (const char* name : {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"})
    EXPECT_EQ(tensor(r, name).verdict, Verdict::Compiled) << name << "\n" << text;
  EXPECT_EQ(r.summary.flagged_tensors_outside_layers.size(), 3u);

  // The mul layer: 60 one-hot gate rows of +-2^112 (exact constants), 30 two-term down rows.
  const TensorAudit& gate = tensor(r, "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(gate.stats.row_counts.one_hot, 60u);
  EXPECT_EQ(gate.stats.row_counts.zero, static_cast<uint64_t>(s.inter - 60));
  EXPECT_EQ(gate.stats.huge_short, 60u);
  EXPECT_TRUE(has_code(gate.evidence, "exact_extremes"));
  EXPECT_TRUE(has_code(gate.evidence, "structured_rows"));
  const TensorAudit& down = tensor(r, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(down.stats.row_counts.two_nonzero, 30u);
  EXPECT_EQ(down.stats.tiny_short, 60u);
  // The idle mixer: zero tensors.
  EXPECT_EQ(tensor(r, "model.layers.0.linear_attn.in_proj_qkv.weight").verdict, Verdict::Zero);

  // The baked-weights layer has nothing extreme: only its structure gives it away.
  const TensorAudit& up = tensor(r, "model.layers.1.mlp.up_proj.weight");
  EXPECT_EQ(up.stats.huge + up.stats.tiny, 0u);
  EXPECT_EQ(up.stats.row_counts.term, 31u);
  EXPECT_FALSE(has_code(up.evidence, "exact_extremes"));
  EXPECT_EQ(up.verdict, Verdict::Compiled);

  // The dyadic layer: every gate row has 3..6 short terms, every data row of down 8.
  const TensorAudit& dgate = tensor(r, "model.layers.2.mlp.gate_proj.weight");
  EXPECT_EQ(dgate.stats.row_counts.low_bit_sparse, static_cast<uint64_t>(s.inter));
  EXPECT_EQ(dgate.stats.short_dyadic, dgate.stats.nonzero);
  const TensorAudit& ddown = tensor(r, "model.layers.2.mlp.down_proj.weight");
  EXPECT_EQ(ddown.stats.row_counts.low_bit_sparse, static_cast<uint64_t>(data_dims(s)));

  // The embedding's rails: dims 62 and 63 hold 2^51 in every row.
  const TensorAudit& embed = tensor(r, "model.embed_tokens.weight");
  ASSERT_FALSE(embed.stats.rail_column_runs.empty());
  const ColumnRun& last = embed.stats.rail_column_runs.back();
  EXPECT_EQ(last.first, 62u);
  EXPECT_EQ(last.last, 63u);
  EXPECT_EQ(last.value, 0x1p51);
  EXPECT_TRUE(has_code(embed.evidence, "rails"));
  EXPECT_EQ(r.layers[3].type, "full_attention");
}

struct SandwichCase {
  Fill fill;
  io::DType dtype;
  uint64_t seed;
};

class Sandwich : public ::testing::TestWithParam<SandwichCase> {};

// Compiled layers between ordinary layers: only they are flagged; their learned
// neighbours are not dragged into "unusual".
TEST_P(Sandwich, OnlyTheCompiledLayersAreFlagged) {
  const SandwichCase& c = GetParam();
  Shape s;
  s.layers = 8;
  std::mt19937_64 rng(c.seed);
  const OrdinaryOptions o{c.fill, c.dtype, 1.0, c.seed % 2 == 0};
  std::vector<Tensor> t = ordinary_globals(s, rng, o);
  const std::vector<Verdict> expected = {Verdict::Learned,  Verdict::Learned, Verdict::Compiled, Verdict::Compiled,
                                         Verdict::Learned,  Verdict::Compiled, Verdict::Learned, Verdict::Learned};
  for (int64_t i = 0; i < s.layers; ++i) {
    if (i == 2) {
      append(t, compiled_mul_layer(s, i, 20, c.dtype));
    } else if (i == 3) {
      append(t, compiled_memory_layer(s, i));
    } else if (i == 5) {
      append(t, compiled_scale_layer(s, i, rng));
    } else {
      append(t, ordinary_layer(s, i, rng, o));
    }
  }
  ScratchDir dir;
  write_checkpoint(dir.path(), t, qwen35_config(s));
  const AuditReport r = audit_checkpoint(dir.path());
  EXPECT_EQ(layer_verdicts(r), expected) << names(layer_verdicts(r)) << "\n" << format_audit(r, false);
  EXPECT_EQ(r.summary.verdict, "compiled");
  EXPECT_EQ(r.summary.compiled_layers,
            (std::vector<std::string>{"model.layers.2", "model.layers.3", "model.layers.5"}));
  EXPECT_TRUE(r.summary.flagged_tensors_outside_layers.empty());
  // The compiled layers also stand out from their neighbours.
  bool neighbours = false;
  for (const auto& e : r.layers[5].evidence) neighbours |= e.code == "neighbours";
  EXPECT_TRUE(neighbours) << format_audit(r, false);
}

std::vector<SandwichCase> sandwich_cases() {
  std::vector<SandwichCase> out;
  uint64_t seed = 1;
  for (Fill f : {Fill::Gaussian, Fill::StudentT3, Fill::Laplace, Fill::Bf16InF32}) {
    for (io::DType d : {io::DType::F32, io::DType::BF16}) out.push_back({f, d, seed++});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fills, Sandwich, ::testing::ValuesIn(sandwich_cases()),
                         [](const ::testing::TestParamInfo<SandwichCase>& param_info) {
                           return std::string(fill_name(param_info.param.fill)) + "_" + io::dtype_name(param_info.param.dtype);
                         });

// A compiled part merged into learned tensors (the Qwenputer layout): the learned
// model uses dims 0..95, the machine dims 96..127 and vocabulary rows 384..511.
TEST(Merged, CompiledRowsInsideLearnedTensors) {
  Shape s;
  s.vocab = 512;
  s.hidden = 128;
  s.inter = 256;
  s.layers = 4;
  const int64_t base = 96;
  std::mt19937_64 rng(5);
  std::vector<Tensor> t;
  // Embedding: learned rows in base dims; machine rows with rails (126, 127) and bit codes.
  std::vector<float> embed(static_cast<size_t>(s.vocab * s.hidden), 0.0f);
  for (int64_t r = 0; r < 384; ++r) {
    const auto row = gaussian(rng, static_cast<size_t>(base), 0.02);
    std::copy(row.begin(), row.end(), embed.begin() + r * s.hidden);
  }
  for (int64_t r = 384; r < 512; ++r) {
    embed[static_cast<size_t>(r * s.hidden + 126)] = 0x1p51f;
    embed[static_cast<size_t>(r * s.hidden + 127)] = 0x1p51f;
    for (int64_t b = 0; b < 7; ++b) embed[static_cast<size_t>(r * s.hidden + base + 2 * b + ((r >> b) & 1))] = 0x1p48f;
  }
  t.push_back({"model.embed_tokens.weight", {s.vocab, s.hidden}, embed, io::DType::F32});
  t.push_back({"model.norm.weight", {s.hidden}, std::vector<float>(static_cast<size_t>(s.hidden), 0.0f), io::DType::F32});
  for (int64_t i = 0; i < s.layers; ++i) {
    for (Tensor& x : ordinary_layer(s, i, rng)) {
      // Learned weights never read or write the machine's dims (widened with zeros).
      if (x.shape.size() == 2 && x.shape[1] == s.hidden) {
        for (int64_t r = 0; r < x.shape[0]; ++r)
          for (int64_t c = base; c < s.hidden; ++c) x.values[static_cast<size_t>(r * s.hidden + c)] = 0;
      }
      if (x.shape.size() == 2 && x.shape[0] == s.hidden) {
        for (int64_t r = base; r < s.hidden; ++r)
          for (int64_t c = 0; c < x.shape[1]; ++c) x.values[static_cast<size_t>(r * x.shape[1] + c)] = 0;
      }
      // Layer 1's MLP also holds 32 machine neurons (rows 224..255): exact products.
      if (i == 1 && (x.name.ends_with("gate_proj.weight") || x.name.ends_with("up_proj.weight"))) {
        const float v = x.name.ends_with("gate_proj.weight") ? 0x1p112f : 0x1p48f;
        for (int64_t r = 224; r < 256; ++r) {
          for (int64_t c = 0; c < s.hidden; ++c) x.values[static_cast<size_t>(r * s.hidden + c)] = 0;
          x.values[static_cast<size_t>(r * s.hidden + base + (r % 32))] = (r % 2) ? -v : v;
        }
      }
      t.push_back(std::move(x));
    }
  }
  ScratchDir dir;
  write_checkpoint(dir.path(), t);
  const AuditReport r = audit_checkpoint(dir.path());
  const std::string text = format_audit(r, false);
  EXPECT_EQ(layer_verdicts(r),
            (std::vector<Verdict>{Verdict::Learned, Verdict::Mixed, Verdict::Learned, Verdict::Learned}))
      << names(layer_verdicts(r)) << text;
  const TensorAudit& e = tensor(r, "model.embed_tokens.weight");
  EXPECT_EQ(e.verdict, Verdict::Mixed) << text;
  ASSERT_EQ(e.row_runs.size(), 1u) << text;
  EXPECT_EQ(e.row_runs[0].first, 384u);
  EXPECT_EQ(e.row_runs[0].last, 511u);
  EXPECT_EQ(e.row_runs[0].kind, "structured");
  EXPECT_TRUE(has_code(e.evidence, "row_kinds"));
  const TensorAudit& gate = tensor(r, "model.layers.1.mlp.gate_proj.weight");
  EXPECT_EQ(gate.verdict, Verdict::Mixed);
  ASSERT_EQ(gate.row_runs.size(), 1u);
  EXPECT_EQ(gate.row_runs[0].first, 224u);
  EXPECT_EQ(gate.row_runs[0].last, 255u);
  // The widened learned tensors are learned, with the unused dims noted.
  const TensorAudit& up0 = tensor(r, "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(up0.verdict, Verdict::Learned);
  ASSERT_EQ(up0.stats.zero_column_runs.size(), 1u);
  EXPECT_EQ(up0.stats.zero_column_runs[0].first, 96u);
  EXPECT_EQ(up0.stats.zero_column_runs[0].last, 127u);
  EXPECT_EQ(r.summary.verdict, "compiled");
}

TEST(Inert, AllZeroLayerIsTheIdentity) {
  Shape s;
  s.layers = 3;
  std::mt19937_64 rng(8);
  std::vector<Tensor> t = ordinary_globals(s, rng);
  append(t, ordinary_layer(s, 0, rng));
  std::vector<Tensor> zero;
  idle_mixer(s, 1, zero, io::DType::F32);
  push_mlp(s, 1, Mlp(s), zero, io::DType::F32);
  zero_norms(s, 1, zero, io::DType::F32);
  append(t, std::move(zero));
  append(t, ordinary_layer(s, 2, rng));
  ScratchDir dir;
  write_checkpoint(dir.path(), t);
  const AuditReport r = audit_checkpoint(dir.path());
  EXPECT_EQ(layer_verdicts(r), (std::vector<Verdict>{Verdict::Learned, Verdict::Inert, Verdict::Learned}));
  EXPECT_EQ(r.summary.verdict, "unusual");
  EXPECT_EQ(r.summary.inert_layers, std::vector<std::string>{"model.layers.1"});
}

// The JSON report carries the same facts, in the documented schema.
TEST(AuditJson, SchemaAndConsistency) {
  Shape s;
  s.layers = 4;
  std::mt19937_64 rng(3);
  std::vector<Tensor> t = ordinary_globals(s, rng);
  append(t, ordinary_layer(s, 0, rng));
  append(t, compiled_mul_layer(s, 1, 10));
  append(t, ordinary_layer(s, 2, rng));
  append(t, compiled_memory_layer(s, 3));
  ScratchDir dir;
  write_checkpoint(dir.path(), t, qwen35_config(s));
  const AuditReport r = audit_checkpoint(dir.path());
  const nlohmann::json j = nlohmann::json::parse(audit_to_json(r).dump());
  EXPECT_EQ(j["format"], "qpu-audit-v1");
  EXPECT_EQ(j["model"]["architecture"], "Qwen3_5ForCausalLM");
  EXPECT_EQ(j["model"]["num_hidden_layers"], 4);
  EXPECT_EQ(j["summary"]["verdict"], "compiled");
  EXPECT_EQ(j["summary"]["compiled_layers"], (std::vector<std::string>{"model.layers.1", "model.layers.3"}));
  EXPECT_EQ(j["summary"]["layers_by_verdict"]["learned"], 2);
  ASSERT_EQ(j["layers"].size(), 4u);
  EXPECT_EQ(j["layers"][1]["verdict"], "compiled");
  EXPECT_EQ(j["layers"][3]["type"], "full_attention");
  EXPECT_TRUE(j["extensions"].contains("nested_model"));
  size_t tensors_in_layers = 0;
  for (const auto& l : j["layers"]) tensors_in_layers += l["tensors"].size();
  EXPECT_EQ(tensors_in_layers + j["outside_layers"].size(), j["tensors"].size());
  for (const auto& tj : j["tensors"]) {
    const auto& st = tj["stats"];
    EXPECT_EQ(st["zeros"].get<uint64_t>() + st["nonzero"].get<uint64_t>() + st["nonfinite"].get<uint64_t>(),
              st["elements"].get<uint64_t>())
        << tj["name"];
    if (tj["name"] == "model.layers.1.mlp.gate_proj.weight") {
      EXPECT_EQ(tj["verdict"], "compiled");
      EXPECT_EQ(tj["stats"]["rows"]["one_hot"], 20);
      EXPECT_EQ(tj["stats"]["significant_bits"]["1"], 20);
      EXPECT_EQ(tj["stats"]["max_abs"], 0x1p112);
    }
  }
}

}  // namespace
}  // namespace qpu::tools
