#pragma once
// run.c's sampler: greedy argmax, or temperature + softmax + (top-p or plain CDF)
// sampling driven by a xorshift64* generator.
#include <cstdint>
#include <span>
#include <vector>

namespace qpu::reference {

// xorshift64*: advances the state, returns the top 32 bits of state * 0x2545F4914F6CDD1D.
uint32_t random_u32(uint64_t& state);
// The "coin": (random_u32 >> 8) / 16777216.0f, a float in [0, 1) with 24 random bits.
float random_f32(uint64_t& state);

// First index of the maximum (strict >, scanning left to right).
int sample_argmax(std::span<const float> probabilities);
// First i with coin < cdf_i (cdf accumulated in float from 0.0f); n-1 if none.
int sample_mult(std::span<const float> probabilities, float coin);
// Nucleus sampling exactly as run.c: keep p >= (1 - topp)/(n - 1), sort descending
// (ties in ascending index order), cut after the running sum first exceeds topp,
// pick with r = coin * (that running sum). `scratch` is reused between calls.
// Throws qpu::Error when no probability reaches the cutoff (run.c would read
// out of bounds there).
struct ProbIndex {
  float prob;
  int index;
};
int sample_topp(std::span<const float> probabilities, float topp, float coin,
                std::vector<ProbIndex>& scratch);

// Every intermediate of sample_topp (the oracle of the NPU's top-p units, npu/unit_topp.h).
// sample_topp is this function's `pick`, so the two cannot drift.
struct TopPTrace {
  float cutoff = 0.0f;            // (1.0f - topp) / (float)(n - 1)
  std::vector<ProbIndex> kept;    // p >= cutoff, in index order
  std::vector<ProbIndex> sorted;  // kept, stable-sorted by descending p (ties: ascending index)
  std::vector<int> rank;          // rank[i]: kept[i]'s position in `sorted`
  std::vector<float> cumulative;  // running sum over `sorted` (C's float adds from 0.0f), every entry
  int last_idx = 0;               // first position with cumulative > topp, else kept.size() - 1
  float cumulative_prob = 0.0f;   // cumulative[last_idx]
  float r = 0.0f;                 // coin * cumulative_prob
  int pick_rank = 0;              // first position <= last_idx with r < cdf, else last_idx
  int pick = 0;                   // sorted[pick_rank].index: the sampled token
};
// Throws qpu::Error when nothing is kept (as sample_topp).
TopPTrace sample_topp_trace(std::span<const float> probabilities, float topp, float coin);

class Sampler {
 public:
  // temperature 0 means greedy. The seed is the raw xorshift state (run.c replaces a
  // seed of 0 with the time before it gets here; see main's flag handling).
  Sampler(int vocab_size, float temperature, float topp, uint64_t seed);

  // run.c's sample(): modifies `logits` in place (division by the temperature, then
  // softmax) unless greedy, and draws exactly one coin per non-greedy call.
  int sample(std::span<float> logits);

  float temperature() const { return temperature_; }
  float topp() const { return topp_; }
  uint64_t rng_state() const { return rng_state_; }

 private:
  int vocab_size_;
  float temperature_;
  float topp_;
  uint64_t rng_state_;
  std::vector<ProbIndex> probindex_;
};

}  // namespace qpu::reference
