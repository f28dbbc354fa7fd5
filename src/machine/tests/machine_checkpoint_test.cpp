// write_machine_checkpoint on the M1 machine (machine/testing/machine.h): the directory holds the
// machine's weights bit for bit (read back by load_qwen35, in bf16 where exact and fp32
// elsewhere, in several shards), the engine loaded from the files generates the expected
// stream, and a write that cannot happen leaves nothing behind.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/error.h"
#include "common/float_bits.h"
#include "common/testing/scratch_files.h"
#include "io/tests/test_helpers.h"
#include "io/qwen35_weights.h"
#include "machine/machine_checkpoint.h"
#include "machine_runner.h"

namespace qpu::machine {
namespace {

using qpu::testing::ScratchDir;

using testing::random_float;

TEST(MachineCheckpoint, TheFilesHoldTheMachineAndRunIt) {
  std::mt19937_64 rng(2026);
  const MachineOptions o = testing::random_m1_options(rng);
  const Machine m = build_machine(o);
  ScratchDir scratch;
  const auto dir = scratch / "m1";
  CheckpointExtras extras;
  extras.machine = {{"machine", "M1"}, {"width", 8}};
  std::vector<int64_t> progress;
  CheckpointWriteOptions options;
  options.max_shard_bytes = 8'000'000;  // several shards
  options.progress = [&](int64_t done, int64_t total) {
    progress.push_back(done);
    EXPECT_EQ(total, m.compiled.weights.config.num_hidden_layers);
  };
  const io::StreamSaveResult r = write_machine_checkpoint(scratch.path().string() + "/m1/", m, extras, options);
  EXPECT_EQ(static_cast<int64_t>(progress.size()), m.compiled.weights.config.num_hidden_layers);
  EXPECT_EQ(r.parameters, machine_parameters(m));
  EXPECT_GT(r.bf16_tensors, 0);
  EXPECT_GT(r.f32_tensors, 0);  // the matrices' entries are full fp32 values
  EXPECT_LT(r.tensor_bytes, 4 * r.parameters);
  EXPECT_TRUE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  for (const char* f : {"config.json", "generation_config.json", "qpu-machine.json"})
    EXPECT_TRUE(std::filesystem::exists(dir / f)) << f;
  EXPECT_FALSE(std::filesystem::exists(dir / "tokenizer.json"));  // none given
  EXPECT_EQ(qpu::testing::read_file(dir / "qpu-machine.json"), extras.machine.dump(2) + "\n");
  // Only the directory itself beside the scratch: no temporary left.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(scratch.path())) ++entries, (void)e;
  EXPECT_EQ(entries, 1);

  // DONE is the eos token: a stock generate stops where the machine does.
  EXPECT_EQ(io::load_qwen35_config(dir).eos_token_id, m.done());
  // Bit for bit the emitted weights.
  io::Qwen35Weights back = io::load_qwen35(dir);
  io::testing::expect_same_weights(back, m.dense_weights());

  // The engine on the files runs the machine: the expected stream for two vectors.
  const testing::Hosts hosts = testing::engine_hosts(std::move(back));
  for (int v = 0; v < 2; ++v) {
    std::vector<float> x;
    for (int i = 0; i < 8; ++i) x.push_back(v == 1 && i == 3 ? 0.0f : random_float(rng, -3, 3));
    const std::vector<int64_t> expected = m.expected_stream(x, o.a, o.b);
    const testing::Run run = testing::run_greedy(m, m.prompt(x), hosts(),
                                                 static_cast<int64_t>(expected.size()) + 4);
    EXPECT_EQ(run.generated, expected) << "vector " << v;
  }
}

TEST(MachineCheckpoint, AWriteThatFailsHalfwayLeavesNothing) {
  std::mt19937_64 rng(11);
  const Machine m = build_machine(testing::random_m1_options(rng));
  ScratchDir scratch;
  CheckpointWriteOptions options;
  options.max_shard_bytes = 1'000'000;
  options.progress = [&](int64_t done, int64_t) {
    if (done == 5) throw Error("stopped at layer 5");
  };
  try {
    write_machine_checkpoint(scratch / "m1", m, {}, options);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stopped at layer 5"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::filesystem::is_empty(scratch.path()));  // no directory, no temporary
}

TEST(MachineCheckpoint, AnExistingDirectoryIsNeverTouched) {
  std::mt19937_64 rng(7);
  const Machine m = build_machine(testing::random_m1_options(rng));
  ScratchDir scratch;
  const auto dir = scratch / "taken";
  std::filesystem::create_directory(dir);
  qpu::testing::write_file(dir / "keep.txt", "mine");
  try {
    write_machine_checkpoint(dir, m, {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
  }
  EXPECT_EQ(qpu::testing::read_file(dir / "keep.txt"), "mine");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(scratch.path())) ++entries, (void)e;
  EXPECT_EQ(entries, 1);
  try {
    write_machine_checkpoint(scratch / "no" / "such" / "parent", m, {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qpu::machine
