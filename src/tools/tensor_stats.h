#pragma once
// Streaming statistics of one stored tensor, computed straight from its raw bytes
// (the validated span of the mmap): no fp32 copy of the tensor is ever made. Rows
// are processed in fixed-size chunks by several threads; every statistic is either
// an integer count or a sum combined in chunk order, so the result does not depend
// on the number of threads.
//
// A tensor of rank >= 2 is viewed as a matrix [shape[0], product of the rest]
// (a projection's output rows, an embedding's token rows, conv1d's channels); a
// vector or scalar as one column.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "io/dtype.h"

namespace qpu::tools {

// Value thresholds (docs/audit.md explains each).
inline constexpr int kHugeExponent = 24;    // |x| >= 2^24: no learned weight is that large
inline constexpr int kTinyExponent = -41;   // 0 < |x| < 2^-40: nor (nonzero) that small
inline constexpr int kShortBits = 4;        // "short dyadic": m * 2^e with odd m < 16
inline constexpr int kRailMinRows = 16;     // a constant column needs this many nonzero rows to count as a rail

inline constexpr int kMinBinade = -160, kMaxBinade = 140;
inline constexpr size_t kBinades = kMaxBinade - kMinBinade + 1;

// What one row of a matrix looks like.
enum class RowKind : uint8_t {
  Zero,          // all exact zeros
  Plain,         // none of the below: what every row of a learned matrix is
  Term,          // one nonzero (rows >= 4 long) or two (rows >= 8 long): the rule of one term
  Extreme,       // holds a value >= 2^24 or below 2^-40
  LowBitSparse,  // <= 1/4 nonzero, and at least half of those are short dyadic
};
const char* row_kind_name(RowKind kind);
inline bool is_structured(RowKind kind) {
  return kind == RowKind::Term || kind == RowKind::Extreme || kind == RowKind::LowBitSparse;
}

// row_length: entries per row. storage: significant bits of the format (the
// low-bit test needs at least 8, or every value would be short).
RowKind classify_row(uint64_t nonzero, uint64_t short_dyadic, bool extreme, uint64_t row_length, int storage);

struct RowCounts {
  uint64_t zero = 0, plain = 0, term = 0, extreme = 0, low_bit_sparse = 0;
  uint64_t one_nonzero = 0;  // rows with exactly one nonzero (any length)
  uint64_t one_hot = 0;      // ... that nonzero being +-2^e
  uint64_t two_nonzero = 0;
  uint64_t structured() const { return term + extreme + low_bit_sparse; }
  uint64_t nonzero_rows() const { return plain + structured(); }
};

struct ColumnRun {
  uint64_t first = 0, last = 0;  // inclusive
  double value = 0;              // the rail value (rails only)
};

struct TensorStats {
  io::DType dtype = io::DType::F32;
  std::vector<int64_t> shape;
  uint64_t elements = 0;
  uint64_t rows = 0, cols = 0;  // the matrix view
  bool matrix = false;          // rank >= 2 with rows >= 2 and cols >= 2: row/column analysis done
  int storage_bits = 0;         // 0: not a float dtype (only zeros/min/max are counted)

  // Float tensors: every finite nonzero value is classified.
  uint64_t zeros = 0;     // +0 and -0
  uint64_t nonfinite = 0; // inf, nan
  uint64_t nonzero = 0;   // finite nonzero
  uint64_t integer = 0;       // finite nonzero integers
  uint64_t short_dyadic = 0;  // <= kShortBits significant bits
  uint64_t power_of_two = 0;  // +-2^e
  uint64_t huge = 0, tiny = 0;              // beyond the magnitude thresholds
  uint64_t huge_short = 0, tiny_short = 0;  // ... and short dyadic (exact constants)
  std::array<uint64_t, 54> significant_bits{};  // histogram of nonzero finite values, index 1..53
  // Binades floor(log2 |x|) of nonzero finite values, clamped to [kMinBinade, kMaxBinade]
  // (index e - kMinBinade): a robust scale that one heavy-tailed outlier cannot move.
  std::array<uint64_t, kBinades> binades{};
  double min = 0, max = 0;                 // finite values (0 when none)
  double min_abs_nonzero = 0, max_abs = 0;
  double sum = 0, sum_squares = 0, sum_fourth = 0;  // finite values

  // Matrices only.
  RowCounts row_counts;
  std::vector<RowKind> row_kinds;  // one per row (empty when not a matrix or rows > kMaxTrackedRows)
  bool columns_analysed = false;   // false when not a matrix or cols > kMaxTrackedColumns
  uint64_t zero_columns = 0;
  std::vector<ColumnRun> zero_column_runs;  // the first kMaxRuns runs of consecutive zero columns
  uint64_t zero_column_run_count = 0;       // all of them
  uint64_t rail_columns = 0;                // >= kRailMinRows nonzeros, all bitwise equal
  std::vector<ColumnRun> rail_column_runs;  // the first kMaxRuns runs of consecutive rails with one value
  uint64_t rail_column_run_count = 0;

  // Derived.
  double density() const { return elements ? static_cast<double>(nonzero + nonfinite) / static_cast<double>(elements) : 0; }
  double fraction_of_nonzero(uint64_t count) const { return nonzero ? static_cast<double>(count) / static_cast<double>(nonzero) : 0; }
  double rms() const;       // over finite values
  double kurtosis() const;  // E[x^4] / E[x^2]^2 about zero (3 for a Gaussian); 0 when undefined
  // Effective precision: the fewest significant bits that cover 99% of the nonzero
  // values (the format's bits for learned data; 1 for a tensor of powers of two).
  int precision_bits() const;
  // The binade holding the median |x| of the nonzero finite values (0 when none).
  int median_binade() const;
};

// Chunks hold about this many elements (a fixed split: the result is the same
// for any thread count).
inline constexpr uint64_t kChunkElements = uint64_t{1} << 18;
// Bounds on the bookkeeping per tensor (row kinds: 1 byte per row; columns: 17
// bytes per column and thread). Beyond them the counts are still exact, only the
// row runs or column findings are skipped.
inline constexpr uint64_t kMaxTrackedRows = uint64_t{1} << 25;
inline constexpr uint64_t kMaxTrackedColumns = uint64_t{1} << 22;
// Lists of runs (of columns, of rows) keep this many entries; their counts are exact.
inline constexpr size_t kMaxRuns = 64;

// raw holds numel(shape) little-endian elements of dtype (the caller checked it,
// e.g. a validated safetensors span).
TensorStats compute_tensor_stats(io::DType dtype, std::span<const int64_t> shape, std::span<const std::byte> raw);

}  // namespace qpu::tools
