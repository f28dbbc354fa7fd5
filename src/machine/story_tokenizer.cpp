#include "machine/story_tokenizer.h"

#include <set>
#include <unordered_map>
#include <utility>

#include "common/error.h"
#include "npu/host_vocab.h"

namespace qpu::machine {

namespace {

std::string special_text(const std::string& name) { return "<|qpu:" + name + "|>"; }

}  // namespace

std::string story_tokenizer_json(const StoryInterface& m, const reference::Tokenizer& nested) {
  using nlohmann::json;
  if (nested.vocab_size() != m.nested_vocab())
    fail("story tokenizer: run.c's tokenizer has {} pieces, the machine's nested vocabulary is {}", nested.vocab_size(),
         m.nested_vocab());
  std::set<std::string> texts;
  auto unique = [&](const std::string& text, const std::string& what) {
    if (!texts.insert(text).second) fail("story tokenizer: {} has the text '{}' of another host token", what, text);
  };
  // Every host token is in the model's vocabulary at its machine id: stock `tokenizers`
  // gives an added token its model id when the model has its text, and otherwise the next
  // id after the model's (declared ids are not kept). The special ones are added tokens
  // too, so that decode skips them.
  json vocab = json::object();
  json added = json::array();
  auto special = [&](int64_t id, const std::string& content, const std::string& what) {
    unique(content, what);
    vocab[content] = id;
    added.push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  };
  const npu::ValueVocab& values = m.fields().values;
  for (int64_t i = 0; i < values.size(); ++i)
    special(values.first + i, "<|qpu_v" + std::to_string(i) + "|>", "value token " + std::to_string(i));
  // The story tokens' host ids (the description has TOK.k for every nested token k).
  std::unordered_map<int64_t, int> story_token;
  for (int k = 0; k < m.nested_vocab(); ++k) story_token.emplace(m.id("TOK." + std::to_string(k)), k);
  const std::vector<std::string>& names = m.controls();
  for (size_t c = 0; c < names.size(); ++c) {
    const int64_t id = m.first_control() + static_cast<int64_t>(c);
    const auto it = story_token.find(id);
    if (it == story_token.end() || it->second == 1) {  // BOS: run.c stops there and prints nothing
      special(id, special_text(names[c]), "control token " + names[c]);
      continue;
    }
    const int k = it->second;
    std::string piece(nested.piece(k));
    if (!npu::valid_utf8(piece)) fail("story tokenizer: nested piece {} is not valid UTF-8", k);
    if (piece.find(kLeadingSpaceMarker) != std::string::npos)
      fail("story tokenizer: nested piece {} holds U+E000, the leading-space marker", k);
    if (!piece.empty() && piece[0] == ' ') piece = kLeadingSpaceMarker + piece.substr(1);
    unique(piece, names[c]);
    vocab[piece] = id;
  }
  const std::string unprinted = npu::unprinted_byte_tokens_regex();
  json decoder = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "Metaspace"}, {"replacement", kLeadingSpaceMarker},
                                             {"prepend_scheme", "first"}, {"split", false}},
                                            {{"type", "Replace"}, {"pattern", {{"Regex", unprinted}}}, {"content", ""}},
                                            {{"type", "ByteFallback"}},
                                            {{"type", "Fuse"}}})}};
  return npu::bpe_tokenizer_json(std::move(vocab), std::move(added), std::move(decoder));
}

nlohmann::json story_tokenizer_config(const StoryInterface& m) {
  (void)m.done();  // a machine without DONE has no eos token: refused here
  return {{"tokenizer_class", "PreTrainedTokenizerFast"},
          {"clean_up_tokenization_spaces", false},
          {"add_bos_token", false},
          {"add_eos_token", false},
          {"bos_token", nullptr},
          {"eos_token", special_text("DONE")},
          {"pad_token", nullptr},
          {"model_max_length", 1000000000000LL}};
}

}  // namespace qpu::machine
