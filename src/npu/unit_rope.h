#pragma once
// The looped machine's RoPE unit (docs/npu-units.md): run.c's rotation of q (i < dim)
// and k (i < kv_dim) at one position pos, every float operation exactly C's:
//   freq = 1.0f / powf(10000.0f, head_dim / (float)head_size); val = pos * freq;
//   fcr = cosf(val); fci = sinf(val);
//   vec[i] = v0 * fcr - v1 * fci; vec[i+1] = v0 * fci + v1 * fcr;
// fcr and fci are constants per (pos, head_dim) computed here with this machine's libm
// exactly as reference/transformer.cpp does; the unit selects them by a one-hot of pos
// that it builds from the integer pos (3 sublayers in all):
//  1. one-hot: r_m = silu(128 (pos - m)) / 128 = max(pos - m, 0) exactly for integer pos
//     (gates are 0 or multiples of 128 of magnitude >= 128: silu's exact windows), and
//     H_p = r_(p-1) - 2 r_p + r_(p+1) = [pos == p] (a sum of three small integers);
//  2. select: per position p one neuron (gate 128 H_p, up H_p / 128) whose down column
//     holds the head_size constants fcr/fci(p, .): each constant value has one live term;
//  3. rotate: the four products by P3 pairs (mul), each pair delivering fl(c * v) times
//     +-1 into the output: the down sum of the two live terms is C's one rounding of
//     fl(v0 fcr) - fl(v1 fci) (resp. fl(v0 fci) + fl(v1 fcr)).
// The integer pos costs seq_len + 1 neurons and seq_len values for the one-hot, cheaper
// in reads than a one-hot input (one value instead of seq_len). Because pos = 0 is a
// valid position, the unit takes an explicit enable flag (exactly 0 or 1); every constant
// of the unit reads it (compiler::enable_constants), so an idle unit (enable = 0, pos =
// 0, q = k = 0) writes only +-0.
// Window: |fcr|, |fci| >= 2^-57 or 0 (checked: P3's gate), q and k in the value window.
#include <vector>

#include "compiler/ir.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::npu {

struct RopeUnit {
  std::vector<compiler::ValueId> q, k;  // rotated copies (dim, kv_dim values)
  std::vector<compiler::ValueId> one_hot;
  size_t first_op = 0;
};

// run.c's (fcr, fci) for position pos and pair index i (head_dim = i % head_size).
struct RopeConstants {
  float fcr, fci;
};
RopeConstants rope_constants(int pos, int head_dim, int head_size);

// q.size() == config.dim, k.size() == config.kv_dim(); pos an integer in [0, seq_len).
RopeUnit rope_unit(compiler::Program& p, const reference::Llama2Config& config, compiler::ValueId enable,
                   compiler::ValueId pos, const std::vector<compiler::ValueId>& q, const std::vector<compiler::ValueId>& k);

// run.c's RoPE on q (dim floats) and k (kv_dim floats) in place.
void rope_reference(const reference::Llama2Config& config, int pos, float* q, float* k);

}  // namespace qpu::npu
