#include "npu/host_vocab.h"

#include <cctype>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace qpu::npu {

namespace {

// run.c: sscanf(piece, "<0x%02hhX>", &b) == 1. True for the 256 canonical byte tokens and
// for anything else that starts with "<0x" and a hex digit.
bool looks_like_byte(const std::string& piece) {
  unsigned char b = 0;
  return std::sscanf(piece.c_str(), "<0x%02hhX>", &b) == 1;
}

bool canonical_byte(const std::string& piece) {
  if (piece.size() != 6 || !looks_like_byte(piece) || piece[5] != '>') return false;
  for (size_t i = 3; i < 5; ++i)
    if (!std::isxdigit(static_cast<unsigned char>(piece[i])) || std::islower(static_cast<unsigned char>(piece[i])))
      return false;
  return true;
}

// The byte tokens whose byte run.c does not print (neither isprint nor isspace, C locale).
bool printed_byte(int b) { return (b >= 0x20 && b <= 0x7e) || (b >= 0x09 && b <= 0x0d); }

}  // namespace

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + static_cast<size_t>(n) > s.size()) return false;
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) >> 6) != 0x2) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

std::string unprinted_byte_tokens_regex() {
  std::string unprinted;
  for (int b = 0; b < 256; ++b) {
    if (printed_byte(b)) continue;
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    unprinted += (unprinted.empty() ? "" : "|") + std::string(buf);
  }
  return unprinted;
}

int64_t HostVocab::control(const std::string& name) const {
  for (size_t i = 0; i < controls.size(); ++i)
    if (controls[i] == name) return first_control + static_cast<int64_t>(i);
  fail("host vocabulary: no control token {}", name);
}

HostVocab make_host_vocab(const reference::Tokenizer& nested) {
  HostVocab v;
  v.nested_vocab = nested.vocab_size();
  std::map<std::string, int64_t> id_of;
  for (int i = 0; i < v.nested_vocab; ++i) {
    std::string piece(nested.piece(i));
    if (!valid_utf8(piece)) fail("host vocabulary: piece {} is not valid UTF-8", i);
    if (looks_like_byte(piece) && !canonical_byte(piece))
      fail("host vocabulary: piece {} ('{}') reads as a byte token to run.c without being one", i, piece);
    if (!id_of.emplace(piece, i).second) fail("host vocabulary: piece {} ('{}') appears twice", i, piece);
    v.pieces.push_back(std::move(piece));
  }
  const int64_t nul = id_of.count("<0x00>") ? id_of.at("<0x00>") : -1;
  for (int i = 0; i < v.nested_vocab; ++i) {
    const std::string& piece = v.pieces[static_cast<size_t>(i)];
    if (piece.empty() || piece[0] != ' ') {
      v.after_bos.push_back(i);
      continue;
    }
    const std::string stripped = piece.substr(1);
    if (stripped.empty()) {
      if (nul < 0) fail("host vocabulary: the piece ' ' needs the byte token <0x00> to print nothing after BOS");
      v.after_bos.push_back(nul);
    } else if (auto it = id_of.find(stripped); it != id_of.end()) {
      v.after_bos.push_back(it->second);
    } else {
      const auto id = static_cast<int64_t>(v.pieces.size());
      v.pieces.push_back(stripped);
      id_of.emplace(stripped, id);
      v.after_bos.push_back(id);
    }
  }
  v.values.first = v.printing();
  v.first_control = v.values.first + v.values.size();
  v.controls = {"<|qpu_start|>", "<|qpu_go|>", "<|qpu_nop|>", "<|qpu_done|>", "<|qpu_error|>"};
  return v;
}

std::string host_tokenizer_json(const HostVocab& v) {
  using nlohmann::json;
  json vocab = json::object();
  for (size_t i = 0; i < v.pieces.size(); ++i) vocab[v.pieces[i]] = i;
  json added = json::array();
  auto special = [&](int64_t id, const std::string& content) {
    added.push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  };
  for (int64_t t = v.values.first; t < v.values.first + v.values.size(); ++t)
    special(t, "<|qpu_v" + std::to_string(t - v.values.first) + "|>");
  for (size_t i = 0; i < v.controls.size(); ++i) special(v.first_control + static_cast<int64_t>(i), v.controls[i]);
  const std::string unprinted = unprinted_byte_tokens_regex();
  json decoder = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"Regex", unprinted}}}, {"content", ""}},
                                            {{"type", "ByteFallback"}},
                                            {{"type", "Fuse"}}})}};
  return bpe_tokenizer_json(std::move(vocab), std::move(added), std::move(decoder));
}

std::string bpe_tokenizer_json(nlohmann::json vocab, nlohmann::json added, nlohmann::json decoder) {
  using nlohmann::json;
  json model = {{"type", "BPE"},        {"dropout", nullptr}, {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},    {"byte_fallback", true}, {"ignore_merges", false},
                {"vocab", std::move(vocab)}, {"merges", json::array()}};
  json doc = {{"version", "1.0"},       {"truncation", nullptr}, {"padding", nullptr},
              {"added_tokens", std::move(added)}, {"normalizer", nullptr}, {"pre_tokenizer", nullptr},
              {"post_processor", nullptr}, {"decoder", std::move(decoder)}, {"model", std::move(model)}};
  return doc.dump(1);
}

std::vector<int64_t> host_ids_for(const HostVocab& v, const std::vector<int>& t) {
  std::vector<int64_t> ids;
  for (size_t i = 1; i < t.size(); ++i) {
    if (t[i] < 0 || t[i] >= v.nested_vocab) fail("host vocabulary: nested token {} out of range", t[i]);
    if (t[i] == 1) break;  // run.c stops at BOS
    ids.push_back(t[i - 1] == 1 ? v.after_bos[static_cast<size_t>(t[i])] : t[i]);
  }
  return ids;
}

}  // namespace qpu::npu
