// The story tokenizer (machine/story_tokenizer.h) in stock transformers: the tokenizer.json
// and tokenizer_config.json of the stories260K machine, loaded with AutoTokenizer, decode
// streams of story tokens between other host tokens to what run.c prints: every nested
// token as the first one, random stories, and the published greedy story.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/testing/scratch_files.h"
#include "machine/story_tokenizer.h"
#include "machine/token_machine.h"
#include "reference/generate.h"
#include "reference/llama2_checkpoint.h"
#include "reference/sampler.h"
#include "reference/tokenizer.h"
#include "reference/transformer.h"
#include "runner/story_session.h"

namespace qpu::runner {
namespace {

const std::string kModels = std::string(QPU_SHARED_DIR) + "/models/stories260K/";

TEST(StoryTokenizerTransformers, AutoTokenizerDecodesTheStoryAsRunCPrintsIt) {
  const std::string python = QPU_PYTHON;
  if (python.empty()) GTEST_SKIP() << "QPU_PYTHON not set";
  const reference::Llama2Checkpoint model = reference::load_llama2_checkpoint(kModels + "stories260K.bin");
  const reference::Tokenizer tok = reference::Tokenizer::load(kModels + "tok512.bin", 512);
  const machine::TokenMachine machine = machine::build_token_machine(model, token_machine_options(16));
  const machine::StoryInterface m = machine.story_interface();
  testing::ScratchDir dir("qpu-story-tokenizer");
  testing::write_file(dir / "tokenizer.json", machine::story_tokenizer_json(m, tok));
  testing::write_file(dir / "tokenizer_config.json", machine::story_tokenizer_config(m).dump(1));

  auto story_id = [&](int k) { return m.id("TOK." + std::to_string(k)); };
  std::mt19937_64 rng(31);
  auto other_id = [&] {
    for (;;) {
      const auto id = static_cast<int64_t>(rng() % static_cast<uint64_t>(m.fields().host_vocab));
      const int64_t c = id - m.first_control();
      if (c < 0 || !m.controls()[static_cast<size_t>(c)].starts_with("TOK.")) return id;
    }
  };
  std::vector<std::vector<int64_t>> seqs;
  std::vector<std::string> expect;
  auto add = [&](const std::vector<int>& tokens) {
    std::vector<int64_t> ids;
    std::string text;
    for (size_t i = 1; i < tokens.size(); ++i) {
      for (uint64_t n = rng() % 4; n > 0; --n) ids.push_back(other_id());
      ids.push_back(story_id(tokens[i]));
      if (tokens[i] == 1) break;  // run.c stops at BOS; the machine's DONE follows
      text += reference::printable_piece(tok.decode(tokens[i - 1], tokens[i]));
    }
    seqs.push_back(std::move(ids));
    expect.push_back(std::move(text));
  };
  for (int k = 0; k < 512; ++k) add({1, k, static_cast<int>(rng() % 512)});
  for (int c = 0; c < 300; ++c) {
    std::vector<int> tokens{1};
    for (uint64_t n = 1 + rng() % 12; n > 0; --n) tokens.push_back(static_cast<int>(rng() % 512));
    add(tokens);
  }
  // The published greedy story, from run.c's greedy tokens.
  {
    reference::Transformer t(model);
    reference::Sampler greedy(512, 0.0f, 0.9f, 1);
    const reference::GenerateResult r = reference::generate(t, tok, greedy, "Once upon a time", 256);
    add(r.tokens);
    std::ifstream f(kModels + "greedy-once-upon-a-time-256.txt", std::ios::binary);
    const std::string published((std::istreambuf_iterator<char>(f)), {});
    ASSERT_EQ(expect.back() + "\n", published);
  }
  testing::write_file(dir / "ids.json", nlohmann::json(seqs).dump());
  const std::string cmd = python + " " + QPU_SOURCE_DIR + "/src/npu/tests/host_tokenizer_decode.py " +
                          dir.path().string() + " " + (dir / "ids.json").string() + " " + (dir / "out.json").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto got = nlohmann::json::parse(testing::read_file(dir / "out.json")).get<std::vector<std::string>>();
  ASSERT_EQ(got.size(), expect.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], expect[i]) << "sequence " << i;
}

}  // namespace
}  // namespace qpu::runner
