#include "engine/packed_matrix.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "engine/dot.h"

namespace qpu::engine {
namespace {

bool is_bf16_value(float v) { return (std::bit_cast<uint32_t>(v) & 0xffffu) == 0; }

// Only +0 is left out of CSR: a -0 weight is kept so that copy_row returns the exact
// values (its products are zeros, which change no sum; see dot.h).
bool is_plus_zero(float v) { return std::bit_cast<uint32_t>(v) == 0; }

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kParallelMinWork = int64_t{1} << 15;
// Rows handed out together (keeps neighbouring rows, and their cache lines, on one thread).
constexpr int64_t kRowBlock = 16;

}  // namespace

const char* format_name(PackedMatrix::Format format) {
  switch (format) {
    case PackedMatrix::Format::DenseF32: return "dense-f32";
    case PackedMatrix::Format::DenseBf16: return "dense-bf16";
    case PackedMatrix::Format::SparseCsr: return "sparse-csr";
  }
  return "?";
}

PackedMatrix PackedMatrix::pack(std::span<const float> values, int64_t rows, int64_t cols,
                                const Options& options, const std::string& name) {
  if (rows < 0 || cols < 0 || static_cast<int64_t>(values.size()) != rows * cols) {
    fail("{}: expected {} x {} = {} values, got {}", name, rows, cols, rows * cols, values.size());
  }
  if (cols > std::numeric_limits<uint32_t>::max()) fail("{}: {} columns is too many", name, cols);

  PackedMatrix m;
  m.rows_ = rows;
  m.cols_ = cols;

  int64_t zeros = 0;
  bool all_bf16 = true;
  for (float v : values) {
    zeros += is_plus_zero(v);
    all_bf16 = all_bf16 && is_bf16_value(v);
  }

  Format format = Format::DenseF32;
  if (options.force) {
    format = *options.force;
    if (format == Format::DenseBf16 && !all_bf16) {
      fail("{}: cannot store as bf16, some values are not bf16 numbers", name);
    }
  } else if (!values.empty() &&
             static_cast<double>(zeros) > options.sparse_min_zero_fraction * static_cast<double>(values.size())) {
    format = Format::SparseCsr;
  } else if (options.allow_bf16 && all_bf16) {
    format = Format::DenseBf16;
  }
  m.format_ = format;

  switch (format) {
    case Format::DenseF32:
      m.f32_.assign(values.begin(), values.end());
      break;
    case Format::DenseBf16:
      m.bf16_.resize(values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        m.bf16_[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(values[i]) >> 16);
      }
      break;
    case Format::SparseCsr: {
      const auto nonzeros = static_cast<size_t>(static_cast<int64_t>(values.size()) - zeros);
      m.f32_.reserve(nonzeros);
      m.col_index_.reserve(nonzeros);
      m.row_start_.resize(static_cast<size_t>(rows) + 1);
      for (int64_t r = 0; r < rows; ++r) {
        m.row_start_[r] = static_cast<int64_t>(m.f32_.size());
        for (int64_t c = 0; c < cols; ++c) {
          const float v = values[r * cols + c];
          if (!is_plus_zero(v)) {
            m.f32_.push_back(v);
            m.col_index_.push_back(static_cast<uint32_t>(c));
          }
        }
      }
      m.row_start_[rows] = static_cast<int64_t>(m.f32_.size());
      break;
    }
  }
  return m;
}

int64_t PackedMatrix::nonzeros() const {
  if (format_ == Format::SparseCsr) return static_cast<int64_t>(f32_.size());
  int64_t count = 0;
  for (float v : f32_) count += !is_plus_zero(v);
  for (uint16_t b : bf16_) count += (b != 0);
  return count;
}

size_t PackedMatrix::bytes() const {
  return f32_.size() * sizeof(float) + bf16_.size() * sizeof(uint16_t) +
         col_index_.size() * sizeof(uint32_t) + row_start_.size() * sizeof(int64_t);
}

void PackedMatrix::multiply_rows(const float* x, float* y, int64_t row_begin, int64_t row_end) const {
  switch (format_) {
    case Format::DenseF32:
      dot::rows_f32(f32_.data(), cols_, x, y, row_begin, row_end);
      return;
    case Format::DenseBf16:
      dot::rows_bf16(bf16_.data(), cols_, x, y, row_begin, row_end);
      return;
    case Format::SparseCsr:
      for (int64_t r = row_begin; r < row_end; ++r) {
        // The dense lanes with the zero terms left out (see dot.h).
        float lanes[dot::kLanes] = {};
        for (int64_t k = row_start_[r]; k < row_start_[r + 1]; ++k) {
          const uint32_t c = col_index_[k];
          const float product = f32_[k] * x[c];
          lanes[c % dot::kLanes] = lanes[c % dot::kLanes] + product;
        }
        y[r] = dot::combine_lanes(lanes);
      }
      return;
  }
}

void PackedMatrix::multiply(const float* x, float* y) const {
  const int64_t work = format_ == Format::SparseCsr ? nonzeros() + rows_ * 4 : rows_ * cols_;
  const int64_t blocks = (rows_ + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(static) if (work >= kParallelMinWork)
  for (int64_t b = 0; b < blocks; ++b) {
    multiply_rows(x, y, b * kRowBlock, std::min(rows_, (b + 1) * kRowBlock));
  }
}

void PackedMatrix::multiply_all(std::span<const Job> jobs) {
  // Row blocks of all jobs, numbered consecutively: block b belongs to the job whose
  // range contains it.
  std::vector<int64_t> first_block(jobs.size() + 1, 0);
  int64_t work = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const PackedMatrix& m = *jobs[i].matrix;
    first_block[i + 1] = first_block[i] + (m.rows_ + kRowBlock - 1) / kRowBlock;
    work += m.format_ == Format::SparseCsr ? m.nonzeros() + m.rows_ * 4 : m.rows_ * m.cols_;
  }
  const int64_t blocks = first_block.back();
#pragma omp parallel for schedule(static) if (work >= kParallelMinWork)
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t i = static_cast<size_t>(std::upper_bound(first_block.begin(), first_block.end(), b) -
                                         first_block.begin()) - 1;
    const PackedMatrix& m = *jobs[i].matrix;
    const int64_t row = (b - first_block[i]) * kRowBlock;
    m.multiply_rows(jobs[i].x, jobs[i].y, row, std::min(m.rows_, row + kRowBlock));
  }
}

void PackedMatrix::copy_row(int64_t row, float* out) const {
  if (row < 0 || row >= rows_) fail("row {} out of range [0, {})", row, rows_);
  switch (format_) {
    case Format::DenseF32:
      std::memcpy(out, f32_.data() + row * cols_, static_cast<size_t>(cols_) * sizeof(float));
      return;
    case Format::DenseBf16:
      for (int64_t c = 0; c < cols_; ++c) out[c] = dot::bf16_to_float(bf16_[row * cols_ + c]);
      return;
    case Format::SparseCsr:
      std::fill(out, out + cols_, 0.0f);
      for (int64_t k = row_start_[row]; k < row_start_[row + 1]; ++k) out[col_index_[k]] = f32_[k];
      return;
  }
}

}  // namespace qpu::engine
