#pragma once
// Token selection for `qpu generate`. Deterministic and fully specified, so a run
// can be repeated anywhere from (logits, options, seed):
//   temperature == 0: greedy, the first index of the maximum (as torch.argmax).
//   otherwise, in double precision:
//     w_i = exp((logit_i - max) / temperature)
//     top_p < 1: keep the tokens in order of decreasing w (ties: lower id first) up
//       to and including the first one where the kept mass reaches top_p * sum(w);
//       top_p >= 1: keep every token in id order.
//     u = uniform in [0, 1) times the kept mass; return the first kept token whose
//       running sum (in kept order) exceeds u.
//   uniform: xorshift64* (Vigna) seeded through splitmix64(seed); a draw is
//     (next() >> 11) * 2^-53. One draw per sampled token.
#include <cstdint>
#include <span>
#include <vector>

namespace qpu::engine {

int64_t argmax(std::span<const float> logits);

struct SamplerOptions {
  double temperature = 0.0;
  double top_p = 1.0;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);  // throws qpu::Error on bad options
  int64_t sample(std::span<const float> logits);
  double next_uniform();  // [0, 1)

 private:
  SamplerOptions options_;
  uint64_t state_;
  std::vector<double> weights_;
  std::vector<int64_t> order_;
};

}  // namespace qpu::engine
