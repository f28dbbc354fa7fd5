#pragma once
// A draft for speculative decoding that knows nothing of the machine: prompt lookup over
// the host tokens so far. The guess for the next token is what followed the most recent
// earlier occurrence of the longest suffix of the stream (up to kMaxN tokens) that occurred
// before. A looped machine's control stream repeats itself, so the guess is right for most
// cycles (docs/npu-machine.md, "What the second core could do": 92-98 % of the expensive
// ones). A guess only decides what the second core tries; the host's own argmax decides
// what is kept (engine::Model::forward_pair), so a wrong or colliding guess costs time,
// never a bit.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace qpu::runner {

class PromptLookup {
 public:
  static constexpr int kMaxN = 8;
  // table_bits: the table holds 2^table_bits continuations (16 bytes each). A key lives in
  // its home slot or one of the next kProbe - 1; when all of them hold other keys, the home
  // slot's is replaced (the guess gets worse, never wrong in a way that matters).
  explicit PromptLookup(int table_bits = 22);

  // The next token of the stream.
  void push(int64_t token);
  // The guess for the token after the last one pushed; -1 when no suffix occurred before.
  int64_t guess() const;

 private:
  static constexpr uint64_t kProbe = 4;
  struct Slot {
    uint64_t key = 0;  // 0: empty (keys are never 0)
    int64_t next = -1;
  };
  // The key of the n tokens ending just before index `end` of the stream.
  uint64_t key(int n, std::size_t end) const;
  std::vector<int64_t> tokens_;
  std::vector<Slot> table_;
  uint64_t mask_ = 0;
};

}  // namespace qpu::runner
