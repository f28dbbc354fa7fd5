// Malformed or unsupported tokenizer.json files: a qpu::Error that names the
// file and the field, never a crash.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "tokenizer/tokenizer.h"

namespace qpu::tokenizer {
namespace {

using Json = nlohmann::json;

Json valid() {
  return Json{{"version", "1.0"},
              {"added_tokens", Json::array({Json{{"id", 3}, {"content", "<s>"}, {"special", true}}})},
              {"normalizer", {{"type", "NFC"}}},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
              {"post_processor", {{"type", "ByteLevel"}}},
              {"decoder", {{"type", "ByteLevel"}}},
              {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}}};
}

// The error message for loading `text` (empty when it loads).
std::string error_of(const std::string& text) {
  try {
    Tokenizer::from_json(text, "tok.json");
  } catch (const qpu::Error& e) {
    return e.what();
  }
  return "";
}

std::string error_of(const Json& j) { return error_of(j.dump()); }

#define EXPECT_ERROR(json_value, ...)                                                      \
  do {                                                                                     \
    const std::string message = error_of(json_value);                                      \
    EXPECT_FALSE(message.empty()) << "loaded without error";                               \
    for (const std::string part : {__VA_ARGS__}) {                                         \
      EXPECT_NE(message.find(part), std::string::npos) << "\"" << part << "\" not in: " << message; \
    }                                                                                      \
  } while (0)

TEST(LoadErrors, TheValidBaseLoads) {
  EXPECT_EQ(error_of(valid()), "");
  const Tokenizer tok = Tokenizer::from_json(valid().dump(), "tok.json");
  EXPECT_EQ(tok.encode("ab<s>"), (std::vector<std::int32_t>{2, 3}));
}

TEST(LoadErrors, NotJsonOrWrongTopLevel) {
  EXPECT_ERROR(std::string("{\"model\": "), "tok.json: not valid JSON");
  EXPECT_ERROR(std::string(""), "tok.json: not valid JSON");
  EXPECT_ERROR(Json::array({1, 2}), "tok.json", "expected a JSON object at the top level, found array");
  Json j = valid();
  j.erase("model");
  EXPECT_ERROR(j, "tok.json", "missing field \"model\"");
}

TEST(LoadErrors, MissingFile) {
  try {
    Tokenizer::load("/nonexistent/tokenizer.json");
    FAIL() << "no error";
  } catch (const qpu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.json: cannot open"), std::string::npos);
  }
}

TEST(LoadErrors, LoadReadsTheFile) {
  const auto path = std::filesystem::temp_directory_path() / ("qpu-tok-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".json");
  {
    std::ofstream out(path);
    Json j = valid();
    j["model"]["merges"] = {"a c"};
    out << j.dump();
  }
  try {
    Tokenizer::load(path);
    FAIL() << "no error";
  } catch (const qpu::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string() + ": model.merges[0]: merge token \"c\" is not in the vocabulary"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove(path);
}

TEST(LoadErrors, Vocabulary) {
  Json j = valid();
  j["model"]["vocab"]["c"] = -1;
  EXPECT_ERROR(j, "tok.json: model.vocab.\"c\"", "outside [0, 2^31-1]");
  j = valid();
  j["model"]["vocab"]["c"] = 1.5;
  EXPECT_ERROR(j, "model.vocab.\"c\"", "expected an integer id, found number");
  j = valid();
  j["model"]["vocab"]["c"] = 1;
  EXPECT_ERROR(j, "model.vocab", "id 1 is also the id of");
  j = valid();
  j["model"]["vocab"] = Json::array();
  EXPECT_ERROR(j, "model.vocab", "expected an object");
}

TEST(LoadErrors, Merges) {
  Json j = valid();
  j["model"]["merges"] = {"a  b"};
  EXPECT_ERROR(j, "model.merges[0]", "exactly one space");
  j["model"]["merges"] = {"ab"};
  EXPECT_ERROR(j, "model.merges[0]", "exactly one space");
  j["model"]["merges"] = Json::array({Json::array({"a"})});
  EXPECT_ERROR(j, "model.merges[0]", "expected a merge");
  j["model"]["merges"] = Json::array({"a b", Json::array({"a", "b"})});
  EXPECT_ERROR(j, "model.merges", "mixes");
  j["model"]["merges"] = {"b a"};
  EXPECT_ERROR(j, "model.merges[0]", "merged token \"ba\" is not in the vocabulary");
  j["model"]["merges"] = 5;
  EXPECT_ERROR(j, "model.merges", "expected an array");
}

TEST(LoadErrors, UnsupportedComponents) {
  Json j = valid();
  j["model"]["type"] = "Unigram";
  EXPECT_ERROR(j, "tok.json: model", "unsupported model type \"Unigram\"");
  j = valid();
  j["model"]["dropout"] = 0.1;
  EXPECT_ERROR(j, "model.dropout", "not supported");
  j = valid();
  j["model"]["continuing_subword_prefix"] = "##";
  EXPECT_ERROR(j, "model.continuing_subword_prefix", "not supported");
  j = valid();
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_ERROR(j, "tok.json: normalizer", "unsupported normalizer type \"Lowercase\"");
  j = valid();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "NFKD"}}}}};
  EXPECT_ERROR(j, "normalizer.normalizers[1]", "unsupported normalizer type \"NFKD\"");
  j = valid();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_ERROR(j, "pre_tokenizer", "unsupported pre_tokenizer type \"Metaspace\"");
  j = valid();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_ERROR(j, "decoder", "unsupported decoder type \"WordPiece\"");
  j = valid();
  j["truncation"] = {{"max_length", 5}};
  EXPECT_ERROR(j, "truncation", "must be null");
  j = valid();
  j["decoder"] = {{"no_type", 1}};
  EXPECT_ERROR(j, "decoder", "missing field \"type\"");
}

TEST(LoadErrors, SplitPatterns) {
  Json j = valid();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}};
  EXPECT_ERROR(j, "pre_tokenizer.pattern.Regex", "invalid regex");
  j["pre_tokenizer"]["pattern"] = {{"Regex", "\\p{Greek}"}};
  EXPECT_ERROR(j, "pre_tokenizer.pattern.Regex", "not supported");
  j["pre_tokenizer"]["pattern"] = {{"Glob", "*"}};
  EXPECT_ERROR(j, "pre_tokenizer.pattern", "expected \"Regex\" or \"String\"");
  j["pre_tokenizer"]["pattern"] = {{"String", " "}};
  j["pre_tokenizer"]["behavior"] = "Bogus";
  EXPECT_ERROR(j, "pre_tokenizer.behavior", "unknown split behavior \"Bogus\"");
  j["pre_tokenizer"]["behavior"] = "Removed";
  j["pre_tokenizer"]["invert"] = "yes";
  EXPECT_ERROR(j, "pre_tokenizer.invert", "expected true or false");
}

TEST(LoadErrors, AddedTokens) {
  Json j = valid();
  j["added_tokens"][0]["id"] = 7;  // tokenizers would give it id 3 (after the 3 model tokens)
  EXPECT_ERROR(j, "added_tokens[0]", "declares id 7 but tokenizers gives it id 3");
  j = valid();
  j["added_tokens"][0]["content"] = "ab";  // in the model vocabulary: keeps its model id 2
  EXPECT_ERROR(j, "added_tokens[0]", "declares id 3 but tokenizers gives it id 2");
  j["added_tokens"][0]["id"] = 2;
  EXPECT_EQ(error_of(j), "");
  j = valid();
  j["added_tokens"].push_back(j["added_tokens"][0]);
  j["added_tokens"][1]["id"] = 4;
  EXPECT_ERROR(j, "added_tokens[1]", "listed twice");
  j = valid();
  j["added_tokens"][0]["content"] = "";
  EXPECT_ERROR(j, "added_tokens[0]", "content is empty");
  j = valid();
  j["added_tokens"][0].erase("content");
  EXPECT_ERROR(j, "added_tokens[0]", "missing field \"content\"");
  j = valid();
  j["added_tokens"] = {{{"id", 3}}, 5};
  EXPECT_ERROR(j, "added_tokens[0]", "missing field \"content\"");
  j = valid();
  j["added_tokens"][0]["special"] = 1;
  EXPECT_ERROR(j, "added_tokens[0].special", "expected true or false");
}

TEST(LoadErrors, InvalidUtf8InTheFile) {
  std::string text = valid().dump();
  text.replace(text.find("\"a\":0"), 5, "\"\xC3\":0");
  EXPECT_ERROR(text, "tok.json: not valid JSON");
}

}  // namespace
}  // namespace qpu::tokenizer
