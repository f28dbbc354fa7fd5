#pragma once
// A weight matrix given by its entries instead of its dense array: what a compiler emits
// for a layer whose weights are nearly all +0 (a compiled machine's layer: a few thousand
// nonzeros among tens of millions of +0). The engine packs it exactly as it packs the
// dense array (engine::PackedMatrix::pack), without ever allocating, filling or scanning
// the dense form.
//
// SparseMatrixBuilder records the writes a dense emitter would make (`m[i] += w`,
// `m[i] = w`, on an array of +0) and finish() replays them per position in the order they
// were made, from +0: every value is bit for bit the dense array's (float addition is not
// associative, so the order is kept; +0 + -0 is +0, as in the dense array).
#include <cstdint>
#include <span>
#include <vector>

namespace qpu::io {

struct SparseMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<int64_t> positions;  // row * cols + col, strictly ascending
  std::vector<float> values;       // the value at each position; none is +0 (-0 is a value)

  // The entries of a dense row-major array (every value but +0; -0 is listed).
  static SparseMatrix from_dense(std::span<const float> values, int64_t rows, int64_t cols);

  int64_t size() const { return rows * cols; }
  // The dense row-major array (tests, and the packing of a matrix too full for CSR).
  std::vector<float> dense() const;
  // Throws unless the shape is non-negative, positions are strictly ascending inside
  // [0, rows * cols), values match positions one to one and none is +0.
  void check(const char* name) const;
};

class SparseMatrixBuilder {
 public:
  SparseMatrixBuilder() = default;
  SparseMatrixBuilder(int64_t rows, int64_t cols);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // m[position] += w, m[position] = w (position = row * cols + col; checked).
  void add(int64_t position, float w);
  void set(int64_t position, float w);
  // The matrix the writes so far make from an array of +0. Leaves the builder empty.
  SparseMatrix finish();

 private:
  struct Write {
    int64_t position;
    float value;
    bool set;
  };
  void record(int64_t position, float w, bool set);
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  std::vector<Write> writes_;
};

}  // namespace qpu::io
