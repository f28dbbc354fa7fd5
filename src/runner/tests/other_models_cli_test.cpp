// `qpu story` on nested models other than stories260K (issue 30, item 7: any llama2.c
// checkpoint), made by python/make_llama2c_model.py with their own tokenizers: every
// story prints the bytes `qpu ref` prints with the same flags, every crossing float,
// logits vector and token verified against run.c. A model the machine cannot take is
// refused before any story byte, with the reason.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "common/testing/run_command.h"
#include "common/testing/scratch_files.h"

namespace {

namespace fs = std::filesystem;
using Result = qpu::testing::CommandResult;

Result run(const std::string& command) {
  return qpu::testing::run_command(command, fs::temp_directory_path() /
                                                ("qpu-other-models-" + std::to_string(getpid()) + ".err"));
}

class OtherModels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = std::make_unique<qpu::testing::ScratchDir>("qpu-other-models"); }
  static void TearDownTestSuite() { dir_.reset(); }
  void SetUp() override {
    if (std::string(QPU_PYTHON).empty()) GTEST_SKIP() << "QPU_PYTHON is not set (configure with -DQPU_PYTHON=...)";
  }
  // Writes NAME.bin and NAME.tok with the generator's flags; returns "MODEL -z TOK" quoted.
  static std::string make(const std::string& name, const std::string& flags) {
    const std::string model = (*dir_ / (name + ".bin")).string(), tok = (*dir_ / (name + ".tok")).string();
    const Result r = run(std::string("'") + QPU_PYTHON + "' '" + QPU_SOURCE_DIR + "/python/make_llama2c_model.py' '" +
                         model + "' '" + tok + "' " + flags);
    EXPECT_EQ(r.status, 0) << r.err;
    return "'" + model + "' -z '" + tok + "'";
  }
  static Result qpu(const std::string& args) { return run(std::string("'") + QPU_BINARY + "' " + args); }
  // qpu story FILES FLAGS --verify prints what qpu ref FILES FLAGS prints, all of it verified.
  static void expect_story_is_refs(const std::string& files, const std::string& flags, const std::string& verified) {
    const Result ref = qpu("ref " + files + " " + flags);
    ASSERT_EQ(ref.status, 0) << ref.err;
    const Result story = qpu("story --model " + files + " " + flags + " --verify --threads 1");
    ASSERT_EQ(story.status, 0) << story.err;
    EXPECT_EQ(story.out, ref.out) << flags;
    EXPECT_NE(story.err.find("verify: " + verified + " bit-identical to run.c"), std::string::npos) << story.err;
  }
  static inline std::unique_ptr<qpu::testing::ScratchDir> dir_;
};

// dim 16, 2 heads sharing one kv head (head size 8), hidden 32, its own classifier, a
// 32-token character vocabulary, seq_len 16: greedy from a prompt, sampled, top-p.
TEST_F(OtherModels, Dim16OneKvHeadUnsharedClassifier) {
  const std::string files =
      make("d16", "--dim 16 --hidden 32 --layers 2 --heads 2 --kv-heads 1 --vocab 32 --seq-len 16 --unshared --seed 3");
  expect_story_is_refs(files, "-t 0 -n 16 -i 'hi there'", "528 floats, 16 logits vectors and 17 tokens");
  expect_story_is_refs(files, "-t 1.0 -p 1 -s 5 -n 12", "396 floats, 12 logits vectors and 13 tokens");
  expect_story_is_refs(files, "-t 0.9 -p 0.8 -s 11 -n 12 -i the", "396 floats, 12 logits vectors and 13 tokens");
}

// stories260K's shape with hidden_dim 192 (SwiGLU chunks with a partial last one) and
// weights of binades -6..-1, far from a trained model's.
TEST_F(OtherModels, Hidden192SmallWeights) {
  const std::string files = make("h192", "--dim 64 --hidden 192 --layers 5 --heads 8 --kv-heads 4 --vocab 512 "
                                         "--seq-len 256 --binades=-6,-1 --seed 4");
  expect_story_is_refs(files, "-t 0 -n 6 -i 'Once upon a time'", "1926 floats, 6 logits vectors and 7 tokens");
}

// Head size 16 (dim 32, 2 heads): k and v of a kv head (32 floats) do not fit one RAM row
// of 31, so the KV cache keeps them in two heads per bank.
TEST_F(OtherModels, HeadSize16KeepsKAndVInTwoCacheHeads) {
  const std::string files = make("hs16", "--dim 32 --hidden 64 --layers 2 --heads 2 --vocab 64 --seq-len 16");
  expect_story_is_refs(files, "-t 0 -n 16 -i 'hi there'", "1040 floats, 16 logits vectors and 17 tokens");
  expect_story_is_refs(files, "-t 1.0 -p 0.9 -s 1 -n 12 -i the", "780 floats, 12 logits vectors and 13 tokens");
}

// What today's machine cannot take is refused before any story byte, with the reason.
TEST_F(OtherModels, UnsupportedShapesAreRefusedWithTheReason) {
  const std::string head24 = make("hs24", "--dim 48 --hidden 96 --layers 2 --heads 2 --vocab 64 --seq-len 32");
  Result r = qpu("story --model " + head24 + " -n 4 --verify");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("a head size of 24 is more than the 16 the exact slow path takes"), std::string::npos) << r.err;
  const std::string vocab30 = make("v30", "--dim 16 --hidden 32 --layers 2 --heads 2 --vocab 30 --seq-len 16");
  r = qpu("story --model " + vocab30 + " -n 4 -t 1 -p 0.9 -s 3 --verify");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("flag -p: the machine's top-p works on blocks of 8 logits, which do not divide the "
                       "vocabulary of 30"),
            std::string::npos)
      << r.err;
}

// Vocabularies that are no multiple of 8 sample (run.c's sample_mult) in blocks of the
// largest divisor up to 8: 30 in blocks of 6, the prime 31 in blocks of 1.
TEST_F(OtherModels, AnyVocabularySamples) {
  const std::string vocab30 = make("v30", "--dim 16 --hidden 32 --layers 2 --heads 2 --vocab 30 --seq-len 16");
  expect_story_is_refs(vocab30, "-t 1.0 -p 1 -s 3 -n 16 -i the", "528 floats, 16 logits vectors and 17 tokens");
  const std::string vocab31 =
      make("v31", "--dim 16 --hidden 32 --layers 2 --heads 2 --vocab 31 --seq-len 16 --seed 5");
  expect_story_is_refs(vocab31, "-t 1.0 -p 1 -s 3 -n 16 -i the", "528 floats, 16 logits vectors and 17 tokens");
  expect_story_is_refs(vocab31, "-t 0 -n 16 -i the", "528 floats, 16 logits vectors and 17 tokens");
}

}  // namespace
