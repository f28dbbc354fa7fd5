// Stock transformers cross-check of the GDN memory: a compiled checkpoint whose every
// layer is linear_attention (no full-attention layer at all) is exported, run in
// Qwen3_5ForCausalLM (transformers 5.24.0, fp32 CPU) one token per forward with the
// cache, and every logit (= every out value of every head) must equal the value
// written, bit for bit.
#include <gtest/gtest.h>

#include "npu/gdn_memory_suite.h"
#include "transformers_gdn_run.h"

namespace qpu::npu {
namespace {

TEST(TransformersGdn, MemoryReadsMatchWrittenBits) {
  const std::string python = QPU_PYTHON;
  if (python.empty()) GTEST_SKIP() << "QPU_PYTHON not set";
  GdnMemoryOptions o;
  o.heads = 2;  // one integer head, one float head, 128 x 128
  o.tokens = 256;
  o.wipe_probability = 0.01;
  o.seed = 31;
  const GdnMemoryCase c = build_gdn_memory_case(o);
  for (const auto& type : c.compiled.weights.config.layer_types) ASSERT_EQ(type, io::LayerType::LinearAttention);
  const int64_t mismatches = testing::transformers_gdn_mismatches(
      c.compiled.weights, o.tokens, static_cast<int64_t>(c.out_dims.size()), c.expected, "gdn");
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(c.values_read_from_written_rows, 40000);
  EXPECT_GT(c.overwrites, 0);
}

}  // namespace
}  // namespace qpu::npu
