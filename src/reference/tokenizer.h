#pragma once
// run.c's tokenizer: the tokenizer.bin format, the BPE encoder (dummy prefix, UTF-8
// code points, byte fallback, highest-score merges) and the decoder with its printing
// rule (safe_printf).
//
// File format: int32 max_token_length, then vocab_size records of
// (float32 score, int32 length, `length` bytes). run.c handles every piece as a C
// string, so a piece is its bytes up to the first NUL; we store it that way.
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qpu::reference {

inline constexpr int kBosToken = 1;  // "\n<s>\n"
inline constexpr int kEosToken = 2;  // "\n</s>\n"

class Tokenizer {
 public:
  // Reads exactly `vocab_size` records (the model's vocabulary size). Errors (naming
  // the file): truncated file, negative or > max_token_length piece lengths, bytes
  // left after the last record (the tokenizer does not belong to this model).
  static Tokenizer load(const std::filesystem::path& path, int vocab_size);
  // For tests and tools: a tokenizer from pieces and scores (same validation).
  Tokenizer(std::vector<std::string> pieces, std::vector<float> scores, unsigned max_token_length);

  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  unsigned max_token_length() const { return max_token_length_; }
  std::string_view piece(int id) const;  // C-string view of the vocabulary entry
  float score(int id) const;

  // run.c's encode(text, bos, eos). The text is read as a C string (up to its first
  // NUL). Throws qpu::Error when the vocabulary lacks the " " dummy-prefix token or a
  // byte-fallback id (byte + 3) is outside the vocabulary, where run.c would index
  // out of bounds.
  std::vector<int> encode(std::string_view text, bool bos, bool eos) const;

  // run.c's decode(prev_token, token): drops a leading space after BOS and turns a
  // "<0xNN>" piece into that raw byte. The result is a C string (a 0x00 byte decodes
  // to the empty string).
  std::string_view decode(int prev_token, int token) const;

  // Returns the id of `str` or -1, using glibc's bsearch over the strcmp-sorted
  // vocabulary (so duplicate pieces resolve as run.c resolves them).
  int lookup(std::string_view str) const;

 private:
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  unsigned max_token_length_ = 0;
  std::vector<int> sorted_ids_;  // ids ordered by strcmp of their pieces, stable
  std::string byte_pieces_;      // 256 one-byte C strings: byte b at [2b], NUL at [2b+1]
};

// run.c's safe_printf: the bytes actually printed for a decoded piece. Nothing for an
// empty piece or for a single byte that is neither printable nor whitespace (C locale:
// isprint 0x20..0x7e, isspace 0x09..0x0d and 0x20); otherwise the piece itself.
std::string_view printable_piece(std::string_view piece);

}  // namespace qpu::reference
