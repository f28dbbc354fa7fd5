#include "runner/story_precheck.h"

#include <vector>

#include "common/error.h"
#include "reference/generate.h"
#include "reference/run_c_ops.h"
#include "reference/sampler.h"
#include "reference/transformer.h"

namespace qpu::runner {

std::optional<ToppOverflow> first_topp_overflow(const reference::Llama2Checkpoint& checkpoint,
                                                const reference::Tokenizer& tokenizer, const std::string& prompt,
                                                int steps, float temperature, float topp, uint64_t seed,
                                                int64_t max_kept) {
  if (!(temperature > 0.0f && topp > 0.0f && topp < 1.0f))
    fail("first_topp_overflow: temperature {} and top-p {} do not take run.c's top-p path", temperature, topp);
  reference::Transformer transformer(checkpoint);
  reference::Sampler sampler(checkpoint.config().vocab_size, temperature, topp, seed);
  std::optional<ToppOverflow> found;
  int next_position = 0;
  reference::GenerateCallbacks callbacks;
  std::vector<float> probabilities;
  callbacks.on_step = [&](const reference::GenerateStep& e) {
    next_position = e.pos + 1;
    if (e.forced || found) return;
    // run.c's sample(): the logits divided by the temperature, then softmax.
    probabilities.assign(e.logits.begin(), e.logits.end());
    for (float& x : probabilities) x /= temperature;
    reference::softmax(probabilities);
    const int64_t kept = static_cast<int64_t>(reference::sample_topp_trace(probabilities, topp, 0.0f).kept.size());
    if (kept > max_kept) found = ToppOverflow{e.pos, kept};
  };
  try {
    reference::generate(transformer, tokenizer, sampler, prompt, steps, false, callbacks);
  } catch (const Error&) {
    // run.c's sample_topp with no entry at the cutoff: the position after the last one run.
    if (!found) found = ToppOverflow{next_position, 0};
  }
  return found;
}

}  // namespace qpu::runner
