#pragma once
// The nested model's greedy HEAD as a part of a looped machine, shared by the HEAD
// machine (machine/testing/head_machine.h) and the whole-token machine (machine/token_machine.h):
//
//  * HEAD (1 cycle, sends nothing): rmsnorm(x, x, rms_final) -> wcls in row blocks ->
//    sample_argmax (npu::rmsnorm_unit, npu::greedy_head_blocks); the winning logit into
//    the logit RAM; the host's next token is the story token TOK.k (a computed
//    successor: the argmax's one-hot selects its LM head row), or a forced token (a
//    prompt's) instead of the argmax when the machine gives one;
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
  // true: the argmax's one-hot (or the forced token's) is the computed successor TOK.k.
  // false: it is only exposed (HeadPart::onehot()); HEAD names HeadControl::next, or, when
  // that is empty, its successor is the one the machine computes (e.g. from onehot() and
  // the sampler's, machine/sample_part.h). A machine that does not read onehot() clears
  // it (Assembler::discard).
  bool argmax_successor = true;
};

struct HeadControl {
  int64_t x_register = -1;  // the register row HEAD reads (-1: none)
  std::vector<std::pair<compiler::ValueId, float>> head_sets;  // more flags HEAD sets
  // TOK.k's micro-op but its write of k into TOK (HeadPart adds that): its successor(s)
  // and any flags it sets.
  std::function<MicroOp(int k)> story_token;
  // HEAD's successor when HeadOptions::argmax_successor is false (empty: computed by the
  // machine).
  std::string next;
};

class HeadPart {
 public:
  // HEAD, RT, RL, TOK.k for every nested token k.
  static std::vector<std::string> names(const reference::Llama2Config& config);

  // Appends the units. `x`: what HEAD reads, built from HEAD's flag (exact, +-0 on every
  // cycle where the flag is 0). `tok`: the immediate register TOK. `forced` (optional,
  // built from HEAD's flag): an exact integer, 0 when the argmax chooses the next token,
  // k + 1 when the token must be k (run.c's prompt tokens), +-0 when HEAD is idle.
  using FromFlag = std::function<std::vector<compiler::ValueId>(compiler::ValueId head)>;
  HeadPart(Assembler& as, const reference::Llama2Checkpoint& checkpoint, const HeadOptions& options,
           const Assembler::Immediate& tok, const FromFlag& x, const FromFlag& forced = nullptr);
  compiler::ValueId flag() const { return head_; }

  // The classifier's logits (run.c's logits vector), complete before the argmax reads
  // them on HEAD's cycle (AssembledMachine::probes).
  const std::vector<compiler::ValueId>& logits() const { return logits_; }
  // The one-hot of the story token HEAD chooses (the argmax, or the forced token).
  const std::vector<compiler::ValueId>& onehot() const { return onehot_; }

  // Lanes: TOK, the winning logit.
  const std::vector<compiler::ValueId>& lanes() const { return lanes_; }

  // Defines HEAD, TOK.k, RT and RL (lanes from `first_lane` of send(), enable `send`).
  void define(int first_lane, compiler::ValueId send, const HeadControl& control);

 private:
  Assembler& as_;
  int vocab_ = 0;
  Assembler::Immediate tok_;
  bool argmax_successor_ = true;
  compiler::ValueId head_ = 0, logit_read_ = 0;
  std::vector<compiler::ValueId> lanes_, logits_, onehot_;
};

std::string story_token_name(int k);  // TOK.k

}  // namespace qpu::machine
