#include "runner/prompt_lookup.h"

#include <algorithm>
#include <limits>

#include "common/error.h"
#include "common/splitmix64.h"

namespace qpu::runner {
PromptLookup::PromptLookup(int table_bits) {
  if (table_bits < 4 || table_bits > 30) fail("prompt lookup: table_bits {} is outside [4, 30]", table_bits);
  table_.resize(size_t{1} << table_bits);
  mask_ = (uint64_t{1} << table_bits) - 1;
}

uint64_t PromptLookup::suffix_key(int n, size_t end) const {
  uint64_t h = splitmix64(static_cast<uint64_t>(n));
  for (size_t i = end - static_cast<size_t>(n); i < end; ++i) h = splitmix64(h ^ static_cast<uint64_t>(tokens_[i]));
  return h == 0 ? 1 : h;
}

uint64_t PromptLookup::lag_key(int lag, size_t at) const {
  // Seeds apart from the suffixes' (n <= kMaxN).
  const uint64_t h = splitmix64(splitmix64(static_cast<uint64_t>(1000 + lag)) ^ static_cast<uint64_t>(tokens_[at]));
  return h == 0 ? 1 : h;
}

void PromptLookup::learn(uint64_t key, int32_t next) {
  // The key's slot or one of the next kProbe - 1: the first that holds it or is empty;
  // when all are taken by other keys, the home slot is replaced.
  Slot* put = &table_[key & mask_];
  for (uint64_t p = 0; p < kProbe; ++p) {
    Slot& slot = table_[(key + p) & mask_];
    if (slot.key == key || slot.key == 0) {
      put = &slot;
      break;
    }
  }
  const bool same = put->key == key && put->next == next;
  *put = {key, next, same ? 1u : 0u};
}

const PromptLookup::Slot* PromptLookup::find(uint64_t key) const {
  for (uint64_t p = 0; p < kProbe; ++p) {
    const Slot& slot = table_[(key + p) & mask_];
    if (slot.key == key) return &slot;
    if (slot.key == 0) return nullptr;
  }
  return nullptr;
}

void PromptLookup::push(int64_t token) {
  if (token < 0 || token > std::numeric_limits<int32_t>::max())
    fail("prompt lookup: token {} is outside [0, 2^31)", token);
  tokens_.push_back(token);
  const auto next = static_cast<int32_t>(token);
  // Learn: every context of the stream before `token` is followed by it.
  const size_t end = tokens_.size() - 1;
  const int longest = static_cast<int>(std::min<size_t>(kMaxN, end));
  for (int n = 1; n <= longest; ++n) learn(suffix_key(n, end), next);
  for (int lag = 1; lag <= kMaxLag && static_cast<size_t>(lag) + 1 <= end; ++lag)
    learn(lag_key(lag, end - 1 - static_cast<size_t>(lag)), next);
}

int64_t PromptLookup::guess() const {
  const size_t end = tokens_.size();
  int64_t first = -1;
  const auto consider = [&](const Slot* s) {
    if (!s) return false;
    if (first < 0) first = s->next;
    return s->confirmed != 0;
  };
  for (int n = static_cast<int>(std::min<size_t>(kMaxN, end)); n >= 1; --n) {
    const Slot* s = find(suffix_key(n, end));
    if (consider(s)) return s->next;
  }
  for (int lag = 1; lag <= kMaxLag && static_cast<size_t>(lag) + 1 <= end; ++lag) {
    const Slot* s = find(lag_key(lag, end - 1 - static_cast<size_t>(lag)));
    if (consider(s)) return s->next;
  }
  return first;
}

}  // namespace qpu::runner
