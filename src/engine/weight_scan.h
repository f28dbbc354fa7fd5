#pragma once
// Load-time scans of dense weights, with the answers of the plain per-value loops.
//
// A compiled machine's layers are almost all +0 (docs/engine.md, "Streaming
// construction"): thousands of dense layers of ~10^7 values each go through the packer
// and the idle tests once at load, and the per-value loops (a branch and, for columns,
// an integer division per value) were most of the engine model's construction time. These
// scans test blocks of 16 values at once (one OR of their bits) and look at single values
// only inside blocks that hold something.
#include <cstdint>
#include <span>
#include <vector>

namespace qpu::engine::weight_scan {

// How many values are +0 (bits 0; -0 is not), and whether every value is a bf16 number
// (its low 16 bits 0).
struct Census {
  int64_t plus_zeros = 0;
  bool all_bf16 = true;
};
Census census(std::span<const float> values);
// The same census, also listing the flat indices of the values that are not +0, in
// order, while there are at most `limit` of them; `listed` is cleared and left empty when
// there are more (the caller then scans again). One pass instead of two for a matrix that
// turns out sparse.
Census census_listing(std::span<const float> values, int64_t limit, std::vector<int64_t>& listed);

// used[c] = 1 for every column c of a row-major [rows, cols] matrix that holds a value
// != 0.0f (+0 and -0 do not count; NaN does). values.size() must be a multiple of cols.
void mark_nonzero_columns(std::span<const float> values, int64_t cols, std::vector<uint8_t>& used);

// std::isfinite for every value.
bool all_finite(std::span<const float> values);

}  // namespace qpu::engine::weight_scan
