#pragma once
// Regular expressions with the semantics Hugging Face tokenizers gets from
// Oniguruma (Ruby syntax, UTF-8), implemented with PCRE2 (UTF + UCP).
//
// The two engines are both Perl-style backtrackers, so match selection agrees;
// what differs is translated before compiling (see translate_onig_pattern):
//   \p{L} \p{Nd} ... general categories (short or long names, \P and \p{^..})
//          become explicit code point classes from tokenizers' own Unicode 16
//          tables (unicode_tables.inc); PCRE2 10.42 only knows Unicode 14.
//   \w \W  Oniguruma's word sets (from the same tables; a class uses a slightly
//          different one); \d \D are Nd.
//   \b \B  boundaries of that word set, as lookarounds.
//   \s \S  the White_Space property (PCRE2's \s lacks U+0085).
//   \h \H  Ruby: hexadecimal digit (PCRE2: horizontal space).
//   (?m)   Ruby's m is "dot matches newline" = PCRE2's s; ^ and $ are always
//          line anchors in Ruby = PCRE2_MULTILINE.
// Rejected: nested character classes, && intersections, script and binary
// properties (\p{Han}, \p{Alphabetic}). POSIX brackets ([:alpha:]) are
// passed to PCRE2 as they are.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qpu::tokenizer {

// A byte range [start, end) of a UTF-8 string.
struct Span {
  std::size_t start = 0;
  std::size_t end = 0;
  bool operator==(const Span&) const = default;
};

// The pattern PCRE2 compiles for an Oniguruma pattern; throws qpu::Error (with
// `context` in the message) for constructs we do not translate.
std::string translate_onig_pattern(std::string_view pattern, std::string_view context);

struct CodeRange;

// PCRE2 class items ("\x{41}-\x{5A}...") for code point ranges, surrogates
// left out.
std::string class_items(const std::vector<CodeRange>& ranges);

// PCRE2 pattern matching `text` literally.
std::string escape_literal(std::string_view text);

class Regex {
 public:
  // `pattern` in Oniguruma syntax. `context` names it in error messages
  // (e.g. "tok.json: pre_tokenizer.pattern.Regex").
  static Regex from_onig(std::string_view pattern, std::string_view context);
  // A PCRE2 pattern as it is (UTF, UCP, multiline), for our own fixed patterns.
  static Regex from_pcre2(const std::string& pattern, std::string_view context);
  // Matches `text` literally (tokenizers' String patterns).
  static Regex literal(std::string_view text, std::string_view context);

  // Successive matches as the Rust onig crate's find_iter yields them: leftmost
  // match from the end of the previous one, where an empty match right at the
  // end of the previous match is skipped by advancing one character.
  // `text` must be valid UTF-8.
  std::vector<Span> find_all(std::string_view text) const;

  // Whether the whole regex matches at the start / somewhere (used for the small
  // fixed patterns of added-token stripping).
  bool search(std::string_view text, Span* match = nullptr) const;

 private:
  struct Code;
  explicit Regex(std::shared_ptr<const Code> code) : code_(std::move(code)) {}
  static Regex compile(const std::string& pcre2_pattern, std::string_view original, std::string_view context);
  // match_data is a pcre2_match_data* (kept out of this header).
  bool match_at(std::string_view text, std::size_t offset, void* match_data, Span& match) const;

  std::shared_ptr<const Code> code_;
};

// tokenizers' Pattern::find_matches: the text cut into consecutive spans, each
// flagged as a match or not (empty matches included). An empty text gives one
// empty non-match span.
struct MatchSpan {
  Span span;
  bool is_match = false;
};
std::vector<MatchSpan> find_matches(const Regex& regex, std::string_view text);

}  // namespace qpu::tokenizer
