#pragma once
// run.c's generate() loop: encode the prompt (BOS + text), then for pos = 0..steps-1
// run forward(token, pos); the next token is the next prompt token while the prompt
// lasts (no coin is drawn for it), otherwise the sampler's choice. The loop stops
// early when the next token is BOS (1). Every next token is decoded against the
// previous one and printed through safe_printf; a final "\n" follows the loop.
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reference/sampler.h"
#include "reference/tokenizer.h"
#include "reference/transformer.h"

namespace qpu::reference {

// One executed position, as reported to GenerateCallbacks::on_step.
struct GenerateStep {
  int pos = 0;                     // position just run
  int token = 0;                   // token fed to forward at pos
  int next = 0;                    // token chosen for pos + 1 (forced or sampled)
  bool forced = false;             // next came from the prompt, not the sampler
  std::span<const float> logits;   // forward's output, before the sampler touched it
  std::string_view printed;        // bytes printed for next (empty when next is BOS)
};

struct GenerateCallbacks {
  std::function<void(std::string_view bytes)> on_print;  // every chunk run.c prints, incl. final "\n"
  std::function<void(const GenerateStep&)> on_step;
  // Golden trace (reference/trace.h): set on the transformer for the run, plus the
  // sampler's pieces at sampled positions and a next_token record per position.
  TraceObserver* trace = nullptr;
};

struct GenerateResult {
  std::vector<int> prompt_tokens;  // encode(prompt, bos=1, eos=0)
  // The token sequence: tokens[0] is the first prompt token (BOS), tokens[k+1] is the
  // `next` chosen at position k, including a final BOS that stopped the loop. So
  // tokens.size() == positions + 1, and logits vector k belongs to input tokens[k].
  std::vector<int> tokens;
  std::string text;                // exactly the bytes run.c writes to stdout
  std::vector<float> logits;       // keep_logits: positions x vocab_size, forward's outputs
  int positions = 0;               // forward calls made (run.c's final pos)
  // Wall time from the end of the first position to the end of the loop, which is
  // what run.c's "achieved tok/s" divides positions - 1 by. 0 when positions < 2.
  double seconds_after_first = 0.0;
};

// `steps` positions at most (0 runs nothing); must not exceed seq_len (see
// run_c_steps). The prompt is run.c's -i text ("" for none).
GenerateResult generate(Transformer& transformer, const Tokenizer& tokenizer, Sampler& sampler,
                        std::string_view prompt, int steps, bool keep_logits = false,
                        const GenerateCallbacks& callbacks = {});

// run.c's main: steps 0 or above seq_len become seq_len. Negative steps are an error
// here (run.c silently turns them into 0 and then seq_len).
int run_c_steps(int requested_steps, int seq_len);

}  // namespace qpu::reference
