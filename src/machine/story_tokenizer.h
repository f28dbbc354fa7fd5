#pragma once
// The host tokenizer of a compiled story machine (tokenizer.json and
// tokenizer_config.json), so that stock `tokenizers` / transformers' AutoTokenizer turn
// the machine's host stream into the story: `decode(ids, skip_special_tokens=True)` of
// the ids the machine generates is exactly what run.c prints (without the newline run.c
// prints at the end).
//
// Every host token is special (skipped) but the story tokens TOK.k: value tokens are
// "<|qpu_v{i}|>", control tokens "<|qpu:{name}|>". TOK.k is piece k of the nested
// tokenizer in a BPE vocabulary (no merges, byte_fallback), with a leading space written
// as the marker U+E000. The decoder is
//   Sequence[Metaspace(U+E000, prepend_scheme first), Replace(bytes run.c does not
//            print -> ""), ByteFallback, Fuse]
// Metaspace turns the marker back into a space in every token but the first, where it
// drops it: run.c drops a piece's leading space right after BOS, and the machine's
// first story token is the one after the BOS every run starts from. Byte pieces
// (<0x0A>) become their byte; a byte run.c's safe_printf would not print (neither
// isprint nor isspace) becomes nothing. TOK.1 (BOS) is special: run.c stops there
// without printing it.
//
// Encoding text with this tokenizer is not run.c's encoding (there are no merges): a
// host prompt comes from `qpu prompt` (the machine's prompt recipe), not from encode().
#include <string>

#include <nlohmann/json.hpp>

#include "machine/story_interface.h"
#include "reference/tokenizer.h"

namespace qpu::machine {

inline constexpr const char* kLeadingSpaceMarker = "\xee\x80\x80";  // U+E000 in UTF-8

// Throws qpu::Error when the tokenizer's vocabulary differs from the machine's nested
// vocabulary, a piece is not valid UTF-8 (no JSON string could hold it), contains the
// marker, or two host tokens would have the same text.
std::string story_tokenizer_json(const StoryInterface& m, const reference::Tokenizer& nested);

// tokenizer_config.json: PreTrainedTokenizerFast, no BOS added, DONE as the eos token,
// no clean-up of spaces (it would change the story's bytes).
nlohmann::json story_tokenizer_config(const StoryInterface& m);

}  // namespace qpu::machine
