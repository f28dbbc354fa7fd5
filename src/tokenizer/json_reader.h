#pragma once
// Reading tokenizer.json with errors that name the file and the field, e.g.
//   "tok.json: model.merges[12]: expected "a b" or ["a", "b"]"
// so a malformed file never turns into a crash or a vague nlohmann message.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace qpu::tokenizer {

using Json = nlohmann::json;

// Where a JSON value sits: the file it came from and its path inside the file.
class JsonPath {
 public:
  JsonPath(std::string file, std::string path) : file_(std::move(file)), path_(std::move(path)) {}
  JsonPath field(std::string_view key) const;
  JsonPath index(std::size_t i) const;
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  [[noreturn]] void fail(std::string_view message) const;

 private:
  std::string file_;
  std::string path_;
};

// `value` must be a JSON object (null is not an object).
void expect_object(const Json& value, const JsonPath& at);

// A field that must exist (it may be null).
const Json& require_field(const Json& object, std::string_view key, const JsonPath& at);

std::string read_string(const Json& object, std::string_view key, const JsonPath& at);
// Missing or null gives nullopt.
std::optional<std::string> read_optional_string(const Json& object, std::string_view key,
                                                const JsonPath& at);
bool read_bool(const Json& object, std::string_view key, const JsonPath& at, bool fallback);
// An integer in [min, max]; a missing field gives `fallback` when one is given.
std::int64_t read_int(const Json& object, std::string_view key, const JsonPath& at,
                      std::int64_t min, std::int64_t max,
                      std::optional<std::int64_t> fallback = std::nullopt);

// The JSON type name used in messages ("string", "array", ...).
std::string json_type_name(const Json& value);

}  // namespace qpu::tokenizer
