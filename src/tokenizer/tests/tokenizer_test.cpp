// The tokenizer pipeline on small hand-written tokenizer.json files whose
// results follow directly from tokenizers' documented algorithm.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/added_vocabulary.h"

namespace qpu::tokenizer {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<std::int32_t>;

Json bpe(Json vocab, Json merges) {
  return Json{{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
}

Tokenizer make(Json model, Json extra = Json::object()) {
  Json j{{"version", "1.0"}, {"model", std::move(model)}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return Tokenizer::from_json(j.dump(), "test.json");
}

Json added(std::string content, int id, bool special, bool normalized = false) {
  return Json{{"id", id}, {"content", content}, {"special", special}, {"normalized", normalized},
              {"single_word", false}, {"lstrip", false}, {"rstrip", false}};
}

TEST(Bpe, LowestRankMergesFirst) {
  const Json vocab{{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}};
  // "b c" outranks "a b": abc -> a|bc -> abc.
  EXPECT_EQ(make(bpe(vocab, {"b c", "a b", "a bc"})).encode("abc"), (Ids{5}));
  // Without "a bc" the word stops at a|bc.
  EXPECT_EQ(make(bpe(vocab, {"b c", "a b"})).encode("abc"), (Ids{0, 4}));
  // "a b" first: ab|c, and no "ab c" merge.
  EXPECT_EQ(make(bpe(vocab, {"a b", "b c"})).encode("abc"), (Ids{3, 2}));
  // The [a, b] pair format means the same.
  EXPECT_EQ(make(bpe(vocab, Json::array({Json::array({"b", "c"}), Json::array({"a", "b"})}))).encode("abc"),
            (Ids{0, 4}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  const Json vocab{{"a", 0}, {"aa", 1}};
  EXPECT_EQ(make(bpe(vocab, {"a a"})).encode("aaa"), (Ids{1, 0}));
  EXPECT_EQ(make(bpe(vocab, {"a a"})).encode("aaaa"), (Ids{1, 1}));
}

TEST(Bpe, UnknownCharactersByteFallbackUnkOrDropped) {
  Json vocab{{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}};
  Json model = bpe(vocab, Json::array());
  // No fallback, no unk: unknown characters disappear.
  EXPECT_EQ(make(model).encode("a\xC3\xA9" "a"), (Ids{1, 1}));
  model["byte_fallback"] = true;
  EXPECT_EQ(make(model).encode("a\xC3\xA9" "a"), (Ids{1, 2, 3, 1}));  // é = C3 A9
  model["unk_token"] = "<unk>";
  // ü (C3 BC) has no <0xBC>: unk.
  EXPECT_EQ(make(model).encode("\xC3\xBC\xC3\xBC" "a"), (Ids{0, 0, 1}));
  model["fuse_unk"] = true;
  EXPECT_EQ(make(model).encode("\xC3\xBC\xC3\xBC" "a"), (Ids{0, 1}));
}

TEST(Bpe, IgnoreMergesTakesWholeVocabularyWords) {
  Json model = bpe(Json{{"a", 0}, {"b", 1}, {"ab", 2}, {"ba", 3}, {"aba", 4}}, {"a b", "b a"});
  EXPECT_EQ(make(model).encode("aba"), (Ids{2, 0}));
  model["ignore_merges"] = true;
  EXPECT_EQ(make(model).encode("aba"), (Ids{4}));
}

TEST(Bpe, MissingUnkTokenIsAnErrorWhenNeeded) {
  Json model = bpe(Json{{"a", 0}}, Json::array());
  model["unk_token"] = "<unk>";
  const Tokenizer tok = make(model);
  EXPECT_EQ(tok.encode("aa"), (Ids{0, 0}));
  EXPECT_THROW(tok.encode("b"), qpu::Error);
}

TEST(WordLevel, WordsAndUnk) {
  const Json model{{"type", "WordLevel"}, {"vocab", {{"[UNK]", 0}, {"hello", 1}, {"world", 2}}}, {"unk_token", "[UNK]"}};
  const Tokenizer tok = make(model, {{"pre_tokenizer", {{"type", "WhitespaceSplit"}}}});
  EXPECT_EQ(tok.encode("hello  big\tworld"), (Ids{1, 0, 2}));
  // No decoder: tokenizers joins the tokens with spaces.
  EXPECT_EQ(tok.decode(Ids{1, 0, 2}), "hello [UNK] world");
}

TEST(AddedTokens, MatchedFirstAndSkippedOnRequest) {
  const Json model = bpe(Json{{"a", 0}, {"b", 1}, {"ab", 2}}, {"a b"});
  const Tokenizer tok = make(model, {{"added_tokens", {added("<|s|>", 3, true), added("bb", 4, false)}},
                                     {"decoder", {{"type", "Fuse"}}}});
  EXPECT_EQ(tok.encode("a<|s|>bab<|s|>"), (Ids{0, 3, 1, 2, 3}));
  EXPECT_EQ(tok.encode("abbab"), (Ids{0, 4, 2}));  // a|bb|ab: "bb" is cut out before merging
  EXPECT_EQ(tok.encode("<|s"), (Ids{}));              // '<' '|' 's' are not in the vocabulary
  EXPECT_EQ(tok.decode(Ids{0, 3, 1, 4}), "a<|s|>bbb");
  EXPECT_EQ(tok.decode(Ids{0, 3, 1, 4}, true), "abbb");  // only special tokens are skipped
  EXPECT_EQ(tok.decode(Ids{0, 99, -1, 1}), "ab");         // unknown ids are skipped
  EXPECT_TRUE(tok.is_special(3));
  EXPECT_FALSE(tok.is_special(4));
  EXPECT_EQ(tok.token_to_id("<|s|>"), 3);
  EXPECT_EQ(tok.id_to_token(4), "bb");
  EXPECT_EQ(tok.id_to_token(5), std::nullopt);
  EXPECT_EQ(tok.vocab_size(), 5);
  ASSERT_EQ(tok.added_tokens().size(), 2u);
  EXPECT_EQ(tok.added_tokens()[0].content, "<|s|>");
}

TEST(AddedTokens, LongestMatchWins) {
  const Json model = bpe(Json{{"a", 0}}, Json::array());
  const Tokenizer tok = make(model, {{"added_tokens", {added("<x>", 1, true), added("<x>>", 2, true)}}});
  EXPECT_EQ(tok.encode("<x>><x>a"), (Ids{2, 1, 0}));
}

TEST(ByteLevel, Gpt2StyleRoundTrip) {
  // A byte-level vocabulary with a few byte characters and "Ġh".
  Json vocab = Json::object();
  std::int32_t next = 0;
  const std::vector<std::string> pieces = {"h", "e", "l", "o", "\xC4\xA0", "\xC3\xA2", "\xC4\xA4", "\xC2\xAC"};
  for (const std::string& p : pieces) vocab[p] = next++;
  vocab["\xC4\xA0h"] = next++;  // "Ġh" = 8
  const Json merges = Json::array({Json::array({"\xC4\xA0", "h"})});
  const Tokenizer tok = make(bpe(vocab, merges), {{"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                                                  {"decoder", {{"type", "ByteLevel"}}}});
  // " hello" -> "Ġhello": Ġh e l l o.
  EXPECT_EQ(tok.encode(" hello"), (Ids{8, 1, 2, 2, 3}));
  // "€" = E2 82 AC -> byte characters â (E2), Ĥ (82 -> U+0124), ¬ (AC).
  EXPECT_EQ(tok.encode("\xE2\x82\xAC"), (Ids{5, 6, 7}));
  EXPECT_EQ(tok.decode(Ids{8, 1, 2, 2, 3, 5, 6, 7}), " hello\xE2\x82\xAC");
  EXPECT_EQ(tok.decode(Ids{5, 6}), "\xEF\xBF\xBD");  // an incomplete character

  // Streaming: the euro sign only comes out once its third byte is there.
  DecodeStream stream(tok);
  EXPECT_EQ(stream.step(8), " h");
  EXPECT_EQ(stream.step(1), "e");
  EXPECT_EQ(stream.step(5), std::nullopt);
  EXPECT_EQ(stream.step(6), std::nullopt);
  EXPECT_EQ(stream.step(7), "\xE2\x82\xAC");
  EXPECT_EQ(stream.step(3), "o");
}

TEST(Tokenizer, InvalidUtf8InputIsAnError) {
  const Tokenizer tok = make(bpe(Json{{"a", 0}}, Json::array()));
  try {
    tok.encode("a\xFF");
    FAIL() << "no error";
  } catch (const qpu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8 (byte offset 1)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(tok.encode(""), (Ids{}));
}

TEST(Tokenizer, MovesKeepWorking) {
  Tokenizer a = make(bpe(Json{{"a", 0}}, Json::array()));
  Tokenizer b = std::move(a);
  EXPECT_EQ(b.encode("aa"), (Ids{0, 0}));
}

}  // namespace
}  // namespace qpu::tokenizer
