#pragma once
// The column-major (CSC) copy of a sparse matrix, and the product that visits only the
// columns whose input is nonzero: y = W x in time proportional to the nonzero weights
// of the ACTIVE columns (plus a +0 fill of y), with the bits of dot::rows_f32 on the
// dense matrix.
//
// Why the bits are the canonical ones (dot.h), for finite weights and finite x:
// lane l of row r sums the products w[r][j] * x[j] for j = l (mod 64) in ascending j
// from +0. A left-out product (x[j] = +-0, or w[r][j] = +0) is +-0; a lane that starts
// at +0 never holds -0 (a + (-a) = +0, +0 + -0 = +0 in round-to-nearest), and
// s + (+-0) = s for every s that is not -0. So each lane holds the same value when only
// the nonzero-input columns are added, in ascending j, which is the order this product
// visits them. The combine tree pruned to the lanes that received a term is the full
// tree (an empty subtree is +0, and no lane or partial sum is -0); a row that received
// no term is +0, as the dense row of +-0 products is.
//
// Rows are split into bands (kBandRows rows each, the CSC stored band by band) so that
// the per-row bookkeeping of one band stays in the L1/L2 cache and bands can run on
// different threads; a row is always computed whole by one band, so the thread count
// never changes a bit.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace qpu::engine {

class ColumnMatrix {
 public:
  static constexpr int64_t kBandRows = 4096;

  ColumnMatrix() = default;

  // From a CSR matrix (row_start: rows + 1 offsets; col_index/values: the nonzeros,
  // any order within a row). Entries keep ascending row order within each column.
  static ColumnMatrix from_csr(int64_t rows, int64_t cols, const std::vector<int64_t>& row_start,
                               const std::vector<uint32_t>& col_index, const std::vector<float>& values);

  bool empty() const { return cols_ == 0 && rows_ == 0; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t bands() const { return (rows_ + kBandRows - 1) / kBandRows; }
  bool weights_finite() const { return weights_finite_; }
  size_t bytes() const;

  // What x activates: the ascending columns j with x[j] != 0 (+0 and -0 are zeros),
  // how many stored weights they hold, and whether every x[j] is finite.
  struct Plan {
    const int32_t* active = nullptr;
    int64_t active_cols = 0;
    int64_t active_entries = 0;
    bool x_finite = true;
  };
  // count() fills active_cols and x_finite (one vectorized pass over x alone, enough to
  // turn down a dense x); list_active() then writes the column list into `active`
  // (resized to cols() once, no allocation when warm), points plan.active at it and
  // sums active_entries.
  Plan count(const float* x) const;
  void list_active(const float* x, Plan& plan, std::vector<int32_t>& active) const;
  // list_active in two halves, so that products of several matrices with the same x
  // (PackedMatrix::multiply_all) scan x once: list_columns writes the column list of x
  // (cols entries; plan.active_cols must be count()'s) and points plan.active at it;
  // active_entries() is the stored weights of those columns in this matrix.
  static void list_columns(const float* x, int64_t cols, Plan& plan, std::vector<int32_t>& active);
  // count() and list_columns() in one pass over the blocks of 16 set in `blocks` (bit b of
  // word b / 64) and the tail past the last full block, for an x that is +-0 everywhere
  // else (PackedMatrix::Support): the same plan as the scan of the whole x.
  static void list_columns_in(const float* x, int64_t cols, const uint64_t* blocks, Plan& plan,
                              std::vector<int32_t>& active);
  int64_t active_entries(const Plan& plan) const;
  // active_entries, and the plan narrowed to this matrix: `plan.active` (an x's list)
  // becomes the ascending columns that also hold a stored weight here, written to
  // `own`, found from `active_bits` (the same columns as a bitmap, (cols + 63) / 64
  // words) AND this matrix's nonempty columns, a word at a time. A compiled layer's
  // matrix reads a few of the residual's live dims: the walk then visits only those
  // (the columns left out hold no term, so the product is the same).
  // entry_limit: the caller's budget; once the columns listed hold more weights than that
  // the walk stops (the plan is then incomplete, its active_entries over the limit, and
  // the caller turns it down): a busy matrix that will take its rows anyway does not pay
  // for the reads of all its active columns.
  int64_t narrow(Plan& plan, const uint64_t* active_bits, std::vector<int32_t>& own,
                 int64_t entry_limit = std::numeric_limits<int64_t>::max()) const;

  // y[r] for the rows of `band`, for an x whose plan is `plan` (plan.x_finite and
  // weights_finite() must hold). Uses the calling thread's scratch. fill_words: nullptr,
  // or the 64-row words (ascending) that hold every row with an entry: the band's rows
  // outside them are then not written (PackedMatrix::multiply_words).
  void multiply_band(int64_t band, const float* x, const Plan& plan, float* y,
                     const std::span<const uint32_t>* fill_words = nullptr) const;
  // fn(lo, hi) over [begin, end): once over all of it, or (words != nullptr) over its part
  // in each of the listed 64-row words (ascending).
  template <typename Fn>
  static void for_word_ranges(int64_t begin, int64_t end, const std::span<const uint32_t>* words, Fn&& fn) {
    if (words == nullptr) {
      fn(begin, end);
      return;
    }
    auto w = begin == 0 ? words->begin() : std::lower_bound(words->begin(), words->end(), static_cast<uint32_t>(begin / 64));
    for (; w != words->end() && 64 * static_cast<int64_t>(*w) < end; ++w) {
      fn(std::max(begin, 64 * static_cast<int64_t>(*w)), std::min(end, 64 * static_cast<int64_t>(*w) + 64));
    }
  }
  // y[begin, end) = +0: every row, or (words != nullptr) those in the listed 64-row words.
  static void fill_zero(float* y, int64_t begin, int64_t end, const std::span<const uint32_t>* words) {
    for_word_ranges(begin, end, words, [y](int64_t lo, int64_t hi) { std::fill(y + lo, y + hi, 0.0f); });
  }

 // Every stored array equal, weights bit for bit (tests: two packings of one matrix).
  bool same_storage(const ColumnMatrix& other) const;

 private:
  struct Entry {
    uint32_t row;  // within the band
    float weight;
  };
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  bool weights_finite_ = true;
  std::vector<uint32_t> col_entries_;  // [cols]: stored weights per column, all bands
  std::vector<uint64_t> nonempty_;     // bit j: column j holds a stored weight
  std::vector<uint32_t> start_;        // [bands * (cols + 1)]: offsets into entries_ per band
  std::vector<Entry> entries_;         // band-major, then column-major, rows ascending
};

}  // namespace qpu::engine
