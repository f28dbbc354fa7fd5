#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <unordered_set>

#include "common/error.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/decoder.h"
#include "tokenizer/json_reader.h"
#include "tokenizer/model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace qpu::tokenizer {

struct Tokenizer::Impl {
  std::string source;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
  std::int32_t vocab_size = 0;
};

namespace {

// tokenizers re-derives added-token ids when loading (AddedVocabulary::add_tokens):
// a token already in the model keeps the model's id, any other gets the next
// id after the model vocabulary and the added tokens before it. A file whose
// declared ids disagree would be read differently by tokenizers, so we refuse it.
std::vector<AddedToken> parse_added_tokens(const Json& root, const Model& model, const JsonPath& at) {
  std::vector<AddedToken> tokens;
  const auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return tokens;
  if (!it->is_array()) at.fail("expected an array, found " + json_type_name(*it));
  const auto model_size = static_cast<std::int64_t>(model.vocab().size());
  std::optional<std::int64_t> max_added;
  std::unordered_set<std::string> seen;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const Json& item = (*it)[i];
    const JsonPath where = at.index(i);
    expect_object(item, where);
    AddedToken t;
    t.content = read_string(item, "content", where);
    const std::int64_t declared = read_int(item, "id", where, 0, std::numeric_limits<std::int32_t>::max());
    t.special = read_bool(item, "special", where, false);
    t.single_word = read_bool(item, "single_word", where, false);
    t.lstrip = read_bool(item, "lstrip", where, false);
    t.rstrip = read_bool(item, "rstrip", where, false);
    t.normalized = read_bool(item, "normalized", where, !t.special);
    if (t.content.empty()) where.fail("content is empty");
    if (!is_valid_utf8(t.content)) where.fail("content is not valid UTF-8");
    if (!seen.insert(t.content).second) where.fail("\"" + t.content + "\" is listed twice");
    std::int64_t expected = 0;
    if (const auto in_model = model.vocab().find(t.content)) {
      expected = *in_model;
    } else if (!max_added) {
      expected = model_size;
    } else {
      expected = (*max_added >= model_size || model_size == 0) ? *max_added + 1 : model_size;
    }
    if (declared != expected) {
      where.fail("\"" + t.content + "\" declares id " + std::to_string(declared) + " but tokenizers gives it id " +
                 std::to_string(expected) +
                 " (an added token keeps its model id, otherwise takes the next id after the model's " +
                 std::to_string(model_size) + " tokens and the added tokens before it)");
    }
    if (expected > std::numeric_limits<std::int32_t>::max()) where.fail("id overflows int32");
    t.id = static_cast<std::int32_t>(expected);
    max_added = max_added ? std::max(*max_added, expected) : expected;
    tokens.push_back(std::move(t));
  }
  return tokens;
}

void refuse_non_null(const Json& root, const char* field, const JsonPath& at) {
  const auto it = root.find(field);
  if (it != root.end() && !it->is_null()) at.field(field).fail("must be null (not supported)");
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) qpu::fail("{}: cannot open tokenizer file", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) qpu::fail("{}: read error", path.string());
  return from_json(text.str(), path.string());
}

Tokenizer Tokenizer::from_json(std::string_view json_text, std::string_view source) {
  const JsonPath root_at{std::string(source), ""};
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::parse_error& e) {
    qpu::fail("{}: not valid JSON: {}", source, e.what());
  }
  if (!root.is_object()) root_at.fail("expected a JSON object at the top level, found " + json_type_name(root));
  refuse_non_null(root, "truncation", root_at);
  refuse_non_null(root, "padding", root_at);
  auto impl = std::make_unique<Impl>();
  impl->source = std::string(source);
  const auto field_or_null = [&](const char* name) -> const Json& {
    static const Json null_json;
    const auto it = root.find(name);
    return it == root.end() ? null_json : *it;
  };
  impl->normalizer = parse_normalizer(field_or_null("normalizer"), root_at.field("normalizer"));
  impl->pre_tokenizer = parse_pre_tokenizer(field_or_null("pre_tokenizer"), root_at.field("pre_tokenizer"));
  impl->model = parse_model(require_field(root, "model", root_at), root_at.field("model"));
  impl->decoder = parse_decoder(field_or_null("decoder"), root_at.field("decoder"));
  // post_processor only adds template tokens (BOS/EOS) in tokenizers'
  // add_special_tokens=True path, which we do not offer; check its shape only.
  if (const Json& post = field_or_null("post_processor"); !post.is_null()) {
    read_string(post, "type", root_at.field("post_processor"));
  }
  std::vector<AddedToken> added = parse_added_tokens(root, *impl->model, root_at.field("added_tokens"));
  std::int32_t max_id = impl->model->vocab().max_id();
  for (const AddedToken& t : added) max_id = std::max(max_id, t.id);
  impl->vocab_size = max_id + 1;
  impl->added = AddedVocabulary(std::move(added), impl->normalizer.get());
  return Tokenizer(std::move(impl));
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text) const {
  if (const std::size_t bad = first_invalid_utf8(text); bad != std::string_view::npos) {
    qpu::fail("encode: the text is not valid UTF-8 (byte offset {})", bad);
  }
  std::vector<std::int32_t> ids;
  for (const Segment& segment : impl_->added.extract_and_normalize(text, impl_->normalizer.get())) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    std::vector<std::string> pieces{segment.text};
    if (impl_->pre_tokenizer) impl_->pre_tokenizer->pre_tokenize(pieces);
    try {
      for (const std::string& piece : pieces) impl_->model->tokenize(piece, ids);
    } catch (const qpu::Error& e) {
      qpu::fail("{}: {}", impl_->source, e.what());  // e.g. an unk_token missing from the vocabulary
    }
  }
  return ids;
}

std::optional<std::string> Tokenizer::id_to_token(std::int32_t id) const {
  if (const AddedToken* t = impl_->added.find(id)) return t->text;
  if (const std::string* token = impl_->model->vocab().token(id)) return *token;
  return std::nullopt;
}

std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* t = impl_->added.find(token)) return t->id;
  return impl_->model->vocab().find(token);
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const std::int32_t id : ids) {
    std::optional<std::string> token = id_to_token(id);
    if (!token) continue;
    if (skip_special_tokens && impl_->added.is_special(*token)) continue;
    tokens.push_back(std::move(*token));
  }
  if (impl_->decoder) return impl_->decoder->decode(std::move(tokens));
  // Without a decoder tokenizers joins the tokens with single spaces.
  std::string text;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) text += ' ';
    text += tokens[i];
  }
  return text;
}

std::int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

bool Tokenizer::is_special(std::int32_t id) const {
  const AddedToken* t = impl_->added.find(id);
  return t != nullptr && t->special;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added.tokens(); }

DecodeStream::DecodeStream(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

// tokenizers' step_decode_stream, step for step.
std::optional<std::string> DecodeStream::step(std::int32_t id) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  if (prefix_.empty() && !ids_.empty()) {
    std::string new_prefix = tokenizer_->decode(ids_, skip_special_tokens_);
    if (!new_prefix.ends_with(kReplacement)) {
      prefix_ = std::move(new_prefix);
      prefix_index_ = ids_.size();
    }
  }
  ids_.push_back(id);
  const std::string text = tokenizer_->decode(ids_, skip_special_tokens_);
  if (text.size() <= prefix_.size() || text.ends_with(kReplacement)) return std::nullopt;
  if (!text.starts_with(prefix_)) {
    qpu::fail("decode stream: the text of the tokens so far no longer starts with what was already emitted");
  }
  std::string new_text = text.substr(prefix_.size());
  const std::size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  prefix_ = tokenizer_->decode(ids_, skip_special_tokens_);
  prefix_index_ = new_prefix_index;
  return new_text;
}

}  // namespace qpu::tokenizer
