#pragma once
// tokenizer.json "pre_tokenizer": cuts normalized text into pieces that the
// model tokenizes independently. Supported: Split (regex or string pattern, all
// five delimiter behaviours, invert), ByteLevel (add_prefix_space, use_regex
// with GPT-2's regex), Whitespace, WhitespaceSplit and Sequence.
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_reader.h"
#include "tokenizer/regex.h"

namespace qpu::tokenizer {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every piece by its sub-pieces; empty pieces are dropped, as
  // tokenizers' PreTokenizedString::split does.
  virtual void pre_tokenize(std::vector<std::string>& pieces) const = 0;
};

// A tokenizers pattern object: {"Regex": "..."} (Oniguruma syntax) or
// {"String": "..."} (matched literally), read from value["pattern"].
Regex parse_pattern(const Json& value, const JsonPath& at);

// null gives nullptr (the normalized text is one piece).
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Json& value, const JsonPath& at);

// What happens to the delimiters (matches) of a split, as in tokenizers'
// SplitDelimiterBehavior.
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// tokenizers' NormalizedString::split on already computed matches; only the
// non-empty pieces are returned.
std::vector<std::string> split_by_matches(std::string_view text, const std::vector<MatchSpan>& matches,
                                          SplitBehavior behavior);

// The regex GPT-2 (and tokenizers' ByteLevel with use_regex) splits text with.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace qpu::tokenizer
