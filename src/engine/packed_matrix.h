#pragma once
// A weight matrix stored for single-token decode: row-major [rows, cols], in the
// smallest form that reproduces its fp32 values exactly.
//   DenseF32   plain fp32.
//   DenseBf16  every value is a bf16 number (low 16 bits zero, as in a checkpoint
//              stored in BF16): kept as bf16 and upcast exactly while multiplying.
//              Same bits, half the memory traffic.
//   SparseCsr  mostly zeros (compiled checkpoints): only the nonzeros, in ascending
//              column order per row, plus a column-major copy (column_matrix.h) for
//              inputs that are mostly exact zeros.
// All three produce identical results (dot.h explains why the sparse sum equals the
// dense one on finite inputs, column_matrix.h why the column product does).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/column_matrix.h"
#include "io/sparse_matrix.h"

namespace qpu::engine {

class PackedMatrix {
 public:
  enum class Format { DenseF32, DenseBf16, SparseCsr };

  // How a SparseCsr product walks the matrix.
  //   Rows     every stored nonzero, row by row (the CSR kernel); no column copy is kept
  //            (nor under Auto for a matrix with under 64 nonzeros: its rows are cheaper).
  //   Columns  only the columns whose input is nonzero (ColumnMatrix), whenever that is
  //            exact: every x[j] and every weight finite; otherwise Rows.
  //   Auto     per call, Columns when the stored weights of the active columns are few
  //            enough to be cheaper (packed_matrix.cpp, measured), else Rows.
  // Dense formats always run their row kernels. All give the same bits.
  enum class Path { Auto, Rows, Columns };

  struct Options {
    // CSR when more than this fraction of the values are +0 (-0 counts as a value).
    double sparse_min_zero_fraction = 0.9;
    bool allow_bf16 = true;
    // Tests force a format; DenseBf16 is refused if a value is not a bf16 number.
    std::optional<Format> force;
    Path path = Path::Auto;
  };

  PackedMatrix() = default;

  // `name` is used in error messages (e.g. "layers.3.mlp.up_proj").
  static PackedMatrix pack(std::span<const float> values, int64_t rows, int64_t cols,
                           const Options& options, const std::string& name);
  // The same packing from the matrix's entries (io/sparse_matrix.h): the same format and
  // arrays as pack(s.dense(), ...), without the dense array unless the format is dense.
  static PackedMatrix pack(const io::SparseMatrix& s, const Options& options, const std::string& name);
  // Every stored array equal, values bit for bit (tests: the two packings above).
  bool same_storage(const PackedMatrix& other) const;

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  Format format() const { return format_; }
  Path path() const { return path_; }
  int64_t nonzeros() const;
  // multiply() writes +0 to every row whatever x holds (-0, inf and NaN included): a
  // SparseCsr matrix with no stored entry (every weight is +0). Each row path then
  // writes +0 without reading x (an empty row), and the column path writes +0 to rows
  // that got no term. A dense matrix of zeros does not qualify (0 * inf = NaN in its
  // sums), nor does a CSR one holding a -0 weight (stored, so its product reads x).
  bool always_zero() const { return format_ == Format::SparseCsr && f32_.empty(); }
  // Row r's product is +0 whatever x holds: a SparseCsr row with no stored entry (the
  // reasons of always_zero, for one row).
  bool row_always_zero(int64_t r) const {
    return format_ == Format::SparseCsr && row_start_[static_cast<size_t>(r) + 1] == row_start_[static_cast<size_t>(r)];
  }
  size_t bytes() const;  // storage used for the values (and indices), column copy included
  // What the dense matrix would answer, from the stored values (CSR leaves out only +0
  // weights, which are finite and not != 0): every weight finite; used[c] = 1 for every
  // column c holding a weight != 0.0f (used has cols() entries).
  bool all_finite() const;
  void mark_nonzero_columns(std::vector<uint8_t>& used) const;
  // used[c] = 1 for every column c whose input a product can read: a CSR matrix's stored
  // columns (a -0 weight included: -0 * NaN is NaN), every column of a dense one.
  void mark_stored_columns(std::vector<uint8_t>& used) const;
  // used[r] = 1 for every row whose product can be other than +0: a CSR matrix's rows
  // with a stored entry (the others are row_always_zero), every row of a dense one.
  void mark_stored_rows(std::vector<uint8_t>& used) const;

  // y[0..rows) = W x. Rows are split between OpenMP threads; each row is summed by
  // one thread in the canonical order of dot.h, so y does not depend on the thread
  // count. x and y must not overlap. A SparseCsr matrix picks its path per call (Path).
  void multiply(const float* x, float* y) const;
  // multiply() on the rows of `words` only: 64-row words, ascending, that hold every row
  // with a stored entry (mark_stored_rows). Those rows get multiply()'s bits; the others,
  // +0 in multiply()'s product, are not written. For a caller that reads only those words
  // (Model's residual add): a tall product of few stored rows then fills no empty rows.
  void multiply_words(const float* x, float* y, std::span<const uint32_t> words) const;

  // Several products in one parallel region (fewer fork/join points per token): each
  // job is y = M x, rows split between threads exactly as multiply() does, so the
  // results are the same bits as separate calls. Jobs that take the column path run
  // first, each on its own (split into row bands only when large); jobs with the same x
  // (pointer and width) share one scan of it (no job may write another job's x).
  struct Job {
    const PackedMatrix* matrix;
    const float* x;
    float* y;
  };
  // What the caller knows about one input: x[0, n) is +-0 outside the blocks of 16 set
  // in `blocks` (bit b of word b / 64: x[16 b, 16 b + 16)) and the tail past the last
  // full block. The column plan of that x (its nonzero columns, their count, whether all
  // are finite) is then found by scanning those blocks only: the plan of the full scan,
  // so the same path and the same bits, for the cost of the blocks instead of the width.
  struct Support {
    const float* x = nullptr;
    int64_t n = 0;
    const uint64_t* blocks = nullptr;
  };
  static void multiply_all(std::span<const Job> jobs);
  static void multiply_all(std::span<const Job> jobs, const Support& support);

  // One row upcast to fp32 (embedding lookup of a tied matrix).
  void copy_row(int64_t row, float* out) const;

  // The path multiply(x, ...) takes for this x (Rows for dense formats), and how many
  // products took the column path so far in this process (tests and benchmarks check
  // that the path they mean to exercise is the one that ran).
  Path path_for(const float* x) const;
  static int64_t column_products();
  // How many column plans were found from a Support's blocks (tests: the path they mean to
  // exercise is the one that ran).
  static int64_t supported_plans();

 private:
  // multiply() (fill_words nullptr) or multiply_words().
  void multiply_filling(const float* x, float* y, const std::span<const uint32_t>* fill_words) const;
  // fill_words: as ColumnMatrix::multiply_band's.
  void multiply_rows(const float* x, float* y, int64_t row_begin, int64_t row_end,
                     const std::span<const uint32_t>* fill_words = nullptr) const;
  float csr_row(const float* x, int64_t r) const;
  // csr_row's pruned tree for a row of few lanes: its nonzeros from f32_[k], its program
  // entries program_[p, p_end) (at most kMaxProgramLanes; packed_matrix.cpp).
  float run_program(const float* x, int64_t k, int64_t p, int64_t p_end) const;
  // The scan of x that column-path products with the same x share (multiply_all): its
  // count, and whether the calling thread's active list holds its columns.
  struct ColumnScan {
    const float* x = nullptr;
    int64_t cols = -1;
    bool listed = false;
    ColumnMatrix::Plan plan;
    Support support;  // multiply_all's: used for the x it describes
  };
  // The column path when this call should take it (plans x, and runs it): true if done.
  bool try_columns(const float* x, float* y, ColumnScan* shared = nullptr,
                   const std::span<const uint32_t>* fill_words = nullptr) const;
  // Plans x into the calling thread's active list (reusing `shared` when it describes
  // this x, and updating it otherwise); false if the row path must run.
  bool plan_columns(const float* x, ColumnMatrix::Plan& plan, ColumnScan* shared = nullptr) const;
  int64_t row_work() const;  // multiply-adds of the row path (parallel threshold)
  static Format choose_format(int64_t size, int64_t plus_zeros, bool all_bf16, const Options& options,
                              const std::string& name);
  // The SparseCsr arrays (rows_, cols_ and path_ set) from the non-+0 entries, positions ascending.
  void fill_csr(std::span<const int64_t> listed, std::span<const float> listed_values, const Options& options);

  int64_t rows_ = 0;
  int64_t cols_ = 0;
  Format format_ = Format::DenseF32;
  std::vector<float> f32_;          // DenseF32 values, or CSR nonzero values
  std::vector<uint16_t> bf16_;      // DenseBf16 values
  std::vector<uint32_t> col_index_; // CSR
  std::vector<int64_t> row_start_;  // CSR, rows + 1 entries
  // CSR combine program (packed_matrix.cpp, "the pruned tree"): per row, one entry per
  // occupied lane in tree order, (terms in that lane << 8) | merges after it. The row's
  // nonzeros are stored in the same order (ascending column within a lane).
  std::vector<uint32_t> program_;
  std::vector<int64_t> program_start_;  // rows + 1 entries
  // CSR matrices whose rows are mostly empty (out_proj of a compiled layer): the rows
  // with a nonzero, ascending. The row path fills y with +0 (what an empty row sums
  // to) and evaluates only these (live_rows_listed_; none listed when most rows hold a
  // nonzero). Each carries its nonzeros' range and its program's (the row's offsets are
  // scattered, cold cache lines on a machine of thousands of layers, and so is the
  // program): a row whose nonzeros all sit in one lane (a compiled row's usual 1-3
  // weights; leaves == 1) is summed right here from +0 in stored order, which is what
  // csr_row's program does for one leaf; a row of a few lanes runs its program from the
  // ranges held here (run_program), without reading row_start_ or program_start_.
  struct LiveRow {
    int32_t row;
    uint32_t begin, end;  // its nonzeros in f32_ / col_index_
    uint32_t program;     // its first entry in program_
    uint32_t leaves;      // its program's entries (occupied lanes)
  };
  std::vector<LiveRow> live_rows_;
  bool live_rows_listed_ = false;
  // The two commonest live rows of a compiled layer, kept out of live_rows_ with their
  // weights and columns inline (one stream of memory instead of three): one term,
  // 0 + w * x[col] (csr_row's one lane from +0, no merge); and two lanes of one term each,
  // (0 + w0 * x[col0]) + (0 + w1 * x[col1]) (its program: push, push and merge, in stored
  // order). The story machine's rows over 12 nested steps: 123 M of one term, 27 M of two
  // lanes, 11 M others.
  struct OneTermRow {
    int32_t row;
    uint32_t col;
    float weight;
  };
  struct TwoLaneRow {
    int32_t row;
    uint32_t col0, col1;
    float weight0, weight1;
  };
  std::vector<OneTermRow> one_term_rows_;
  std::vector<TwoLaneRow> two_lane_rows_;
  // CSR matrices whose every row holds at most one stored value (the looped machine's
  // GDN in_proj_z: 1,024 rows, 512 values): the row path writes 0 + w * x[c] or +0 per
  // row directly instead of running the row's program (the same bits).
  bool single_term_rows_ = false;
  Path path_ = Path::Auto;
  ColumnMatrix columns_;  // SparseCsr, path_ Columns or Auto: the same nonzeros, column-major
};

const char* format_name(PackedMatrix::Format format);

// A layer's projection packed and its source freed, whether it comes dense (a checkpoint's
// [rows, cols] array) or as entries (a compiled layer; its shape must be rows x cols).
PackedMatrix pack_matrix(std::vector<float>& dense, int64_t rows, int64_t cols, const PackedMatrix::Options& options,
                         const std::string& name);
PackedMatrix pack_matrix(io::SparseMatrix& sparse, int64_t rows, int64_t cols, const PackedMatrix::Options& options,
                         const std::string& name);

}  // namespace qpu::engine
