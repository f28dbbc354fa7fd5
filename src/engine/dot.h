#pragma once
// The one summation order the engine uses for every dot product (matrix rows,
// norms, attention scores). Fixing it here is what makes the engine bit-for-bit
// deterministic: a row is always summed by one thread in this order, whatever the
// thread count, the CPU's vector width or the storage format of the weights.
//
// Canonical order of sum_j w[j] * x[j], j in [0, n):
//   1. 64 lanes. Lane l accumulates the products of the indices j = l (mod 64) in
//      ascending j, starting from +0: p[l] = ((+0 + w[l]x[l]) + w[l+64]x[l+64]) + ...
//      (each product rounded to fp32 before the add: no FMA anywhere).
//   2. Fixed combine tree: s[i] = (p[i] + p[i+16]) + (p[i+32] + p[i+48]) for i < 16,
//      then halving: s[i] += s[i+8] (i < 8), s[i] += s[i+4], s[i] += s[i+2], s[0] + s[1].
//
// Skipping a term whose weight is exactly 0 (the sparse CSR path) gives the same
// bits when x is finite: the omitted product is +0 or -0, a lane that starts at +0
// can never hold -0 (x + (-x) rounds to +0, +0 + -0 = +0), and s + (+-0) == s for
// every s that is not -0. So dense and sparse agree exactly, zeros' signs included.
// The only difference: 0 * inf and 0 * NaN are NaN in the dense sum and absent from
// the sparse one.
#include <cstdint>

namespace qpu::engine::dot {

inline constexpr int64_t kLanes = 64;

// Vector code paths. All produce identical bits (same IEEE operations in the same
// order, only more or fewer lanes per instruction); the fastest supported one is
// picked once, on first use, unless the environment names one: QPU_ISA=generic, avx2 or
// avx512 (to measure one set against another, or to check a whole run on each).
enum class Isa { Generic, Avx2, Avx512 };
bool isa_supported(Isa isa);
// The active set. Throws qpu::Error when QPU_ISA names no set or one this CPU lacks, so a
// program calls it once before its parallel work (the qpu command does, in main).
Isa active_isa();
const char* isa_name(Isa isa);  // "generic", "avx2", "avx512"

// Step 2 on 64 lane partials (the vector kernels must equal it).
float combine_lanes(const float* lanes);

// The combine tree merges lanes that differ in bit 4 first, then bit 5, 3, 2, 1 and
// finally bit 0. With a lane's bits reordered into this key (bit 0 most significant)
// the tree is the binary trie of the keys: two lanes meet at the level of the highest
// bit in which their keys differ, and the lane with the smaller key is the left operand
// of every add on its way up. (The sparse kernels evaluate the tree pruned to the
// occupied lanes in this order.)
constexpr uint32_t tree_key(uint32_t lane) {
  const auto bit = [&](int b) { return (lane >> b) & 1u; };
  return bit(0) << 5 | bit(1) << 4 | bit(2) << 3 | bit(3) << 2 | bit(5) << 1 | bit(4);
}

// bf16 -> fp32 is exact: the bf16 bits are the high half of the fp32 bits.
inline float bf16_to_float(uint16_t b) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(b) << 16);
}

// Canonical dot of an fp32 or bf16 row with x.
float dot_f32(const float* w, const float* x, int64_t n);
float dot_bf16(const uint16_t* w, const float* x, int64_t n);

// y[r] = dot(row r, x) for r in [row_begin, row_end) of a row-major [rows, n]
// matrix. Single-threaded; callers split rows between threads.
void rows_f32(const float* w, int64_t n, const float* x, float* y, int64_t row_begin, int64_t row_end);
void rows_bf16(const uint16_t* w, int64_t n, const float* x, float* y, int64_t row_begin,
               int64_t row_end);

// The same with an explicit code path (tests compare every path bit for bit).
void rows_f32_with(Isa isa, const float* w, int64_t n, const float* x, float* y, int64_t row_begin,
                   int64_t row_end);
void rows_bf16_with(Isa isa, const uint16_t* w, int64_t n, const float* x, float* y,
                    int64_t row_begin, int64_t row_end);

// The canonical order written as plain scalar loops, for tests.
float dot_reference(const float* w, const float* x, int64_t n);

}  // namespace qpu::engine::dot
