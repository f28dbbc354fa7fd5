// Zero false positives on checkpoints written by transformers 5.24.0 itself:
// * make_ordinary_transformers.py: Qwen3_5ForCausalLM and LlamaForCausalLM, stock
//   initialisation and re-randomised weights, F32 and BF16;
// * a real learned model: stories260K converted to a Hugging Face Llama checkpoint by
//   python/llama2c_to_hf.py (checked to be stories260K: stock transformers' greedy
//   story equals run.c's token for token).
// Every layer must be "learned" and no tensor may carry compiled or unusual evidence.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/testing/scratch_files.h"
#include "python_run.h"
#include "reference/generate.h"
#include "reference/llama2_checkpoint.h"
#include "tools/audit.h"
#include "tools_learned_check.h"

namespace qpu::tools {
namespace {

namespace fs = std::filesystem;
using qpu::testing::CommandResult;
using qpu::testing::ScratchDir;
using testing::run_python;

const std::string kSource = QPU_SOURCE_DIR;
const fs::path kStories = fs::path(QPU_SHARED_DIR) / "models" / "stories260K";

// A suite whose checkpoints one Python script writes once, into a scratch directory of the
// suite's own: Maker names the directory's prefix, the script and its arguments.
template <typename Maker>
class MadeByPython : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::string(QPU_PYTHON).empty()) return;
    dir_ = std::make_unique<ScratchDir>(Maker::kPrefix);
    run_ = run_python(kSource + Maker::kScript, Maker::args(dir_->path()), dir_->path());
  }
  static void TearDownTestSuite() { dir_.reset(); }
  void SetUp() override {
    if (std::string(QPU_PYTHON).empty()) GTEST_SKIP() << "QPU_PYTHON is not set (configure with -DQPU_PYTHON=...)";
    ASSERT_TRUE(dir_);
    ASSERT_EQ(run_.status, 0) << run_.err;
  }
  static inline std::unique_ptr<ScratchDir> dir_;
  static inline CommandResult run_;
};

struct OrdinaryTransformers {
  static constexpr const char* kPrefix = "qpu-tools-transformers";
  static constexpr const char* kScript = "/src/tools/tests/make_ordinary_transformers.py";
  static std::vector<std::string> args(const fs::path& dir) { return {dir.string()}; }
};
using TransformersCheckpoints = MadeByPython<OrdinaryTransformers>;

TEST_F(TransformersCheckpoints, AllLearned) {
  std::ifstream in(dir_->path() / "index.json");
  const auto index = nlohmann::json::parse(in);
  ASSERT_EQ(index["checkpoints"].size(), 6u);
  for (const auto& c : index["checkpoints"]) {
    const std::string name = c["name"];
    const AuditReport r = audit_checkpoint(dir_->path() / name);
    std::vector<std::string> types;
    for (const auto& t : c["layer_types"]) types.push_back(t.get<std::string>());
    expect_learned_everywhere(r, name, c["layers"].get<int64_t>(), types);
  }
}

// stories260K as a Hugging Face Llama checkpoint, converted once for the suite into hf/.
struct StoriesToLlama {
  static constexpr const char* kPrefix = "qpu-tools-stories-llama";
  static constexpr const char* kScript = "/python/llama2c_to_hf.py";
  static std::vector<std::string> args(const fs::path& dir) {
    return {(kStories / "stories260K.bin").string(), (dir / "hf").string()};
  }
};
class Stories260KAsLlama : public MadeByPython<StoriesToLlama> {
 protected:
  static fs::path hf() { return dir_->path() / "hf"; }
};

TEST_F(Stories260KAsLlama, IsLearnedEverywhere) {
  const AuditReport r = audit_checkpoint(hf());
  expect_learned_everywhere(r, "stories260K as Llama", 5, {});
  // 9 tensors per layer, the embedding (tied classifier: no lm_head) and the final norm.
  EXPECT_EQ(r.tensors.size(), 5u * 9u + 2u);
  EXPECT_EQ(r.architecture, "LlamaForCausalLM");
}

TEST_F(Stories260KAsLlama, TransformersGreedyStoryIsRunCs) {
  const reference::Llama2Checkpoint checkpoint = reference::load_llama2_checkpoint(kStories / "stories260K.bin");
  reference::Transformer transformer(checkpoint);
  const auto tokenizer = reference::Tokenizer::load(kStories / "tok512.bin", checkpoint.config().vocab_size);
  reference::Sampler sampler(checkpoint.config().vocab_size, 0.0f, 0.9f, 1);
  const reference::GenerateResult story =
      reference::generate(transformer, tokenizer, sampler, "Once upon a time", 256);
  ASSERT_EQ(story.tokens.size(), 257u);
  const size_t prompt = story.prompt_tokens.size();
  std::vector<std::string> args = {hf().string(), std::to_string(story.tokens.size() - prompt)};
  for (size_t i = 0; i < prompt; ++i) args.push_back(std::to_string(story.prompt_tokens[i]));
  const CommandResult run = run_python(kSource + "/src/tools/tests/transformers_greedy.py", args, dir_->path());
  ASSERT_EQ(run.status, 0) << run.err;
  const std::vector<int> tokens = nlohmann::json::parse(run.out).get<std::vector<int>>();
  EXPECT_EQ(tokens, story.tokens);
}

TEST_F(Stories260KAsLlama, RefusesATruncatedFileAndWritesNothing) {
  const fs::path truncated = dir_->path() / "truncated.bin";
  fs::copy_file(kStories / "stories260K.bin", truncated);
  fs::resize_file(truncated, fs::file_size(truncated) - 4);
  const fs::path out = dir_->path() / "truncated-hf";
  const CommandResult run =
      run_python(kSource + "/python/llama2c_to_hf.py", {truncated.string(), out.string()}, dir_->path());
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.err.find("bytes, but its header implies"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(out));
  for (const auto& entry : fs::directory_iterator(dir_->path()))
    EXPECT_EQ(entry.path().filename().string().find(".llama2c-to-hf-"), std::string::npos) << entry.path();
}

}  // namespace
}  // namespace qpu::tools
