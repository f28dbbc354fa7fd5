#include "tokenizer/decoder.h"

#include <limits>
#include <optional>

#include "common/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace qpu::tokenizer {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Tokens whose characters all come from the byte map become those bytes; any
// other token keeps its UTF-8 bytes. The whole byte string is then read as
// UTF-8 with invalid parts replaced (one output token).
class ByteLevelDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      const auto raw = chars_to_bytes(token);
      bytes += raw ? *raw : token;
    }
    return {from_utf8_lossy(bytes)};
  }
};

// Rust's u8::from_str_radix(s, 16) for a two-byte string: an optional '+' sign
// then hex digits.
std::optional<unsigned char> parse_hex_byte(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return std::nullopt;
  unsigned value = 0;
  for (const char c : s) {
    unsigned digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<unsigned>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<unsigned>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<unsigned>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
    value = value * 16 + digit;
  }
  return static_cast<unsigned char>(value);
}

// Runs of <0xXX> tokens become the text of those bytes when they form valid
// UTF-8, else one U+FFFD per byte.
class ByteFallbackDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    const auto flush = [&] {
      if (pending.empty()) return;
      if (is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (std::size_t i = 0; i < pending.size(); ++i) out.emplace_back(kReplacementChar);
      }
      pending.clear();
    };
    for (std::string& token : tokens) {
      std::optional<unsigned char> byte;
      if (token.size() == 6 && token.starts_with("<0x") && token.ends_with('>')) {
        byte = parse_hex_byte(std::string_view(token).substr(3, 2));
      }
      if (byte) {
        pending += static_cast<char>(*byte);
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    return out;
  }
};

class FuseDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    return {joined};
  }
};

// Removes up to `start` leading and `stop` trailing `content` characters of
// every token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, std::size_t start, std::size_t stop) : content_(content), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& token : tokens) {
      std::vector<std::size_t> offsets;  // byte offset of every character, then the end
      std::vector<char32_t> chars;
      for (std::size_t i = 0; i < token.size();) {
        offsets.push_back(i);
        chars.push_back(next_char(token, i));
      }
      offsets.push_back(token.size());
      std::size_t start_cut = 0;
      while (start_cut < start_ && start_cut < chars.size() && chars[start_cut] == content_) ++start_cut;
      std::size_t stop_cut = chars.size();
      for (std::size_t i = 0; i < stop_ && stop_cut > start_cut && chars[stop_cut - 1] == content_; ++i) --stop_cut;
      token = token.substr(offsets[start_cut], offsets[stop_cut] - offsets[start_cut]);
    }
    return tokens;
  }

 private:
  char32_t content_;
  std::size_t start_;
  std::size_t stop_;
};

// `tokenizers`' Metaspace decoder: every `replacement` character becomes a space, except
// in the first token when a prefix space is prepended (prepend_scheme "first" or
// "always"), where it is dropped, as the space the pre-tokenizer would have added.
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool strip_first) : replacement_(replacement), strip_first_(strip_first) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const std::string& token = tokens[t];
      std::string out;
      for (std::size_t i = 0; i < token.size();) {
        const std::size_t begin = i;
        if (next_char(token, i) != replacement_) {
          out.append(token, begin, i - begin);
        } else if (t != 0 || !strip_first_) {
          out += ' ';
        }
      }
      tokens[t] = std::move(out);
    }
    return tokens;
  }

 private:
  char32_t replacement_;
  bool strip_first_;
};

// Every match of the pattern in a token is replaced by `content`.
class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Regex regex, std::string content) : regex_(std::move(regex)), content_(std::move(content)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& token : tokens) {
      std::string replaced;
      for (const MatchSpan& m : find_matches(regex_, token)) {
        if (m.is_match) {
          replaced += content_;
        } else {
          replaced.append(token, m.span.start, m.span.end - m.span.start);
        }
      }
      token = std::move(replaced);
    }
    return tokens;
  }

 private:
  Regex regex_;
  std::string content_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& step : steps_) tokens = step->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::string Decoder::decode(std::vector<std::string> tokens) const {
  std::string text;
  for (const std::string& piece : decode_chain(std::move(tokens))) text += piece;
  return text;
}

std::unique_ptr<Decoder> parse_decoder(const Json& value, const JsonPath& at) {
  if (value.is_null()) return nullptr;
  const std::string type = read_string(value, "type", at);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const std::string content = read_string(value, "content", at);
    std::size_t i = 0;
    if (content.empty() || !is_valid_utf8(content) || (next_char(content, i), i != content.size())) {
      at.field("content").fail("expected exactly one character");
    }
    i = 0;
    const char32_t c = next_char(content, i);
    const auto start = read_int(value, "start", at, 0, std::numeric_limits<std::int32_t>::max());
    const auto stop = read_int(value, "stop", at, 0, std::numeric_limits<std::int32_t>::max());
    return std::make_unique<StripDecoder>(c, static_cast<std::size_t>(start), static_cast<std::size_t>(stop));
  }
  if (type == "Metaspace") {
    const std::string r = read_string(value, "replacement", at);
    std::size_t i = 0;
    if (r.empty() || !is_valid_utf8(r) || (next_char(r, i), i != r.size()))
      at.field("replacement").fail("expected exactly one character");
    i = 0;
    const char32_t c = next_char(r, i);
    // prepend_scheme (tokenizers >= 0.19), else the older add_prefix_space (true: "always").
    bool strip_first = read_bool(value, "add_prefix_space", at, true);
    if (const auto scheme = read_optional_string(value, "prepend_scheme", at)) {
      if (*scheme != "first" && *scheme != "always" && *scheme != "never")
        at.field("prepend_scheme").fail("expected \"first\", \"always\" or \"never\", found \"" + *scheme + "\"");
      strip_first = *scheme != "never";
    }
    return std::make_unique<MetaspaceDecoder>(c, strip_first);
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(parse_pattern(value, at), read_string(value, "content", at));
  }
  if (type == "Sequence") {
    const Json& list = require_field(value, "decoders", at);
    if (!list.is_array()) at.field("decoders").fail("expected an array, found " + json_type_name(list));
    std::vector<std::unique_ptr<Decoder>> steps;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const JsonPath item = at.field("decoders").index(i);
      if (list[i].is_null()) item.fail("expected a decoder, found null");
      steps.push_back(parse_decoder(list[i], item));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  at.fail("unsupported decoder type \"" + type +
          "\" (supported: ByteLevel, ByteFallback, Fuse, Strip, Metaspace, Replace, Sequence)");
}

}  // namespace qpu::tokenizer
