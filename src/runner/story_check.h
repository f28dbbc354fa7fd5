#pragma once
// The reference side of `qpu story --verify`: run.c's forward (reference::Transformer, bit
// for bit) and sampler (reference::Sampler: greedy at temperature 0) run from BOS, one
// position at a time as the machine's stream needs it,
// and every crossing float and story token of the stream compared with it:
//
//   FFN(l).i  at position p   run.c's x after the FFN of layer l (x_ffn_res), element i
//   INC       at position p   p + 1
//   story token j             j = 0: BOS; else run.c's next token at position j - 1 (the
//                             prompt's while it lasts, else its sampler's: the greedy
//                             one at temperature 0)
//   logits at position p      run.c's logits vector at p, every entry (read from the host's
//                             residual on HEAD's cycle: StoryRunOptions::logit_probes)
//
// x after the attention (x_att_res) no longer crosses (ATTO writes it down into the X1
// RAM): it is checked through x_ffn_res, which depends on it bit for bit (x_att_res + w2
// (...) of rmsnorm(x_att_res)).
//
// Floats are compared as bits (std::bit_cast<uint32_t>), so +0 and -0 differ. The checker
// keeps the FIRST difference (nested position, what, both values and their bits) and
// counts what it compared.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reference/llama2_checkpoint.h"
#include "reference/sampler.h"
#include "reference/transformer.h"
#include "runner/story_stream.h"

namespace qpu::runner {

// run.c's values at one nested position.
struct ReferencePosition {
  int token = 0;  // the token run.c's forward got at this position
  std::vector<std::vector<float>> x_ffn_res;  // [layer][dim]
  std::vector<float> logits;                  // run.c's forward's output
  int next = 0;   // run.c's next token (a prompt token, else its sampler's: at temperature 0 the first maximum)
  bool sampled = false;  // next is the sampler's with temperature > 0 (a coin was drawn)
};

struct Difference {
  int position = 0;
  std::string what;      // e.g. "x after the FFN of layer 2, element 17"
  std::string machine;   // the machine's value, e.g. "0.123 (0x3dfbe76d)" or "token 403"
  std::string run_c;     // run.c's
  std::string message() const;  // one line naming all of the above
};

class StoryChecker {
 public:
  // Keeps a reference: the checkpoint must outlive the checker. `prompt`: run.c's prompt
  // tokens (BOS first; empty or BOS alone: none): the next token at position p is
  // prompt[p + 1] while there is one (run.c forces them), else `sampler`'s (run.c's
  // sample(), one coin per sampled position; none: greedy).
  explicit StoryChecker(const reference::Llama2Checkpoint& checkpoint, std::vector<int> prompt = {},
                        std::optional<reference::Sampler> sampler = std::nullopt);

  // Compare one event; false when it differs or cannot be compared (the difference is
  // then first_difference(), if it is the first). Once a difference is found, later
  // events are not compared.
  bool check(const CrossingEvent& e);
  bool check(const StoryTokenEvent& e);
  bool check(const LogitEvent& e);

  const std::optional<Difference>& first_difference() const { return first_; }
  int64_t floats_compared() const { return floats_; }
  int64_t tokens_compared() const { return tokens_; }
  int64_t logit_vectors_compared() const { return logit_vectors_; }

  // run.c's record of position `pos`, running positions up to it first (from BOS, each
  // next token run.c's: the prompt's, else the sampler's). Mutable so that a test can corrupt a value and see
  // the checker report it. Throws qpu::Error past the checkpoint's seq_len.
  ReferencePosition& reference(int pos);

 private:
  bool differ(int position, std::string what, std::string machine, std::string run_c);

  const reference::Llama2Checkpoint& checkpoint_;
  reference::Transformer transformer_;
  reference::Sampler sampler_;
  std::vector<int> prompt_;
  std::vector<ReferencePosition> positions_;
  std::map<int, int64_t> crossings_seen_;  // per position, for the completeness check
  std::optional<Difference> first_;
  int64_t floats_ = 0, tokens_ = 0, logit_vectors_ = 0;
};

// "1.5 (0x3fc00000)": a float with its bits.
std::string float_with_bits(float v);

}  // namespace qpu::runner
