#include "reference/sampler.h"

#include <algorithm>

#include "common/error.h"
#include "reference/run_c_ops.h"

namespace qpu::reference {

uint32_t random_u32(uint64_t& state) {
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return static_cast<uint32_t>((state * 0x2545F4914F6CDD1Dull) >> 32);
}

float random_f32(uint64_t& state) {
  return static_cast<float>(random_u32(state) >> 8) / 16777216.0f;
}

int sample_argmax(std::span<const float> probabilities) {
  int max_i = 0;
  float max_p = probabilities[0];
  for (size_t i = 1; i < probabilities.size(); i++) {
    if (probabilities[i] > max_p) {
      max_i = static_cast<int>(i);
      max_p = probabilities[i];
    }
  }
  return max_i;
}

int sample_mult(std::span<const float> probabilities, float coin) {
  const int n = static_cast<int>(probabilities.size());
  float cdf = 0.0f;
  for (int i = 0; i < n; i++) {
    cdf += probabilities[i];
    if (coin < cdf) return i;
  }
  return n - 1;  // in case of rounding errors
}

TopPTrace sample_topp_trace(std::span<const float> probabilities, float topp, float coin) {
  const int n = static_cast<int>(probabilities.size());
  TopPTrace t;
  // Tokens below the cutoff cannot be in the nucleus; run.c drops them before sorting.
  t.cutoff = (1.0f - topp) / static_cast<float>(n - 1);
  for (int i = 0; i < n; i++) {
    if (probabilities[i] >= t.cutoff) t.kept.push_back({probabilities[i], i});
  }
  if (t.kept.empty())
    fail("top-p sampling: no probability reaches the cutoff {} (topp {}): run.c reads out of bounds here",
         t.cutoff, topp);
  // glibc's qsort is a stable merge sort here: equal probabilities stay in index order.
  t.sorted = t.kept;
  std::stable_sort(t.sorted.begin(), t.sorted.end(),
                   [](const ProbIndex& a, const ProbIndex& b) { return a.prob > b.prob; });
  const int n0 = static_cast<int>(t.sorted.size());
  t.rank.assign(static_cast<size_t>(n0), 0);
  for (int k = 0; k < n0; k++) {  // kept is in index order and indices are distinct
    const auto it = std::lower_bound(t.kept.begin(), t.kept.end(), t.sorted[k].index,
                                     [](const ProbIndex& a, int index) { return a.index < index; });
    t.rank[static_cast<size_t>(it - t.kept.begin())] = k;
  }

  float cumulative_prob = 0.0f;
  t.last_idx = n0 - 1;
  bool cut = false;
  for (int i = 0; i < n0; i++) {
    cumulative_prob += t.sorted[i].prob;
    t.cumulative.push_back(cumulative_prob);
    if (!cut && cumulative_prob > topp) {
      t.last_idx = i;
      cut = true;
    }
  }
  t.cumulative_prob = t.cumulative[static_cast<size_t>(t.last_idx)];

  t.r = coin * t.cumulative_prob;
  t.pick_rank = t.last_idx;
  float cdf = 0.0f;
  for (int i = 0; i <= t.last_idx; i++) {
    cdf += t.sorted[i].prob;
    if (t.r < cdf) {
      t.pick_rank = i;
      break;
    }
  }
  t.pick = t.sorted[static_cast<size_t>(t.pick_rank)].index;
  return t;
}

int sample_topp(std::span<const float> probabilities, float topp, float coin,
                std::vector<ProbIndex>& scratch) {
  TopPTrace t = sample_topp_trace(probabilities, topp, coin);
  scratch = std::move(t.sorted);
  return t.pick;
}

Sampler::Sampler(int vocab_size, float temperature, float topp, uint64_t seed)
    : vocab_size_(vocab_size), temperature_(temperature), topp_(topp), rng_state_(seed) {
  if (vocab_size <= 0) fail("sampler: vocab_size {} must be positive", vocab_size);
  probindex_.reserve(vocab_size);
}

int Sampler::sample(std::span<float> logits) {
  if (logits.size() != static_cast<size_t>(vocab_size_))
    fail("sampler: {} logits for a vocabulary of {}", logits.size(), vocab_size_);
  if (temperature_ == 0.0f) return sample_argmax(logits);
  for (float& l : logits) l /= temperature_;
  softmax(logits);
  const float coin = random_f32(rng_state_);
  if (topp_ <= 0 || topp_ >= 1) return sample_mult(logits, coin);
  return sample_topp(logits, topp_, coin, probindex_);
}

}  // namespace qpu::reference
