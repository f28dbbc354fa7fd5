#pragma once
// Byte-pair encoding exactly as tokenizers' BPE model (no dropout): the piece is
// cut into characters (unknown ones become <0xXX> byte tokens with
// byte_fallback, or the unk token, or are dropped), then the lowest-ranked
// merge is applied repeatedly, leftmost first among equal ranks.
#include <memory>

#include "tokenizer/json_reader.h"
#include "tokenizer/model.h"

namespace qpu::tokenizer {

std::unique_ptr<Model> parse_bpe(const Json& value, const JsonPath& at);

}  // namespace qpu::tokenizer
