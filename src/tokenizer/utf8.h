#pragma once
// UTF-8 helpers with the exact semantics of Rust's str/String, because the
// behaviour we must reproduce (Hugging Face tokenizers) is written in Rust:
// what counts as valid UTF-8, and how String::from_utf8_lossy replaces bad bytes.
#include <cstddef>
#include <string>
#include <string_view>

namespace qpu::tokenizer {

// Length of the valid UTF-8 sequence starting at text[i], or 0 when the bytes
// there are not one (overlong, surrogate, above U+10FFFF, truncated).
std::size_t valid_utf8_length_at(std::string_view text, std::size_t i);

bool is_valid_utf8(std::string_view text);

// Byte offset of the first invalid sequence, or npos when the text is valid.
std::size_t first_invalid_utf8(std::string_view text);

// Decodes the (valid) character at text[i] and advances i past it.
char32_t next_char(std::string_view text, std::size_t& i);

void append_utf8(std::string& out, char32_t c);

// Rust's String::from_utf8_lossy: every maximal invalid subpart becomes one
// U+FFFD (the Unicode "substitution of maximal subparts" practice).
std::string from_utf8_lossy(std::string_view bytes);

}  // namespace qpu::tokenizer
