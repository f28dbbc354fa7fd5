#pragma once
// Comparison of the C++ tokenizer with what stock `tokenizers` recorded
// (make_tokenizer_cases.py writes the cases; see that script for the format).
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace qpu::tokenizer::testing {

using Json = nlohmann::json;

// Reads a JSON file (fails the test on error).
Json read_json(const std::filesystem::path& path);

// One entry of cases["tokenizers"]: loads dir/entry["file"] and checks
// vocab_size, id_to_token, every encode and decode case and DecodeStream.
void check_tokenizer_cases(const Json& entry, const std::filesystem::path& dir);

// cases["normalizers"], cases["pre_tokenizers"], cases["decoders"].
void check_normalizer_cases(const Json& list);
void check_pre_tokenizer_cases(const Json& list);
void check_decoder_cases(const Json& list);

// cases["unicode"]: regex class sweeps and NFC probes over every code point.
void check_unicode_cases(const Json& unicode);

// A string made readable in failure messages (JSON with \u escapes).
std::string show(const std::string& s);

// Runs make_tokenizer_cases.py with QPU_PYTHON into a fresh temporary folder
// (extra_args appended) and returns the folder; fails the test on error.
std::filesystem::path generate_cases(const std::string& python, const std::string& extra_args);

}  // namespace qpu::tokenizer::testing
