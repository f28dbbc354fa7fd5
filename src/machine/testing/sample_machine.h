#pragma once
// M3 (docs/npu-machine.md, "M3: sampling", "On the machine"): run.c's temperature
// sampling below HEAD, as a test machine (the HEAD machine's shape, machine/testing/head_machine.h,
// with machine/sample_part.h after HEAD). A prompt loads x after the last nested layer
// (run.c's x_ffn_res of layer n_layers - 1) into register X, the temperature into T and
// the coin (run.c's random_f32 draw for this position) into COIN, and names HEAD; or,
// with SampleMachineOptions::rng, the seed's four 16-bit limbs into SEED.j, the prompt's
// token count (with BOS) into PLEN and the position into POS, and MAX draws the coin
// (npu::rng_draw, draw n = POS - PLEN + 2: run.c's random_f32 of that position):
//
//   HEAD                 rmsnorm, the classifier: the logits; with T = 0 (run.c's greedy)
//                        its argmax names TOK.k at once, else TEMP.0 (SamplePart::successor)
//   TEMP.b (b < nb)      logits / t, block b, and its max
//   MAX                  softmax's max (and the coin from the seed, with rng)
//   EXP.b                expf(x - max), block b
//   SUM                  softmax's sum, in run.c's order
//   PROB.b               e / sum, block b
//   CDF                  sample_mult with the coin: its one-hot names the story token TOK.k
//                        (with top-p, 0 < topp < 1: KEEP ... PICK instead, machine/sample_part.h)
//   TOK.k, RT, RL        as the HEAD machine: k sent up, then HEAD's (argmax) logit, DONE.
//
// nb = vocab / block (stories260K: 64 blocks of 8): 3 nb + 4 host cycles per sampled
// position from HEAD to TOK.k.
#include <cstdint>
#include <vector>

#include "machine/assembler.h"
#include "machine/head_part.h"
#include "machine/sample_part.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::machine {

struct SampleMachineOptions : HostOptions, HeadOptions {
  SampleOptions sample;
  bool rng = false;     // the coin from the seed on MAX's cycle (else a register the prompt writes)
  int max_draws = 256;  // with rng: draws up to this n are exact (run.c's steps)
};

struct SampleMachine : AssembledMachine {
  int dim = 0, vocab = 0, blocks = 0, block = 0;
  bool rng = false, topp = false;
  // Where the sample part's values can be seen on their stages' cycles (SampleValues'
  // order: scaled (block), block max, max, mant (block), exponent (block), sum, pm
  // (block), cdf (vocab), lt (vocab), one-hot (vocab), with rng the coin, with top-p the cutoff, count_in, keep
  // (block), slot (block), kept_p (8), kept_q (8), n0, rank (8), sorted_p (8), sorted_q (8), cum
  // (128), last_idx, cumulative_prob, r, pick; with top-p no cdf and lt: no CDF).
  std::vector<ValueProbe> value_probes;
  std::vector<compiler::ValueId> probed_values;  // the program's values behind value_probes

  // WX.i + the parts of x_i for every i, WT + the temperature's, WC + the coin's, HEAD.
  std::vector<int64_t> load_and_run(const std::vector<float>& x, float temperature, float coin) const;
  // With rng: WX.i, WT, WS.0 ... WS.3 + the seed's 16-bit limbs (least significant first),
  // WPLEN + plen, WPOS + pos, HEAD.
  std::vector<int64_t> load_and_run_seeded(const std::vector<float>& x, float temperature, uint64_t seed, int plen,
                                           int pos) const;
  // What the machine generates after HEAD when the sampler picks k (HEAD's argmax logit
  // `logit`): TEMP.0 ... PROB.(nb - 1), CDF, TOK.k, RT, the parts of k, RL, the parts of
  // the logit, DONE. With top-p (`kept`: run.c's n0, the entries that reach the cutoff)
  // KEEP.0 ... SLOT.15, then RANK.i.j for i, j < m = ceil(n0 / 8) (RNEXT.i after each
  // row block i), RANKSUM.0 ... SORTED.15, PICK.0 ... PICK.15 instead of CDF; for n0 = 0 or
  // n0 > kToppSlots SLOT.15, REFUSE, DONE (no story token: k and logit unused).
  // sampled false (temperature 0, run.c's greedy argmax): TOK.k directly.
  std::vector<int64_t> expected(int k, float logit, bool sampled = true, int kept = -1) const;
  int64_t story_token(int k) const;  // TOK.k
};

// Dimensions from the checkpoint's header (dim <= 64 register elements, vocab a multiple
// of the block). Throws qpu::Error for options the units or heads cannot hold.
SampleMachine build_sample_machine(const reference::Llama2Checkpoint& checkpoint, const SampleMachineOptions& options);

}  // namespace qpu::machine
