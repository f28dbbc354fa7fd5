#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdint>

#include "common/error.h"
#include "tokenizer/unicode_tables.h"
#include "tokenizer/utf8.h"

namespace qpu::tokenizer {
namespace {

constexpr std::string_view kHexDigitClass = "0-9a-fA-F";

// Copies one UTF-8 character of `pattern` at i (the pattern is validated first).
void copy_char(std::string_view pattern, std::size_t& i, std::string& out) {
  const std::size_t start = i;
  next_char(pattern, i);
  out.append(pattern.substr(start, i - start));
}

// Ruby option groups "(?imx-imx)" / "(?imx-imx:": translate m (dotall) to s.
bool translate_option_group(std::string_view pattern, std::size_t& i, std::string& out) {
  std::size_t k = i + 2;  // after "(?"
  while (k < pattern.size() && (pattern[k] == 'i' || pattern[k] == 'm' || pattern[k] == 'x' ||
                                pattern[k] == '-')) {
    ++k;
  }
  if (k == i + 2 || k >= pattern.size() || (pattern[k] != ':' && pattern[k] != ')')) return false;
  out += "(?";
  for (std::size_t j = i + 2; j < k; ++j) out += pattern[j] == 'm' ? 's' : pattern[j];
  i = k;
  return true;
}

}  // namespace

std::string class_items(const std::vector<CodeRange>& ranges) {
  std::string out;
  const auto item = [&](char32_t first, char32_t last) {
    if (first > last) return;
    out += fmt::format("\\x{{{:X}}}", static_cast<std::uint32_t>(first));
    if (last != first) out += fmt::format("-\\x{{{:X}}}", static_cast<std::uint32_t>(last));
  };
  for (const CodeRange& r : ranges) {
    if (r.last < 0xD800 || r.first > 0xDFFF) {
      item(r.first, r.last);
    } else {
      if (r.first < 0xD800) item(r.first, 0xD7FF);
      if (r.last > 0xDFFF) item(0xE000, r.last);
    }
  }
  return out;
}

namespace {

// A set of code points written for PCRE2: as items inside a class, otherwise
// as a class of its own.
std::string code_point_set(const std::vector<CodeRange>& ranges, bool negate, bool in_class) {
  if (in_class) return class_items(negate ? complement(ranges) : ranges);
  const std::string items = class_items(ranges);
  if (items.empty()) return negate ? "(?s:.)" : "(?!)";
  return std::string(negate ? "[^" : "[") + items + "]";
}

// Oniguruma word boundaries with its own \w.
std::string word_boundary(bool negate) {
  const std::string w = code_point_set(onig_word_ranges(), false, false);
  if (negate) return "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
  return "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))";
}

}  // namespace

std::string translate_onig_pattern(std::string_view pattern, std::string_view context) {
  const auto unsupported = [&](std::string_view what) {
    qpu::fail("{}: regex \"{}\": {} is not supported", context, pattern, what);
  };
  if (!is_valid_utf8(pattern)) qpu::fail("{}: regex is not valid UTF-8", context);
  std::string out;
  bool in_class = false;
  std::size_t class_start = 0;  // index just after "[" or "[^"
  std::size_t i = 0;
  while (i < pattern.size()) {
    const char c = pattern[i];
    if (c == '\\') {
      if (i + 1 >= pattern.size()) qpu::fail("{}: regex \"{}\" ends with a backslash", context, pattern);
      const char e = pattern[i + 1];
      std::size_t next = i + 2;
      switch (e) {
        case 's': out += "\\p{White_Space}"; break;
        case 'S': out += "\\P{White_Space}"; break;
        case 'w':
        case 'W':
          out += code_point_set(in_class ? onig_class_word_ranges() : onig_word_ranges(), e == 'W', in_class);
          break;
        case 'd':
        case 'D': out += code_point_set(*general_category_ranges("Nd"), e == 'D', in_class); break;
        case 'h':
          out += in_class ? std::string(kHexDigitClass) : "[" + std::string(kHexDigitClass) + "]";
          break;
        case 'H':
          if (in_class) unsupported("\\H inside a character class");
          out += "[^" + std::string(kHexDigitClass) + "]";
          break;
        case 'b':
        case 'B':
          if (in_class) {
            out.append(pattern.substr(i, 2));  // backspace / an error, as in Oniguruma
          } else {
            out += word_boundary(e == 'B');
          }
          break;
        case 'p':
        case 'P': {
          bool negate = e == 'P';
          std::string name;
          if (next < pattern.size() && pattern[next] == '{') {
            const std::size_t close = pattern.find('}', next);
            if (close == std::string_view::npos) unsupported("an unterminated \\p{");
            name = pattern.substr(next + 1, close - next - 1);
            next = close + 1;
          } else if (next < pattern.size()) {
            name = pattern.substr(next, 1);
            ++next;
          } else {
            unsupported("a \\p without a name");
          }
          if (!name.empty() && name.front() == '^') {
            negate = !negate;
            name.erase(0, 1);
          }
          const auto ranges = general_category_ranges(name);
          // Scripts and binary properties would come from PCRE2's Unicode 14
          // data (with script-extension semantics): refuse rather than differ.
          if (!ranges) unsupported("the property \\p{" + name + "} (only general categories)");
          out += code_point_set(*ranges, negate, in_class);
          break;
        }
        default: {
          out += '\\';
          next = i + 1;
          copy_char(pattern, next, out);
          break;
        }
      }
      i = next;
      continue;
    }
    if (in_class) {
      if (c == ']' && i != class_start) {
        in_class = false;
      } else if (c == '[') {
        if (i + 1 < pattern.size() && pattern[i + 1] == ':') {
          // POSIX bracket [:alpha:]: same syntax in both; copy through ":]".
          const std::size_t close = pattern.find(":]", i + 2);
          if (close == std::string_view::npos) unsupported("an unterminated POSIX bracket");
          out.append(pattern.substr(i, close + 2 - i));
          i = close + 2;
          continue;
        }
        unsupported("a nested character class");
      } else if (c == '&' && i + 1 < pattern.size() && pattern[i + 1] == '&') {
        unsupported("class intersection (&&)");
      }
      copy_char(pattern, i, out);
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += '[';
      ++i;
      if (i < pattern.size() && pattern[i] == '^') {
        out += '^';
        ++i;
      }
      class_start = i;
      continue;
    }
    if (c == '(' && i + 1 < pattern.size() && pattern[i + 1] == '?' &&
        translate_option_group(pattern, i, out)) {
      continue;
    }
    copy_char(pattern, i, out);
  }
  return out;
}

std::string escape_literal(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    const bool alnum = (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z');
    if (u < 0x80 && !alnum) out += '\\';
    out += c;
  }
  return out;
}

struct Regex::Code {
  pcre2_code* code = nullptr;
  std::string pattern;  // as the tokenizer file gives it, for messages
  ~Code() { pcre2_code_free(code); }
};

namespace {

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};
using MatchData = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

}  // namespace

Regex Regex::compile(const std::string& pcre2_pattern, std::string_view original, std::string_view context) {
  pcre2_compile_context* cctx = pcre2_compile_context_create(nullptr);
  if (cctx == nullptr) throw std::bad_alloc();
  pcre2_set_newline(cctx, PCRE2_NEWLINE_LF);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre2_pattern.data()),
                                   pcre2_pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NEVER_BACKSLASH_C,
                                   &error, &offset, cctx);
  pcre2_compile_context_free(cctx);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    qpu::fail("{}: invalid regex \"{}\": {}", context, original, reinterpret_cast<const char*>(message));
  }
  // JIT only speeds matching up; the interpreter gives the same results.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  auto holder = std::make_shared<Code>();
  holder->code = code;
  holder->pattern = std::string(original);
  return Regex(std::move(holder));
}

Regex Regex::from_onig(std::string_view pattern, std::string_view context) {
  return compile(translate_onig_pattern(pattern, context), pattern, context);
}

Regex Regex::from_pcre2(const std::string& pattern, std::string_view context) {
  return compile(pattern, pattern, context);
}

Regex Regex::literal(std::string_view text, std::string_view context) {
  if (!is_valid_utf8(text)) qpu::fail("{}: pattern is not valid UTF-8", context);
  return compile(escape_literal(text), text, context);
}

bool Regex::match_at(std::string_view text, std::size_t offset, void* match_data, Span& match) const {
  auto* data = static_cast<pcre2_match_data*>(match_data);
  // The texts are validated UTF-8 and offsets sit on character boundaries.
  const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), offset,
                             PCRE2_NO_UTF_CHECK, data, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof message);
    qpu::fail("regex \"{}\": matching failed: {}", code_->pattern, reinterpret_cast<const char*>(message));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
  match = Span{ovector[0], ovector[1]};
  return true;
}

std::vector<Span> Regex::find_all(std::string_view text) const {
  if (!is_valid_utf8(text)) qpu::fail("regex \"{}\": the text is not valid UTF-8", code_->pattern);
  const MatchData data(pcre2_match_data_create_from_pattern(code_->code, nullptr));
  if (!data) throw std::bad_alloc();
  std::vector<Span> matches;
  std::size_t search_from = 0;
  bool have_previous = false;
  std::size_t previous_end = 0;
  while (search_from <= text.size()) {
    Span m;
    if (!match_at(text, search_from, data.get(), m)) break;
    if (m.start == m.end && have_previous && previous_end == m.end) {
      // onig's FindMatches: no empty match right after the previous match;
      // step over one character (one byte at the very end, which ends the loop).
      std::size_t next = search_from;
      if (next < text.size()) {
        next_char(text, next);
      } else {
        ++next;
      }
      search_from = next;
      continue;
    }
    search_from = m.end;
    have_previous = true;
    previous_end = m.end;
    matches.push_back(m);
  }
  return matches;
}

bool Regex::search(std::string_view text, Span* match) const {
  if (!is_valid_utf8(text)) qpu::fail("regex \"{}\": the text is not valid UTF-8", code_->pattern);
  const MatchData data(pcre2_match_data_create_from_pattern(code_->code, nullptr));
  if (!data) throw std::bad_alloc();
  Span m;
  const bool found = match_at(text, 0, data.get(), m);
  if (found && match != nullptr) *match = m;
  return found;
}

std::vector<MatchSpan> find_matches(const Regex& regex, std::string_view text) {
  if (text.empty()) return {MatchSpan{Span{0, 0}, false}};
  std::vector<MatchSpan> out;
  std::size_t previous = 0;
  for (const Span& m : regex.find_all(text)) {
    if (previous != m.start) out.push_back({Span{previous, m.start}, false});
    out.push_back({m, true});
    previous = m.end;
  }
  if (previous != text.size()) out.push_back({Span{previous, text.size()}, false});
  return out;
}

}  // namespace qpu::tokenizer
