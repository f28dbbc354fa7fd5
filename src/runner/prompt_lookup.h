#pragma once
// A draft for speculative decoding that knows nothing of the machine: lookup over the host
// tokens so far. Each candidate guess is what followed the most recent earlier occurrence
// of a context:
//   - a suffix of the stream, n = kMaxN .. 1 tokens (prompt lookup);
//   - the token k = 1 .. kMaxLag places before the last one, alone (a skip-gram: the token
//     k + 1 places after it). A stream whose fixed skeleton is interleaved with data, e.g.
//     a control token, three data tokens, the next control token, has no suffix that
//     repeats across the data, but the control token 3 places back predicts the next one.
// A candidate is confirmed when its context's last two occurrences were followed by the
// same token. The guess is the first confirmed candidate in the order above (the longest
// suffix first, then the nearest lag), or, with none confirmed, the first candidate.
// A looped machine's control stream repeats itself, so the guess is right for most cycles
// (docs/npu-machine.md, "What the second core could do"). A guess only decides what the
// second core tries; the host's own argmax decides what is kept
// (engine::Model::forward_pair), so a wrong or colliding guess costs time, never a bit.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace qpu::runner {

class PromptLookup {
 public:
  static constexpr int kMaxN = 8;
  static constexpr int kMaxLag = 5;
  // table_bits: the table holds 2^table_bits contexts (16 bytes each). A key lives in its
  // home slot or one of the next kProbe - 1; when all of them hold other keys, the home
  // slot's is replaced (the guess gets worse, never wrong in a way that matters).
  explicit PromptLookup(int table_bits = 22);

  // The next token of the stream, in [0, 2^31).
  void push(int64_t token);
  // The guess for the token after the last one pushed; -1 when no context occurred before.
  int64_t guess() const;

 private:
  static constexpr uint64_t kProbe = 4;
  struct Slot {
    uint64_t key = 0;      // 0: empty (keys are never 0)
    int32_t next = -1;     // what followed the context's latest occurrence
    uint32_t confirmed = 0;  // 1: the occurrence before it was followed by the same token
  };
  // The key of the n tokens ending just before index `end` of the stream, and of the token
  // at index `at` as the context of the token `lag` + 1 places after it.
  uint64_t suffix_key(int n, std::size_t end) const;
  uint64_t lag_key(int lag, std::size_t at) const;
  void learn(uint64_t key, int32_t next);
  const Slot* find(uint64_t key) const;
  std::vector<int64_t> tokens_;
  std::vector<Slot> table_;
  uint64_t mask_ = 0;
};

}  // namespace qpu::runner
