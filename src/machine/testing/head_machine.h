#pragma once
// M2d (docs/npu-machine.md, "M2 build order" step 5): the nested model's greedy HEAD on
// the looped machine, and the story token that comes out of it. A prompt loads x after
// the last nested layer (run.c's x_ffn_res of layer n_layers - 1) into register X and
// names HEAD; HEAD (1 cycle, sends nothing) runs
//
//   rmsnorm(x, x, rms_final); logits = wcls x; k = sample_argmax(logits)
//
// (npu::rmsnorm_unit, npu::greedy_head_blocks: the classifier in row blocks laid one below
// the other, each block's (max, index) meeting the running one by run.c's tie rule), keeps
// the winning logit in the logit RAM (npu/float_ram.h), and makes the HOST's next token
// the story token TOK.k: its successor is computed (Assembler::computed_successor: the
// argmax's one-hot selects TOK.k's LM head row, 2^20 + 2^10 like any control token).
// TOK.k's embedding writes k into the scalar register TOK on its own cycle (an immediate:
// Assembler::immediate_register) and names RT. The read-backs (4 cycles each) show what
// happened: RT sends TOK up, then RL the winning logit, then DONE. In the whole machine
// TOK.k will name QKV(0), whose x is embedding_lookup(TOK) (npu/table_lookup.h).
//
// Stack: register file, TOK → rmsnorm (rms_final) → classifier blocks → argmax blocks →
// one-hot → computed successor; logit RAM → uplink.
#include <cstdint>
#include <vector>

#include "machine/assembler.h"
#include "machine/head_part.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::machine {

struct HeadMachineOptions : HostOptions, HeadOptions {};

struct HeadMachine : AssembledMachine {
  int dim = 0, vocab = 0;

  // WX.i + the parts of x_i for every i, then HEAD (no HDR).
  std::vector<int64_t> load_and_run(const std::vector<float>& x) const;
  // What HEAD generates when it chooses k with winning logit `logit`: TOK.k, RT, the parts
  // of k, RL, the parts of the logit, DONE.
  std::vector<int64_t> expected(int k, float logit) const;
  int64_t story_token(int k) const;  // TOK.k
};

// Dimensions from the checkpoint's header (dim <= 64 register elements). Throws qpu::Error
// for options the units or heads cannot hold.
HeadMachine build_head_machine(const reference::Llama2Checkpoint& checkpoint, const HeadMachineOptions& options);

}  // namespace qpu::machine
