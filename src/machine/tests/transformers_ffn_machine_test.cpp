// Stock transformers runs the M2a machine (machine/testing/ffn_machine.h) compiled from a
// synthetic llama2.c checkpoint (dims from its header only: dim 6, hidden 5, 3 layers):
// the checkpoint is exported, fed its prompt one token per forward with the cache, then
// generates greedily (argmax fed back, one token per forward) until DONE. The stream
// must equal the expected one token for token: every float of every layer's FFN equals
// run.c's (ffn_c) bit for bit, and of the attention's output step (x + wo xb). Sized for the test machine: value tokens of binades
// [-40, 8], 384 neurons per MLP sublayer, 2 GDN heads per mixer (≈ 1.4 GB fp32).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "machine/testing/ffn_machine.h"
#include "npu/export.h"
#include "npu/tests/unit_harness.h"
#include "synthetic_checkpoint.h"

namespace qpu::machine {
namespace {

TEST(TransformersFfnMachine, GeneratesTheSameStream) {
  const std::string python = QPU_PYTHON;
  if (python.empty()) GTEST_SKIP() << "QPU_PYTHON not set";
  std::mt19937_64 rng(909);
  const reference::Llama2Checkpoint ck = testing::synthetic_checkpoint(rng);
  const auto& cfg = ck.config();
  FfnMachineOptions o;
  o.lanes = 2;
  o.value_jmin = -40;
  o.value_jmax = 8;
  o.limits.max_neurons_per_mlp = 384;
  o.limits.max_gdn_memories_per_mixer = 2;
  const FfnMachine m = build_ffn_machine(ck, o);
  const auto dir = std::filesystem::temp_directory_path() / ("qpu_ffn_machine_tf_" + std::to_string(::getpid()));
  const npu::ExportStats stats = npu::export_checkpoint(m.dense_weights(), dir);
  std::vector<int64_t> all;
  std::vector<std::vector<int64_t>> expected;
  for (const int first : {0, 2}) {
    std::vector<float> x(static_cast<size_t>(cfg.dim));
    for (auto& e : x) e = npu::unit_testing::rand_float(rng, -6, 2);
    const auto p = m.prompt(x, first);
    all.push_back(static_cast<int64_t>(p.size()));
    all.insert(all.end(), p.begin(), p.end());
    expected.push_back(m.expected_stream(ck, x, first));
  }
  {  // the last layer from its input: ATTO (x + wo xb, xb random), then the FFN
    std::vector<float> x(static_cast<size_t>(cfg.dim)), xb(static_cast<size_t>(cfg.dim));
    for (auto& e : x) e = npu::unit_testing::rand_float(rng, -6, 2);
    for (auto& e : xb) e = npu::unit_testing::rand_float(rng, -6, 1);
    const auto p = m.prompt_layer(x, xb, cfg.n_layers - 1);
    all.push_back(static_cast<int64_t>(p.size()));
    all.insert(all.end(), p.begin(), p.end());
    expected.push_back(m.expected_layer(ck, x, xb, cfg.n_layers - 1));
  }
  std::ofstream(dir / "prompts.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(all.data()), static_cast<std::streamsize>(all.size() * 8));
  const std::string cmd = python + " " + QPU_SOURCE_DIR + "/src/machine/tests/transformers_machine_generate.py " +
                          dir.string() + " " + (dir / "prompts.bin").string() + " " + std::to_string(m.done()) + " " +
                          std::to_string(expected[0].size() + 4) + " " + (dir / "generated.bin").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(dir / "generated.bin", std::ios::binary);
  for (size_t v = 0; v < expected.size(); ++v) {
    int64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 8);
    std::vector<int64_t> got(static_cast<size_t>(n));
    in.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(n * 8));
    ASSERT_TRUE(in.good());
    EXPECT_EQ(got, expected[v]) << "vector " << v;
  }
  const auto& c = m.compiled.weights.config;
  std::printf("ffn machine in transformers: %zu + %zu + %zu tokens as expected; layers %lld, hidden %lld, intermediate %lld, "
              "%lld bytes on disk (%lld bf16 / %lld f32 tensors)\n",
              expected[0].size(), expected[1].size(), expected[2].size(), static_cast<long long>(c.num_hidden_layers),
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.intermediate_size),
              static_cast<long long>(stats.bytes), static_cast<long long>(stats.bf16_tensors),
              static_cast<long long>(stats.f32_tensors));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qpu::machine
