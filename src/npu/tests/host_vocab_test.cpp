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

TEST(HostVocab, GreedyStoryDecodesToThePublishedOutput) {
  const auto ckpt = reference::load_llama2_checkpoint(kModels + "stories260K.bin");
  const auto nested = reference::Tokenizer::load(kModels + "tok512.bin", 512);
  reference::Transformer tf(ckpt);
  const std::vector<int> prompt = nested.encode("Once upon a time", true, false);
  std::vector<int> tokens = {prompt[0]};
  for (int pos = 0; pos < 256; ++pos) {  // run.c's generate loop, greedy, -n 256
    const auto logits = tf.forward(tokens.back(), pos);
    int next = 0;
    if (pos + 1 < static_cast<int>(prompt.size())) {
      next = prompt[static_cast<size_t>(pos) + 1];
    } else {
      for (size_t i = 1; i < logits.size(); ++i)
        if (logits[i] > logits[static_cast<size_t>(next)]) next = static_cast<int>(i);
    }
    tokens.push_back(next);
    if (next == 1) break;
  }
  const HostVocab v = make_host_vocab(nested);
  testing::ScratchDir dir("host_vocab_story");
  testing::write_file(dir.path() / "tokenizer.json", host_tokenizer_json(v));
  const auto host = tokenizer::Tokenizer::load(dir.path() / "tokenizer.json");
  const auto ids = host_ids_for(v, tokens);
  const std::string story = host.decode(ids32(ids), true) + "\n";  // run.c ends with a newline
  EXPECT_EQ(story, testing::read_file(kModels + "greedy-once-upon-a-time-256.txt"));
  // Streaming (what `qpu run` prints as the host generates) gives the same bytes.
  tokenizer::DecodeStream stream(host, true);
  std::string streamed;
  for (int64_t id : ids)
    if (auto piece = stream.step(static_cast<int32_t>(id))) streamed += *piece;
  EXPECT_EQ(streamed + "\n", story);
}

TEST(HostVocab, RefusesPiecesItCannotWrite) {
  const reference::Tokenizer bad({"<unk>", "<s>", "</s>", "<0x4>"}, {0, 0, 0, 0}, 8);
  EXPECT_THROW(make_host_vocab(bad), Error);
  const reference::Tokenizer latin1({"<unk>", "<s>", "</s>", std::string("\xe9")}, {0, 0, 0, 0}, 8);
  EXPECT_THROW(make_host_vocab(latin1), Error);
}

}  // namespace
}  // namespace qpu::npu
