#pragma once
// run.c's coin of the n-th draw, computed in one pass from the seed and n
// (docs/npu.md, "RNG draw by GF(2) jump"; docs/journal/npu-machine-design-study.md section 6.3). The looped
// machine cannot carry the 64-bit xorshift state from one nested position to the next
// (it would have to go up through value tokens), but the state update is linear over
// GF(2): the state after n steps is M^n seed, M a 64x64 bit matrix. So the unit takes
// the seed (written once by the host prompt) and n, and computes
//
//   state_n = prod over the set bits k of n of M^(2^k), applied to the seed bits,
//   u32     = (state_n * 0x2545F4914F6CDD1D) >> 32,  coin = (u32 >> 8) / 16777216.0f
//
// i.e. exactly what the n-th call of run.c's random_u32 / random_f32 returns.
//
// Encoding:
//  * seed: 4 values holding the 16-bit limbs of the 64-bit seed (limb j = bits 16j ..
//    16j+15), exact integers in [0, 2^16): what a host prompt can write as 4 floats.
//  * draw: n, an exact integer in [0, 2^22); the unit uses n mod 2^K, K = bit_width(
//    max_draws), so every n in [0, max_draws] is exact (n = 0: the seed's own u32).
//  * enable: exactly 1 when the unit runs, exactly 0 when idle (e.g. flags_enable).
//
// Sublayers (every form exact in any summation order, so HostSim's orders agree):
//  1. floors (2 sublayers, all in parallel): q_jk = floor(limb_j / 2^k), k = 1..15, and
//     r_k = floor(n / 2^k), k = 0..K (floor_div_pow2); seed bit 16j+k = q_jk - 2 q_j(k+1)
//     and bit k of n = r_k - 2 r_(k+1) stay linear forms (no value per bit).
//  2. K conditional jumps, most significant bit of n first (the powers of M commute),
//     2 sublayers each, on the state s (bits as linear forms, then values):
//       a. S_i = b ? (A s)_i : s_i with A = M^(2^k), an integer <= 64: a select pair
//          (gates 128 b and 128 (1 - b)) whose ups are S/2 - 1/4 for either branch, plus
//          one constant neuron shared by the 64 rows; into t_i = fl(y + 1.5 2^23) =
//          1.5 2^23 + floor(S_i / 2) (floor_div_pow2's tie-free rounding) and into
//          v_i = 2 y + 1/2 = S_i;
//       b. v_i += 2 (1.5 2^23) - 2 t_i (a two-term up, exact): v_i = S_i mod 2, the new bit.
//  3. the output half of xorshift64star (npu::xorshift_output, 18 sublayers) on v.
// Cost for max_draws = 256 (K = 9): 2 + 18 + 18 = 38 sublayers (measured in the test).
//
// Idle contract: every constant of the unit reads `enable` (compiler::enable_constants).
// With enable = 0 every neuron of the floors and of the first jump has a gate of +-0
// whatever the seed limbs and n hold (the floors' gates are the constant; the select
// gates are bits of n as floors of it, and 1 - b), so every value the unit writes is
// +-0, and from there every later form is +-0 too. Seed 0 with enable 1 is run.c's
// degenerate fixed point: state, u32 and coin all 0.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "compiler/ir.h"

namespace qpu::npu {

// A 64x64 matrix over GF(2): row i has bit j set iff bit i of M s depends on bit j of s.
using Gf2Matrix = std::array<uint64_t, 64>;

// M s over GF(2): bit i = parity(row_i & s).
uint64_t gf2_apply(const Gf2Matrix& m, uint64_t s);
// a b (b applied first).
Gf2Matrix gf2_multiply(const Gf2Matrix& a, const Gf2Matrix& b);
// One step of run.c's state update (s ^= s >> 12; s ^= s << 25; s ^= s >> 27) as a
// matrix, from the images of the 64 unit vectors.
Gf2Matrix xorshift_matrix();
// M^(2^k) for k = 0 .. count-1, by repeated squaring.
std::vector<Gf2Matrix> xorshift_jump_powers(int count);

struct RngDraw {
  std::vector<compiler::ValueId> state;  // state after n steps, 64 bits LSB first (0/1)
  compiler::ValueId u32_lo, u32_hi;      // u32 & 0xffff, u32 >> 16 (exact integers)
  compiler::ValueId coin;                // (u32 >> 8) / 2^24, exactly C's float
  int jumps = 0;                         // K: conditional jumps (bits of n)
  size_t first_op = 0;                   // the unit's first op
};

// max_draws in [1, 2^20]. Throws qpu::Error when a seed limb, draw or enable is not a
// value of the program, or two of them are the same value, or max_draws is out of range.
RngDraw rng_draw(compiler::Program& p, const std::array<compiler::ValueId, 4>& seed_limbs, compiler::ValueId draw,
                 int max_draws, compiler::ValueId enable);

}  // namespace qpu::npu
