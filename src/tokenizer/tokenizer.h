#pragma once
// A Hugging Face tokenizer.json, encoded and decoded exactly as the stock
// `tokenizers` library (0.23) does for the features Qwen-family tokenizers and
// our compiled checkpoints use:
//
//   model          BPE (byte_fallback, ignore_merges, unk_token, fuse_unk;
//                  merges as "a b" or ["a", "b"]) and WordLevel
//   normalizer     NFC, Sequence, null
//   pre_tokenizer  Split (Regex/String, all behaviours, invert), ByteLevel,
//                  Whitespace, WhitespaceSplit, Sequence, null
//   decoder        ByteLevel, ByteFallback, Fuse, Strip, Replace, Sequence, null
//   added_tokens   matched first, with their ids, special or not
//
// Anything else is refused at load with an error naming the file and field.
// post_processor is read but ignored: encode() equals tokenizers'
// encode(text, add_special_tokens=False); callers add BOS/EOS themselves.
// truncation and padding must be null.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qpu::tokenizer {

struct AddedToken;

class Tokenizer {
 public:
  // Reads and validates a tokenizer.json; throws qpu::Error on any problem.
  static Tokenizer load(const std::filesystem::path& path);
  // The same from the file's text; `source` names it in error messages.
  static Tokenizer from_json(std::string_view json_text, std::string_view source);

  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Token ids of `text` (UTF-8; invalid UTF-8 is an error). Special tokens
  // written in the text are recognised and become their ids.
  std::vector<std::int32_t> encode(std::string_view text) const;

  // Text of `ids`. Unknown ids are skipped (as tokenizers does); with
  // skip_special_tokens, special added tokens are skipped too. Invalid UTF-8
  // produced by byte tokens becomes U+FFFD.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const;

  std::optional<std::string> id_to_token(std::int32_t id) const;
  std::optional<std::int32_t> token_to_id(std::string_view token) const;

  // Size of the id space: the largest id (model or added token) plus one. For
  // files without id gaps this is tokenizers' get_vocab_size(True).
  std::int32_t vocab_size() const;

  bool is_special(std::int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental decoding for streaming generated text, as tokenizers'
// DecodeStream: step() returns the text that became complete with the new
// token, or nullopt while it is still inside a character (or when the text so
// far ends with U+FFFD). Concatenating all returned pieces gives decode(ids) up
// to a trailing incomplete character. Keeps a reference to `tokenizer`.
class DecodeStream {
 public:
  explicit DecodeStream(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::optional<std::string> step(std::int32_t id);

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<std::int32_t> ids_;  // the tokens since the last emitted prefix
  std::string prefix_;             // decode of ids_[0, prefix_index_)
  std::size_t prefix_index_ = 0;
};

}  // namespace qpu::tokenizer
