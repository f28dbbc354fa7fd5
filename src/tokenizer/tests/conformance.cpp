#include "conformance.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "tokenizer/decoder.h"
#include "tokenizer/json_reader.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace qpu::tokenizer::testing {
namespace {

// Stops reporting after this many mismatches of one kind (the rest would only
// repeat the same cause), but still counts them.
constexpr int kMaxReported = 15;

class Mismatches {
 public:
  explicit Mismatches(std::string what) : what_(std::move(what)) {}
  ~Mismatches() {
    if (count_ > kMaxReported) ADD_FAILURE() << what_ << ": " << count_ << " mismatches in total";
  }
  void add(const std::string& detail) {
    if (++count_ <= kMaxReported) ADD_FAILURE() << what_ << ": " << detail;
  }

 private:
  std::string what_;
  int count_ = 0;
};

std::string show_ids(const std::vector<std::int32_t>& ids) {
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

std::vector<std::int32_t> ids_of(const Json& j) { return j.get<std::vector<std::int32_t>>(); }

}  // namespace

std::string show(const std::string& s) { return Json(s).dump(-1, ' ', true, Json::error_handler_t::replace); }

Json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return Json::parse(in);
}

void check_tokenizer_cases(const Json& entry, const std::filesystem::path& dir) {
  const std::string name = entry.at("name").get<std::string>();
  SCOPED_TRACE("tokenizer " + name);
  const Tokenizer tok = Tokenizer::load(dir / entry.at("file").get<std::string>());
  EXPECT_EQ(tok.vocab_size(), entry.at("vocab_size").get<std::int32_t>());
  {
    Mismatches bad(name + " id_to_token");
    const Json& expected = entry.at("id_to_token");
    for (std::size_t id = 0; id < expected.size(); ++id) {
      const auto got = tok.id_to_token(static_cast<std::int32_t>(id));
      const std::optional<std::string> want =
          expected[id].is_null() ? std::nullopt : std::optional<std::string>(expected[id].get<std::string>());
      if (got != want) bad.add("id " + std::to_string(id) + ": got " + (got ? show(*got) : "null"));
    }
  }
  {
    Mismatches bad(name + " token_to_id");
    for (const auto& [token, id] : entry.at("token_to_id").items()) {
      // -1 stands for "no id" on both sides.
      const std::int64_t want = id.is_null() ? -1 : id.get<std::int64_t>();
      const std::int64_t got = tok.token_to_id(token).value_or(-1);
      if (got != want) bad.add(show(token) + ": want " + std::to_string(want) + " got " + std::to_string(got));
    }
  }
  {
    Mismatches bad(name + " encode");
    for (const Json& c : entry.at("encode")) {
      const std::string text = c.at("text").get<std::string>();
      const auto want = ids_of(c.at("ids"));
      const auto got = tok.encode(text);
      if (got != want) bad.add(show(text) + "\n  want " + show_ids(want) + "\n  got  " + show_ids(got));
    }
  }
  Mismatches bad_decode(name + " decode");
  Mismatches bad_stream(name + " DecodeStream");
  for (const Json& c : entry.at("decode")) {
    const auto ids = ids_of(c.at("ids"));
    for (const bool skip : {false, true}) {
      const std::string want = c.at(skip ? "text_skip" : "text").get<std::string>();
      const std::string got = tok.decode(ids, skip);
      if (got != want) {
        bad_decode.add(show_ids(ids) + (skip ? " (skip special)" : "") + "\n  want " + show(want) + "\n  got  " +
                       show(got));
      }
      DecodeStream stream(tok, skip);
      const Json& steps = c.at(skip ? "stream_skip" : "stream");
      for (std::size_t k = 0; k < steps.size(); ++k) {
        const std::string where = show_ids(ids) + (skip ? " (skip special)" : "") + " step " + std::to_string(k);
        if (steps[k].is_object()) {  // stock tokenizers raised here
          try {
            stream.step(ids[k]);
            bad_stream.add(where + ": expected an error (" + steps[k].at("error").get<std::string>() + ")");
          } catch (const qpu::Error&) {
          }
          break;
        }
        std::optional<std::string> got_step;
        try {
          got_step = stream.step(ids[k]);
        } catch (const qpu::Error& e) {
          bad_stream.add(where + ": unexpected error " + e.what());
          break;
        }
        const std::optional<std::string> want_step =
            steps[k].is_null() ? std::nullopt : std::optional<std::string>(steps[k].get<std::string>());
        if (got_step != want_step) {
          bad_stream.add(where + ": want " + (want_step ? show(*want_step) : "null") + " got " +
                         (got_step ? show(*got_step) : "null"));
          break;
        }
      }
    }
  }
}

void check_normalizer_cases(const Json& list) {
  for (const Json& component : list) {
    const std::string config = component.at("config").dump();
    Mismatches bad("normalizer " + config);
    const auto normalizer = parse_normalizer(component.at("config"), JsonPath("cases.json", "normalizer"));
    for (const Json& c : component.at("cases")) {
      const std::string text = c.at("text").get<std::string>();
      const std::string want = c.at("normalized").get<std::string>();
      const std::string got = normalizer->normalize(text);
      if (got != want) bad.add(show(text) + "\n  want " + show(want) + "\n  got  " + show(got));
    }
  }
}

void check_pre_tokenizer_cases(const Json& list) {
  for (const Json& component : list) {
    const std::string config = component.at("config").dump();
    Mismatches bad("pre_tokenizer " + config);
    const auto pre = parse_pre_tokenizer(component.at("config"), JsonPath("cases.json", "pre_tokenizer"));
    for (const Json& c : component.at("cases")) {
      const std::string text = c.at("text").get<std::string>();
      const auto want = c.at("pieces").get<std::vector<std::string>>();
      std::vector<std::string> got{text};  // pre_tokenize_str starts from one piece, even for ""
      pre->pre_tokenize(got);
      if (got != want) bad.add(show(text) + "\n  want " + Json(want).dump() + "\n  got  " + Json(got).dump());
    }
  }
}

void check_decoder_cases(const Json& list) {
  for (const Json& component : list) {
    const std::string config = component.at("config").dump();
    Mismatches bad("decoder " + config);
    const auto decoder = parse_decoder(component.at("config"), JsonPath("cases.json", "decoder"));
    for (const Json& c : component.at("cases")) {
      const auto tokens = c.at("tokens").get<std::vector<std::string>>();
      const std::string want = c.at("text").get<std::string>();
      const std::string got = decoder->decode(tokens);
      if (got != want) bad.add(Json(tokens).dump() + "\n  want " + show(want) + "\n  got  " + show(got));
    }
  }
}

void check_unicode_cases(const Json& unicode) {
  // Every code point except surrogates, as one text, with its byte offsets.
  std::string text;
  std::vector<std::size_t> offset;
  std::vector<char32_t> code_points;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    offset.push_back(text.size());
    code_points.push_back(c);
    append_utf8(text, c);
  }
  for (const auto& [pattern, ranges] : unicode.at("classes").items()) {
    Mismatches bad("regex class " + pattern);
    std::vector<char> expected(0x110000, 0);
    for (const Json& r : ranges) {
      for (auto c = r[0].get<std::uint32_t>(); c <= r[1].get<std::uint32_t>(); ++c) expected[c] = 1;
    }
    std::vector<char> matched_byte(text.size() + 1, 0);
    const Regex regex = Regex::from_onig(pattern, "test");
    for (const Span& m : regex.find_all(text)) {
      for (std::size_t i = m.start; i < m.end; ++i) matched_byte[i] = 1;
    }
    for (std::size_t i = 0; i < code_points.size(); ++i) {
      const char32_t c = code_points[i];
      if (matched_byte[offset[i]] != expected[c]) {
        bad.add(fmt::format("U+{:04X}: tokenizers {} it", static_cast<std::uint32_t>(c),
                            expected[c] ? "matches" : "does not match"));
      }
    }
  }
  for (const auto& [probe, spec] : unicode.at("nfc").items()) {
    Mismatches bad("NFC probe " + probe);
    const std::string before = spec.at("before").get<std::string>();
    const std::string after = spec.at("after").get<std::string>();
    const Json& changed = spec.at("changed");
    for (const char32_t c : code_points) {
      std::string input = before;
      append_utf8(input, c == U'\n' ? U'x' : c);
      input += after;
      const auto it = changed.find(std::to_string(c));
      const std::string want = it == changed.end() ? input : it->get<std::string>();
      const std::string got = nfc(input);
      if (got != want) {
        bad.add(fmt::format("U+{:04X}: ", static_cast<std::uint32_t>(c)) + show(input) + " want " + show(want) +
                " got " + show(got));
      }
    }
  }
}

std::filesystem::path generate_cases(const std::string& python, const std::string& extra_args) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("qpu-tokenizer-cases-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path script =
      std::filesystem::path(QPU_SOURCE_DIR) / "src/tokenizer/tests/make_tokenizer_cases.py";
  const std::string command = "'" + python + "' '" + script.string() + "' '" + dir.string() + "' " + extra_args +
                              " > '" + (dir / "log.txt").string() + "' 2>&1";
  const int rc = std::system(command.c_str());
  if (rc != 0) {
    std::ifstream log(dir / "log.txt");
    std::stringstream text;
    text << log.rdbuf();
    throw std::runtime_error("make_tokenizer_cases.py failed (" + command + "):\n" + text.str());
  }
  return dir;
}

}  // namespace qpu::tokenizer::testing
