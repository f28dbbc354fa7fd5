#pragma once
// Where a GDN memory keeps its cells inside one Gated DeltaNet head, and the exact
// constants of its read path (docs/npu-gdn-memory.md). Shared by the emitter, the
// order-adversarial simulator's tests and the conformance suite.
//
// Key space (dk rows): a one-hot key of pre-silu 128 selects one row. The read scale
// 1/sqrt(dk) is an exact power of two when dk is a power of 4 (one-hot query); when
// dk = 2 * 4^j the query is two-hot over the row and a never-written partner row
// (the last one), which makes l2norm(q) / sqrt(dk) exactly 2^-(j+1) on the decode
// path (measured: fl(fl(128 * fl(1 / fl(sqrt(32768)))) / fl(sqrt(128))) = 2^-4).
// Value space (dv columns): data columns first, then one offset column when the op
// has an offset, then the rail columns (last `rails` columns) that fix the per-head
// gated RMSNorm scale to exactly 2^-norm_exponent (exactness-toolkit P1 inside the
// head): `rails` cells of rail_cell in every written row.
#include <cstdint>

namespace qpu::compiler {

struct GdnLayout {
  int64_t key_dim = 0;    // dk
  int64_t value_dim = 0;  // dv
  bool two_hot = false;   // query row + partner row dk - 1
  int64_t rails = 0;      // 1 if dv is a power of 4, 2 if dv = 2 * 4^j
  int norm_exponent = 54; // the gated norm's rsqrt is 2^-norm_exponent
  float read_scale = 0;   // q after l2norm and 1/sqrt(dk): an exact power of two
  float rail_cell = 0;    // stored value of a rail cell

  // Throws qpu::Error unless dk and dv are powers of 4 or twice a power of 4, >= 16
  // (dk >= 16 keeps read_scale <= 1/4, which the 2^44 cell bound needs).
  static GdnLayout for_dims(int64_t key_dim, int64_t value_dim);

  int64_t rows() const { return two_hot ? key_dim - 1 : key_dim; }
  // Data values per row (the offset column takes one when used).
  int64_t capacity(bool has_offset) const { return value_dim - rails - (has_offset ? 1 : 0); }
  int64_t offset_column(int64_t data_values) const { return data_values; }
  int64_t first_rail() const { return value_dim - rails; }
  // Largest cell magnitude that keeps the data squares under half an ulp of the
  // rail squares in the gated norm (cells below 2^44 always do).
  static constexpr float kMaxCell = 0x1p44f;
  static constexpr float kMinCell = 18.0f;  // silu(x) == x for x >= 18
};

}  // namespace qpu::compiler
