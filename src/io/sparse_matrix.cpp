#include "io/sparse_matrix.h"

#include <algorithm>
#include <bit>

#include "common/error.h"
#include "common/float_bits.h"

namespace qpu::io {

SparseMatrix SparseMatrix::from_dense(std::span<const float> values, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0 || static_cast<int64_t>(values.size()) != rows * cols)
    fail("sparse matrix: {} values for a {} x {} matrix", values.size(), rows, cols);
  SparseMatrix m;
  m.rows = rows;
  m.cols = cols;
  for (size_t i = 0; i < values.size(); ++i) {
    if (is_plus_zero(values[i])) continue;
    m.positions.push_back(static_cast<int64_t>(i));
    m.values.push_back(values[i]);
  }
  return m;
}

std::vector<float> SparseMatrix::dense() const {
  check("sparse matrix");
  std::vector<float> out(static_cast<size_t>(size()), 0.0f);
  for (size_t i = 0; i < positions.size(); ++i) out[static_cast<size_t>(positions[i])] = values[i];
  return out;
}

void SparseMatrix::check(const char* name) const {
  if (rows < 0 || cols < 0) fail("{}: shape {} x {}", name, rows, cols);
  if (positions.size() != values.size())
    fail("{}: {} positions but {} values", name, positions.size(), values.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] < 0 || positions[i] >= size())
      fail("{}: entry {} at position {}, outside the {} x {} matrix", name, i, positions[i], rows, cols);
    if (i > 0 && positions[i] <= positions[i - 1])
      fail("{}: entry {} at position {} does not follow {} (positions must ascend)", name, i, positions[i],
           positions[i - 1]);
    if (is_plus_zero(values[i])) fail("{}: entry {} at position {} is +0 (a +0 is not listed)", name, i, positions[i]);
  }
}

SparseMatrixBuilder::SparseMatrixBuilder(int64_t rows, int64_t cols) : rows_(rows), cols_(cols) {
  if (rows < 0 || cols < 0) fail("sparse matrix: shape {} x {}", rows, cols);
}

void SparseMatrixBuilder::record(int64_t position, float w, bool set) {
  if (position < 0 || position >= rows_ * cols_)
    fail("sparse matrix: write at position {}, outside the {} x {} matrix", position, rows_, cols_);
  writes_.push_back({position, w, set});
}

void SparseMatrixBuilder::add(int64_t position, float w) { record(position, w, false); }
void SparseMatrixBuilder::set(int64_t position, float w) { record(position, w, true); }

SparseMatrix SparseMatrixBuilder::finish() {
  // Stable: the writes to one position stay in the order they were made.
  std::stable_sort(writes_.begin(), writes_.end(),
                   [](const Write& a, const Write& b) { return a.position < b.position; });
  SparseMatrix m;
  m.rows = rows_;
  m.cols = cols_;
  for (size_t i = 0; i < writes_.size();) {
    const int64_t p = writes_[i].position;
    float v = 0.0f;  // the dense array's +0
    for (; i < writes_.size() && writes_[i].position == p; ++i) v = writes_[i].set ? writes_[i].value : v + writes_[i].value;
    if (is_plus_zero(v)) continue;
    m.positions.push_back(p);
    m.values.push_back(v);
  }
  writes_.clear();
  writes_.shrink_to_fit();
  return m;
}

}  // namespace qpu::io
