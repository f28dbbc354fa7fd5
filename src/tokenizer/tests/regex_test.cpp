#include "tokenizer/regex.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace qpu::tokenizer {
namespace {

std::vector<Span> all(std::string_view pattern, std::string_view text) {
  return Regex::from_onig(pattern, "test").find_all(text);
}

bool matches_whole(std::string_view pattern, std::string_view text) {
  const auto m = all(pattern, text);
  return m.size() == 1 && m[0] == Span{0, text.size()};
}

// onig's find_iter: an empty match is taken where no match just ended; right
// after a match it is skipped by stepping one character.
TEST(Regex, EmptyMatchesFollowOnigFindIter) {
  EXPECT_EQ(all("x*", "axxb"), (std::vector<Span>{{0, 0}, {1, 3}, {4, 4}}));
  EXPECT_EQ(all("x*", ""), (std::vector<Span>{{0, 0}}));
  EXPECT_EQ(all("", "ab"), (std::vector<Span>{{0, 0}, {1, 1}, {2, 2}}));
  // Stepping moves by a whole character, never into a UTF-8 sequence.
  EXPECT_EQ(all("x*", "\xC3\xA9x"), (std::vector<Span>{{0, 0}, {2, 3}}));
}

TEST(Regex, FindMatchesCoversTheText) {
  const Regex r = Regex::from_onig(R"(\d)", "test");
  const auto m = find_matches(r, "a1b22");
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].span, (Span{0, 1}));
  EXPECT_FALSE(m[0].is_match);
  EXPECT_EQ(m[1].span, (Span{1, 2}));
  EXPECT_TRUE(m[1].is_match);
  EXPECT_EQ(m[4].span, (Span{4, 5}));
  EXPECT_TRUE(m[4].is_match);
  const auto empty = find_matches(r, "");
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_FALSE(empty[0].is_match);
}

// Facts from the Unicode Character Database (16.0), which tokenizers'
// Oniguruma uses and PCRE2 10.42 (Unicode 14) would not know.
TEST(Regex, PropertiesUseUnicode16) {
  EXPECT_TRUE(matches_whole(R"(\p{L})", "\xE1\xB2\x89"));       // U+1C89 CYRILLIC CAPITAL LETTER TJE (16.0)
  EXPECT_TRUE(matches_whole(R"(\p{Lu})", "\xE1\xB2\x89"));
  EXPECT_TRUE(matches_whole(R"(\p{Lo})", "\xF0\xAE\xAF\xB0"));  // U+2EBF0 CJK Ext. I (15.1)
  EXPECT_TRUE(matches_whole(R"(\p{Nd})", "\xF0\x90\xB5\x80"));  // U+10D40 GARAY DIGIT ZERO (16.0)
  EXPECT_TRUE(matches_whole(R"([^\p{L}])", "1"));
  EXPECT_TRUE(all(R"([^\p{L}])", "\xE1\xB2\x89").empty());
  EXPECT_TRUE(matches_whole(R"(\p{Letter}+)", "abc"));
  EXPECT_TRUE(matches_whole(R"(\P{L})", "1"));
  EXPECT_TRUE(matches_whole(R"(\p{^L})", "1"));
  EXPECT_TRUE(matches_whole(R"([\P{L}])", "1"));
}

TEST(Regex, WhitespaceIsTheWhiteSpaceProperty) {
  EXPECT_TRUE(matches_whole(R"(\s)", "\xC2\x85"));  // U+0085 NEXT LINE is White_Space
  EXPECT_TRUE(matches_whole(R"(\s)", "\xE3\x80\x80"));
  EXPECT_TRUE(all(R"(\s)", "\xE2\x80\x8B").empty());  // U+200B ZERO WIDTH SPACE is not
  EXPECT_TRUE(matches_whole(R"([^\S])", "\t"));
}

TEST(Regex, RubySyntax) {
  EXPECT_EQ(all("^.", "ab\ncd"), (std::vector<Span>{{0, 1}, {3, 4}}));  // ^ is a line anchor
  EXPECT_TRUE(matches_whole("(?m:a.b)", "a\nb"));                         // m lets . match \n
  EXPECT_TRUE(all("a.b", "a\nb").empty());
  EXPECT_TRUE(matches_whole(R"(\h+)", "09afAF"));                         // \h is a hex digit
  EXPECT_TRUE(matches_whole("(?i:'s)", "'S"));
  EXPECT_TRUE(matches_whole("(?i:'s)", "'\xC5\xBF"));  // U+017F LATIN SMALL LETTER LONG S folds to s
}

TEST(Regex, LiteralPatterns) {
  const Regex r = Regex::literal("a.b(", "test");
  EXPECT_EQ(r.find_all("a.b(axb("), (std::vector<Span>{{0, 4}}));
  EXPECT_EQ(Regex::literal("\xE2\x96\x81", "test").find_all("a\xE2\x96\x81" "b"), (std::vector<Span>{{1, 4}}));
}

TEST(Regex, UnsupportedConstructsAreRefused) {
  const auto message = [](std::string_view pattern) {
    try {
      Regex::from_onig(pattern, "file.json: pre_tokenizer.pattern.Regex");
    } catch (const qpu::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(R"(\p{Han})").find("not supported"), std::string::npos);
  EXPECT_NE(message(R"([a[b]])").find("nested character class"), std::string::npos);
  EXPECT_NE(message(R"([a-z&&[^c]])").find("&&"), std::string::npos);
  const std::string bad = message("(ab");
  EXPECT_NE(bad.find("file.json: pre_tokenizer.pattern.Regex"), std::string::npos) << bad;
  EXPECT_NE(bad.find("invalid regex"), std::string::npos) << bad;
  EXPECT_NE(message("ab\\").find("backslash"), std::string::npos);
}

}  // namespace
}  // namespace qpu::tokenizer
