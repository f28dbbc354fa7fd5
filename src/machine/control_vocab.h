#pragma once
// The control tokens of the looped machine (docs/npu-machine.md, "M1 skeleton"): the
// host ids after the value tokens, and the LM head signature that makes the host's
// argmax pick exactly one of them.
//
// Control token c (0-based among the control tokens) has the signature (group c / G,
// member c % G). The program computes two one-hot feature vectors, `group` and
// `member`; the LM head row of token c holds 2^20 on group[c / G] and 2^10 on
// member[c % G]. When the features name c, c scores 2^20 + 2^10 and every other row at
// most 2^20 (exact small integers in any summation order) — the same construction as
// the value tokens (npu/uplink.h), on features of their own, so on a cycle that emits a
// control token every value token scores 0 and vice versa.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compiler/allocate.h"
#include "compiler/ir.h"
#include "io/qwen35_weights.h"

namespace qpu::machine {

// A control token's family: its name with every run of digits collapsed to '#'
// (FFN(2).17 -> FFN(#).#). Profiles and the machine map group tokens by it.
std::string control_family(const std::string& name);

struct ControlVocab {
  int64_t first = 0;        // host id of control token 0
  int64_t count = 0;        // number of control tokens
  int64_t group_size = 16;  // G

  int64_t groups() const { return (count + group_size - 1) / group_size; }
  int64_t id(int64_t c) const;     // throws for c outside [0, count)
  int64_t index(int64_t id) const;  // throws for an id that is not a control token
  bool contains(int64_t id) const { return id >= first && id < first + count; }
};

// The group size that makes a signature set smallest: ceil(sqrt(count)), so a set has about
// 2 sqrt(count) features instead of count / 16 + 16. Every set lives in residual dims from
// the token that names a successor to the LM head, and a machine carries four (the
// successor now, the delayed one, a branch's two).
int64_t signature_group_size(int64_t count);

// One set of signature features (values of a program).
struct SignatureFeatures {
  std::vector<compiler::ValueId> group, member;

  std::vector<compiler::ValueId> all() const;
  // (value, 1) for the two features that name control token c (for embedding rows).
  std::vector<std::pair<compiler::ValueId, float>> naming(const ControlVocab& vocab, int64_t c) const;
};

SignatureFeatures signature_features(compiler::Program& p, const ControlVocab& vocab, const char* name);

// A successor as token inputs travel it down the stack: a flag `named` (1 when the code
// names a token) and the token's group and member in binary, about 2 log2(sqrt(count)) + 1
// dims instead of a signature set's 2 sqrt(count). Every value is exactly 0 or 1, and the
// all-zero code names nothing.
struct SuccessorCode {
  compiler::ValueId named = compiler::kNever;  // kNever and no bits: not made (successor_code)
  std::vector<compiler::ValueId> group_bits, member_bits;  // least significant first

  std::vector<compiler::ValueId> all() const;
  // (value, 1) for the code of control token c (for embedding rows).
  std::vector<std::pair<compiler::ValueId, float>> naming(const ControlVocab& vocab, int64_t c) const;
};

SuccessorCode successor_code(compiler::Program& p, const ControlVocab& vocab, const char* name);

// Adds the signature the code names into `into` (one MLP op, one neuron per feature): the
// neuron of group g has gate 128 (sum over the bits of +b_i where g has a 1, -b_i where it
// has a 0, plus (1 - popcount(g)) named) and up named / 128: the gate is 128 exactly when
// the bits are g and named is 1, else an integer multiple of 128 at most 0 (silu 0 or -0),
// and all-zero codes give +-0 everywhere. No constant: free on cycles that name nothing.
void decode_successor(compiler::Program& p, const SuccessorCode& code, const SignatureFeatures& into,
                      const ControlVocab& vocab, const std::string& label);

// Writes the LM head rows of the control tokens (2 nonzeros each). Needs an untied
// LM head and a final norm that passes values through unchanged (compiler/emit.h).
void install_control_head(io::Qwen35Weights& weights, const compiler::Allocation& allocation,
                          const SignatureFeatures& f, const ControlVocab& vocab);

}  // namespace qpu::machine
