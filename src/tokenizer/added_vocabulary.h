#pragma once
// tokenizer.json "added_tokens": tokens matched in the input before anything
// else (special tokens such as <|im_start|>, and non-special added tokens).
//
// As in tokenizers' AddedVocabulary: tokens with normalized=false are matched
// in the raw text, the others in the normalized text; matching is
// leftmost-longest and non-overlapping; single_word, lstrip and rstrip are
// honoured.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/model.h"
#include "tokenizer/normalizer.h"

namespace qpu::tokenizer {

struct AddedToken {
  std::string content;
  std::int32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
  // What tokenizers' id_to_token and decode give for this id: the content,
  // normalized when the token is normalized (set by AddedVocabulary).
  std::string text;
};

// A piece of the input: an added token (id >= 0) or text still to tokenize.
struct Segment {
  std::string text;
  std::int32_t id = -1;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // Token ids must already be final; `normalizer` (may be null) normalizes the
  // contents of normalized tokens for matching.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // The input cut around added tokens, with the text between them normalized;
  // empty pieces are dropped.
  std::vector<Segment> extract_and_normalize(std::string_view text, const Normalizer* normalizer) const;

  const AddedToken* find(std::string_view content) const;
  const AddedToken* find(std::int32_t id) const;
  bool is_special(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Leftmost-longest matcher over a fixed set of strings (a byte trie).
  struct Matcher {
    struct Node {
      std::vector<std::pair<unsigned char, std::size_t>> children;
      int token_index = -1;  // the token this node completes, or -1
    };
    std::vector<Node> nodes{Node{}};
    void add(std::string_view pattern, int token_index);
    // Longest pattern starting at text[start]: (token_index, end) or nullopt.
    std::optional<std::pair<int, std::size_t>> longest_at(std::string_view text, std::size_t start) const;
  };

  std::vector<Segment> split(std::string_view text, const Matcher& matcher) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, std::size_t, StringHash, std::equal_to<>> by_content_;
  std::unordered_map<std::int32_t, std::size_t> by_id_;
  Matcher raw_matcher_;         // normalized == false
  Matcher normalized_matcher_;  // normalized == true, contents normalized
};

}  // namespace qpu::tokenizer
