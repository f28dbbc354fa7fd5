#pragma once
// The KV-cache write address unit (docs/npu-units.md, "KV address"): a nested token's
// position pos -- an exact integer VALUE read from a register -- becomes the GDN address
// where its k and v are stored. Layout: per (nested layer, kv head), B banks (GDN heads);
// position t lives in bank t mod B, row t / B, so one SCORE micro-op reads B
// consecutive positions in one cycle (the same row of the B banks).
//
//   row_bits[b] = bit b of floor(pos / B), LSB first (GdnMemory key bits), b < row_bits
//   bank[k]     = [pos mod B == k]  (the write flag of bank k's head),       k < B
//
// every value exactly 0 or 1. Sublayers (row_bits + 2), all exact in any summation order:
//  1. gate: pe = silu(128 enable) * pos / 128 = enable * pos (no constant: pos is
//     zeroed on idle cycles whatever it holds);
//  2. row_bits steps, most significant first, on thresholds t = B 2^j: bit_j =
//     step(pe >= t), pe -= bit_j t (int_to_bits' two-neuron step), leaving pe = pos mod B;
//  3. one-hot: r_j = silu(128 (pe - j)) / 128 = max(pe - j, 0) for j = -1 .. B and
//     bank[k] = r_(k-1) - 2 r_k + r_(k+1), a sum of three small integers (table_lookup's
//     one-hot, written straight into the bank values by the r_j neurons' down columns).
// Cost: row_bits + 2 MLP sublayers, 1 + 2 row_bits + (B + 2) neurons.
//
// Valid range: pos an integer in [0, B 2^row_bits). Outside it, for an integer with
// |pos| <= 2^16, every output is still exactly 0 or 1 and the bank one-hot is all +-0
// (no head writes): pos >= B 2^row_bits gives row bits all 1 (the last step leaves
// pe >= B, where r_(k-1) - 2 r_k + r_(k+1) = 0 on the linear part), pos < 0 gives row
// bits all 0 (pe stays negative, every r_j is +-0). A non-integer pos is not supported.
//
// Idle contract: every constant of the unit reads `enable` (compiler::enable_constants);
// with enable = 0 the gate writes pe = +-0 whatever pos holds, and from there every
// gate and up form is +-0, so every value the unit writes (pe, the bits, the banks) is
// +-0: no write into any GDN head.
#include <cstddef>
#include <vector>

#include "compiler/ir.h"

namespace qpu::npu {

struct KvAddress {
  std::vector<compiler::ValueId> row_bits;  // row_bits values, LSB first
  std::vector<compiler::ValueId> bank;      // B values, one-hot
  size_t first_op = 0;                      // the unit's first op
};

// banks: B, a power of two >= 1; row_bits >= 0, with B 2^row_bits <= 2^16. Throws
// qpu::Error for other shapes, or when pos or enable is not a value of the program (or
// they are the same value).
KvAddress kv_address(compiler::Program& p, compiler::ValueId pos, compiler::ValueId enable, int banks, int row_bits);

// The fewest row bits with banks 2^row_bits >= positions (positions t in [0, positions)).
int kv_row_bits(int banks, int64_t positions);

}  // namespace qpu::npu
