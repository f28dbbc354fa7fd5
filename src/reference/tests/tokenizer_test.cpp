// run.c's tokenizer on tok512.bin and on small hand-made vocabularies: encoding,
// decoding and printing rules, and rejection of malformed files.
#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "reference/tokenizer.h"
#include "test_support.h"

namespace qpu::reference {
namespace {

using Tokens = std::vector<int>;

template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no qpu::Error thrown";
  } catch (const Error& e) {
    for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

const Tokenizer& tok512() {
  static const Tokenizer t = Tokenizer::load(test::tok512_bin(), 512);
  return t;
}

TEST(RefTokenizer, LoadsTok512) {
  const Tokenizer& t = tok512();
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.max_token_length(), 7u);
  EXPECT_EQ(t.piece(0), "<unk>");
  EXPECT_EQ(t.piece(1), "\n<s>\n");
  EXPECT_EQ(t.piece(2), "\n</s>\n");
  EXPECT_EQ(t.piece(3), "<0x00>");
  EXPECT_EQ(t.piece(258), "<0xFF>");
  EXPECT_EQ(t.piece(410), " ");
  EXPECT_EQ(t.score(259), -0.0f);
  EXPECT_EQ(t.score(511), -252.0f);
  for (int id = 0; id < 512; id++) EXPECT_EQ(t.lookup(t.piece(id)), id) << id;  // no duplicates
  EXPECT_EQ(t.lookup("no such piece"), -1);
}

TEST(RefTokenizer, EncodesKnownPrompts) {
  const Tokenizer& t = tok512();
  EXPECT_EQ(t.encode("Once upon a time", true, false), (Tokens{1, 403, 407, 261, 378}));
  EXPECT_EQ(t.encode("Lily", true, false), (Tokens{1, 317}));
  EXPECT_EQ(t.encode("", true, false), (Tokens{1}));
  EXPECT_EQ(t.encode("", false, false), (Tokens{}));
  EXPECT_EQ(t.encode("", true, true), (Tokens{1, 2}));
  EXPECT_EQ(t.encode("Lily", false, true), (Tokens{317, 2}));
  // The text is a C string: nothing after a NUL exists.
  EXPECT_EQ(t.encode(std::string_view("Lily\0 time", 10), true, false), (Tokens{1, 317}));
}

TEST(RefTokenizer, ByteFallbackForCodePointsOutsideTheVocabulary) {
  const Tokenizer& t = tok512();
  // "ü" (C3 BC) is not a piece: " " then one token per byte, id = byte + 3.
  EXPECT_EQ(t.encode("\xc3\xbc", true, false), (Tokens{1, 410, 0xc3 + 3, 0xbc + 3}));
  // A 4-byte emoji (F0 9F 98 80) after a word.
  EXPECT_EQ(t.encode("Lily\xf0\x9f\x98\x80", true, false), (Tokens{1, 317, 0xf0 + 3, 0x9f + 3, 0x98 + 3, 0x80 + 3}));
  // "€" (E2 82 AC) is a piece (id 506 in tok512): no fallback.
  const Tokens euro = t.encode("\xe2\x82\xac", true, false);
  ASSERT_EQ(euro.size(), 3u);
  EXPECT_EQ(t.piece(euro[2]), "\xe2\x82\xac");
  // Five continuation bytes: a code point holds at most 4 bytes, so 4 + 1 lookups,
  // all failing, give five byte tokens.
  EXPECT_EQ(t.encode("\x80\x80\x80\x80\x80", true, false), (Tokens{1, 410, 131, 131, 131, 131, 131}));
}

TEST(RefTokenizer, EncodeRoundTripsThroughDecode) {
  // Decoding an encoding reproduces the text (leading space dropped after BOS).
  const Tokenizer& t = tok512();
  for (const char* text : {"Once upon a time", "Lily and Ben went to the park.",
                           "\"Hello!\" said Tom, 42 times.\nThe end", "caf\xc3\xa9 \xc3\xbc\xe2\x82\xac"}) {
    const Tokens tokens = t.encode(text, true, false);
    std::string decoded;
    for (size_t i = 1; i < tokens.size(); i++) decoded += t.decode(tokens[i - 1], tokens[i]);
    EXPECT_EQ(decoded, text);
  }
}

TEST(RefTokenizer, DecodeRules) {
  const Tokenizer& t = tok512();
  EXPECT_EQ(t.decode(1, 403), "Once");   // " Once" after BOS: leading space stripped
  EXPECT_EQ(t.decode(2, 403), " Once");  // after anything else: kept
  EXPECT_EQ(t.decode(1, 410), "");       // " " after BOS is empty
  EXPECT_EQ(t.decode(1, 3 + 'A'), "A");  // "<0x41>" is the raw byte
  EXPECT_EQ(t.decode(5, 3 + 0x0a), "\n");
  EXPECT_EQ(t.decode(5, 3 + 0xe2), "\xe2");
  EXPECT_EQ(t.decode(5, 3 + 0x00), "");  // byte 0 is an empty C string
  EXPECT_EQ(t.decode(5, 0), "<unk>");
  expect_error([&] { t.decode(1, 512); }, {"512"});
}

TEST(RefTokenizer, PrintingRules) {
  const Tokenizer& t = tok512();
  EXPECT_EQ(printable_piece(t.decode(5, 3 + 'A')), "A");
  EXPECT_EQ(printable_piece(t.decode(5, 3 + '\n')), "\n");   // whitespace prints
  EXPECT_EQ(printable_piece(t.decode(5, 3 + '\t')), "\t");
  EXPECT_EQ(printable_piece(t.decode(5, 3 + 0x0d)), "\r");
  EXPECT_EQ(printable_piece(t.decode(5, 3 + 0x07)), "");     // bell: control, skipped
  EXPECT_EQ(printable_piece(t.decode(5, 3 + 0x7f)), "");     // DEL: skipped
  EXPECT_EQ(printable_piece(t.decode(5, 3 + 0xe2)), "");     // lone UTF-8 byte: skipped
  EXPECT_EQ(printable_piece(t.decode(5, 3 + 0x00)), "");
  EXPECT_EQ(printable_piece(t.decode(5, 3 + '~')), "~");
  EXPECT_EQ(printable_piece(t.decode(1, 403)), "Once");
  EXPECT_EQ(printable_piece(t.piece(511)), "\xe2\x80\x8a");  // several bytes: printed as is
  EXPECT_EQ(printable_piece(t.decode(1, 410)), "");
  // A single-byte piece that is a real piece (not "<0x..>") follows the same rule.
  EXPECT_EQ(printable_piece(t.decode(5, 411)), "e");
}

// A vocabulary with run.c's first three ids and a few merges.
Tokenizer small_tokenizer(float score_ab, float score_ba) {
  return Tokenizer({"<unk>", "\n<s>\n", "\n</s>\n", " ", "a", "b", "ab", "ba", " ab"},
                   {0, 0, 0, -5, -5, -5, score_ab, score_ba, -3}, 6);
}

TEST(RefTokenizer, MergesHighestScoreLeftmostOnTies) {
  // "aba": pairs "ab" (left) and "ba" (right).
  // Tie: the left pair "ab" wins, then " " + "ab" merges too.
  EXPECT_EQ(small_tokenizer(-1, -1).encode("aba", true, false), (Tokens{1, 8, 4}));
  EXPECT_EQ(small_tokenizer(-1, -0.5f).encode("aba", true, false), (Tokens{1, 3, 4, 7}));  // "ba" scores higher
  // After "ab" merges, " " + "ab" is a piece: merging continues until nothing merges.
  EXPECT_EQ(small_tokenizer(-1, -2).encode("ab", true, false), (Tokens{1, 8}));
  // A merge whose score is not above -1e10 never happens.
  EXPECT_EQ(small_tokenizer(-1e10f, -2e10f).encode("aba", true, false), (Tokens{1, 3, 4, 5, 4}));
}

TEST(RefTokenizer, EncodeErrorsWhereRunCWouldReadOutOfBounds) {
  // Byte fallback needs ids byte + 3, which this 9-token vocabulary lacks.
  expect_error([] { small_tokenizer(-1, -1).encode("c", true, false); }, {"byte fallback", "0x63"});
  const Tokenizer no_space({"<unk>", "\n<s>\n", "\n</s>\n", "a"}, {0, 0, 0, 0}, 6);
  expect_error([&] { no_space.encode("a", true, false); }, {"dummy prefix"});
}

// tok512.bin with edits, for the malformed-file cases.
std::string tok512_bytes() { return test::read_file(test::tok512_bin()); }

TEST(RefTokenizer, RejectsMalformedFiles) {
  const auto dir = test::scratch_dir();
  const auto path = dir / "tok.bin";
  const std::string good = tok512_bytes();
  ASSERT_EQ(good.size(), 6227u);
  const std::string name = path.string();

  // Truncated anywhere: inside max_token_length, a score, a length, a piece's bytes.
  for (size_t size : {size_t{0}, size_t{2}, size_t{4}, size_t{6}, size_t{10}, size_t{14}, size_t{6226}}) {
    test::write_file(path, good.substr(0, size));
    expect_error([&] { Tokenizer::load(path, 512); }, {name, "truncated"});
  }
  // Piece lengths out of range: negative, above max_token_length.
  std::string bad = good;
  const int32_t negative = -1;
  std::memcpy(bad.data() + 8, &negative, 4);  // token 0's length
  test::write_file(path, bad);
  expect_error([&] { Tokenizer::load(path, 512); }, {name, "token 0", "length -1"});
  bad = good;
  const int32_t too_long = 8;  // max_token_length is 7
  std::memcpy(bad.data() + 8, &too_long, 4);
  test::write_file(path, bad);
  expect_error([&] { Tokenizer::load(path, 512); }, {name, "token 0", "length 8"});
  // max_token_length not positive.
  bad = good;
  const int32_t zero = 0;
  std::memcpy(bad.data(), &zero, 4);
  test::write_file(path, bad);
  expect_error([&] { Tokenizer::load(path, 512); }, {name, "max_token_length"});
  // Trailing bytes, or a vocabulary size that does not match the file.
  test::write_file(path, good + "x");
  expect_error([&] { Tokenizer::load(path, 512); }, {name, "left after 512 tokens"});
  test::write_file(path, good);
  expect_error([&] { Tokenizer::load(path, 511); }, {name, "left after 511 tokens"});
  expect_error([&] { Tokenizer::load(path, 513); }, {name, "truncated", "token 512"});
  expect_error([&] { Tokenizer::load(dir / "missing.bin", 512); }, {"missing.bin", "cannot open"});
}

}  // namespace
}  // namespace qpu::reference
