#pragma once
// What a story needs that the machine does not hold, found before the machine is built:
// run.c's reference runs the same story first (milliseconds against minutes), so a story
// the machine would stop in the middle of is refused up front, with the place and the
// reason. Today: top-p positions where the entries that reach run.c's cutoff are none (run.c
// reads out of bounds) or more than the machine orders (npu::kToppSlots).
#include <cstdint>
#include <optional>
#include <string>

#include "reference/llama2_checkpoint.h"
#include "reference/tokenizer.h"

namespace qpu::runner {

struct ToppOverflow {
  int position = 0;  // the nested position whose next token top-p picks
  int64_t kept = 0;  // entries >= run.c's cutoff (1 - p) / (vocab - 1)
};

// run.c's story with these flags (temperature > 0, 0 < topp < 1); the first position whose
// kept entries are 0 or more than `max_kept`, if any.
std::optional<ToppOverflow> first_topp_overflow(const reference::Llama2Checkpoint& checkpoint,
                                                const reference::Tokenizer& tokenizer, const std::string& prompt,
                                                int steps, float temperature, float topp, uint64_t seed,
                                                int64_t max_kept);

}  // namespace qpu::runner
