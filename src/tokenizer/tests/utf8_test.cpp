#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <string>

#include "tokenizer/byte_level.h"

namespace qpu::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string bytes(std::initializer_list<int> values) {
  std::string s;
  for (const int v : values) s += static_cast<char>(v);
  return s;
}

// The example of "U+FFFD substitution of maximal subparts" in the Unicode
// Standard (chapter 3, Table 3-8), which Rust's from_utf8_lossy implements.
TEST(Utf8, LossyReplacesEachMaximalSubpartOnce) {
  const std::string input = bytes({0x61, 0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2, 0x62, 0x80, 0x63, 0x80, 0xBF, 0x64});
  EXPECT_EQ(from_utf8_lossy(input), "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
}

TEST(Utf8, LossyRejectsSurrogatesOverlongsAndOutOfRange) {
  EXPECT_EQ(from_utf8_lossy(bytes({0xED, 0xA0, 0x80})), kFffd + kFffd + kFffd);  // U+D800
  EXPECT_EQ(from_utf8_lossy(bytes({0xC0, 0xAF})), kFffd + kFffd);                // overlong '/'
  EXPECT_EQ(from_utf8_lossy(bytes({0xE0, 0x80, 0xAF})), kFffd + kFffd + kFffd);  // overlong '/'
  EXPECT_EQ(from_utf8_lossy(bytes({0xF4, 0x90, 0x80, 0x80})), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(from_utf8_lossy(bytes({0xF5})), kFffd);
  EXPECT_EQ(from_utf8_lossy(bytes({0xE2, 0x82})), kFffd);  // truncated euro sign at the end
  EXPECT_EQ(from_utf8_lossy(bytes({0xE2, 0x82, 0x41})), kFffd + "A");
  EXPECT_EQ(from_utf8_lossy("\xE2\x82\xAC\xF0\x9F\x98\x80"), "\xE2\x82\xAC\xF0\x9F\x98\x80");  // valid
  EXPECT_EQ(from_utf8_lossy(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(Utf8, EveryScalarValueRoundTrips) {
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    std::string s;
    append_utf8(s, c);
    ASSERT_EQ(s.size(), c < 0x80 ? 1u : c < 0x800 ? 2u : c < 0x10000 ? 3u : 4u);
    ASSERT_TRUE(is_valid_utf8(s)) << static_cast<unsigned>(c);
    std::size_t i = 0;
    ASSERT_EQ(next_char(s, i), c);
    ASSERT_EQ(i, s.size());
  }
}

TEST(Utf8, FirstInvalidOffset) {
  EXPECT_EQ(first_invalid_utf8("abc"), std::string_view::npos);
  EXPECT_EQ(first_invalid_utf8("ab\xFF"), 2u);
  EXPECT_EQ(first_invalid_utf8("\xC3\xA9\xC3"), 2u);
  EXPECT_FALSE(is_valid_utf8("\xED\xBF\xBF"));  // U+DFFF
  EXPECT_TRUE(is_valid_utf8("\xEF\xBF\xBF"));   // U+FFFF is a valid scalar value
}

// GPT-2's bytes_to_unicode: '!'..'~', '¡'..'¬', '®'..'ÿ' are themselves; the
// other bytes are U+0100.. in byte order (so ' ' is U+0120 'Ġ', '\n' U+010A 'Ċ').
TEST(ByteLevel, Gpt2ByteMap) {
  EXPECT_EQ(byte_to_char('A'), U'A');
  EXPECT_EQ(byte_to_char(0x00), U'\u0100');
  EXPECT_EQ(byte_to_char('\n'), U'\u010A');
  EXPECT_EQ(byte_to_char(' '), U'\u0120');
  EXPECT_EQ(byte_to_char(0x7F), U'\u0121');
  EXPECT_EQ(byte_to_char(0xAD), U'\u0143');
  EXPECT_EQ(byte_to_char(0xFF), U'\u00FF');
  for (int b = 0; b < 256; ++b) {
    const auto back = char_to_byte(byte_to_char(static_cast<unsigned char>(b)));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, b);
  }
  EXPECT_FALSE(char_to_byte(U'\u0144').has_value());
  EXPECT_FALSE(char_to_byte(U' ').has_value());
  EXPECT_EQ(bytes_to_chars("\xE2\x82\xAC"), "\xC3\xA2\xC4\xA4\xC2\xAC");  // "€" -> "âĤ¬"
  EXPECT_EQ(chars_to_bytes("\xC3\xA2\xC4\xA4\xC2\xAC"), "\xE2\x82\xAC");
  EXPECT_FALSE(chars_to_bytes("a b").has_value());
}

}  // namespace
}  // namespace qpu::tokenizer
