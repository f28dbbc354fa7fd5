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

int sample_topp(std::span<const float> probabilities, float topp, float coin,
                std::vector<ProbIndex>& scratch) {
  const int n = static_cast<int>(probabilities.size());
  // Tokens below the cutoff cannot be in the nucleus; run.c drops them before sorting.
  const float cutoff = (1.0f - topp) / static_cast<float>(n - 1);
  scratch.clear();
  for (int i = 0; i < n; i++) {
    if (probabilities[i] >= cutoff) scratch.push_back({probabilities[i], i});
  }
  if (scratch.empty())
    fail("top-p sampling: no probability reaches the cutoff {} (topp {}): run.c reads out of bounds here",
         cutoff, topp);
  // glibc's qsort is a stable merge sort here: equal probabilities stay in index order.
  std::stable_sort(scratch.begin(), scratch.end(),
                   [](const ProbIndex& a, const ProbIndex& b) { return a.prob > b.prob; });

  const int n0 = static_cast<int>(scratch.size());
  float cumulative_prob = 0.0f;
  int last_idx = n0 - 1;
  for (int i = 0; i < n0; i++) {
    cumulative_prob += scratch[i].prob;
    if (cumulative_prob > topp) {
      last_idx = i;
      break;
    }
  }

  const float r = coin * cumulative_prob;
  float cdf = 0.0f;
  for (int i = 0; i <= last_idx; i++) {
    cdf += scratch[i].prob;
    if (r < cdf) return scratch[i].index;
  }
  return scratch[last_idx].index;
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
