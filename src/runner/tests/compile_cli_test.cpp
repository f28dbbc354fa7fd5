// `qpu compile` as a user runs it on stories260K: the token machine is scheduled, its size
// as a dense checkpoint reported, and a machine over the parameter budget is refused
// before anything is written; bad inputs (a truncated model, a tokenizer of another
// vocabulary, an existing output directory, flags out of range) are errors that leave
// nothing behind. The writing path itself is tested on a machine that fits
// (src/machine/tests/machine_checkpoint_test.cpp).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/testing/run_command.h"
#include "common/testing/scratch_files.h"

namespace {

namespace fs = std::filesystem;
using qpu::testing::ScratchDir;

const std::string kModels = std::string(QPU_SHARED_DIR) + "/models/stories260K/";

qpu::testing::CommandResult run_qpu(const std::string& args) {
  return qpu::testing::run_command("'" + std::string(QPU_BINARY) + "' " + args,
                                   fs::temp_directory_path() / ("qpu-compile-test-" + std::to_string(getpid()) + ".err"));
}

int entries(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) ++n, (void)e;
  return n;
}

TEST(CompileCli, AMachineOverTheBudgetIsRefusedBeforeAnyFile) {
  ScratchDir scratch;
  const fs::path out = scratch / "ckpt";
  const auto r = run_qpu("compile '" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin' -o '" + out.string() +
                         "' --positions 16");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("compile: token machine for 16 positions ("), std::string::npos) << r.err;
  // The intermediate sizes and schedules are searched: each machine is reported, the
  // smallest kept.
  for (const char* size : {"intermediate 1024,", "intermediate 768,", "intermediate 640,", "intermediate 512,",
                           "intermediate 448,", "intermediate 384,"})
    EXPECT_NE(r.err.find(size), std::string::npos) << size << "\n" << r.err;
  for (const char* schedule : {"; greedy)", "; greedy, 128 neurons kept for the clears)",
                               "; by deadline, 128 neurons kept for the clears)", "; by deadline, 160 neurons kept for the clears)",
                               "; by deadline, 140 neurons kept for the clears)", "; by deadline, 144 neurons kept for the clears)"})
    EXPECT_NE(r.err.find(schedule), std::string::npos) << schedule << "\n" << r.err;
  EXPECT_NE(r.err.find("compile: kept WSUM / SLOW segments of "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(", scheduled "), std::string::npos) << r.err;
  // 16 positions are 2 blocks: WSUM's and SLOW's segments are both 2 blocks, SLOW below or
  // beside WSUM (the third layout is the first one again, not built twice).
  EXPECT_NE(r.err.find("(WSUM / SLOW segments of 2 / 2 blocks, SLOW below WSUM; greedy)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(WSUM / SLOW segments of 2 / 2 blocks, SLOW beside WSUM; greedy)"), std::string::npos) << r.err;
  size_t builds = 0;
  for (size_t at = r.err.find("compile: token machine for"); at != std::string::npos;
       at = r.err.find("compile: token machine for", at + 1))
    ++builds;
  EXPECT_EQ(builds, 18u) << r.err;  // 2 layouts x 9 candidates
  EXPECT_NE(r.err.find("billion parameters as a dense Qwen3.5 checkpoint"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("over the budget of 4000000000 parameters (--max-params); nothing was written"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty());
  EXPECT_EQ(entries(scratch.path()), 0);  // no directory, no temporary
  // A budget of 1 refuses whatever the machine is, with the same message.
  const auto tiny = run_qpu("compile '" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin' -o '" +
                            out.string() + "' --positions 16 --max-params 1 --intermediate 768");
  EXPECT_EQ(tiny.status, 1);
  EXPECT_NE(tiny.err.find("over the budget of 1 parameters"), std::string::npos) << tiny.err;
  EXPECT_NE(tiny.err.find("intermediate 768, scheduled "), std::string::npos) << tiny.err;  // pinned: only 768
  EXPECT_EQ(tiny.err.find("intermediate 1024,"), std::string::npos) << tiny.err;
  EXPECT_EQ(entries(scratch.path()), 0);
}

TEST(CompileCli, BadInputsAreErrorsThatWriteNothing) {
  ScratchDir scratch;
  const std::string model = "'" + kModels + "stories260K.bin'", tok = "'" + kModels + "tok512.bin'";
  const fs::path out = scratch / "ckpt";
  // A truncated model: its header promises more floats than the file holds.
  const std::string bytes = qpu::testing::read_file(kModels + "stories260K.bin");
  qpu::testing::write_file(scratch / "short.bin", bytes.substr(0, bytes.size() - 4));
  auto r = run_qpu("compile '" + (scratch / "short.bin").string() + "' -z " + tok + " -o '" + out.string() + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("short.bin"), std::string::npos) << r.err;
  // A tokenizer that ends before the model's 512 entries.
  const std::string tbytes = qpu::testing::read_file(kModels + "tok512.bin");
  qpu::testing::write_file(scratch / "tok-short.bin", tbytes.substr(0, tbytes.size() / 2));
  r = run_qpu("compile " + model + " -z '" + (scratch / "tok-short.bin").string() + "' -o '" + out.string() + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("tok-short.bin"), std::string::npos) << r.err;
  // Flags out of range.
  r = run_qpu("compile " + model + " -z " + tok + " -o '" + out.string() + "' --positions 513");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("seq_len 512"), std::string::npos) << r.err;
  r = run_qpu("compile " + model + " -z " + tok + " -o '" + out.string() + "' --max-params 0");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--max-params"), std::string::npos) << r.err;
  r = run_qpu("compile " + model + " -z " + tok + " -o '" + out.string() + "' --intermediate 100");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("flag --intermediate: 100 is outside [128, 65536]"), std::string::npos) << r.err;
  // 128 neurons cannot hold SLOW's widest op (an exponent's one-hot over its products).
  r = run_qpu("compile " + model + " -z " + tok + " -o '" + out.string() + "' --positions 16 --intermediate 128");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("flag --intermediate: the machine does not fit 128 neurons per MLP sublayer: split: op '"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(entries(scratch.path()), 2);  // the two broken inputs, nothing else
  // An existing output directory is never touched.
  fs::create_directory(out);
  qpu::testing::write_file(out / "keep.txt", "mine");
  r = run_qpu("compile " + model + " -z " + tok + " -o '" + out.string() + "' --positions 16");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  EXPECT_EQ(qpu::testing::read_file(out / "keep.txt"), "mine");
  EXPECT_EQ(entries(out), 1);
  // The output's parent must exist: checked before the machine is built.
  r = run_qpu("compile " + model + " -z " + tok + " -o '" + (scratch / "no" / "dir").string() + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("compile: token machine"), std::string::npos) << r.err;  // no build
  r = run_qpu("compile " + model + " -z " + tok + " -o '" + out.string() + "/'");  // "ckpt/" names ckpt: it exists
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  r = run_qpu("compile " + model + " -z " + tok + " -o '" + (scratch / "x").string() + "' --max-shard-bytes inf");
  EXPECT_NE(r.status, 0);
  r = run_qpu("compile " + model + " -z " + tok);  // no -o
  EXPECT_NE(r.status, 0);
}

}  // namespace
