#pragma once
// run.c's forward(): one token at one position through the llama2 transformer,
// returning the logits with run.c's exact float32 bits.
#include <span>
#include <vector>

#include "reference/llama2_checkpoint.h"
#include "reference/trace.h"

namespace qpu::reference {

class Transformer {
 public:
  // Keeps a reference: the checkpoint must outlive the transformer.
  explicit Transformer(const Llama2Checkpoint& checkpoint);

  const Llama2Config& config() const { return config_; }

  // Runs `token` at position `pos` and returns config().vocab_size logits (valid until
  // the next call; the caller may modify them, as run.c's sampler does). The key/value
  // cache rows 0..pos-1 are the ones written by earlier calls, so a sequence is run
  // with pos = 0, 1, 2, ... as run.c does. Throws qpu::Error for a token outside
  // [0, vocab_size) or a position outside [0, seq_len).
  std::span<float> forward(int token, int pos);

  // Reports every intermediate vector of later forward calls to `observer` (reference/
  // trace.h); nullptr (the default) turns tracing off. The results do not change.
  void set_trace(TraceObserver* observer) { trace_ = observer; }
  TraceObserver* trace() const { return trace_; }

 private:
  Llama2Config config_;
  Llama2Weights w_;
  // run.c's RunState.
  std::vector<float> x_, xb_, xb2_, hb_, hb2_, q_, att_, logits_;
  std::vector<float> key_cache_, value_cache_;  // [layer][seq_len][kv_dim]
  TraceObserver* trace_ = nullptr;
};

}  // namespace qpu::reference
