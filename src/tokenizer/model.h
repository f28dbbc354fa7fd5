#pragma once
// tokenizer.json "model": turns one pre-tokenized piece into ids.
// Supported: BPE (merges as "a b" strings or ["a", "b"] pairs, byte_fallback,
// ignore_merges, unk_token, fuse_unk) and WordLevel. Rejected with a clear
// error: BPE dropout (random), a non-empty continuing_subword_prefix or
// end_of_word_suffix, and other model types (WordPiece, Unigram).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_reader.h"

namespace qpu::tokenizer {

// Hash that lets unordered_map<std::string, ...> be searched with a string_view.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Token <-> id, one-to-one (a file giving two tokens the same id is rejected).
class Vocab {
 public:
  // A JSON object {"token": id, ...}.
  static Vocab parse(const Json& value, const JsonPath& at);
  std::optional<std::int32_t> find(std::string_view token) const;
  const std::string* token(std::int32_t id) const;  // nullptr when unknown
  std::size_t size() const { return to_id_.size(); }
  std::int32_t max_id() const { return max_id_; }  // -1 when empty

 private:
  std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>> to_id_;
  std::unordered_map<std::int32_t, std::string> to_token_;
  std::int32_t max_id_ = -1;
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one non-empty piece.
  virtual void tokenize(std::string_view piece, std::vector<std::int32_t>& ids) const = 0;
  virtual const Vocab& vocab() const = 0;
};

std::unique_ptr<Model> parse_model(const Json& value, const JsonPath& at);

}  // namespace qpu::tokenizer
