// Stock transformers runs the M1 machine: the compiled checkpoint is written as qpu compile
// writes one (machine/machine_checkpoint.h: streamed shards, bf16 where exact), fed its
// prompt one token per forward with the cache, then generates greedily (argmax of each
// step's logits fed back, one token per forward) until DONE; the stream must equal the
// engine's expected stream token for token.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "machine/testing/machine.h"
#include "machine/machine_checkpoint.h"
#include "machine_runner.h"

namespace qpu::machine {
namespace {

TEST(TransformersMachine, GeneratesTheSameStream) {
  const std::string python = QPU_PYTHON;
  if (python.empty()) GTEST_SKIP() << "QPU_PYTHON not set";
  std::mt19937_64 rng(77);
  const auto r = [&](int lo, int hi) { return testing::random_float(rng, lo, hi); };
  const MachineOptions o = testing::random_m1_options(rng);
  const Machine m = build_machine(o);
  const auto dir = std::filesystem::temp_directory_path() / ("qpu_machine_tf_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  CheckpointWriteOptions write;
  write.max_shard_bytes = 8'000'000;  // several shards, as a large machine has
  write_machine_checkpoint(dir, m, {}, write);
  std::vector<int64_t> all;
  constexpr int kVectors = 2;
  std::vector<std::vector<int64_t>> expected;
  for (int v = 0; v < kVectors; ++v) {
    std::vector<float> x;
    for (int i = 0; i < 8; ++i) x.push_back(v == 1 && i == 3 ? 0.0f : r(-3, 3));
    const auto p = m.prompt(x);
    all.push_back(static_cast<int64_t>(p.size()));
    all.insert(all.end(), p.begin(), p.end());
    expected.push_back(m.expected_stream(x, o.a, o.b));
  }
  std::ofstream(dir / "prompts.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(all.data()), static_cast<std::streamsize>(all.size() * 8));
  const std::string cmd = python + " " + QPU_SOURCE_DIR + "/src/machine/tests/transformers_machine_generate.py " +
                          dir.string() + " " + (dir / "prompts.bin").string() + " " + std::to_string(m.done()) + " " +
                          std::to_string(8 * 8 + 4) + " " + (dir / "generated.bin").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(dir / "generated.bin", std::ios::binary);
  for (int v = 0; v < kVectors; ++v) {
    int64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 8);
    std::vector<int64_t> got(static_cast<size_t>(n));
    in.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(n * 8));
    ASSERT_TRUE(in.good());
    EXPECT_EQ(got, expected[static_cast<size_t>(v)]) << "vector " << v;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qpu::machine
