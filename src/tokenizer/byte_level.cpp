#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace qpu::tokenizer {
namespace {

bool maps_to_itself(unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int, 324> to_byte{};  // characters are all below U+0144
  Tables() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      to_char[b] = maps_to_itself(b) ? b : next++;
      to_byte[to_char[b]] = static_cast<int>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(unsigned char b) { return tables().to_char[b]; }

std::optional<unsigned char> char_to_byte(char32_t c) {
  if (c >= tables().to_byte.size() || tables().to_byte[c] < 0) return std::nullopt;
  return static_cast<unsigned char>(tables().to_byte[c]);
}

std::string bytes_to_chars(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char b : bytes) append_utf8(out, byte_to_char(static_cast<unsigned char>(b)));
  return out;
}

std::optional<std::string> chars_to_bytes(std::string_view chars) {
  std::string out;
  std::size_t i = 0;
  while (i < chars.size()) {
    const auto b = char_to_byte(next_char(chars, i));
    if (!b) return std::nullopt;
    out += static_cast<char>(*b);
  }
  return out;
}

}  // namespace qpu::tokenizer
