// Cross-check with stock transformers: the mul, dot_var, argmax, xorshift, divide and
// sqrt checkpoints of the suite are exported as Hugging Face checkpoints, run in
// Qwen3_5ForCausalLM (fp32, batched, MKL's summation order), and their logits must
// equal C's results bit for bit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "common/float_bits.h"
#include "npu/export.h"
#include "npu/suite.h"

namespace qpu::npu {
namespace {

class Transformers : public ::testing::TestWithParam<std::string> {};

TEST_P(Transformers, LogitsMatchC) {
  const std::string python = QPU_PYTHON;
  if (python.empty()) GTEST_SKIP() << "QPU_PYTHON not set";
  for (const PrimitiveSpec& spec : all_primitives()) {
    if (spec.name != GetParam()) continue;
    const int64_t lanes = lanes_for(spec, 256), rows = 512;
    std::mt19937_64 rng(99);
    std::vector<float> inputs;
    for (const auto& e : spec.edge_cases) inputs.insert(inputs.end(), e.begin(), e.end());
    std::vector<float> one(static_cast<size_t>(spec.inputs));
    while (inputs.size() < static_cast<size_t>(lanes * rows * spec.inputs)) {
      spec.random_case(rng, one.data());
      inputs.insert(inputs.end(), one.begin(), one.end());
    }
    const Batch b = build_batch(spec, lanes, rows, inputs);
    const auto dir = std::filesystem::temp_directory_path() / ("qpu_npu_tf_" + spec.name + "_" + std::to_string(::getpid()));
    export_checkpoint(b.compiled.weights, dir);
    std::vector<int64_t> tokens(static_cast<size_t>(rows));
    for (int64_t t = 0; t < rows; ++t) tokens[static_cast<size_t>(t)] = t;
    std::ofstream(dir / "tokens.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 8));
    const int64_t n_out = lanes * spec.outputs;
    const std::string cmd = python + " " + QPU_SOURCE_DIR + "/src/npu/tests/transformers_logits.py " + dir.string() +
                            " " + (dir / "tokens.bin").string() + " " + std::to_string(n_out) + " " +
                            (dir / "logits.bin").string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::vector<float> logits(static_cast<size_t>(rows * n_out));
    std::ifstream(dir / "logits.bin", std::ios::binary)
        .read(reinterpret_cast<char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
    int64_t mismatches = 0, cases = 0;
    std::vector<float> expect(static_cast<size_t>(spec.outputs));
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t l = 0; l < lanes; ++l) {
        spec.reference(&inputs[static_cast<size_t>((t * lanes + l) * spec.inputs)], expect.data());
        ++cases;
        for (int o = 0; o < spec.outputs; ++o) {
          const float got = logits[static_cast<size_t>(t * n_out + l * spec.outputs + o)];
          if (float_bits(got) != float_bits(0.0f + expect[static_cast<size_t>(o)])) {
            if (mismatches++ < 3)
              ADD_FAILURE() << spec.name << " row " << t << " lane " << l << ": expected "
                            << describe_float(0.0f + expect[static_cast<size_t>(o)]) << " got " << describe_float(got);
          }
        }
      }
    EXPECT_EQ(cases, lanes * rows);
    EXPECT_EQ(mismatches, 0);
    std::filesystem::remove_all(dir);
    return;
  }
  FAIL() << "no primitive " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(All, Transformers,
                         ::testing::Values("mul", "dot_var", "dot_fused_var", "argmax", "xorshift", "divide", "sqrt"));

}  // namespace
}  // namespace qpu::npu
