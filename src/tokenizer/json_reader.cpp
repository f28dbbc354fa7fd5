#include "tokenizer/json_reader.h"

#include "common/error.h"

namespace qpu::tokenizer {

JsonPath JsonPath::field(std::string_view key) const {
  return JsonPath(file_, path_.empty() ? std::string(key) : path_ + "." + std::string(key));
}

JsonPath JsonPath::index(std::size_t i) const {
  return JsonPath(file_, path_ + "[" + std::to_string(i) + "]");
}

void JsonPath::fail(std::string_view message) const {
  if (path_.empty()) qpu::fail("{}: {}", file_, message);
  qpu::fail("{}: {}: {}", file_, path_, message);
}

std::string json_type_name(const Json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "number";
  return value.type_name();
}

void expect_object(const Json& value, const JsonPath& at) {
  if (!value.is_object()) at.fail("expected an object, found " + json_type_name(value));
}

const Json& require_field(const Json& object, std::string_view key, const JsonPath& at) {
  expect_object(object, at);
  const auto it = object.find(key);
  if (it == object.end()) at.fail("missing field \"" + std::string(key) + "\"");
  return *it;
}

std::string read_string(const Json& object, std::string_view key, const JsonPath& at) {
  const Json& value = require_field(object, key, at);
  if (!value.is_string()) at.field(key).fail("expected a string, found " + json_type_name(value));
  return value.get<std::string>();
}

std::optional<std::string> read_optional_string(const Json& object, std::string_view key,
                                                const JsonPath& at) {
  expect_object(object, at);
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) at.field(key).fail("expected a string or null, found " + json_type_name(*it));
  return it->get<std::string>();
}

bool read_bool(const Json& object, std::string_view key, const JsonPath& at, bool fallback) {
  expect_object(object, at);
  const auto it = object.find(key);
  if (it == object.end()) return fallback;
  if (!it->is_boolean()) at.field(key).fail("expected true or false, found " + json_type_name(*it));
  return it->get<bool>();
}

std::int64_t read_int(const Json& object, std::string_view key, const JsonPath& at,
                      std::int64_t min, std::int64_t max, std::optional<std::int64_t> fallback) {
  expect_object(object, at);
  const auto it = object.find(key);
  if (it == object.end()) {
    if (fallback) return *fallback;
    at.fail("missing field \"" + std::string(key) + "\"");
  }
  if (!it->is_number_integer()) at.field(key).fail("expected an integer, found " + json_type_name(*it));
  // Unsigned values above INT64_MAX must not wrap into range.
  if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
    at.field(key).fail("integer " + it->dump() + " out of range");
  }
  const auto v = it->get<std::int64_t>();
  if (v < min || v > max) {
    at.field(key).fail("integer " + std::to_string(v) + " out of range [" + std::to_string(min) +
                       ", " + std::to_string(max) + "]");
  }
  return v;
}

}  // namespace qpu::tokenizer
