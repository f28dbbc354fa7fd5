#pragma once
// M2b (docs/npu-machine.md, "M2b plan"): the nested model's QKV micro-op on the looped
// machine, with the position in a scalar register and the KV cache in GDN RAM. A prompt
// loads run.c's x at the start of layer l into register X and the position into POS and
// names QKV(l); QKV(l) (1 cycle, sends nothing) runs
//
//   rmsnorm(xb, x, rms_att[l]); q = wq xb; k = wk xb; v = wv xb; RoPE(pos) on q and k
//
// (npu::qkv_block), writes q into the q RAM (npu/float_ram.h, wiped and written at once)
// and k, v into the KV cache: per (layer l, kv head j), `kv_banks` heads, position t in
// head t mod banks, row t / banks (npu/kv_address.h computes the address from POS), one
// row = k_t,j || v_t,j, written once. The read-back micro-ops (4 cycles each) send a
// stored float up: RQ.i element i of q; RK(l).i / RV(l).i element i of k / v of layer l
// at the position POS holds, so a test sees every float, at any earlier position. INC
// (4 cycles) reads POS and sends pos + 1 up into POS, as the nested token's last
// micro-op will.
//
// The cache's out values are shared in slots: bank b reads into slot b mod 8 (a SCORE
// micro-op will read 8 consecutive positions, one per slot); the heads of one (layer,
// group of 8 banks) are one float RAM, and the groups write the same slot values in
// later sublayers (exact: one bank reads at a time).
//
// With options.attention, the attention's stages follow the cache (M2c,
// machine/attention_stages.h): SCORE, MAX, EXP, SUM, PROB, WSUM and their RAMs
// and read-backs, then ATTO(l).i (4 cycles each): x + wo xb, element i sent up (x from
// X, xb from the xb RAM).
//
// Stack: register file + POS → QKV block → KV addresses → q RAM, KV cache → [SCORE →
// score RAM, block-max RAM → MAX → max RAM → EXP → exp RAM → SUM → sum RAM → PROB → prob RAM,
// v RAM → WSUM → xb RAM → ATTO] →
// uplink.
#include <cstdint>
#include <utility>
#include <vector>

#include "machine/assembler.h"
#include "machine/attention_half.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::machine {

struct QkvMachineOptions : HostOptions, AttentionOptions {};

struct QkvMachine : AssembledMachine {
  int dim = 0, kv_dim = 0, layers = 0;

  int64_t qkv(int l) const;  // QKV(l)
  // WX.i + the parts of x_i for every i.
  std::vector<int64_t> load_x(const std::vector<float>& x) const;
  // Tokens that load x into X and pos into POS, then run QKV(l) (no HDR).
  std::vector<int64_t> load_and_run(const std::vector<float>& x, int pos, int layer) const;
  // WPOS + the parts of pos.
  std::vector<int64_t> set_pos(int pos) const;
  // What RQ.0 generates: per float of q its three parts and the next token, DONE last.
  std::vector<int64_t> expected_q(const std::vector<float>& q) const;
  // What RK(l).0 generates: k then v of layer l at POS, DONE last.
  std::vector<int64_t> expected_kv(int layer, const std::vector<float>& k, const std::vector<float>& v) const;

  // M2c (options.attention). SCORE(l).0 .. SCORE(l).(nb - 1) then MAX(l), for the position
  // POS holds (nb = pos / 8 + 1): the scores of layer l's heads at every position <= pos
  // and each head's max, run.c's att[] before the softmax.
  int heads = 0, exp_groups = 0;
  std::vector<int64_t> score_and_max(int layer, int pos) const;
  // What MAX(l) generates: its successor RM.0, then the max of every head, DONE last.
  std::vector<int64_t> expected_max(const std::vector<float>& max) const;
  // What RS.0 generates: every head's scaled score at the position POS holds, DONE last.
  std::vector<int64_t> expected_scores(const std::vector<float>& scores) const;
  // EXP(l).b.g for every block b <= pos / 8 and head group g (after score_and_max).
  std::vector<int64_t> exps(int layer, int pos) const;
  // SUM(l).h.0 for every head h (after exps; POS in SUM's first segment), and what RSUM.0
  // generates: every head's softmax sum, DONE last.
  std::vector<int64_t> sums(int layer) const;
  std::vector<int64_t> expected_sums(const std::vector<float>& sum) const;
  // PROB(l).b.g for every block b <= pos / 8 and head group g (after sums), and what RP.0
  // generates: every head's pm, then every head's exponent, at POS; DONE last.
  std::vector<int64_t> probs(int layer, int pos) const;
  std::vector<int64_t> expected_probs(const std::vector<float>& pm, const std::vector<float>& exponent) const;
  // WSUM(l).h.0 and WSUMX(l).h for every head h (after probs; POS in WSUM's first segment,
  // no head unsafe), and what RXB(h).0 generates: head h's
  // xb (run.c's att_out for the head), then its unsafe bit (1: the fast path's xb may
  // differ from C's), DONE last.
  std::vector<int64_t> wsums(int layer) const;
  std::vector<int64_t> expected_xb(int head, const std::vector<float>& xb, bool unsafe) const;
  // What ATTO(l).0 generates (with X holding layer l's x at the position the stages ran
  // at): run.c's x after the attention, x + wo xb, element by element; DONE last.
  std::vector<int64_t> expected_atto(int layer, const std::vector<float>& x) const;
  // What RE.0 generates: every head's mant, then every head's exponent, at POS; DONE last.
  std::vector<int64_t> expected_exps(const std::vector<float>& mant, const std::vector<float>& exponent) const;

 private:
  // For i < count, in order, each form's op(l).i + suffix.
  using StageForm = std::pair<const char*, std::string>;
  std::vector<int64_t> stage_tokens(int layer, int count, const std::vector<StageForm>& forms) const;
  // op(l).i.g for every head group g.
  std::vector<StageForm> grouped(const char* op) const;
  // What ops[0].0 generates: for each op, every head's float (floats in that order), DONE last.
  std::vector<int64_t> read_backs(const std::vector<const char*>& ops, const std::vector<float>& floats) const;
};

// Dimensions come from the checkpoint's header (dim <= 64 register elements). Throws
// qpu::Error for options the units or heads cannot hold.
QkvMachine build_qkv_machine(const reference::Llama2Checkpoint& checkpoint, const QkvMachineOptions& options);

}  // namespace qpu::machine
