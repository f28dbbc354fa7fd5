#pragma once
// The compiled host's vocabulary and its tokenizer.json: how the nested model's story
// becomes the host's own output text.
//
// Ids, in order:
//  * [0, V): the nested model's pieces, as they are (V = the llama2.c vocabulary size);
//  * [V, V + S): "stripped" pieces. run.c drops a piece's leading space right after BOS;
//    the machine then emits, instead of the piece " w", the id of "w" — an existing
//    piece when there is one, else one of these S new ids (and for the piece " " alone,
//    the byte token <0x00>, which prints nothing);
//  * the value tokens of the uplink (npu/uplink.h), special;
//  * the control tokens (machine start, stop, no-op), special.
// tokenizer.json: a BPE model over the printing ids with byte_fallback, and the decoder
// Sequence[Replace(byte tokens run.c does not print -> ""), ByteFallback, Fuse], so
// that stock `tokenizers` (and src/tokenizer) decode the host's output, with special
// tokens skipped, to exactly the bytes run.c prints (safe_printf: a single byte that is
// neither isprint nor isspace in the C locale is not printed).
// Encoding with this file is not run.c's encoding (no merges): the CLI encodes prompts
// with the reference's BPE (docs/journal/npu-machine-design-study.md §5.2).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "npu/uplink.h"
#include "reference/tokenizer.h"

namespace qpu::npu {

struct HostVocab {
  int nested_vocab = 0;                    // V
  std::vector<std::string> pieces;         // the printing ids' strings, [0, V + S)
  std::vector<int64_t> after_bos;          // per nested id: the id to emit right after BOS
  ValueVocab values;
  int64_t first_control = 0;
  std::vector<std::string> controls;       // special tokens after the value tokens

  int64_t printing() const { return static_cast<int64_t>(pieces.size()); }
  int64_t size() const { return first_control + static_cast<int64_t>(controls.size()); }
  int64_t control(const std::string& name) const;  // id of a control token
};

// Throws qpu::Error when a piece is not valid UTF-8 (it could not be a JSON string) or
// looks like a byte token to run.c's sscanf without being one of the 256 "<0xNN>".
HostVocab make_host_vocab(const reference::Tokenizer& nested);

// The tokenizer.json text.
std::string host_tokenizer_json(const HostVocab& vocab);

// Shared by the host tokenizers (this one and machine/story_tokenizer.h):
// whether a piece is valid UTF-8 (a JSON string can hold it), and the regex alternation of
// the byte tokens "<0xNN>" whose byte run.c's safe_printf does not print as a one-byte
// piece (neither isprint nor isspace in the C locale), for a Replace decoder.
bool valid_utf8(const std::string& s);
std::string unprinted_byte_tokens_regex();
// A tokenizer.json document: a BPE model over `vocab` (text -> id, no merges,
// byte_fallback), the `added` tokens and `decoder`; no normalizer, pre-tokenizer or
// post-processor.
std::string bpe_tokenizer_json(nlohmann::json vocab, nlohmann::json added, nlohmann::json decoder);

// The host ids run.c's stdout corresponds to, for a nested token stream that starts
// with BOS (run.c prints every token after the first, the first one after BOS stripped,
// and stops at a BOS).
std::vector<int64_t> host_ids_for(const HostVocab& vocab, const std::vector<int>& nested_tokens);

}  // namespace qpu::npu
