#pragma once
// The elementwise work of a decode step that runs over the full width of a layer
// (norm scaling, residual adds, silu(gate) * up, the GDN conv + silu, the gated
// RMSNorm), vectorized, and with blocks of exact zeros skipped where the result is
// provably the same value. Every function gives the bits of the plain scalar loop
// written next to it, for every input (NaN, inf, -0 and subnormals included):
//
//   * Pure elementwise IEEE operations (x + y, x * r, x / d) do the same operation per
//     element in a vector lane as in a scalar register (no FMA: -ffp-contract=off), so
//     vectorizing them changes no bit.
//   * silu(x) returns x itself when x == 0 (numerics.h: silu(+-0) = +-0, as torch's
//     x / (1 + exp(-x)) gives), so in a block of 16 inputs that are all +-0, silu is the
//     identity and what is left is elementwise arithmetic, done in vectors. A block
//     with a nonzero (or NaN) input runs the scalar loop.
//   * A conv channel whose history and input are all +0 (bits 0) and whose taps are
//     finite sums w * (+0) = +-0 terms from +0, which is +0 (+0 + -0 = +0 in
//     round-to-nearest); silu(+0) = +0; and shifting +0s through a +0 history leaves
//     it unchanged. So a block of 16 such channels writes +0 and touches nothing else.
//     Anything else (a -0 anywhere, a non-finite tap in the layer) runs the scalar loop.
//
// An idle channel of a compiled layer (input exactly 0) therefore costs a vector
// compare instead of a call to exp or a 4-tap loop. docs/engine.md, "Idle channels".
#include <cstdint>
#include <vector>

#include "engine/dot.h"

namespace qpu::engine::elementwise {

inline constexpr int64_t kBlock = 16;  // floats per skip decision (one AVX-512 vector)

// The kernels of one instruction set (dot::Isa); all sets give the same bits.
struct Kernels {
  // x[i] = x[i] + y[i]
  void (*add)(float* x, const float* y, int64_t n);
  // out[i] = (x[i] * r) * scale[i]   (RMSNorm's scaling; out may be x)
  void (*scale_mul)(const float* x, float r, const float* scale, float* out, int64_t n);
  // scale_mul where blocks of 16 whose x is all +-0 and whose scale is `plain` (bit b
  // of plain[b / 64]: every scale value of block b is finite with the sign bit clear)
  // copy x instead: (+-0 * r) * s keeps x's bits for such s and a finite r with the sign
  // bit clear (the caller passes plain = nullptr for any other r). The scale of an idle
  // block, cold on a looped machine, is then not read. The bits of scale_mul.
  void (*scale_mul_plain)(const float* x, float r, const float* scale, const uint64_t* plain, float* out,
                          int64_t n);
  // out[i] = x[i] * m   (out may be x)
  void (*mul)(const float* x, float m, float* out, int64_t n);
  // out[i] = x[i] / d   (out may be x)
  void (*div)(const float* x, float d, float* out, int64_t n);
  // gate[i] = silu(gate[i]) * up[i]
  void (*silu_mul)(float* gate, const float* up, int64_t n);
  // y[i] = (w[i] * (o[i] * r)) * silu(z[i])   (the GDN's gated RMSNorm)
  void (*gated_norm)(const float* w, const float* o, float r, const float* z, float* y, int64_t n);
  // The GDN's causal depthwise conv update + silu, channel c in [0, channels):
  //   acc = +0; acc = acc + w[c][t] * state[c][t] for t < taps-1; acc = acc + w[c][taps-1] * in[c];
  //   state[c] shifts left by one and takes in[c] last; out[c] = silu(acc).
  // weight: [channels, taps]; state: [channels, taps-1]. taps_finite: every weight is
  // finite (else no channel is skipped).
  void (*conv_silu)(const float* weight, int64_t taps, bool taps_finite, float* state, const float* in,
                    float* out, int64_t channels);
  // conv_silu that also keeps, per block b of 16 channels (b < channels / 16), a count
  // zero_inputs[b]: how many of the block's latest inputs were all +0 (bits 0), capped at
  // taps-1. At taps-1 the block's history is all +0 without reading it, so a block whose
  // input is all +0 too writes +0 after one test of the input (the history of a GDN layer
  // that runs on a cycle is mostly +0 and mostly not in the cache). A count may be too
  // low (0 = unknown, always safe) but never too high: start from 0, or from taps-1 for a
  // state of +0s, and let no other code write the state. The same bits as conv_silu.
  void (*conv_silu_tracked)(const float* weight, int64_t taps, bool taps_finite, float* state, const float* in,
                            float* out, int64_t channels, uint8_t* zero_inputs);
  // The ascending indices i < n with x[i] != 0 (+0 and -0 are zeros, NaN is not),
  // written to rows; returns their count.
  int64_t (*nonzero_indices)(const float* x, int64_t n, int32_t* rows);
  // The residual facts of the idle-sublayer test (model.cpp): bit k of live[w] is 1 iff
  // x[64 w + k] is not +-0 (NaN is live), for (n + 63) / 64 words (the bits past n are
  // 0); returns whether every x[i] is finite. Pure bit tests: the same result in every set.
  bool (*live_words)(const float* x, int64_t n, uint64_t* live);
  // The greedy pick, n >= 1: the index the scan `if (x[i] > x[best]) best = i` from
  // best = 0 ends on (the first maximum; NaNs never win, but a NaN x[0] does, as the scan
  // never leaves it), and, when count_above is not null, how many x[i] > above. The index
  // of the scan in every set (a host's vocabulary of logits: one vector pass instead of a
  // compare and a branch per logit).
  int64_t (*argmax)(const float* x, int64_t n, float above, int64_t* count_above);
};

const Kernels& kernels();                 // the active instruction set (dot::active_isa())
const Kernels& kernels_for(dot::Isa isa);  // tests: a supported set

// RMSNorm with the kernels: r = rsqrt(mean(x^2) + eps) in the canonical dot order, then
// scale_mul. The bits of numerics::rms_norm. With `plain` (plain_blocks(scale)), idle
// blocks of x skip their scale (scale_mul_plain).
void rms_norm(const float* x, int64_t n, const float* scale, float eps, float* out,
              const uint64_t* plain = nullptr);
// dot::dot_f32(x, x, n) (the RMSNorm's sum of squares, canonical order) from the dims
// whose bit is set in `live` (live_words of this x: bit k of live[w] iff x[64 w + k] is
// not +-0): a +-0 dim squares to +0, a lane starts at +0 and is never -0, and
// s + (+0) = s for every other s, so leaving those terms out changes no lane and no bit.
// Costs the live dims, not n (a looped machine's residual is mostly exact zeros).
float sum_squares_live(const float* x, int64_t n, const uint64_t* live);
// RMSNorm into a buffer that is read only by matrix products (the normed input of a
// sublayer's projections), written only where it can be nonzero. A product gives the same
// bits for +0 and -0 in x: w * (+-0) is +-0 for finite w, which no lane keeps (a lane
// starts at +0, +0 + -0 = +0, s + (+-0) = s otherwise), and NaN for inf/NaN w either
// way. So out only has to be (x * r) * scale up to the sign of its zeros:
//   r = rsqrt(sum_squares_live / n + eps), the bits of numerics::rms_norm's r; when r is
//   finite, (+-0 * r) * s is +-0 wherever s is finite, so out is computed on the blocks
//   of 16 with a live dim, on `odd_blocks` (blocks whose scale holds inf or NaN) and on
//   the tail past the last full block, and is +0 elsewhere. The +0s are kept from the
//   previous call: only the blocks it wrote are cleared (the first call clears all).
// A looped machine's layer then costs its live dims instead of two passes over the width.
//
// read_blocks (bit b of word b / 64: block b of 16 dims; nullptr: every block): the blocks
// holding a column that the products reading `out` store (PackedMatrix::mark_stored_columns).
// A product reads x only at stored columns (the CSR rows, the column walk over nonempty
// columns), so a block no product reads may hold +0 instead of its value: only the live
// and odd blocks that are read are written (the tail always). Those products then give
// the bits of the plain norm's out, and so does every other reader that reads only there.
class LiveNorm {
 public:
  // The buffer's content is unknown (a new forward, another buffer, a dense write).
  void forget() { known_ = false; }
  // false when this path does not apply (r not finite, or too many live dims to pay);
  // nothing is written then and the caller runs the plain RMSNorm (and forget()).
  bool run(const float* x, int64_t n, const float* scale, float eps, const uint64_t* live,
           const std::vector<int32_t>& odd_blocks, float* out, const uint64_t* read_blocks = nullptr);
  // After a run that returned true: bit b is set for each block of 16 that the run wrote;
  // every other full block of out is +0 (the tail past n / 16 blocks is always written).
  const uint64_t* written_blocks() const { return written_bits_.data(); }

 private:
  bool known_ = false;
  int64_t n_ = 0;
  const float* out_ = nullptr;
  std::vector<int32_t> written_;  // blocks written since the buffer was last all +-0
  std::vector<uint64_t> written_bits_;  // the blocks the last run wrote
};
// The blocks of 16 of a scale vector that hold a non-finite value (LiveNorm's odd_blocks).
std::vector<int32_t> non_finite_blocks(const float* scale, int64_t n);
// scale_mul_plain's mask of a scale vector: bit b set iff scale[16 b, 16 b + 16) are all
// finite with the sign bit clear (a partial last block never is).
std::vector<uint64_t> plain_blocks(const float* scale, int64_t n);
// GDN l2norm in place: the bits of numerics::l2norm (an all-+-0 x is left as it is:
// that is what the formula gives).
void l2norm(float* x, int64_t n);
// numerics::mean_square_plus_eps with the all-+-0 x answered without the sum (0 / n + eps,
// the same bits).
float mean_square_plus_eps(const float* x, int64_t n, float eps);
// Every x[i] is +0 or -0 (n = 0 included).
bool all_zero(const float* x, int64_t n);

}  // namespace qpu::engine::elementwise
