#include "tokenizer/unicode_tables.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <string>

namespace qpu::tokenizer {
namespace {

enum class Gc : std::uint8_t {
  Lu, Ll, Lt, Lm, Lo, Mn, Mc, Me, Nd, Nl, No, Pc, Pd, Ps, Pe, Pi, Pf, Po,
  Sm, Sc, Sk, So, Zs, Zl, Zp, Cc, Cf, Co, Cs, Cn
};

struct CategoryRun {
  char32_t first;
  Gc gc;
};

#include "tokenizer/unicode_tables.inc"

struct Alias {
  std::string_view short_name;
  std::string_view long_name;
  std::string_view members;  // the two-letter categories, concatenated
};

constexpr std::array kAliases = {
    Alias{"L", "letter", "LuLlLtLmLo"},
    Alias{"LC", "casedletter", "LuLlLt"},
    Alias{"L&", "", "LuLlLt"},
    Alias{"Lu", "uppercaseletter", "Lu"},
    Alias{"Ll", "lowercaseletter", "Ll"},
    Alias{"Lt", "titlecaseletter", "Lt"},
    Alias{"Lm", "modifierletter", "Lm"},
    Alias{"Lo", "otherletter", "Lo"},
    Alias{"M", "mark", "MnMcMe"},
    Alias{"Mn", "nonspacingmark", "Mn"},
    Alias{"Mc", "spacingmark", "Mc"},
    Alias{"Me", "enclosingmark", "Me"},
    Alias{"N", "number", "NdNlNo"},
    Alias{"Nd", "decimalnumber", "Nd"},
    Alias{"Nl", "letternumber", "Nl"},
    Alias{"No", "othernumber", "No"},
    Alias{"P", "punctuation", "PcPdPsPePiPfPo"},
    Alias{"Pc", "connectorpunctuation", "Pc"},
    Alias{"Pd", "dashpunctuation", "Pd"},
    Alias{"Ps", "openpunctuation", "Ps"},
    Alias{"Pe", "closepunctuation", "Pe"},
    Alias{"Pi", "initialpunctuation", "Pi"},
    Alias{"Pf", "finalpunctuation", "Pf"},
    Alias{"Po", "otherpunctuation", "Po"},
    Alias{"S", "symbol", "SmScSkSo"},
    Alias{"Sm", "mathsymbol", "Sm"},
    Alias{"Sc", "currencysymbol", "Sc"},
    Alias{"Sk", "modifiersymbol", "Sk"},
    Alias{"So", "othersymbol", "So"},
    Alias{"Z", "separator", "ZsZlZp"},
    Alias{"Zs", "spaceseparator", "Zs"},
    Alias{"Zl", "lineseparator", "Zl"},
    Alias{"Zp", "paragraphseparator", "Zp"},
    Alias{"C", "other", "CcCfCoCsCn"},
    Alias{"Cc", "control", "Cc"},
    Alias{"Cf", "format", "Cf"},
    Alias{"Co", "privateuse", "Co"},
    Alias{"Cs", "surrogate", "Cs"},
    Alias{"Cn", "unassigned", "Cn"},
};

constexpr std::array<std::string_view, 30> kGcNames = {
    "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
    "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Co", "Cs", "Cn"};

std::string loose(std::string_view name) {
  std::string out;
  for (const char c : name) {
    if (c == '_' || c == '-' || c == ' ') continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// Appends [first, last] to sorted ranges, merging with the previous one.
void append_range(std::vector<CodeRange>& out, char32_t first, char32_t last) {
  if (!out.empty() && out.back().last + 1 == first) {
    out.back().last = last;
  } else {
    out.push_back({first, last});
  }
}

template <std::size_t N>
bool in_ranges(const CodeRange (&ranges)[N], char32_t c) {
  const auto it = std::upper_bound(std::begin(ranges), std::end(ranges), c,
                                   [](char32_t v, const CodeRange& r) { return v < r.first; });
  return it != std::begin(ranges) && c <= std::prev(it)->last;
}

}  // namespace


std::optional<std::vector<CodeRange>> general_category_ranges(std::string_view name) {
  const std::string key = loose(name);
  const Alias* alias = nullptr;
  for (const Alias& a : kAliases) {
    if (loose(a.short_name) == key || (!a.long_name.empty() && a.long_name == key)) {
      alias = &a;
      break;
    }
  }
  if (alias == nullptr) return std::nullopt;
  std::array<bool, kGcNames.size()> wanted{};
  for (std::size_t i = 0; i < kGcNames.size(); ++i) {
    for (std::size_t k = 0; k + 2 <= alias->members.size(); k += 2) {
      if (alias->members.substr(k, 2) == kGcNames[i]) wanted[i] = true;
    }
  }
  std::vector<CodeRange> out;
  constexpr std::size_t n = std::size(kCategoryRuns);
  for (std::size_t i = 0; i < n; ++i) {
    if (!wanted[static_cast<std::size_t>(kCategoryRuns[i].gc)]) continue;
    const char32_t last = i + 1 < n ? kCategoryRuns[i + 1].first - 1 : 0x10FFFF;
    append_range(out, kCategoryRuns[i].first, last);
  }
  return out;
}

std::vector<CodeRange> onig_word_ranges() { return {std::begin(kOnigWordRanges), std::end(kOnigWordRanges)}; }

std::vector<CodeRange> onig_class_word_ranges() {
  return {std::begin(kOnigClassWordRanges), std::end(kOnigClassWordRanges)};
}

std::vector<CodeRange> regex_crate_word_ranges() {
  return {std::begin(kRegexCrateWordRanges), std::end(kRegexCrateWordRanges)};
}

bool regex_crate_is_word(char32_t c) { return in_ranges(kRegexCrateWordRanges, c); }

std::vector<CodeRange> complement(const std::vector<CodeRange>& ranges) {
  std::vector<CodeRange> out;
  char32_t next = 0;
  const auto add_gap = [&](char32_t first, char32_t last) {
    // Surrogates are never part of UTF-8 text (and PCRE2 refuses them).
    if (first <= 0xD7FF) append_range(out, first, std::min<char32_t>(last, 0xD7FF));
    if (last >= 0xE000) append_range(out, std::max<char32_t>(first, 0xE000), last);
  };
  for (const CodeRange& r : ranges) {
    if (r.first > next) add_gap(next, r.first - 1);
    next = r.last + 1;
  }
  if (next <= 0x10FFFF) add_gap(next, 0x10FFFF);
  return out;
}

bool nfc_inert(char32_t c) { return in_ranges(kNfcInertRanges, c); }

}  // namespace qpu::tokenizer
