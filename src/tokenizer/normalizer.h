#pragma once
// tokenizer.json "normalizer": NFC (what Qwen tokenizers use), Prepend and
// Replace (what Llama-style tokenizers use) and Sequence of supported ones.
// Anything else is rejected with an "unsupported" error rather than silently
// producing different ids.
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/json_reader.h"

namespace qpu::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8; so is the result.
  virtual std::string normalize(std::string_view text) const = 0;
};

// null gives nullptr (no normalization).
std::unique_ptr<Normalizer> parse_normalizer(const Json& value, const JsonPath& at);

// Unicode NFC as tokenizers computes it: utf8proc, except for the code points
// its older tables do not know (unicode_tables.h, nfc_inert), left alone.
std::string nfc(std::string_view text);

}  // namespace qpu::tokenizer
