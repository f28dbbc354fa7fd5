#pragma once
// tokenizer.json "decoder": turns the tokens of decode() back into text.
// Supported: ByteLevel, ByteFallback, Fuse, Strip, Replace and Sequence; each
// is tokenizers' decode_chain (tokens in, tokens out), and the final tokens are
// concatenated. Other types are rejected with an "unsupported" error.
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_reader.h"

namespace qpu::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
  // decode_chain, then the pieces joined.
  std::string decode(std::vector<std::string> tokens) const;
};

// null gives nullptr: tokenizers then joins the tokens with single spaces.
std::unique_ptr<Decoder> parse_decoder(const Json& value, const JsonPath& at);

}  // namespace qpu::tokenizer
