#pragma once
// Unicode data as stock `tokenizers` sees it (generated into unicode_tables.inc
// by gen_unicode_tables.py): general categories and \w of its Oniguruma
// (Unicode 16), the regex crate's \w, and the code points its older NFC tables
// do not know.
#include <optional>
#include <string_view>
#include <vector>

namespace qpu::tokenizer {

struct CodeRange {
  char32_t first = 0;
  char32_t last = 0;  // inclusive
};

// The code points of a general category property as Oniguruma names it: one
// or two letters ("L", "Nd", "LC"/"L&") or the long name ("Letter",
// "Decimal_Number"), compared loosely (case, '_', '-', ' ' ignored).
// nullopt when `name` is not a general category.
std::optional<std::vector<CodeRange>> general_category_ranges(std::string_view name);

// Oniguruma's \w outside and inside a character class (they differ on a few
// Latin-1 numbers such as U+00B2).
std::vector<CodeRange> onig_word_ranges();
std::vector<CodeRange> onig_class_word_ranges();

// The Rust regex crate's \w (tokenizers' Whitespace pre-tokenizer and its
// single_word check for added tokens).
std::vector<CodeRange> regex_crate_word_ranges();
bool regex_crate_is_word(char32_t c);

// The complement of sorted, disjoint ranges within [0, U+10FFFF] minus surrogates.
std::vector<CodeRange> complement(const std::vector<CodeRange>& ranges);

// Whether NFC must leave c alone because tokenizers' tables do not know it.
bool nfc_inert(char32_t c);

}  // namespace qpu::tokenizer
