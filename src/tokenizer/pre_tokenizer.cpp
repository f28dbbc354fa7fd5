#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "common/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/unicode_tables.h"

namespace qpu::tokenizer {
namespace {

// Runs `split` on every piece and keeps the non-empty results.
template <typename F>
void split_each(std::vector<std::string>& pieces, F&& split) {
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (const std::string& piece : pieces) {
    if (piece.empty()) continue;  // tokenizers never passes an empty piece on
    for (std::string& sub : split(piece)) {
      if (!sub.empty()) out.push_back(std::move(sub));
    }
  }
  pieces = std::move(out);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<std::string>& pieces) const override {
    split_each(pieces, [&](const std::string& piece) {
      std::vector<MatchSpan> matches = find_matches(regex_, piece);
      if (invert_) {
        for (MatchSpan& m : matches) m.is_match = !m.is_match;
      }
      return split_by_matches(piece, matches, behavior_);
    });
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, std::string_view context)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<Regex>(Regex::from_onig(kGpt2Pattern, context)) : nullptr) {}
  void pre_tokenize(std::vector<std::string>& pieces) const override {
    split_each(pieces, [&](const std::string& piece) {
      std::string text = piece;
      if (add_prefix_space_ && !text.starts_with(' ')) text.insert(text.begin(), ' ');
      if (!regex_) return std::vector<std::string>{text};
      return split_by_matches(text, find_matches(*regex_, text), SplitBehavior::Isolated);
    });
    // Then every byte becomes its visible character.
    for (std::string& piece : pieces) piece = bytes_to_chars(piece);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<std::string>& pieces) const override {
    for (const auto& step : steps_) step->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

SplitBehavior parse_behavior(const Json& value, const JsonPath& at) {
  const std::string name = read_string(value, "behavior", at);
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  at.field("behavior").fail("unknown split behavior \"" + name +
                            "\" (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
}

}  // namespace

Regex parse_pattern(const Json& value, const JsonPath& at) {
  const JsonPath pat = at.field("pattern");
  const Json& pattern = require_field(value, "pattern", at);
  expect_object(pattern, pat);
  if (pattern.size() != 1) pat.fail("expected exactly one of \"Regex\" or \"String\"");
  if (pattern.contains("Regex")) {
    const std::string text = read_string(pattern, "Regex", pat);
    return Regex::from_onig(text, pat.file() + ": " + pat.path() + ".Regex");
  }
  if (pattern.contains("String")) {
    const std::string text = read_string(pattern, "String", pat);
    return Regex::literal(text, pat.file() + ": " + pat.path() + ".String");
  }
  pat.fail("expected \"Regex\" or \"String\", found \"" + pattern.begin().key() + "\"");
}

std::vector<std::string> split_by_matches(std::string_view text, const std::vector<MatchSpan>& matches,
                                          SplitBehavior behavior) {
  // (span, remove) pairs, built exactly as tokenizers folds the matches.
  std::vector<std::pair<Span, bool>> splits;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const MatchSpan& m : matches) splits.push_back({m.span, false});
      break;
    case SplitBehavior::Removed:
      for (const MatchSpan& m : matches) splits.push_back({m.span, m.is_match});
      break;
    case SplitBehavior::Contiguous: {
      bool previous_match = false;
      for (const MatchSpan& m : matches) {
        if (m.is_match == previous_match && !splits.empty()) {
          splits.back().first.end = m.span.end;
        } else {
          splits.push_back({m.span, false});
        }
        previous_match = m.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool previous_match = false;
      for (const MatchSpan& m : matches) {
        if (m.is_match && !previous_match && !splits.empty()) {
          splits.back().first.end = m.span.end;
        } else {
          splits.push_back({m.span, false});
        }
        previous_match = m.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool previous_match = false;
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        if (it->is_match && !previous_match && !splits.empty()) {
          splits.back().first.start = it->span.start;
        } else {
          splits.push_back({it->span, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(splits.begin(), splits.end());
      break;
    }
  }
  std::vector<std::string> out;
  for (const auto& [span, remove] : splits) {
    if (!remove && span.end > span.start) out.emplace_back(text.substr(span.start, span.end - span.start));
  }
  return out;
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Json& value, const JsonPath& at) {
  if (value.is_null()) return nullptr;
  const std::string type = read_string(value, "type", at);
  const std::string context = at.file() + ": " + at.path();
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(parse_pattern(value, at), parse_behavior(value, at),
                                               read_bool(value, "invert", at, false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(read_bool(value, "add_prefix_space", at, true),
                                                   read_bool(value, "use_regex", at, true), context);
  }
  if (type == "Whitespace") {
    // Keeps \w+|[^\w\s]+ (inverted, the rest removed), written for the Rust
    // regex crate, not Oniguruma: its own \w.
    const std::string w = class_items(regex_crate_word_ranges());
    return std::make_unique<SplitPreTokenizer>(
        Regex::from_pcre2("[" + w + "]+|[^" + w + "\\p{White_Space}]+", context), SplitBehavior::Removed, true);
  }
  if (type == "WhitespaceSplit") {
    // Each whitespace character (char::is_whitespace) is a removed delimiter.
    return std::make_unique<SplitPreTokenizer>(Regex::from_onig(R"(\s)", context), SplitBehavior::Removed, false);
  }
  if (type == "Sequence") {
    const Json& list = require_field(value, "pretokenizers", at);
    if (!list.is_array()) at.field("pretokenizers").fail("expected an array, found " + json_type_name(list));
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const JsonPath item = at.field("pretokenizers").index(i);
      if (list[i].is_null()) item.fail("expected a pre-tokenizer, found null");
      steps.push_back(parse_pre_tokenizer(list[i], item));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  at.fail("unsupported pre_tokenizer type \"" + type +
          "\" (supported: Split, ByteLevel, Whitespace, WhitespaceSplit, Sequence)");
}

}  // namespace qpu::tokenizer
