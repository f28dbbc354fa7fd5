#include "tokenizer/model.h"

#include <limits>

#include "common/error.h"
#include "tokenizer/bpe.h"

namespace qpu::tokenizer {
namespace {

class WordLevel final : public Model {
 public:
  WordLevel(Vocab vocab, std::string unk_token) : vocab_(std::move(vocab)), unk_token_(std::move(unk_token)) {}

  void tokenize(std::string_view piece, std::vector<std::int32_t>& ids) const override {
    if (const auto id = vocab_.find(piece)) {
      ids.push_back(*id);
    } else if (const auto unk = vocab_.find(unk_token_)) {
      ids.push_back(*unk);
    } else {
      qpu::fail("WordLevel: \"{}\" is not in the vocabulary and the unk_token \"{}\" is not either", piece,
                unk_token_);
    }
  }
  const Vocab& vocab() const override { return vocab_; }

 private:
  Vocab vocab_;
  std::string unk_token_;
};

}  // namespace

Vocab Vocab::parse(const Json& value, const JsonPath& at) {
  if (!value.is_object()) at.fail("expected an object {\"token\": id}, found " + json_type_name(value));
  Vocab vocab;
  vocab.to_id_.reserve(value.size());
  vocab.to_token_.reserve(value.size());
  for (const auto& [token, id_value] : value.items()) {
    const JsonPath item = at.field("\"" + token + "\"");
    if (!id_value.is_number_integer()) item.fail("expected an integer id, found " + json_type_name(id_value));
    if (id_value.is_number_unsigned() ? id_value.get<std::uint64_t>() > std::numeric_limits<std::int32_t>::max()
                                      : id_value.get<std::int64_t>() < 0) {
      item.fail("id " + id_value.dump() + " is outside [0, 2^31-1]");
    }
    const auto id = id_value.get<std::int32_t>();
    const auto [it, inserted] = vocab.to_token_.emplace(id, token);
    if (!inserted) {
      item.fail("id " + std::to_string(id) + " is also the id of \"" + it->second + "\"");
    }
    vocab.to_id_.emplace(token, id);
    vocab.max_id_ = std::max(vocab.max_id_, id);
  }
  return vocab;
}

std::optional<std::int32_t> Vocab::find(std::string_view token) const {
  const auto it = to_id_.find(token);
  if (it == to_id_.end()) return std::nullopt;
  return it->second;
}

const std::string* Vocab::token(std::int32_t id) const {
  const auto it = to_token_.find(id);
  return it == to_token_.end() ? nullptr : &it->second;
}

std::unique_ptr<Model> parse_model(const Json& value, const JsonPath& at) {
  expect_object(value, at);
  std::string type;
  if (value.contains("type")) {
    type = read_string(value, "type", at);
  } else if (value.contains("merges")) {
    type = "BPE";  // tokenizers also accepts a model without "type" by its fields
  } else {
    at.fail("missing field \"type\"");
  }
  if (type == "BPE") return parse_bpe(value, at);
  if (type == "WordLevel") {
    Vocab vocab = Vocab::parse(require_field(value, "vocab", at), at.field("vocab"));
    std::string unk = value.contains("unk_token") ? read_string(value, "unk_token", at) : "<unk>";
    return std::make_unique<WordLevel>(std::move(vocab), std::move(unk));
  }
  at.fail("unsupported model type \"" + type + "\" (supported: BPE, WordLevel)");
}

}  // namespace qpu::tokenizer
