// Stock transformers cross-check of the GDN memory: a compiled checkpoint whose every
// layer is linear_attention (no full-attention layer at all) is exported, run in
// Qwen3_5ForCausalLM (transformers 5.24.0, fp32 CPU) one token per forward with the
// cache, and every logit (= every out value of every head) must equal the value
// written, bit for bit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "common/float_bits.h"
#include "npu/export.h"
#include "npu/gdn_memory_suite.h"

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
  const auto dir = std::filesystem::temp_directory_path() / ("qpu_npu_tf_gdn_" + std::to_string(::getpid()));
  export_checkpoint(c.compiled.weights, dir);
  std::vector<int64_t> tokens(static_cast<size_t>(o.tokens));
  for (int64_t t = 0; t < o.tokens; ++t) tokens[static_cast<size_t>(t)] = t;
  std::ofstream(dir / "tokens.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 8));
  const auto n_out = static_cast<int64_t>(c.out_dims.size());
  const std::string cmd = python + " " + QPU_SOURCE_DIR + "/src/npu/tests/transformers_gdn_logits.py " + dir.string() +
                          " " + (dir / "tokens.bin").string() + " " + std::to_string(n_out) + " " +
                          (dir / "logits.bin").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<float> logits(static_cast<size_t>(o.tokens * n_out));
  std::ifstream in(dir / "logits.bin", std::ios::binary);
  in.read(reinterpret_cast<char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
  ASSERT_EQ(in.gcount(), static_cast<std::streamsize>(logits.size() * 4));
  int64_t mismatches = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (float_bits(logits[i]) != float_bits(c.expected[i]) && mismatches++ < 3)
      ADD_FAILURE() << "token " << i / static_cast<size_t>(n_out) << " out " << i % static_cast<size_t>(n_out)
                    << ": expected " << describe_float(c.expected[i]) << " got " << describe_float(logits[i]);
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(c.values_read_from_written_rows, 40000);
  EXPECT_GT(c.overwrites, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qpu::npu
