// The audit on weights compiled by this project's own compiler (src/npu's
// conformance suite: every primitive compiled into a checkpoint and exported like
// a Hugging Face model): every layer must be flagged, none may pass as learned.
#include <random>

#include <gtest/gtest.h>

#include "npu/export.h"
#include "npu/gdn_memory_suite.h"
#include "npu/uplink.h"
#include "npu/suite.h"
#include "tools/audit.h"
#include "tools_test_helpers.h"

namespace qpu::tools {
namespace {

TEST(AuditNpu, EveryCompiledPrimitiveIsFlagged) {
  for (const npu::PrimitiveSpec& spec : npu::all_primitives()) {
    const int64_t lanes = npu::lanes_for(spec, 256), rows = 64;
    std::mt19937_64 rng(7);
    std::vector<float> inputs;
    std::vector<float> one(static_cast<size_t>(spec.inputs));
    while (inputs.size() < static_cast<size_t>(lanes * rows * spec.inputs)) {
      spec.random_case(rng, one.data());
      inputs.insert(inputs.end(), one.begin(), one.end());
    }
    const npu::Batch batch = npu::build_batch(spec, lanes, rows, inputs);
    testing::ScratchDir dir;
    npu::export_checkpoint(batch.compiled.weights, dir.path());
    const AuditReport r = audit_checkpoint(dir.path());
    EXPECT_EQ(r.summary.verdict, "compiled") << spec.name << "\n" << format_audit(r, false);
    size_t compiled = 0;
    for (const LayerAudit& l : r.layers) {
      EXPECT_TRUE(l.verdict == Verdict::Compiled || l.verdict == Verdict::Inert)
          << spec.name << " " << l.id << ": " << verdict_name(l.verdict) << "\n" << format_audit(r, false);
      compiled += l.verdict == Verdict::Compiled;
    }
    EXPECT_GT(compiled, 0u) << spec.name;
    for (const TensorAudit& t : r.tensors) {
      if (t.where.role == TensorRole::Embedding || t.where.role == TensorRole::LmHead) {
        EXPECT_TRUE(t.verdict == Verdict::Compiled || t.verdict == Verdict::Mixed) << spec.name << " " << t.name;
      }
    }
  }
}

// Every layer compiled or inert, at least one compiled, and the named tensors flagged.
void expect_all_flagged(const AuditReport& r, const std::string& what, TensorRole role, const std::string& tensor_part) {
  EXPECT_EQ(r.summary.verdict, "compiled") << what << "\n" << format_audit(r, false);
  size_t compiled = 0;
  for (const LayerAudit& l : r.layers) {
    EXPECT_TRUE(l.verdict == Verdict::Compiled || l.verdict == Verdict::Inert)
        << what << " " << l.id << ": " << verdict_name(l.verdict) << "\n" << format_audit(r, false);
    compiled += l.verdict == Verdict::Compiled;
  }
  EXPECT_GT(compiled, 0u) << what;
  size_t seen = 0;
  for (const TensorAudit& t : r.tensors)
    if (t.where.role == role && t.name.find(tensor_part) != std::string::npos) {
      ++seen;
      EXPECT_TRUE(t.verdict == Verdict::Compiled || t.verdict == Verdict::Mixed) << what << " " << t.name;
    }
  EXPECT_GT(seen, 0u) << what << ": no tensor " << tensor_part;
}

// The machine's RAM: Gated DeltaNet layers with real (compiled) weights.
TEST(AuditNpu, GdnMemoryLayersAreFlagged) {
  npu::GdnMemoryOptions o;
  o.heads = 2;
  o.tokens = 8;
  const npu::GdnMemoryCase c = npu::build_gdn_memory_case(o);
  testing::ScratchDir dir;
  npu::export_checkpoint(c.compiled.weights, dir.path());
  expect_all_flagged(audit_checkpoint(dir.path()), "gdn_memory", TensorRole::Layer, "linear_attn.in_proj_qkv");
}

// The uplink: the value-token LM head (two powers of two per row) and its feature layers.
TEST(AuditNpu, UplinkHeadIsFlagged) {
  const npu::UplinkCheckpoint u = npu::build_uplink_checkpoint({1.0f, -3.5f, 0x1p-20f});
  testing::ScratchDir dir;
  npu::export_checkpoint(u.compiled.weights, dir.path());
  expect_all_flagged(audit_checkpoint(dir.path()), "uplink", TensorRole::LmHead, "lm_head");
}

}  // namespace
}  // namespace qpu::tools
