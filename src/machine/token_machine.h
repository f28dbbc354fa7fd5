#pragma once
// M2e (docs/npu-machine.md, "M2e"): one looped machine that runs the whole nested model,
// token after token, with nothing from the host but its own output fed back. The prompt
// is data only (TokenMachine::prompt: HDR, the step count, the nested prompt's tokens);
// its last write names TOK.1 (run.c's BOS at position 0) and from there every micro-op
// names the next:
//
//   TOK.k       writes k into TOK (an immediate register) -> QKV.0 (or DONE, below)
//   QKV.l       x (layer 0: the embedding of TOK, npu::embedding_lookup; else X0) ->
//               rmsnorm -> wq, wk, wv -> RoPE(POS); q RAM, KV cache -> SCORE(l).0
//   SCORE ... WSUM   the attention of layer l (machine/attention_stages.h); the block
//               loops branch on POS -> ATTO(l).0
//   ATTO(l).0   x + wo xb, all dim elements written down into the X1 RAM in the same
//               forward pass (no crossing: its readers are below it; one micro-op per
//               layer, named .0 as the attention stages name it) -> SW(l).0
//   SW(l).c     x from the X1 RAM; the FFN's chunks into the product RAM -> FFN(l).0
//   FFN(l).i    x (the X1 RAM) + w2 (silu(w1 x) * w3 x), element i sent up into X0 ->
//               QKV.(l + 1), after the last layer INC
//   INC         POS + 1, sent up into POS -> HEAD
//   HEAD        rmsnorm (rms_final) -> wcls -> argmax k: the host's next token is TOK.k
//
// so the host's output is the nested story's token ids (TOK.k) between the machine's
// own control and value tokens. X0 holds a layer's input; the X1 RAM (in the attention
// half, machine/wide_float_ram.h) its x after the attention, exactly for +-0 (read as +0)
// and every |x| in [2^-47, 2^20) (the uplink's window; stories260K's x_att_res spans
// binades -24..3, docs/trace-ranges.md).
//
// run.c's loop control: STEPS (a register the prompt writes) ends the story: TOK.k goes
// on to QKV.0 while POS < STEPS, else to DONE; TOK.1 (BOS) goes on only at position 0
// (run.c stops when the model picks BOS). A prompt's tokens wait in the prompt RAM (the
// host prompt writes them, TokenMachine::prompt): HEAD takes position p's token from
// there instead of the argmax while the prompt lasts (run.c's forced prompt tokens).
//
// Stack (top to bottom): register file, POS, TOK -> the embedding lookup -> the attention
// half (machine/attention_half.h) -> the FFN half (machine/ffn_half.h) -> HEAD
// (machine/head_part.h) -> uplink. The three parts are ordered one below the other
// (Program::order): side by side their working values would not fit the width budget.
#include <cstdint>
#include <vector>

#include "machine/attention_half.h"
#include "machine/ffn_half.h"
#include "machine/head_part.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::machine {

struct TokenMachineOptions : HostOptions, AttentionOptions, FfnOptions, HeadOptions {};

// run.c's values at one position that the machine's stream shows: x after the
// attention and after the FFN of every layer, and the next token.
struct PositionRecord {
  int pos = 0;
  std::vector<std::vector<float>> x_att_res, x_ffn_res;  // [layer][dim]
  int next = 0;
};

struct TokenMachine : AssembledMachine {
  int dim = 0, layers = 0, vocab = 0, chunks = 0, heads = 0, exp_groups = 0;

  int max_positions = 0;

  // Where HEAD's classifier leaves run.c's logits on HEAD's cycle, per vocabulary entry
  // (verification only: they never leave the forward pass; runner/story_stream.h).
  std::vector<ValueProbe> logit_probes;

  // The host prompt of a run of `steps` nested positions (run.c's -n; 1 .. max_positions):
  // HDR, WSTEPS and the parts of steps, then per nested prompt token t_j after BOS
  // (j >= 1) WPOS j, WF t_j + 1 and PST (the prompt RAM), then WPOS 0. `nested_prompt`:
  // run.c's prompt tokens, BOS first (BOS alone: no prompt). Throws for a prompt that
  // does not start with BOS, a token outside the vocabulary, or one past max_positions.
  std::vector<int64_t> prompt(const std::vector<int>& nested_prompt, int steps) const;

  // What the machine generates for one nested position, from the token after the
  // position's TOK (QKV.0) through the next TOK: every control token and the value
  // tokens of every float it sends up (x after the FFN of every layer, POS + 1; x after
  // the attention stays below, record.x_att_res is only size-checked).
  std::vector<int64_t> expected_position(const PositionRecord& record) const;
};

// Dimensions come from the checkpoint's header (dim <= 64 register elements). The
// attention stages are always on. Throws qpu::Error for options the units or heads
// cannot hold.
TokenMachine build_token_machine(const reference::Llama2Checkpoint& checkpoint, const TokenMachineOptions& options);

}  // namespace qpu::machine
