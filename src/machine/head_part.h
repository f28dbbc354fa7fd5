#pragma once
// The nested model's greedy HEAD as a part of a looped machine, shared by the HEAD
// machine (machine/head_machine.h) and the whole-token machine (machine/token_machine.h):
//
//  * HEAD (1 cycle, sends nothing): rmsnorm(x, x, rms_final) -> wcls in row blocks ->
//    sample_argmax (npu::rmsnorm_unit, npu::greedy_head_blocks); the winning logit into
//    the logit RAM; the host's next token is the story token TOK.k (a computed
//    successor: the argmax's one-hot selects its LM head row);
//  * TOK.k (1 cycle): writes k into the immediate register TOK on its own cycle;
//  * RT, RL (4 cycles each): TOK, then the winning logit, sent up.
#include <functional>
#include <string>
#include <vector>

#include "machine/assembler.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::machine {

struct HeadOptions {
  // Classifier rows per block: 86 (6 blocks for stories260K's 512) fits hidden 1,024 in 512
  // layers; 64 rows fit too (596 layers), 103 (5 blocks) need hidden 1,152.
  int block_rows = 86;
  int logit_low_binade = -31;  // the logit RAM holds 0 and |logit| in [2^-31, 2^6)
};

class HeadPart {
 public:
  // HEAD, RT, RL, TOK.k for every nested token k.
  static std::vector<std::string> names(const reference::Llama2Config& config);

  // Appends the units. `x`: what HEAD reads (exact, +-0 on every cycle where `head_on()`
  // is 0; the caller builds it from head_on()). `tok`: the immediate register TOK.
  HeadPart(Assembler& as, const reference::Llama2Checkpoint& checkpoint, const HeadOptions& options,
           const Assembler::Immediate& tok, const std::function<std::vector<compiler::ValueId>(compiler::ValueId)>& x);

  // Lanes: TOK, the winning logit.
  const std::vector<compiler::ValueId>& lanes() const { return lanes_; }

  // Defines HEAD (reading register row `x_register`, -1 for none), TOK.k (naming
  // `after_token`), RT and RL (lanes from `first_lane` of send(), enable `send`).
  void define(int first_lane, compiler::ValueId send, int64_t x_register, const std::string& after_token);

 private:
  Assembler& as_;
  int vocab_ = 0;
  Assembler::Immediate tok_;
  compiler::ValueId head_ = 0, logit_read_ = 0;
  std::vector<compiler::ValueId> lanes_;
};

std::string story_token_name(int k);  // TOK.k

}  // namespace qpu::machine
