#pragma once
// The uplink: how a value computed deep in the host gets back to layer 0.
//
// In a decoder-only host every cache belongs to one layer and stores that layer's input,
// so a value computed at depth d reaches later tokens only at depths > d; the one path
// back to the shallow layers is the output token (docs/npu-machine.md, "The depth law"). The uplink
// makes that path exact: a float x is split into three parts of at most 8 significant
// bits (x = p0 + p1 + p2 exactly), and a part is emitted as a *value token* whose id
// names (sign, binade j, 8-bit mantissa m): part = ±m·2^(j-7), m in [128, 255]. The
// token's embedding row carries the part's value (exact even in bf16) into an inbox dim
// at the next forward, where the parts add back to x exactly.
//
// Emission is an argmax that cannot tie or round: the program computes, for the part c,
// the one-hot of (binade j, sign) and the one-hot of the 8-bit mantissa m; the LM head
// row of token v has 2^20 on v's (binade, sign) feature and 2^10 on v's mantissa
// feature. The binade one-hot is 1 on the hot entry but the mantissa one-hot is 2^-7
// (its neurons are silu(128)·(1/128)·(1/128)), so the right token scores 2^20 + 2^3 and
// every other at most 2^20 (exact dyadic numbers in any summation order; measured by
// the machine's exact-score check, src/machine). Two nonzeros per row, two nonzero
// features.

#include <array>
#include <cstdint>
#include <vector>

#include "compiler/emit.h"
#include "compiler/ir.h"

namespace qpu::npu {

// The value tokens: ids [first, first + size()). Binades j in [jmin, jmax].
struct ValueVocab {
  int64_t first = 0;
  int jmin = -70;
  int jmax = 20;

  int64_t size() const { return 1 + 2 * int64_t{jmax - jmin + 1} * 128; }
  // The token for a part (0 or ±m·2^(j-7) with m in [128, 255], j in the window).
  // Throws qpu::Error for anything else.
  int64_t token(float part) const;
  // The part a token stands for (its embedding row's inbox value).
  float value(int64_t token) const;
};

// x = p0 + p1 + p2 exactly, each part 0 or with <= 8 significant bits, |p0| >= |p1| >= |p2|
// (two Veltkamp splits with 2^16 + 1). Window: x = 0 or |x| in [2^-47, 2^20): then every
// nonzero part lies in [2^-70, 2^20] (rounding the high part to 8 bits can carry into
// binade 20). 8 MLP sublayers.
std::array<compiler::ValueId, 3> split_parts(compiler::Program& p, compiler::ValueId x);
// The same split in C (one float operation per NPU op).
std::array<float, 3> split_parts_reference(float x);

// What the LM head reads to emit a part c (computed by emit_features).
struct EmitFeatures {
  std::vector<compiler::ValueId> t;  // t[j - jmin] = [|c| >= 2^j] (t[0] = [c != 0])
  compiler::ValueId sign;            // [c < 0]
  compiler::ValueId mantissa;        // m (0 when c = 0)
  std::vector<compiler::ValueId> positive, negative;  // [binade j and c > 0], [binade j and c < 0]
  std::vector<compiler::ValueId> mantissa_hot;        // [m == k], k = 128..255
  compiler::ValueId zero;                             // [c == 0]
};
// The features of one part c (0, or 8 significant bits with binade in the window).
// 11 MLP sublayers; about 23 neurons per binade and 3 per mantissa value.
EmitFeatures emit_features(compiler::Program& p, compiler::ValueId c, const ValueVocab& vocab);

// Writes the LM head rows of the value tokens (every other row is left as compiled) so
// that the host's argmax is the token of the part whose features `f` holds. Needs the
// compiled checkpoint's final norm to pass values through unchanged (docs/npu.md: final
// norm weight 2^k) and an untied LM head.
void install_value_head(io::Qwen35Weights& weights, const compiler::Allocation& allocation, const EmitFeatures& f,
                        const ValueVocab& vocab);

// A test checkpoint for the round trip: the vocabulary is the value tokens (ids
// [0, vocab.size())), then three rows per float: row first_row + 3k + i emits part i of
// xs[k]. Every token's embedding row also writes its inbox value (the value tokens'
// parts) into the value `inbox`. Window of xs: as split_parts.
struct UplinkCheckpoint {
  compiler::Compiled compiled;
  ValueVocab vocab;
  compiler::ValueId inbox = 0;
  int64_t first_row = 0;
};
UplinkCheckpoint build_uplink_checkpoint(const std::vector<float>& xs);

}  // namespace qpu::npu
