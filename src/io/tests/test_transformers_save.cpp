// save_qwen35 checked by transformers: a checkpoint loaded from save_pretrained
// output and written back by qpu must be, for transformers 5.24.0, the same model
// (no missing/unexpected keys, identical parameters and logits). Two Python runs
// per case, hence the "slow" label.
#include <cstdlib>

#include <gtest/gtest.h>

#include "io/qwen35_save.h"
#include "io/qwen35_weights.h"
#include "test_helpers.h"
#include "transformers_fixture.h"

namespace qpu::io {
namespace {

using TransformersSavedCopy = testing::TransformersCheckpoint;

// The other direction: what save_qwen35 writes, transformers loads as the same model.
TEST_P(TransformersSavedCopy, IsTheSameModelForTransformers) {
  const std::string variant = GetParam();
  const Qwen35Weights weights = load_qwen35(dir_);
  const auto saved = scratch_ / "saved";
  std::filesystem::create_directory(saved);
  SaveOptions options;
  options.dtype = variant == "causal_f32" ? DType::F32 : variant == "causal_f16" ? DType::F16 : DType::BF16;
  if (variant == "causal_bf16") {  // like the released checkpoints
    options.dtype_for = [](std::string_view name) {
      return name.ends_with("A_log") || name.ends_with("linear_attn.norm.weight") ? DType::F32 : DType::BF16;
    };
  }
  options.max_shard_bytes = variant == "causal_tied_sharded" ? 30000 : 5'000'000'000;
  save_qwen35(saved, weights, options);
  const std::string log = (scratch_ / "check.log").string();
  const std::string command = "'" + std::string(QPU_PYTHON) + "' '" + testing::test_data("check_saved_qwen35.py").string() +
                              "' '" + dir_.string() + "' '" + saved.string() + "' > '" + log + "' 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0) << testing::read_file(log);
}

// The vision wrapper is left out: AutoModelForCausalLM does not build it.
INSTANTIATE_TEST_SUITE_P(SavePretrained, TransformersSavedCopy,
                         ::testing::Values("causal_f32", "causal_bf16", "causal_f16", "causal_tied_sharded"));

}  // namespace
}  // namespace qpu::io
