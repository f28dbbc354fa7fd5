#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <vector>

#include "common/error.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode_tables.h"
#include "tokenizer/utf8.h"

namespace qpu::tokenizer {
namespace {

class Nfc final : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override { return nfc(text); }
};

// Prepend: the string in front of any non-empty text (Llama-style "▁").
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string_view text) const override {
    return text.empty() ? std::string() : prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

// Replace: every match of the pattern becomes `content`.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Regex regex, std::string content) : regex_(std::move(regex)), content_(std::move(content)) {}
  std::string normalize(std::string_view text) const override {
    std::string out;
    for (const MatchSpan& m : find_matches(regex_, text)) {
      if (m.is_match) {
        out += content_;
      } else {
        out.append(text.substr(m.span.start, m.span.end - m.span.start));
      }
    }
    return out;
  }

 private:
  Regex regex_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  std::string normalize(std::string_view text) const override {
    std::string s(text);
    for (const auto& step : steps_) s = step->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

namespace {

std::string utf8proc_nfc(std::string_view text) {
  if (text.empty()) return {};
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &result,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) qpu::fail("NFC normalization failed: {}", utf8proc_errmsg(n));
  std::string out(reinterpret_cast<const char*>(result), static_cast<std::size_t>(n));
  std::free(result);
  return out;
}

}  // namespace

// To tokenizers' NFC an inert code point is a starter that neither decomposes
// nor composes, so nothing reorders or composes across it: normalizing the
// text between inert code points separately is exactly its NFC.
std::string nfc(std::string_view text) {
  std::string out;
  std::size_t segment = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t start = i;
    if (!nfc_inert(next_char(text, i))) continue;
    out += utf8proc_nfc(text.substr(segment, start - segment));
    out.append(text.substr(start, i - start));
    segment = i;
  }
  out += utf8proc_nfc(text.substr(segment));
  return out;
}

std::unique_ptr<Normalizer> parse_normalizer(const Json& value, const JsonPath& at) {
  if (value.is_null()) return nullptr;
  const std::string type = read_string(value, "type", at);
  if (type == "NFC") return std::make_unique<Nfc>();
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(read_string(value, "prepend", at));
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(parse_pattern(value, at), read_string(value, "content", at));
  }
  if (type == "Sequence") {
    const Json& list = require_field(value, "normalizers", at);
    if (!list.is_array()) at.field("normalizers").fail("expected an array, found " + json_type_name(list));
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const JsonPath item = at.field("normalizers").index(i);
      if (list[i].is_null()) item.fail("expected a normalizer, found null");
      steps.push_back(parse_normalizer(list[i], item));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  at.fail("unsupported normalizer type \"" + type + "\" (supported: NFC, Prepend, Replace, Sequence)");
}

}  // namespace qpu::tokenizer
