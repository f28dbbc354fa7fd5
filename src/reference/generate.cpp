#include "reference/generate.h"

#include <algorithm>
#include <chrono>

#include "common/error.h"

namespace qpu::reference {

int run_c_steps(int requested_steps, int seq_len) {
  if (requested_steps < 0) fail("steps {} must not be negative", requested_steps);
  if (requested_steps == 0 || requested_steps > seq_len) return seq_len;
  return requested_steps;
}

GenerateResult generate(Transformer& transformer, const Tokenizer& tokenizer, Sampler& sampler,
                        std::string_view prompt, int steps, bool keep_logits,
                        const GenerateCallbacks& callbacks) {
  if (steps < 0 || steps > transformer.config().seq_len)
    fail("generate: steps {} outside [0, seq_len = {}]", steps, transformer.config().seq_len);
  if (tokenizer.vocab_size() != transformer.config().vocab_size)
    fail("generate: tokenizer has {} tokens, the model {}", tokenizer.vocab_size(),
         transformer.config().vocab_size);

  GenerateResult result;
  const auto print = [&](std::string_view bytes) {
    if (bytes.empty()) return;
    result.text.append(bytes);
    if (callbacks.on_print) callbacks.on_print(bytes);
  };

  result.prompt_tokens = tokenizer.encode(prompt, /*bos=*/true, /*eos=*/false);
  const int num_prompt_tokens = static_cast<int>(result.prompt_tokens.size());

  using Clock = std::chrono::steady_clock;
  Clock::time_point start;
  bool started = false;
  TraceObserver* const trace = callbacks.trace;
  // The transformer traces for this run only, also when generate throws.
  struct RestoreTrace {
    Transformer& transformer;
    TraceObserver* previous;
    ~RestoreTrace() { transformer.set_trace(previous); }
  } restore_trace{transformer, transformer.trace()};
  if (trace != nullptr) transformer.set_trace(trace);

  const bool copy_logits = keep_logits || static_cast<bool>(callbacks.on_step) || trace != nullptr;
  std::vector<float> logits_copy;

  int token = result.prompt_tokens[0];
  result.tokens.push_back(token);
  int pos = 0;
  while (pos < steps) {
    const std::span<float> logits = transformer.forward(token, pos);
    if (copy_logits) logits_copy.assign(logits.begin(), logits.end());
    if (keep_logits) result.logits.insert(result.logits.end(), logits.begin(), logits.end());

    const bool forced = pos < num_prompt_tokens - 1;
    const uint64_t rng_before = sampler.rng_state();
    const int next = forced ? result.prompt_tokens[pos + 1] : sampler.sample(logits);
    if (trace != nullptr) {
      // sample() left the probabilities in `logits`; logits_copy holds forward's output.
      if (!forced && sampler.temperature() != 0.0f)
        trace_sampler(*trace, pos, logits_copy, sampler.temperature(), sampler.topp(), rng_before, logits);
      const float next_record[2] = {static_cast<float>(next), forced ? 1.0f : 0.0f};
      trace->record(TraceKind::next_token, pos, -1, -1, next_record);
    }
    result.tokens.push_back(next);
    const int this_pos = pos;
    pos++;

    std::string_view printed;
    if (next != kBosToken) printed = printable_piece(tokenizer.decode(token, next));
    if (callbacks.on_step) callbacks.on_step({this_pos, token, next, forced, logits_copy, printed});
    if (next == kBosToken) break;  // data-dependent termination: BOS delimits sequences
    print(printed);
    token = next;
    if (!started) {
      start = Clock::now();
      started = true;
    }
  }
  print("\n");

  result.positions = pos;
  if (pos > 1 && started) {
    result.seconds_after_first = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return result;
}

}  // namespace qpu::reference
