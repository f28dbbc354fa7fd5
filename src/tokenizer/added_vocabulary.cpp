#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/regex.h"
#include "tokenizer/unicode_tables.h"
#include "tokenizer/utf8.h"

namespace qpu::tokenizer {
namespace {

// tokenizers decides single_word / lstrip / rstrip with the Rust regex crate's
// Unicode \w and \s (the White_Space property).
bool is_word_char(std::string_view c) {
  std::size_t i = 0;
  return regex_crate_is_word(next_char(c, i));
}
bool is_space_char(std::string_view c) {
  static const Regex r = Regex::from_pcre2(R"(\A\p{White_Space})", "added tokens");
  return r.search(c);
}

// The last / first character of a string.
std::string_view last_char(std::string_view s) {
  std::size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  return s.substr(i == 0 ? 0 : i - 1);
}
std::string_view first_char(std::string_view s) {
  if (s.empty()) return s;
  std::size_t i = 0;
  next_char(s, i);
  return s.substr(0, i);
}

bool ends_with_word(std::string_view s) { return !s.empty() && is_word_char(last_char(s)); }
bool starts_with_word(std::string_view s) { return !s.empty() && is_word_char(first_char(s)); }

// Start of the whitespace run that ends `s` (s.size() when none).
std::size_t trailing_space_start(std::string_view s) {
  std::size_t end = s.size();
  while (end > 0) {
    const std::string_view c = last_char(s.substr(0, end));
    if (!is_space_char(c)) break;
    end -= c.size();
  }
  return end;
}

// Length of the whitespace run that starts `s`.
std::size_t leading_space_length(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const std::string_view c = first_char(s.substr(i));
    if (!is_space_char(c)) break;
    i += c.size();
  }
  return i;
}

}  // namespace

void AddedVocabulary::Matcher::add(std::string_view pattern, int token_index) {
  std::size_t node = 0;
  for (const char ch : pattern) {
    const auto byte = static_cast<unsigned char>(ch);
    auto& children = nodes[node].children;
    const auto it = std::find_if(children.begin(), children.end(), [&](const auto& c) { return c.first == byte; });
    if (it != children.end()) {
      node = it->second;
    } else {
      nodes[node].children.emplace_back(byte, nodes.size());
      node = nodes.size();
      nodes.emplace_back();
    }
  }
  // The first token given a pattern keeps it (aho-corasick prefers the
  // earlier pattern among equal matches).
  if (nodes[node].token_index < 0) nodes[node].token_index = token_index;
}

std::optional<std::pair<int, std::size_t>> AddedVocabulary::Matcher::longest_at(std::string_view text,
                                                                                std::size_t start) const {
  std::optional<std::pair<int, std::size_t>> best;
  std::size_t node = 0;
  for (std::size_t i = start; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto& children = nodes[node].children;
    const auto it = std::find_if(children.begin(), children.end(), [&](const auto& c) { return c.first == byte; });
    if (it == children.end()) break;
    node = it->second;
    if (nodes[node].token_index >= 0) best = std::make_pair(nodes[node].token_index, i + 1);
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    AddedToken& t = tokens_[i];
    t.text = t.normalized && normalizer ? normalizer->normalize(t.content) : t.content;
    by_content_.emplace(tokens_[i].content, i);
    by_id_.emplace(tokens_[i].id, i);
  }
  // tokenizers lists the special tokens before the other added tokens.
  for (const bool special_pass : {true, false}) {
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
      const AddedToken& t = tokens_[i];
      if (t.special != special_pass) continue;
      if (!t.normalized) {
        raw_matcher_.add(t.content, static_cast<int>(i));
      } else {
        normalized_matcher_.add(t.text, static_cast<int>(i));
      }
    }
  }
}

// tokenizers' AddedVocabulary::find_matches followed by the split.
std::vector<Segment> AddedVocabulary::split(std::string_view text, const Matcher& matcher) const {
  std::vector<Segment> out;
  const auto emit = [&](std::size_t start, std::size_t end, std::int32_t id) {
    if (end > start) out.push_back(Segment{std::string(text.substr(start, end - start)), id});
  };
  std::size_t start_offset = 0;  // end of what was already emitted
  std::size_t search = 0;        // where the matcher continues (end of last match)
  while (search < text.size()) {
    std::optional<std::pair<int, std::size_t>> found;
    std::size_t match_start = search;
    for (; match_start < text.size(); ++match_start) {
      if ((found = matcher.longest_at(text, match_start))) break;
    }
    if (!found) break;
    search = found->second;
    const AddedToken& token = tokens_[static_cast<std::size_t>(found->first)];
    std::size_t start = match_start;
    std::size_t stop = found->second;
    if (token.single_word) {
      const bool space_before = start == 0 || !ends_with_word(text.substr(0, start));
      const bool space_after = stop == text.size() || !starts_with_word(text.substr(stop));
      if (!space_before || !space_after) continue;  // not a whole word: ignore this match
    }
    if (token.lstrip) {
      // The spaces may already belong to the previous match.
      start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    }
    if (token.rstrip) stop += leading_space_length(text.substr(stop));
    if (start_offset < start) emit(start_offset, start, -1);
    // tokenizers keeps the token even if lstrip/rstrip made it overlap.
    out.push_back(Segment{std::string(text.substr(start, stop - start)), token.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) emit(start_offset, text.size(), -1);
  return out;
}

std::vector<Segment> AddedVocabulary::extract_and_normalize(std::string_view text,
                                                            const Normalizer* normalizer) const {
  std::vector<Segment> out;
  for (Segment& raw : split(text, raw_matcher_)) {
    if (raw.id >= 0) {
      out.push_back(std::move(raw));
      continue;
    }
    const std::string normalized = normalizer ? normalizer->normalize(raw.text) : std::move(raw.text);
    for (Segment& piece : split(normalized, normalized_matcher_)) {
      if (piece.id >= 0 || !piece.text.empty()) out.push_back(std::move(piece));
    }
  }
  return out;
}

const AddedToken* AddedVocabulary::find(std::string_view content) const {
  const auto it = by_content_.find(content);
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find(std::int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

bool AddedVocabulary::is_special(std::string_view content) const {
  const AddedToken* t = find(content);
  return t != nullptr && t->special;
}

}  // namespace qpu::tokenizer
