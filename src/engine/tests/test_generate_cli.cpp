// `qpu generate` end to end: a tiny checkpoint written with io::save_qwen35, the qpu
// binary run as a user runs it, its token ids and --dump-logits file compared with
// the engine called directly, at several thread counts, and its error messages.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/float_bits.h"
#include "common/testing/run_command.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "io/qwen35_save.h"
#include "io/qwen35_weights.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

namespace fs = std::filesystem;

using Result = qpu::testing::CommandResult;

Result run_qpu(const std::string& args, const fs::path& dir) {
  return qpu::testing::run_command(std::string("'") + QPU_BINARY + "' " + args, dir / "stderr.txt");
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class GenerateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "qpu-generate-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    testing::TinySpec spec;
    spec.bf16 = true;
    spec.tied = true;
    weights_ = testing::make_tiny_weights(spec);
    fs::create_directories(dir_ / "ckpt");
    io::save_qwen35(dir_ / "ckpt", weights_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The engine itself: `steps` tokens after `prompt`, and every logits vector.
  std::pair<std::string, std::string> expected(const std::vector<int64_t>& prompt, int steps,
                                               const SamplerOptions& sampling) const {
    const Model model(weights_);
    Sampler sampler(sampling);
    State state = model.new_state();
    std::vector<float> logits(model.config().vocab_size);
    std::string dump, ids;
    auto forward = [&](int64_t t) {
      model.forward(t, state, logits);
      dump.append(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float));
    };
    for (int64_t t : prompt) forward(t);
    for (int i = 0; i < steps; ++i) {
      const int64_t t = sampler.sample(logits);
      ids += (i ? " " : "") + std::to_string(t);
      if (i + 1 < steps) forward(t);
    }
    return {ids + "\n", dump};
  }

  fs::path dir_;
  io::Qwen35Weights weights_;
};

TEST_F(GenerateCli, GreedyIdsAndLogitsMatchTheEngineAtEveryThreadCount) {
  const auto [ids, dump] = expected({3, 1, 4, 1, 5}, 12, {});
  ASSERT_EQ(dump.size(), (5 + 12 - 1) * 97 * sizeof(float));
  for (int threads : {1, 2, 3}) {
    const fs::path logits = dir_ / ("logits" + std::to_string(threads) + ".f32");
    const Result r = run_qpu("generate '" + (dir_ / "ckpt").string() + "' --tokens 3,1,4,1,5 -n 12 --threads " +
                                 std::to_string(threads) + " --dump-logits '" + logits.string() + "'",
                             dir_);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, ids) << threads << " threads";
    EXPECT_TRUE(read_file(logits) == dump) << threads << " threads: logits differ";
    EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
  }
}

TEST_F(GenerateCli, SeededSamplingIsReproducible) {
  const auto [ids, dump] = expected({7, 8}, 20, {0.9, 0.8, 12345});
  const std::string args = "generate '" + (dir_ / "ckpt").string() +
                           "' --tokens 7,8 -n 20 --temperature 0.9 --top-p 0.8 --seed 12345";
  const Result a = run_qpu(args, dir_);
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.out, ids);
  EXPECT_EQ(run_qpu(args + " --threads 3", dir_).out, ids);
}

TEST_F(GenerateCli, PromptTextGoesThroughTokenizerJson) {
  // A word-level tokenizer.json: "w<i>" is token i; no decoder, so decoding joins the
  // tokens with spaces (as the tokenizers library does).
  std::string vocab;
  for (int i = 0; i < 97; ++i) vocab += (i ? "," : "") + std::string("\"w") + std::to_string(i) + "\":" + std::to_string(i);
  std::ofstream(dir_ / "ckpt" / "tokenizer.json")
      << R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,)"
      << R"("pre_tokenizer":{"type":"WhitespaceSplit"},"post_processor":null,"decoder":null,)"
      << R"("model":{"type":"WordLevel","unk_token":"w0","vocab":{)" << vocab << "}}}";
  const auto [ids, dump] = expected({3, 1, 4}, 6, {});
  const Result r = run_qpu("generate '" + (dir_ / "ckpt").string() + "' --prompt 'w3 w1 w4' -n 6", dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  std::string text;
  std::istringstream id_stream(ids);
  for (std::string id; id_stream >> id;) text += (text.empty() ? "w" : " w") + id;
  EXPECT_EQ(r.out, ids + text + "\n");
}

TEST_F(GenerateCli, ClearErrors) {
  const std::string ckpt = "'" + (dir_ / "ckpt").string() + "'";
  Result r = run_qpu("generate " + ckpt + " --prompt 'Once upon a time'", dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("tokenizer"), std::string::npos) << r.err;
  r = run_qpu("generate " + ckpt + " --tokens 1,500", dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("500"), std::string::npos) << r.err;
  r = run_qpu("generate " + ckpt + " --tokens 1,x", dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("'x'"), std::string::npos) << r.err;
  r = run_qpu("generate " + ckpt, dir_);
  EXPECT_EQ(r.status, 1);
  r = run_qpu("generate " + ckpt + " --tokens 1 --temperature -1", dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("temperature"), std::string::npos) << r.err;
  r = run_qpu("generate '" + (dir_ / "missing").string() + "' --tokens 1", dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("missing"), std::string::npos) << r.err;
  r = run_qpu("generate " + ckpt + " --tokens 1 --snapshot-at 1", dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--snapshot-dir"), std::string::npos) << r.err;
  r = run_qpu("generate " + ckpt + " --tokens 1 --snapshot-at 0 --snapshot-dir '" + (dir_ / "s").string() + "'", dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--snapshot-at"), std::string::npos) << r.err;
  // A compiled story machine's prompt is the machine's recipe, not its tokenizer's encoding.
  std::ofstream(dir_ / "ckpt" / "qpu-machine.json") << "{}";
  r = run_qpu("generate " + ckpt + " --prompt 'Once upon a time'", dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("qpu prompt DIR"), std::string::npos) << r.err;
  EXPECT_EQ(run_qpu("generate " + ckpt + " --tokens 1 -n 1", dir_).status, 0);
}

// --snapshot-at writes the state after N consumed tokens: read back, it goes on as the
// run did (engine/state_snapshot.h has the bit-level round trip).
TEST_F(GenerateCli, SnapshotsAreWrittenWhereAsked) {
  const std::string ckpt = "'" + (dir_ / "ckpt").string() + "'";
  const fs::path snaps = dir_ / "snapshots";
  const Result r = run_qpu("generate " + ckpt + " --tokens 3,1,4,1,5 -n 6 --snapshot-at 2,7,40 --snapshot-dir '" +
                               snaps.string() + "'",
                           dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(snaps / "state-2.safetensors"));
  EXPECT_TRUE(fs::exists(snaps / "state-7.safetensors"));
  EXPECT_FALSE(fs::exists(snaps / "state-40.safetensors"));  // the run consumed 10 tokens
  EXPECT_NE(r.err.find("2 of 3 snapshots written (the run consumed 10 tokens)"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace qpu::engine
