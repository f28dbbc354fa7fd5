// The compiled host's tokenizer.json, decoded by src/tokenizer (which matches stock
// tokenizers; the stock check itself is in transformers_test.cpp): every nested token,
// after BOS and elsewhere, prints exactly what run.c prints, and the greedy story's host
// ids decode to the published run.c output byte for byte.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/testing/scratch_files.h"
#include "npu/host_vocab.h"
#include "reference/tokenizer.h"
#include "reference/generate.h"
#include "reference/sampler.h"
#include "reference/transformer.h"
#include "tokenizer/tokenizer.h"

namespace qpu::npu {
namespace {

const std::string kModels = QPU_SHARED_DIR "/models/stories260K/";

std::vector<int32_t> ids32(const std::vector<int64_t>& ids) { return {ids.begin(), ids.end()}; }

TEST(HostVocab, EveryTokenPrintsWhatRunCPrints) {
  const auto nested = reference::Tokenizer::load(kModels + "tok512.bin", 512);
  const HostVocab v = make_host_vocab(nested);
  testing::ScratchDir dir("host_vocab");
  testing::write_file(dir.path() / "tokenizer.json", host_tokenizer_json(v));
  const auto host = tokenizer::Tokenizer::load(dir.path() / "tokenizer.json");
  ASSERT_EQ(host.vocab_size(), v.size());
  int stripped_new = 0;
  for (int t = 0; t < v.nested_vocab; ++t) {
    if (t == 1) continue;  // BOS ends run.c's output
    for (int prev : {1, 5}) {
      const std::string expect(reference::printable_piece(nested.decode(prev, t)));
      const int64_t id = prev == 1 ? v.after_bos[static_cast<size_t>(t)] : t;
      const std::vector<int32_t> one = {static_cast<int32_t>(id)};
      EXPECT_EQ(host.decode(one, true), expect) << "token " << t << " after " << prev;
    }
    if (v.after_bos[static_cast<size_t>(t)] >= v.nested_vocab) ++stripped_new;
  }
  EXPECT_EQ(v.printing(), v.nested_vocab + stripped_new);
  // Value and control tokens print nothing.
  const std::vector<int32_t> silent = {static_cast<int32_t>(v.values.first + 77), static_cast<int32_t>(v.control("<|qpu_done|>"))};
  EXPECT_EQ(host.decode(silent, true), "");
  EXPECT_TRUE(host.is_special(static_cast<int32_t>(v.values.first)));
}

// run.c's stdout for a run, and what the host's tokenizer makes of the same tokens.
struct Decoded {
  std::string run_c, host, host_streamed;
};

Decoded decode_run(float temperature, float topp, uint64_t seed, const std::string& prompt, int steps) {
  const auto ckpt = reference::load_llama2_checkpoint(kModels + "stories260K.bin");
  const auto nested = reference::Tokenizer::load(kModels + "tok512.bin", 512);
  reference::Transformer tf(ckpt);
  reference::Sampler sampler(512, temperature, topp, seed);
  const auto run = reference::generate(tf, nested, sampler, prompt, steps);
  const HostVocab v = make_host_vocab(nested);
  testing::ScratchDir dir("host_vocab_story");
  testing::write_file(dir.path() / "tokenizer.json", host_tokenizer_json(v));
  const auto host = tokenizer::Tokenizer::load(dir.path() / "tokenizer.json");
  const auto ids = host_ids_for(v, run.tokens);
  Decoded d{run.text, host.decode(ids32(ids), true) + "\n", ""};  // run.c ends with a newline
  tokenizer::DecodeStream stream(host, true);  // what `qpu run` prints as the host generates
  for (int64_t id : ids)
    if (auto piece = stream.step(static_cast<int32_t>(id))) d.host_streamed += *piece;
  d.host_streamed += "\n";
  return d;
}

TEST(HostVocab, GreedyStoryDecodesToThePublishedOutput) {
  const Decoded d = decode_run(0.0f, 0.9f, 1, "Once upon a time", 256);
  EXPECT_EQ(d.run_c, testing::read_file(kModels + "greedy-once-upon-a-time-256.txt"));
  EXPECT_EQ(d.host, d.run_c);
  EXPECT_EQ(d.host_streamed, d.run_c);
}

TEST(HostVocab, SampledRunsDecodeToRunCsOutput) {
  struct Run { float t, p; uint64_t seed; const char* prompt; };
  for (const Run& r : {Run{1.0f, 0.9f, 42, ""}, Run{0.8f, 0.9f, 7, "Lily"}, Run{1.0f, 0.0f, 3, "Once"},
                       Run{1.5f, 1.0f, 11, "The dog"}, Run{2.0f, 0.0f, 5, ""}}) {
    const Decoded d = decode_run(r.t, r.p, r.seed, r.prompt, 256);
    EXPECT_EQ(d.host, d.run_c) << "-t " << r.t << " -p " << r.p << " -s " << r.seed << " -i '" << r.prompt << "'";
    EXPECT_EQ(d.host_streamed, d.run_c) << "-t " << r.t << " -s " << r.seed;
  }
}

TEST(HostVocab, RefusesPiecesItCannotWrite) {
  const reference::Tokenizer bad({"<unk>", "<s>", "</s>", "<0x4>"}, {0, 0, 0, 0}, 8);
  EXPECT_THROW(make_host_vocab(bad), Error);
  const reference::Tokenizer latin1({"<unk>", "<s>", "</s>", std::string("\xe9")}, {0, 0, 0, 0}, 8);
  EXPECT_THROW(make_host_vocab(latin1), Error);
}

}  // namespace
}  // namespace qpu::npu
