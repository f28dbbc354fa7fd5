#include "reference/tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "common/error.h"

namespace qpu::reference {

namespace {

// run.c keeps each piece as a C string: everything after a NUL is invisible to it.
std::string as_c_string(std::string bytes) {
  const size_t nul = bytes.find('\0');
  if (nul != std::string::npos) bytes.resize(nul);
  return bytes;
}

// strcmp order: std::string_view::compare compares as unsigned char and orders a
// prefix first, which is strcmp's order for NUL-free strings (all of ours are).
int c_compare(std::string_view a, std::string_view b) { return a.compare(b); }

}  // namespace

Tokenizer::Tokenizer(std::vector<std::string> pieces, std::vector<float> scores, unsigned max_token_length)
    : scores_(std::move(scores)), max_token_length_(max_token_length) {
  if (pieces.size() != scores_.size())
    fail("tokenizer: {} pieces but {} scores", pieces.size(), scores_.size());
  if (pieces.empty()) fail("tokenizer: empty vocabulary");
  pieces_.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); i++) {
    if (pieces[i].size() > max_token_length_)
      fail("tokenizer: piece {} is {} bytes, longer than max_token_length {}", i, pieces[i].size(),
           max_token_length_);
    pieces_.push_back(as_c_string(std::move(pieces[i])));
  }
  // run.c sorts with glibc qsort, which for this element size is a stable merge sort:
  // equal pieces keep ascending id order.
  sorted_ids_.resize(pieces_.size());
  for (size_t i = 0; i < sorted_ids_.size(); i++) sorted_ids_[i] = static_cast<int>(i);
  std::stable_sort(sorted_ids_.begin(), sorted_ids_.end(),
                   [&](int a, int b) { return c_compare(pieces_[a], pieces_[b]) < 0; });
  byte_pieces_.assign(512, '\0');
  for (int b = 0; b < 256; b++) byte_pieces_[2 * b] = static_cast<char>(b);
}

Tokenizer Tokenizer::load(const std::filesystem::path& path, int vocab_size) {
  const std::string name = path.string();
  if (vocab_size <= 0) fail("{}: vocab_size {} must be positive", name, vocab_size);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open tokenizer: {}", name, std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail("{}: read error", name);

  size_t at = 0;
  const auto read_i32 = [&](const std::string& field) {
    if (bytes.size() - at < 4) {
      fail("{}: truncated tokenizer: {} missing at byte {} (file is {} bytes)", name, field, at,
           bytes.size());
    }
    int32_t v = 0;
    std::memcpy(&v, bytes.data() + at, 4);
    at += 4;
    return v;
  };
  const int32_t max_len = read_i32("max_token_length");
  if (max_len <= 0) fail("{}: max_token_length {} must be positive", name, max_len);

  std::vector<std::string> pieces(vocab_size);
  std::vector<float> scores(vocab_size);
  for (int i = 0; i < vocab_size; i++) {
    const int32_t score_bits = read_i32(fmt::format("score of token {}", i));
    std::memcpy(&scores[i], &score_bits, 4);
    const int32_t len = read_i32(fmt::format("length of token {}", i));
    if (len < 0 || len > max_len)
      fail("{}: token {} has length {}, outside [0, max_token_length = {}]", name, i, len, max_len);
    if (bytes.size() - at < static_cast<size_t>(len))
      fail("{}: truncated tokenizer: token {} needs {} bytes at byte {} (file is {} bytes)", name, i,
           len, at, bytes.size());
    pieces[i].assign(bytes.data() + at, static_cast<size_t>(len));
    at += static_cast<size_t>(len);
  }
  if (at != bytes.size()) {
    fail("{}: {} bytes left after {} tokens: the tokenizer does not match the model's vocab_size",
         name, bytes.size() - at, vocab_size);
  }
  return Tokenizer(std::move(pieces), std::move(scores), static_cast<unsigned>(max_len));
}

std::string_view Tokenizer::piece(int id) const {
  if (id < 0 || id >= vocab_size()) fail("tokenizer: token id {} outside [0, {})", id, vocab_size());
  return pieces_[id];
}

float Tokenizer::score(int id) const {
  if (id < 0 || id >= vocab_size()) fail("tokenizer: token id {} outside [0, {})", id, vocab_size());
  return scores_[id];
}

int Tokenizer::lookup(std::string_view str) const {
  // glibc 2.36 bsearch, step for step: which of several equal entries it finds
  // depends on these midpoints.
  size_t lo = 0, hi = sorted_ids_.size();
  while (lo < hi) {
    const size_t idx = (lo + hi) / 2;
    const int cmp = c_compare(str, pieces_[sorted_ids_[idx]]);
    if (cmp < 0) {
      hi = idx;
    } else if (cmp > 0) {
      lo = idx + 1;
    } else {
      return sorted_ids_[idx];
    }
  }
  return -1;
}

std::vector<int> Tokenizer::encode(std::string_view text_in, bool bos, bool eos) const {
  // The text is a C string in run.c.
  const std::string_view text = text_in.substr(0, text_in.find('\0'));
  std::vector<int> tokens;
  if (bos) tokens.push_back(kBosToken);

  // add_dummy_prefix: a " " token before any non-empty text.
  if (!text.empty()) {
    const int dummy_prefix = lookup(" ");
    if (dummy_prefix == -1) fail("tokenizer: no \" \" token for the dummy prefix");
    tokens.push_back(dummy_prefix);
  }

  // Split into UTF-8 code points (a lead byte and at most three continuation bytes);
  // a code point that is not a piece becomes one token per byte, id = byte + 3.
  std::string buffer;
  for (size_t c = 0; c < text.size(); c++) {
    const auto byte = static_cast<unsigned char>(text[c]);
    if ((byte & 0xC0) != 0x80) buffer.clear();  // a lead byte starts a new code point
    buffer.push_back(text[c]);
    const bool next_is_continuation =
        c + 1 < text.size() && (static_cast<unsigned char>(text[c + 1]) & 0xC0) == 0x80;
    if (next_is_continuation && buffer.size() < 4) continue;
    const int id = lookup(buffer);
    if (id != -1) {
      tokens.push_back(id);
    } else {
      for (const char b : buffer) {
        const int byte_id = static_cast<unsigned char>(b) + 3;
        if (byte_id >= vocab_size())
          fail("tokenizer: byte fallback token {} for byte 0x{:02x} is outside the vocabulary", byte_id,
               static_cast<unsigned char>(b));
        tokens.push_back(byte_id);
      }
    }
    buffer.clear();
  }

  // Merge the adjacent pair with the best score (strictly greater: leftmost wins ties)
  // until no adjacent pair is a piece. A merge can start at the BOS token too.
  std::string pair;
  while (true) {
    float best_score = -1e10f;
    int best_id = -1;
    size_t best_idx = 0;
    bool found = false;
    for (size_t i = 0; i + 1 < tokens.size(); i++) {
      pair.assign(pieces_[tokens[i]]);
      pair.append(pieces_[tokens[i + 1]]);
      const int id = lookup(pair);
      if (id != -1 && scores_[id] > best_score) {
        best_score = scores_[id];
        best_id = id;
        best_idx = i;
        found = true;
      }
    }
    if (!found) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_idx) + 1);
  }

  if (eos) tokens.push_back(kEosToken);
  return tokens;
}

std::string_view Tokenizer::decode(int prev_token, int token) const {
  if (token < 0 || token >= vocab_size())
    fail("tokenizer: cannot decode token id {} (vocabulary [0, {}))", token, vocab_size());
  const char* piece = pieces_[token].c_str();
  // After BOS, SentencePiece's decoder strips a leading space.
  if (prev_token == kBosToken && piece[0] == ' ') piece++;
  // Raw-byte tokens look like "<0x0A>". run.c asks sscanf, and so do we, so that every
  // quirk of the pattern (it stops after the hex digits) is the same.
  unsigned char byte_val = 0;
  if (std::sscanf(piece, "<0x%02hhX>", &byte_val) == 1) {
    piece = byte_pieces_.c_str() + 2 * static_cast<size_t>(byte_val);
  }
  return piece;
}

std::string_view printable_piece(std::string_view piece) {
  if (piece.empty()) return {};
  if (piece.size() == 1) {
    const auto b = static_cast<unsigned char>(piece[0]);
    const bool is_print = b >= 0x20 && b <= 0x7e;                 // isprint, C locale
    const bool is_space = b == ' ' || (b >= 0x09 && b <= 0x0d);   // isspace, C locale
    if (!(is_print || is_space)) return {};
  }
  return piece;
}

}  // namespace qpu::reference
