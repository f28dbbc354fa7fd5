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

// The canonical combine tree of dot.h merges lanes that differ in bit 4 first, then
// bit 5, 3, 2, 1 and finally bit 0. With the lane's bits reordered into this key (bit 0
// most significant), the tree is the binary trie of the keys: two lanes meet at the
// level of the highest bit in which their keys differ.
uint32_t tree_key(uint32_t lane) {
  const auto bit = [&](int b) { return (lane >> b) & 1u; };
  return bit(0) << 5 | bit(1) << 4 | bit(2) << 3 | bit(3) << 2 | bit(5) << 1 | bit(4);
}

int meet_level(uint32_t key_a, uint32_t key_b) { return 32 - std::countl_zero(key_a ^ key_b); }

// Rows with more occupied lanes than this sum into all 64 lanes and run the full
// combine tree (the same bits; cheaper than interpreting a long program).
constexpr int64_t kMaxProgramLanes = 12;

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
      m.program_start_.resize(static_cast<size_t>(rows) + 1);
      std::vector<uint32_t> row_cols;
      std::vector<int> pending;  // meet levels of the subtrees on the evaluation stack
      for (int64_t r = 0; r < rows; ++r) {
        m.row_start_[r] = static_cast<int64_t>(m.f32_.size());
        m.program_start_[r] = static_cast<int64_t>(m.program_.size());
        row_cols.clear();
        for (int64_t c = 0; c < cols; ++c) {
          if (!is_plus_zero(values[r * cols + c])) row_cols.push_back(static_cast<uint32_t>(c));
        }
        // Tree order of the lanes; a stable sort keeps each lane's columns ascending.
        std::stable_sort(row_cols.begin(), row_cols.end(), [](uint32_t a, uint32_t b) {
          return tree_key(a % dot::kLanes) < tree_key(b % dot::kLanes);
        });
        for (uint32_t c : row_cols) {
          m.f32_.push_back(values[r * cols + c]);
          m.col_index_.push_back(c);
        }
        // One leaf per occupied lane. After pushing a leaf, merge the top two subtrees
        // while they meet below the level at which the stack meets the next leaf.
        pending.clear();
        for (size_t i = 0; i < row_cols.size();) {
          const uint32_t lane = row_cols[i] % dot::kLanes;
          size_t end = i;
          while (end < row_cols.size() && row_cols[end] % dot::kLanes == lane) ++end;
          const int next = end < row_cols.size() ? meet_level(tree_key(lane), tree_key(row_cols[end] % dot::kLanes)) : 7;
          pending.push_back(next);
          uint32_t merges = 0;
          while (pending.size() >= 2 && pending[pending.size() - 2] < next) {
            pending.erase(pending.end() - 2);  // the merged subtree meets the next leaf at `next`
            ++merges;
          }
          m.program_.push_back(static_cast<uint32_t>(end - i) << 8 | merges);
          i = end;
        }
      }
      m.row_start_[rows] = static_cast<int64_t>(m.f32_.size());
      m.program_start_[rows] = static_cast<int64_t>(m.program_.size());
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
         col_index_.size() * sizeof(uint32_t) + row_start_.size() * sizeof(int64_t) +
         program_.size() * sizeof(uint32_t) + program_start_.size() * sizeof(int64_t);
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
        // The dense lanes and combine tree with the zero terms left out (see dot.h).
        if (program_start_[r + 1] - program_start_[r] > kMaxProgramLanes) {
          // Many lanes: all 64 of them and the full tree. The row is stored in tree
          // order, which keeps each lane's columns ascending.
          float lanes[dot::kLanes] = {};
          for (int64_t k = row_start_[r]; k < row_start_[r + 1]; ++k) {
            const uint32_t c = col_index_[k];
            lanes[c % dot::kLanes] = lanes[c % dot::kLanes] + f32_[k] * x[c];
          }
          y[r] = dot::combine_lanes(lanes);
          continue;
        }
        // Few lanes: the tree pruned to the occupied lanes. A lane with no terms is +0,
        // a lane or subtree sum is never -0, and s + (+0) == s for every other s, so an
        // empty subtree changes no node. What is left is the trie of the occupied
        // lanes, evaluated here on a stack in tree order (program_, built by pack).
        float stack[dot::kLanes];
        int top = 0;
        int64_t k = row_start_[r];
        for (int64_t p = program_start_[r]; p < program_start_[r + 1]; ++p) {
          const uint32_t op = program_[p];
          float lane = 0.0f;
          for (const int64_t end = k + (op >> 8); k < end; ++k) lane = lane + f32_[k] * x[col_index_[k]];
          stack[top++] = lane;
          for (uint32_t merge = op & 0xffu; merge > 0; --merge) {
            --top;
            stack[top - 1] = stack[top - 1] + stack[top];
          }
        }
        y[r] = top > 0 ? stack[0] : 0.0f;
      }
      return;
  }
}

void PackedMatrix::multiply(const float* x, float* y) const {
  const int64_t work = format_ == Format::SparseCsr ? nonzeros() + rows_ * 4 : rows_ * cols_;
  if (work < kParallelMinWork) {  // rows in order on this thread: the same bits, no region
    multiply_rows(x, y, 0, rows_);
    return;
  }
  const int64_t blocks = (rows_ + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    multiply_rows(x, y, b * kRowBlock, std::min(rows_, (b + 1) * kRowBlock));
  }
}

void PackedMatrix::multiply_all(std::span<const Job> jobs) {
  // Row blocks of all jobs, numbered consecutively: block b belongs to the job whose
  // range contains it. (On the stack for the usual handful of jobs: no allocation.)
  constexpr size_t kInline = 8;
  int64_t inline_first[kInline + 1];
  std::vector<int64_t> heap_first;
  int64_t* first_block = inline_first;
  if (jobs.size() > kInline) {
    heap_first.resize(jobs.size() + 1);
    first_block = heap_first.data();
  }
  first_block[0] = 0;
  int64_t work = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const PackedMatrix& m = *jobs[i].matrix;
    first_block[i + 1] = first_block[i] + (m.rows_ + kRowBlock - 1) / kRowBlock;
    work += m.format_ == Format::SparseCsr ? m.nonzeros() + m.rows_ * 4 : m.rows_ * m.cols_;
  }
  const int64_t blocks = first_block[jobs.size()];
  if (work < kParallelMinWork) {  // one thread: each job in turn, no block search
    for (const Job& job : jobs) job.matrix->multiply_rows(job.x, job.y, 0, job.matrix->rows_);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t i = static_cast<size_t>(std::upper_bound(first_block, first_block + jobs.size() + 1, b) -
                                         first_block) - 1;
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
