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
// Sampling (TokenMachineOptions::sampling; docs/npu-machine.md, "M3: sampling"): run.c's
// temperature path with topp <= 0 or >= 1 (sample_mult). The prompt also writes T, the
// seed's four 16-bit limbs SEED.0-3 and PLEN (the nested prompt's tokens with BOS); HEAD
// reads T, and names TOK.k at once when T = 0 or the prompt RAM forces the token (run.c
// draws no coin there), else TEMP.0: the sampler's stages (machine/sample_part.h) run
// below HEAD, MAX draws run.c's coin n = POS - PLEN + 1 (POS is run.c's pos + 1 on HEAD's
// and the stages' cycles) from the seed, and CDF's pick names TOK.k.
//
// Stack (top to bottom): register file, POS, TOK -> the embedding lookup -> the attention
// half (machine/attention_half.h) -> the FFN half (machine/ffn_half.h) -> uplink, with
// HEAD (machine/head_part.h) and [the sampler's stages] in the same layers as the halves:
// the FFN half is ordered below the attention half (Program::order), the sampler below
// HEAD; HEAD reads only registers and its own RAMs, so it starts at the top.
#include <cstdint>
#include <vector>

#include "machine/attention_half.h"
#include "machine/ffn_half.h"
#include "machine/head_part.h"
#include "machine/sample_part.h"
#include "machine/story_interface.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::machine {

struct TokenMachineOptions : HostOptions, AttentionOptions, FfnOptions, HeadOptions {
  // run.c's temperature sampling below HEAD (above); off: the greedy machine (HEAD's argmax
  // or the forced token names TOK.k).
  bool sampling = false;
  SampleOptions sample;
};

// run.c's values at one position that the machine's stream shows: x after the
// attention and after the FFN of every layer, and the next token.
struct PositionRecord {
  int pos = 0;
  std::vector<std::vector<float>> x_att_res, x_ffn_res;  // [layer][dim]
  int next = 0;
  bool sampled = false;  // next is run.c's sample() (temperature > 0, not a prompt token)
  int kept = -1;         // with top-p: run.c's n0 at a sampled position (entries >= the cutoff)
};

struct TokenMachine : AssembledMachine {
  int dim = 0, layers = 0, vocab = 0, seq_len = 0, chunks = 0, heads = 0, exp_groups = 0;

  int max_positions = 0;
  // Positions in the first segment of both WSUM and SUM (AttentionGeometry): a position up to
  // there generates no crossing of theirs.
  int first_segment_positions = 0;
  int sample_blocks = 0;  // the sampler's nb (TEMP.b, EXP.b, PROB.b); 0: a greedy machine
  bool sample_topp = false;  // run.c's top-p (0 < topp < 1) on the sampling machine
  float topp = 1.0f;         // ... and the p it holds

  // Where HEAD's classifier leaves run.c's logits on HEAD's cycle, per vocabulary entry
  // (verification only: they never leave the forward pass; runner/story_stream.h).
  std::vector<ValueProbe> logit_probes;

  // The host prompt of a run of `steps` nested positions (run.c's -n; 1 .. max_positions):
  // HDR, WSTEPS and the parts of steps, then per nested prompt token t_j after BOS
  // (j >= 1) WPOS j, WF t_j + 1 and PST (the prompt RAM), on a sampling machine WT, WS.0-3
  // and WPLEN with their parts, then WPOS 0. `nested_prompt`: run.c's prompt tokens, BOS
  // first (BOS alone: no prompt); `temperature` and `seed`: run.c's (the seed as run.c's
  // rng state). Throws for a prompt that does not start with BOS, a token outside the
  // vocabulary, one past max_positions, a temperature other than 0 on a greedy machine, or
  // one outside 0 and [kMinTemperature, kMaxTemperature] (the sampler's windows).
  std::vector<int64_t> prompt(const std::vector<int>& nested_prompt, int steps, float temperature = 0.0f,
                              uint64_t seed = 0) const;
  // What a host needs to drive this machine (the prompt above, its vocabulary, the logit
  // probes): what qpu-machine.json carries for `qpu run`.
  StoryInterface story_interface() const;
  // The temperatures the sampler's windows hold for stories260K's logits (SampleOptions).
  static constexpr float kMinTemperature = 0.05f, kMaxTemperature = 32.0f;

  // What the machine generates for one nested position, from the token after the
  // position's TOK (QKV.0) through the next TOK: every control token and the value
  // tokens of every float it sends up (x after the FFN of every layer, POS + 1; x after
  // the attention stays below, record.x_att_res is only size-checked); a sampled record
  // (sampling machine only) has TEMP.0 ... CDF (with top-p TEMP.0 ... PICK.15,
  // SamplePart::stream of record.kept) between HEAD and TOK.k; a refused top-p position
  // ends in REFUSE, DONE instead of TOK.k. Throws for a position past WSUM's or SUM's first
  // segment (their crossings carry the attention's running values, which a record does not
  // hold).
  std::vector<int64_t> expected_position(const PositionRecord& record) const;
};

// Dimensions come from the checkpoint's header (dim <= 64 register elements). The
// attention stages are always on. Throws qpu::Error for options the units or heads
// cannot hold.
TokenMachine build_token_machine(const reference::Llama2Checkpoint& checkpoint, const TokenMachineOptions& options);

}  // namespace qpu::machine
