#include "engine/packed_matrix.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "common/float_bits.h"
#include "engine/dot.h"
#include "engine/weight_scan.h"

namespace qpu::engine {
namespace {

// Only +0 (is_plus_zero, common/float_bits.h) is left out of CSR
// (weight_scan::census_listing): a -0 weight is kept so that copy_row returns the exact
// values (its products are zeros, which change no sum; see dot.h). A bf16 number:
// weight_scan::census.

using dot::tree_key;

int meet_level(uint32_t key_a, uint32_t key_b) { return 32 - std::countl_zero(key_a ^ key_b); }

// Rows with more occupied lanes than this sum into all 64 lanes and run the full
// combine tree (the same bits; cheaper than interpreting a long program).
constexpr int64_t kMaxProgramLanes = 12;

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kParallelMinWork = int64_t{1} << 15;
// Rows handed out together (keeps neighbouring rows, and their cache lines, on one thread).
constexpr int64_t kRowBlock = 16;

// Path::Auto takes the column path when 4 x (the weights of the active columns) + 64 is
// at most the matrix's stored nonzeros, and the active weights are at most
// kColumnPathMaxTermsPerRow per row. A column-path term costs ~2-3x a row-path nonzero
// (a scatter into its row's list), a call has a fixed cost (~64 nonzeros' worth: the
// scan of x, the bookkeeping; so a matrix with almost no nonzeros stays on its rows),
// and a row that collects terms in several lanes pays a run-time tree; the second bound
// catches that (down_proj with wide columns). Measured with layer_cost_bench BM_Product
// and BM_LayerPass/idle* (docs/layer-cost.md): the crossover is at ~30% of the weights
// for gate-like and head-like matrices, ~7% for the down-like one (~2.5 terms per row).
constexpr int64_t kColumnTermCost = 4;
constexpr int64_t kColumnCallCost = 64;
constexpr int64_t kColumnPathMaxTermsPerRow = 2;

std::atomic<int64_t> column_product_count{0};
std::atomic<int64_t> supported_plan_count{0};

}  // namespace

const char* format_name(PackedMatrix::Format format) {
  switch (format) {
    case PackedMatrix::Format::DenseF32: return "dense-f32";
    case PackedMatrix::Format::DenseBf16: return "dense-bf16";
    case PackedMatrix::Format::SparseCsr: return "sparse-csr";
  }
  return "?";
}

PackedMatrix::Format PackedMatrix::choose_format(int64_t size, int64_t plus_zeros, bool all_bf16,
                                                 const Options& options, const std::string& name) {
  if (options.force) {
    if (*options.force == Format::DenseBf16 && !all_bf16)
      fail("{}: cannot store as bf16, some values are not bf16 numbers", name);
    return *options.force;
  }
  if (size > 0 && static_cast<double>(plus_zeros) > options.sparse_min_zero_fraction * static_cast<double>(size))
    return Format::SparseCsr;
  if (options.allow_bf16 && all_bf16) return Format::DenseBf16;
  return Format::DenseF32;
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

  // One pass: the census, listing the non-+0 positions while the matrix can still be
  // sparse, or all of them when CSR is forced. CSR below needs zeros > X = fraction * size
  // (the same double), so zeros >= floor(X) + 1 and the non-+0 values number at most
  // size - floor(X) - 1: a limit of size - floor(X) lists every one of a CSR matrix's.
  const auto size = static_cast<int64_t>(values.size());
  const bool force_sparse = options.force && *options.force == Format::SparseCsr;
  const double sparse_zeros = options.sparse_min_zero_fraction * static_cast<double>(size);
  const int64_t limit =
      force_sparse ? size
                   : static_cast<int64_t>(std::clamp(static_cast<double>(size) - std::floor(sparse_zeros), 0.0,
                                                     static_cast<double>(size)));
  std::vector<int64_t> listed;
  const weight_scan::Census census = weight_scan::census_listing(values, limit, listed);
  const int64_t zeros = census.plus_zeros;
  const Format format = choose_format(size, zeros, census.all_bf16, options, name);
  m.format_ = format;
  m.path_ = options.path;

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
      // The census listed every non-+0 position (its limit, above).
      if (static_cast<int64_t>(listed.size()) != size - zeros)
        fail("{}: internal: the census listed {} of {} nonzeros", name, listed.size(), size - zeros);
      std::vector<float> listed_values(listed.size());
      for (size_t i = 0; i < listed.size(); ++i) listed_values[i] = values[static_cast<size_t>(listed[i])];
      m.fill_csr(listed, listed_values, options);
      break;
    }
  }
  return m;
}

PackedMatrix PackedMatrix::pack(const io::SparseMatrix& s, const Options& options, const std::string& name) {
  s.check(name.c_str());
  if (s.cols > std::numeric_limits<uint32_t>::max()) fail("{}: {} columns is too many", name, s.cols);
  // The census of the dense array without it: the unlisted positions are +0, bf16 numbers.
  uint32_t low = 0;
  for (float v : s.values) low |= std::bit_cast<uint32_t>(v);
  const int64_t zeros = s.size() - static_cast<int64_t>(s.values.size());
  const Format format = choose_format(s.size(), zeros, (low & 0xffffu) == 0, options, name);
  // A matrix too full for CSR is as large as its dense array anyway: the dense packing.
  if (format != Format::SparseCsr) return pack(s.dense(), s.rows, s.cols, options, name);
  PackedMatrix m;
  m.rows_ = s.rows;
  m.cols_ = s.cols;
  m.format_ = format;
  m.path_ = options.path;
  m.fill_csr(s.positions, s.values, options);
  return m;
}

// The CSR form from the non-+0 entries (positions ascending, their values), whichever
// form the matrix came in: the same arrays for the same matrix.
void PackedMatrix::fill_csr(std::span<const int64_t> listed, std::span<const float> listed_values,
                            const Options& options) {
  const int64_t rows = rows_, cols = cols_;
  f32_.reserve(listed.size());
  col_index_.reserve(listed.size());
  row_start_.resize(static_cast<size_t>(rows) + 1);
  program_start_.resize(static_cast<size_t>(rows) + 1);
  size_t next_listed = 0;
  std::vector<uint32_t> row_entries;  // indices into listed, made row-relative below
  std::vector<int> pending;           // meet levels of the subtrees on the evaluation stack
  const auto col_of = [&](uint32_t e) { return static_cast<uint32_t>(listed[e] % cols); };
  for (int64_t r = 0; r < rows; ++r) {
    row_start_[r] = static_cast<int64_t>(f32_.size());
    program_start_[r] = static_cast<int64_t>(program_.size());
    row_entries.clear();
    for (; next_listed < listed.size() && listed[next_listed] < (r + 1) * cols; ++next_listed)
      row_entries.push_back(static_cast<uint32_t>(next_listed));
    // Tree order of the lanes; a stable sort keeps each lane's columns ascending.
    std::stable_sort(row_entries.begin(), row_entries.end(), [&](uint32_t a, uint32_t b) {
      return tree_key(col_of(a) % dot::kLanes) < tree_key(col_of(b) % dot::kLanes);
    });
    for (uint32_t e : row_entries) {
      f32_.push_back(listed_values[e]);
      col_index_.push_back(col_of(e));
    }
    // One leaf per occupied lane. After pushing a leaf, merge the top two subtrees
    // while they meet below the level at which the stack meets the next leaf.
    pending.clear();
    for (size_t i = 0; i < row_entries.size();) {
      const uint32_t lane = col_of(row_entries[i]) % dot::kLanes;
      size_t end = i;
      while (end < row_entries.size() && col_of(row_entries[end]) % dot::kLanes == lane) ++end;
      const int next =
          end < row_entries.size() ? meet_level(tree_key(lane), tree_key(col_of(row_entries[end]) % dot::kLanes)) : 7;
      pending.push_back(next);
      uint32_t merges = 0;
      while (pending.size() >= 2 && pending[pending.size() - 2] < next) {
        pending.erase(pending.end() - 2);  // the merged subtree meets the next leaf at `next`
        ++merges;
      }
      program_.push_back(static_cast<uint32_t>(end - i) << 8 | merges);
      i = end;
    }
  }
  row_start_[rows] = static_cast<int64_t>(f32_.size());
  program_start_[rows] = static_cast<int64_t>(program_.size());
  int64_t live = 0, widest = 0;
  for (int64_t r = 0; r < rows; ++r) {
    live += row_start_[r + 1] > row_start_[r];
    widest = std::max(widest, row_start_[r + 1] - row_start_[r]);
  }
  single_term_rows_ = widest <= 1;
  if (2 * live < rows && rows <= std::numeric_limits<int32_t>::max() &&
      f32_.size() <= std::numeric_limits<uint32_t>::max() && program_.size() <= std::numeric_limits<uint32_t>::max()) {
    live_rows_listed_ = true;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t k = row_start_[r], terms = row_start_[r + 1] - k;
      const int64_t leaves = program_start_[r + 1] - program_start_[r];
      const auto row = static_cast<int32_t>(r);
      if (terms == 0) continue;
      if (terms == 1) {
        one_term_rows_.push_back({row, col_index_[k], f32_[k]});
      } else if (terms == 2 && leaves == 2) {
        two_lane_rows_.push_back({row, col_index_[k], col_index_[k + 1], f32_[k], f32_[k + 1]});
      } else {
        live_rows_.push_back({row, static_cast<uint32_t>(k), static_cast<uint32_t>(row_start_[r + 1]),
                              static_cast<uint32_t>(program_start_[r]), static_cast<uint32_t>(leaves)});
      }
    }
  }
  // No column copy where it would never run: Rows, or Auto on a matrix with almost
  // no nonzeros (its rows cost less than a column-path call).
  if (options.path == Path::Columns ||
      (options.path == Path::Auto && static_cast<int64_t>(f32_.size()) >= kColumnCallCost)) {
    columns_ = ColumnMatrix::from_csr(rows, cols, row_start_, col_index_, f32_);
  }
}

PackedMatrix pack_matrix(std::vector<float>& dense, int64_t rows, int64_t cols, const PackedMatrix::Options& options,
                         const std::string& name) {
  PackedMatrix m = PackedMatrix::pack(dense, rows, cols, options, name);
  dense = {};
  return m;
}

PackedMatrix pack_matrix(io::SparseMatrix& sparse, int64_t rows, int64_t cols, const PackedMatrix::Options& options,
                         const std::string& name) {
  if (sparse.rows != rows || sparse.cols != cols)
    fail("{}: expected {} x {}, got {} x {} entries", name, rows, cols, sparse.rows, sparse.cols);
  PackedMatrix m = PackedMatrix::pack(sparse, options, name);
  sparse = {};
  return m;
}

bool PackedMatrix::same_storage(const PackedMatrix& other) const {
  const auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  };
  const auto same_rows = [](const std::vector<LiveRow>& a, const std::vector<LiveRow>& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const LiveRow& x, const LiveRow& y) {
             return x.row == y.row && x.begin == y.begin && x.end == y.end && x.program == y.program &&
                    x.leaves == y.leaves;
           });
  };
  const auto same_one = [](const std::vector<OneTermRow>& a, const std::vector<OneTermRow>& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const OneTermRow& x, const OneTermRow& y) {
             return x.row == y.row && x.col == y.col && std::bit_cast<uint32_t>(x.weight) == std::bit_cast<uint32_t>(y.weight);
           });
  };
  const auto same_two = [](const std::vector<TwoLaneRow>& a, const std::vector<TwoLaneRow>& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const TwoLaneRow& x, const TwoLaneRow& y) {
             return x.row == y.row && x.col0 == y.col0 && x.col1 == y.col1 &&
                    std::bit_cast<uint32_t>(x.weight0) == std::bit_cast<uint32_t>(y.weight0) &&
                    std::bit_cast<uint32_t>(x.weight1) == std::bit_cast<uint32_t>(y.weight1);
           });
  };
  return same_one(one_term_rows_, other.one_term_rows_) && same_two(two_lane_rows_, other.two_lane_rows_) &&
         rows_ == other.rows_ && cols_ == other.cols_ && format_ == other.format_ && path_ == other.path_ &&
         same_bits(f32_, other.f32_) && bf16_ == other.bf16_ && col_index_ == other.col_index_ &&
         row_start_ == other.row_start_ && program_ == other.program_ && program_start_ == other.program_start_ &&
         same_rows(live_rows_, other.live_rows_) && live_rows_listed_ == other.live_rows_listed_ &&
         single_term_rows_ == other.single_term_rows_ && columns_.same_storage(other.columns_);
}

bool PackedMatrix::all_finite() const {
  if (format_ == Format::DenseBf16) {
    for (uint16_t b : bf16_)
      if ((b & 0x7f80u) == 0x7f80u) return false;
    return true;
  }
  return weight_scan::all_finite(f32_);  // dense, or CSR's stored values (+0 is finite)
}

void PackedMatrix::mark_nonzero_columns(std::vector<uint8_t>& used) const {
  switch (format_) {
    case Format::DenseF32:
      weight_scan::mark_nonzero_columns(f32_, cols_, used);
      break;
    case Format::DenseBf16:
      for (size_t i = 0; i < bf16_.size(); ++i)
        if ((bf16_[i] & 0x7fffu) != 0) used[i % static_cast<size_t>(cols_)] = 1;
      break;
    case Format::SparseCsr:
      for (size_t i = 0; i < f32_.size(); ++i)
        if (f32_[i] != 0.0f) used[col_index_[i]] = 1;  // a stored -0 is not a nonzero weight
      break;
  }
}

void PackedMatrix::mark_stored_columns(std::vector<uint8_t>& used) const {
  if (format_ != Format::SparseCsr) {
    std::fill(used.begin(), used.begin() + cols_, uint8_t{1});
    return;
  }
  for (const uint32_t c : col_index_) used[c] = 1;
}

void PackedMatrix::mark_stored_rows(std::vector<uint8_t>& used) const {
  for (int64_t r = 0; r < rows_; ++r) {
    if (format_ != Format::SparseCsr || !row_always_zero(r)) used[static_cast<size_t>(r)] = 1;
  }
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
         program_.size() * sizeof(uint32_t) + program_start_.size() * sizeof(int64_t) +
         live_rows_.size() * sizeof(LiveRow) + one_term_rows_.size() * sizeof(OneTermRow) +
         two_lane_rows_.size() * sizeof(TwoLaneRow) + columns_.bytes();
}

int64_t PackedMatrix::row_work() const {
  return format_ == Format::SparseCsr ? nonzeros() + rows_ * 4 : rows_ * cols_;
}

void PackedMatrix::multiply_rows(const float* x, float* y, int64_t row_begin, int64_t row_end,
                                 const std::span<const uint32_t>* fill_words) const {
  switch (format_) {
    case Format::DenseF32:
      dot::rows_f32(f32_.data(), cols_, x, y, row_begin, row_end);
      return;
    case Format::DenseBf16:
      dot::rows_bf16(bf16_.data(), cols_, x, y, row_begin, row_end);
      return;
    case Format::SparseCsr:
      if (live_rows_listed_) {
        // Mostly empty rows: an empty row's sum is +0 (below), so fill and evaluate
        // only the rows with a nonzero (and fill only the caller's words, when it reads no others).
        ColumnMatrix::fill_zero(y, row_begin, row_end, fill_words);
        // Each list from its first row in range: from its start when the range starts at
        // row 0 (a product in one thread; the binary search's cold probes were a sixth of
        // this function's time). Every live row is in exactly one list and written once.
        const auto first = [row_begin](const auto& rows) {
          return row_begin == 0 ? rows.begin()
                                : std::lower_bound(rows.begin(), rows.end(), row_begin,
                                                   [](const auto& a, int64_t r) { return a.row < r; });
        };
        for (auto one = first(one_term_rows_); one != one_term_rows_.end() && one->row < row_end; ++one) {
          y[one->row] = 0.0f + one->weight * x[one->col];
        }
        for (auto two = first(two_lane_rows_); two != two_lane_rows_.end() && two->row < row_end; ++two) {
          y[two->row] = (0.0f + two->weight0 * x[two->col0]) + (0.0f + two->weight1 * x[two->col1]);
        }
        for (auto live = first(live_rows_); live != live_rows_.end() && live->row < row_end; ++live) {
          if (live->leaves == 1) {  // csr_row's program for one leaf: the lane from +0, no merge
            float lane = 0.0f;
            for (uint32_t k = live->begin; k < live->end; ++k) lane = lane + f32_[k] * x[col_index_[k]];
            y[live->row] = lane;
          } else if (live->leaves <= kMaxProgramLanes) {  // csr_row's pruned tree, from the ranges here
            y[live->row] = run_program(x, live->begin, live->program, live->program + live->leaves);
          } else {
            y[live->row] = csr_row(x, live->row);
          }
        }
        return;
      }
      if (single_term_rows_) {
        // What csr_row computes for such rows: one lane summed from +0 (0 + w * x[c]) with
        // no merge after it, or +0 for an empty row.
        ColumnMatrix::for_word_ranges(row_begin, row_end, fill_words, [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t k = row_start_[r];
            y[r] = row_start_[r + 1] > k ? 0.0f + f32_[k] * x[col_index_[k]] : 0.0f;
          }
        });
        return;
      }
      ColumnMatrix::for_word_ranges(row_begin, row_end, fill_words, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) y[r] = csr_row(x, r);
      });
      return;
  }
}

float PackedMatrix::csr_row(const float* x, int64_t r) const {
  // The dense lanes and combine tree with the zero terms left out (see dot.h).
  if (program_start_[r + 1] - program_start_[r] > kMaxProgramLanes) {
    // Many lanes: all 64 of them and the full tree. The row is stored in tree
    // order, which keeps each lane's columns ascending.
    float lanes[dot::kLanes] = {};
    for (int64_t k = row_start_[r]; k < row_start_[r + 1]; ++k) {
      const uint32_t c = col_index_[k];
      lanes[c % dot::kLanes] = lanes[c % dot::kLanes] + f32_[k] * x[c];
    }
    return dot::combine_lanes(lanes);
  }
  return run_program(x, row_start_[r], program_start_[r], program_start_[r + 1]);
}

float PackedMatrix::run_program(const float* x, int64_t k, int64_t p_begin, int64_t p_end) const {
  // Few lanes: the tree pruned to the occupied lanes. A lane with no terms is +0,
  // a lane or subtree sum is never -0, and s + (+0) == s for every other s, so an
  // empty subtree changes no node. What is left is the trie of the occupied
  // lanes, evaluated here on a stack in tree order (program_, built by pack).
  float stack[dot::kLanes];
  int top = 0;
  for (int64_t p = p_begin; p < p_end; ++p) {
    const uint32_t op = program_[p];
    float lane = 0.0f;
    for (const int64_t end = k + (op >> 8); k < end; ++k) lane = lane + f32_[k] * x[col_index_[k]];
    stack[top++] = lane;
    for (uint32_t merge = op & 0xffu; merge > 0; --merge) {
      --top;
      stack[top - 1] = stack[top - 1] + stack[top];
    }
  }
  return top > 0 ? stack[0] : 0.0f;  // an empty row: +0
}

bool PackedMatrix::plan_columns(const float* x, ColumnMatrix::Plan& plan, ColumnScan* shared) const {
  if (format_ != Format::SparseCsr || path_ == Path::Rows || columns_.empty() || !columns_.weights_finite()) {
    return false;
  }
  const bool automatic = path_ == Path::Auto;
  if (automatic && nonzeros() < kColumnCallCost) return false;  // the rows cost less than the call
  // The active column list of the calling thread and its bitmap (shared by the jobs with
  // this x), and this matrix's part of it (read by the band workers).
  thread_local std::vector<int32_t> active;
  thread_local std::vector<uint64_t> active_bits;
  thread_local std::vector<int32_t> own;
  const bool reuse = shared != nullptr && shared->x == x && shared->cols == cols_;
  // The caller's support of x: the blocks to scan, listing the columns in the same pass.
  const bool supported = !reuse && shared != nullptr && shared->support.x == x && shared->support.n == cols_;
  if (reuse) {
    plan = shared->plan;
  } else if (supported) {
    ColumnMatrix::list_columns_in(x, cols_, shared->support.blocks, plan, active);
    supported_plan_count.fetch_add(1, std::memory_order_relaxed);
    *shared = ColumnScan{x, cols_, false, plan, shared->support};  // listed once the bits are built
  } else {
    plan = columns_.count(x);
    if (shared != nullptr) *shared = ColumnScan{x, cols_, false, plan, shared->support};
  }
  // 0 * inf / 0 * NaN: the dense sum is NaN where the column product leaves the term
  // out, so a non-finite x takes the row path (the CSR behaviour of dot.h).
  if (!plan.x_finite) return false;
  if (automatic && 2 * plan.active_cols > cols_) return false;  // most inputs live: rows
  if (reuse && shared->listed) {
    plan.active = active.data();  // this x's list, written by an earlier job's plan
  } else {
    if (!supported) ColumnMatrix::list_columns(x, cols_, plan, active);
    active_bits.assign(static_cast<size_t>((cols_ + 63) / 64), 0);
    for (int64_t a = 0; a < plan.active_cols; ++a) {
      const auto j = static_cast<size_t>(plan.active[a]);
      active_bits[j / 64] |= uint64_t{1} << (j % 64);
    }
    if (shared != nullptr) {
      shared->plan = plan;
      shared->listed = true;
    }
  }
  if (!automatic) {
    columns_.narrow(plan, active_bits.data(), own);
    return true;
  }
  // Auto takes the columns iff kColumnTermCost * entries + kColumnCallCost <= nonzeros()
  // and entries <= kColumnPathMaxTermsPerRow * rows_, i.e. entries <= limit; narrow stops
  // once past it (a busy gate/up of the story machine: ~63 active columns, turned down
  // after the first ~20).
  const int64_t spare = nonzeros() - kColumnCallCost;
  const int64_t limit = spare < 0 ? -1 : std::min(spare / kColumnTermCost, kColumnPathMaxTermsPerRow * rows_);
  return columns_.narrow(plan, active_bits.data(), own, limit) <= limit;
}

bool PackedMatrix::try_columns(const float* x, float* y, ColumnScan* shared,
                               const std::span<const uint32_t>* fill_words) const {
  ColumnMatrix::Plan plan;
  if (!plan_columns(x, plan, shared)) return false;
  column_product_count.fetch_add(1, std::memory_order_relaxed);
  const int64_t bands = columns_.bands();
  if (bands > 1 && plan.active_entries + rows_ >= kParallelMinWork) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < bands; ++b) columns_.multiply_band(b, x, plan, y, fill_words);
  } else {
    for (int64_t b = 0; b < bands; ++b) columns_.multiply_band(b, x, plan, y, fill_words);
  }
  return true;
}

PackedMatrix::Path PackedMatrix::path_for(const float* x) const {
  ColumnMatrix::Plan plan;
  return plan_columns(x, plan) ? Path::Columns : Path::Rows;
}

int64_t PackedMatrix::column_products() { return column_product_count.load(std::memory_order_relaxed); }
int64_t PackedMatrix::supported_plans() { return supported_plan_count.load(std::memory_order_relaxed); }

void PackedMatrix::multiply(const float* x, float* y) const { multiply_filling(x, y, nullptr); }

void PackedMatrix::multiply_words(const float* x, float* y, std::span<const uint32_t> words) const {
  multiply_filling(x, y, &words);
}

void PackedMatrix::multiply_filling(const float* x, float* y, const std::span<const uint32_t>* fill_words) const {
  if (try_columns(x, y, nullptr, fill_words)) return;
  const int64_t work = row_work();
  if (work < kParallelMinWork) {  // rows in order on this thread: the same bits, no region
    multiply_rows(x, y, 0, rows_, fill_words);
    return;
  }
  const int64_t blocks = (rows_ + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    multiply_rows(x, y, b * kRowBlock, std::min(rows_, (b + 1) * kRowBlock), fill_words);
  }
}

void PackedMatrix::multiply_all(std::span<const Job> jobs) { multiply_all(jobs, Support{}); }

void PackedMatrix::multiply_all(std::span<const Job> jobs, const Support& support) {
  // Column-path jobs run now, one after the other; the rest share one parallel region.
  // Their row blocks are numbered consecutively: block b belongs to the job whose range
  // contains it. (On the stack for the usual handful of jobs: no allocation.)
  constexpr size_t kInline = 8;
  const Job* inline_rows[kInline];
  int64_t inline_first[kInline + 1];
  std::vector<const Job*> heap_rows;
  std::vector<int64_t> heap_first;
  const Job** row_jobs = inline_rows;
  int64_t* first_block = inline_first;
  if (jobs.size() > kInline) {
    heap_rows.resize(jobs.size());
    heap_first.resize(jobs.size() + 1);
    row_jobs = heap_rows.data();
    first_block = heap_first.data();
  }
  size_t count = 0;
  ColumnScan scan;  // jobs with the same x (the GDN's in_proj_*, the MLP's gate and up) scan it once
  scan.support = support;
  for (const Job& job : jobs) {
    if (!job.matrix->try_columns(job.x, job.y, &scan)) row_jobs[count++] = &job;
  }
  first_block[0] = 0;
  int64_t work = 0;
  for (size_t i = 0; i < count; ++i) {
    const PackedMatrix& m = *row_jobs[i]->matrix;
    first_block[i + 1] = first_block[i] + (m.rows_ + kRowBlock - 1) / kRowBlock;
    work += m.row_work();
  }
  const int64_t blocks = first_block[count];
  if (work < kParallelMinWork) {  // one thread: each job in turn, no block search
    for (size_t i = 0; i < count; ++i) {
      const Job& job = *row_jobs[i];
      job.matrix->multiply_rows(job.x, job.y, 0, job.matrix->rows_);
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t i = static_cast<size_t>(std::upper_bound(first_block, first_block + count + 1, b) -
                                         first_block) - 1;
    const Job& job = *row_jobs[i];
    const PackedMatrix& m = *job.matrix;
    const int64_t row = (b - first_block[i]) * kRowBlock;
    m.multiply_rows(job.x, job.y, row, std::min(m.rows_, row + kRowBlock));
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
