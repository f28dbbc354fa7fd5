// `qpu story` as a user runs it: `-n 2 --verify` on stories260K must print exactly the
// bytes `qpu ref -t 0 -n 2` prints (run as a process too, not hard-coded), report the
// verification, and bad flags or files must be errors with exit code 1.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/testing/run_command.h"

namespace {

namespace fs = std::filesystem;

const std::string kModels = std::string(QPU_SHARED_DIR) + "/models/stories260K/";

using Result = qpu::testing::CommandResult;

Result run_qpu(const std::string& args) {
  return qpu::testing::run_command(std::string("'") + QPU_BINARY + "' " + args,
                                   fs::temp_directory_path() / ("qpu-story-test-" + std::to_string(getpid()) + ".err"));
}

TEST(StoryCli, TwoStepsPrintWhatRefPrintsAndVerify) {
  const Result ref = run_qpu("ref '" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin' -t 0 -n 2");
  ASSERT_EQ(ref.status, 0) << ref.err;
  ASSERT_GT(ref.out.size(), 1u);  // two tokens' text and the final newline
  const Result story =
      run_qpu("story --model '" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin' -n 2 --verify --threads 1");
  ASSERT_EQ(story.status, 0) << story.err;
  EXPECT_EQ(story.out, ref.out);
  // 2 positions of 5 layers x 64 elements (x after the FFN) + INC; BOS and 2 story tokens.
  EXPECT_NE(story.err.find("verify: 642 floats, 2 logits vectors and 3 tokens bit-identical to run.c"), std::string::npos) << story.err;
  EXPECT_NE(story.err.find("story: token machine for 2 nested positions: layers "), std::string::npos) << story.err;
}

// run.c's -i: the prompt's tokens forced by the machine, then greedy; the same bytes as
// `qpu ref -i` and every float verified.
TEST(StoryCli, PromptPrintsWhatRefPrintsAndVerifies) {
  const std::string files = "'" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin'";
  const Result ref = run_qpu("ref " + files + " -t 0 -n 4 -i 'Lily saw'");
  ASSERT_EQ(ref.status, 0) << ref.err;
  const Result story = run_qpu("story --model " + files + " -n 4 -i 'Lily saw' --verify --threads 1");
  ASSERT_EQ(story.status, 0) << story.err;
  EXPECT_EQ(story.out, ref.out);
  EXPECT_NE(story.err.find("verify: 1284 floats, 4 logits vectors and 5 tokens bit-identical to run.c"), std::string::npos) << story.err;
}

TEST(StoryCli, BadFlagsAndFilesAreErrors) {
  const std::string model = "--model '" + kModels + "stories260K.bin' -z '" + kModels + "tok512.bin'";
  Result r = run_qpu("story --model /nonexistent/model.bin -z '" + kModels + "tok512.bin' -n 2");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("/nonexistent/model.bin"), std::string::npos) << r.err;
  r = run_qpu("story --model '" + kModels + "stories260K.bin' -z /nonexistent/tok.bin -n 2");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("/nonexistent/tok.bin"), std::string::npos) << r.err;
  r = run_qpu("story " + model + " -n -3");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("qpu: "), std::string::npos) << r.err;
  r = run_qpu("story " + model + " -n abc");
  EXPECT_NE(r.status, 0);
  r = run_qpu("story " + model + " -n 2 -t 0.5");  // sampling is not accepted yet
  EXPECT_NE(r.status, 0);
  r = run_qpu("story " + model + " -n 2 --threads -1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--threads"), std::string::npos) << r.err;
  r = run_qpu("story -n 2");  // no model
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(r.out.empty());
}

}  // namespace
