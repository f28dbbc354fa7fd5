#pragma once
// GPT-2's reversible byte <-> character map (bytes_to_unicode): printable
// Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in order, so
// every byte string becomes a string of visible characters.
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace qpu::tokenizer {

// The character that byte b becomes.
char32_t byte_to_char(unsigned char b);

// The byte a character stands for, or nullopt for characters outside the map.
std::optional<unsigned char> char_to_byte(char32_t c);

// Every byte of `bytes` replaced by its character (UTF-8 encoded).
std::string bytes_to_chars(std::string_view bytes);

// The inverse: nullopt when some character is not in the map (tokenizers then
// keeps the token's UTF-8 bytes as they are). `chars` must be valid UTF-8.
std::optional<std::string> chars_to_bytes(std::string_view chars);

}  // namespace qpu::tokenizer
