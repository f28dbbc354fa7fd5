#include "runner/prompt_lookup.h"

#include <algorithm>

#include "common/error.h"
#include "common/splitmix64.h"

namespace qpu::runner {
PromptLookup::PromptLookup(int table_bits) {
  if (table_bits < 4 || table_bits > 30) fail("prompt lookup: table_bits {} is outside [4, 30]", table_bits);
  table_.resize(size_t{1} << table_bits);
  mask_ = (uint64_t{1} << table_bits) - 1;
}

uint64_t PromptLookup::key(int n, size_t end) const {
  uint64_t h = splitmix64(static_cast<uint64_t>(n));
  for (size_t i = end - static_cast<size_t>(n); i < end; ++i) h = splitmix64(h ^ static_cast<uint64_t>(tokens_[i]));
  return h == 0 ? 1 : h;
}

void PromptLookup::push(int64_t token) {
  tokens_.push_back(token);
  // Learn: each suffix of the stream before `token` (n = 1 .. kMaxN) is followed by it.
  const size_t end = tokens_.size() - 1;
  const int longest = static_cast<int>(std::min<size_t>(kMaxN, end));
  for (int n = 1; n <= longest; ++n) {
    const uint64_t k = key(n, end);
    // The key's slot or one of the next kProbe - 1: the first that holds it or is empty;
    // when all are taken by other keys, the home slot is replaced.
    Slot* put = &table_[k & mask_];
    for (uint64_t p = 0; p < kProbe; ++p) {
      Slot& slot = table_[(k + p) & mask_];
      if (slot.key == k || slot.key == 0) {
        put = &slot;
        break;
      }
    }
    *put = {k, token};
  }
}

int64_t PromptLookup::guess() const {
  const size_t end = tokens_.size();
  for (int n = static_cast<int>(std::min<size_t>(kMaxN, end)); n >= 1; --n) {
    const uint64_t k = key(n, end);
    for (uint64_t p = 0; p < kProbe; ++p) {
      const Slot& slot = table_[(k + p) & mask_];
      if (slot.key == k) return slot.next;
      if (slot.key == 0) break;
    }
  }
  return -1;
}

}  // namespace qpu::runner
