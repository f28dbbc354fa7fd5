// The column path of sparse products (column_matrix.h): for inputs with exact zeros it
// visits only the active columns, and must give the bits of dot::rows_f32 on the dense
// matrix (the canonical order of dot.h), signed zeros included, at every thread count;
// whole tiny checkpoints whose residual stream is mostly zero give the same logits with
// every path and storage format.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "common/float_bits.h"
#include "engine/dot.h"
#include "engine/model.h"
#include "engine/packed_matrix.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using testing::LayerType;
using testing::TinyRandom;
using testing::TinySpec;
using Path = PackedMatrix::Path;

// A value with exact zeros of both signs, subnormals, products that underflow, and
// magnitudes spread over 2^-40 .. 2^40 (so that a wrong summation order shows in the
// rounding).
float wild_value(TinyRandom& rng, double zeros) {
  const double u = rng.unit();
  if (u < zeros * 0.7) return 0.0f;
  if (u < zeros) return -0.0f;
  const double v = rng.unit();
  if (v < 0.05) return rng.uniform(1.0) * 1e-40f;  // subnormal
  if (v < 0.10) return rng.uniform(1.0) * 1e-25f;  // its products with small x underflow
  return std::ldexp(rng.uniform(1.0), static_cast<int>(rng.unit() * 80.0) - 40);
}

PackedMatrix pack(const std::vector<float>& m, int64_t rows, int64_t cols, Path path) {
  PackedMatrix::Options o;
  o.force = PackedMatrix::Format::SparseCsr;
  o.path = path;
  return PackedMatrix::pack(m, rows, cols, o, "m");
}

std::vector<float> dense_product(const std::vector<float>& m, int64_t rows, int64_t cols, const std::vector<float>& x) {
  std::vector<float> y(static_cast<size_t>(rows), -1.0f);
  dot::rows_f32(m.data(), cols, x.data(), y.data(), 0, rows);
  return y;
}

void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(float_bits(got[r]), float_bits(want[r]))
        << what << " row " << r << ": " << describe_float(got[r]) << " vs " << describe_float(want[r]);
  }
}

struct Case {
  int64_t rows, cols;
  double w_zeros, x_zeros;
};

TEST(ColumnPath, EqualsTheDenseRowsBitForBit) {
  TinyRandom rng(21);
  const int64_t kShapes[][2] = {{1, 1}, {7, 1}, {1, 300}, {37, 63}, {37, 64}, {64, 65},
                                {300, 200}, {96, 1000}, {5000, 70}};
  int64_t checked_rows = 0;
  const int64_t before = PackedMatrix::column_products();
  int64_t column_calls = 0;
  for (const auto& shape : kShapes) {
    const int64_t rows = shape[0], cols = shape[1];
    for (double w_zeros : {0.0, 0.5, 0.9, 0.99}) {
      std::vector<float> m(static_cast<size_t>(rows * cols));
      for (float& v : m) v = wild_value(rng, w_zeros);
      // A row with no nonzero, a row of -0 weights only, and a row that cancels exactly.
      for (int64_t c = 0; c < cols; ++c) m[static_cast<size_t>(c)] = 0.0f;
      if (rows > 1) {
        for (int64_t c = 0; c < cols; ++c) m[static_cast<size_t>(cols + c)] = -0.0f;
      }
      if (rows > 2 && cols > 64) {
        for (int64_t c = 0; c < cols; ++c) m[static_cast<size_t>(2 * cols + c)] = 0.0f;
        m[static_cast<size_t>(2 * cols)] = 3.0f;
        m[static_cast<size_t>(2 * cols + 64)] = -3.0f;
      }
      const PackedMatrix columns = pack(m, rows, cols, Path::Columns);
      const PackedMatrix automatic = pack(m, rows, cols, Path::Auto);
      const PackedMatrix row_path = pack(m, rows, cols, Path::Rows);
      for (int trial = 0; trial < 12; ++trial) {
        const double x_zeros = trial == 0 ? 1.0 : trial < 4 ? 0.0 : rng.unit();
        std::vector<float> x(static_cast<size_t>(cols));
        for (float& v : x) v = wild_value(rng, x_zeros);
        if (rows > 2 && cols > 64 && trial % 2) {
          x[0] = 1.0f;
          x[64] = 1.0f;  // row 2: 3 - 3 = +0 in lane 0
        }
        const std::vector<float> want = dense_product(m, rows, cols, x);
        std::vector<float> got(static_cast<size_t>(rows), -1.0f);
        ASSERT_EQ(columns.path_for(x.data()), Path::Columns);
        columns.multiply(x.data(), got.data());
        ++column_calls;
        expect_bits(got, want, "columns");
        column_calls += automatic.path_for(x.data()) == Path::Columns;
        automatic.multiply(x.data(), got.data());
        expect_bits(got, want, "auto");
        row_path.multiply(x.data(), got.data());
        expect_bits(got, want, "rows");
        EXPECT_EQ(float_bits(want[0]), 0u);  // no nonzero: +0
        if (rows > 1) {
          EXPECT_EQ(float_bits(want[1]), 0u);  // only -0 weights: +0
        }
        checked_rows += rows;
      }
    }
  }
  EXPECT_EQ(PackedMatrix::column_products() - before, column_calls);
  EXPECT_GT(checked_rows, 100000);
}

TEST(ColumnPath, ManyLanesPerRowAndLongColumns) {
  // Rows with 1, 2, 3, ... 64+ occupied lanes (the fast paths for one and two lanes,
  // the full tree above), several terms per lane, and one column feeding every row.
  TinyRandom rng(22);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t rows = 50, cols = 64 * (1 + trial % 5) + trial % 3;
    std::vector<float> m(static_cast<size_t>(rows * cols), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t nnz = r < 40 ? r % 8 : static_cast<int64_t>(rng.unit() * static_cast<double>(cols));
      for (int64_t n = 0; n < nnz; ++n) {
        m[static_cast<size_t>(r * cols + static_cast<int64_t>(rng.unit() * static_cast<double>(cols)))] = wild_value(rng, 0.1);
      }
      m[static_cast<size_t>(r * cols + 5)] = wild_value(rng, 0.0);  // column 5 feeds every row
    }
    std::vector<float> x(static_cast<size_t>(cols));
    for (float& v : x) v = wild_value(rng, trial % 4 == 0 ? 0.0 : 0.6);
    x[5] = rng.uniform(2.0);
    const std::vector<float> want = dense_product(m, rows, cols, x);
    std::vector<float> got(static_cast<size_t>(rows));
    pack(m, rows, cols, Path::Columns).multiply(x.data(), got.data());
    expect_bits(got, want, "columns trial " + std::to_string(trial));
  }
}

TEST(ColumnPath, OrderWithinALaneIsAscending) {
  // Lane 0 of row 0 gets 2^24, 1, 1 (columns 0, 64, 128): each +1 is a tie that rounds
  // back to 2^24, so the canonical order gives 2^24; any other order gives 2^24 + 2.
  std::vector<float> m(3 * 192, 0.0f), x(192, 0.0f);
  m[0] = m[64] = m[128] = 1.0f;
  x[0] = 16777216.0f;
  x[64] = x[128] = 1.0f;
  // Row 1: the same terms in lanes 0, 8, 4 and 12: (0 + 8) first, then (4 + 12) = 2.
  m[192 + 0] = m[192 + 8] = m[192 + 4] = m[192 + 12] = 1.0f;
  x[8] = x[4] = x[12] = 1.0f;
  // Row 2: lanes 0, 16 and 32 hold 2^24, 1, 1: (p0 + p16) + p32 rounds twice to 2^24.
  m[384 + 0] = m[384 + 16] = m[384 + 32] = 1.0f;
  x[16] = x[32] = 1.0f;
  std::vector<float> y(3);
  pack(m, 3, 192, Path::Columns).multiply(x.data(), y.data());
  EXPECT_EQ(y[0], 16777216.0f);
  EXPECT_EQ(y[1], 16777218.0f);
  EXPECT_EQ(y[2], 16777216.0f);
  expect_bits(y, dense_product(m, 3, 192, x), "order");
}

TEST(ColumnPath, NonFiniteInputsAndWeightsTakeTheRowPath) {
  // x with inf or NaN: 0 * inf is NaN in the dense sum and absent from the column walk,
  // so these calls run the CSR rows (dot.h's documented CSR behaviour); the same for a
  // matrix holding an inf weight (inf * 0 for every x[j] = 0).
  std::vector<float> m{0.0f, 2.0f, 0.0f, 1.0f, 1.0f, 0.0f, 0.0f, 0.0f};
  const PackedMatrix columns = pack(m, 2, 4, Path::Columns);
  const PackedMatrix rows = pack(m, 2, 4, Path::Rows);
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    const std::vector<float> x{bad, 1.5f, 0.0f, 0.0f};
    EXPECT_EQ(columns.path_for(x.data()), Path::Rows);
    std::vector<float> a(2), b(2);
    columns.multiply(x.data(), a.data());
    rows.multiply(x.data(), b.data());
    expect_bits(a, b, "non-finite x");
    EXPECT_EQ(a[0], 3.0f);  // the CSR row leaves 0 * inf out
  }
  m[7] = std::numeric_limits<float>::infinity();
  const PackedMatrix inf_weight = pack(m, 2, 4, Path::Columns);
  const std::vector<float> x{1.0f, 1.0f, 0.0f, 0.0f};
  EXPECT_EQ(inf_weight.path_for(x.data()), Path::Rows);
  std::vector<float> y(2);
  inf_weight.multiply(x.data(), y.data());
  expect_bits(y, dense_product(m, 2, 4, x), "inf weight");
  EXPECT_TRUE(std::isnan(y[1]));  // inf * 0 in the dense order
}

TEST(ColumnPath, AutoPicksByTheActiveShare) {
  TinyRandom rng(23);
  const int64_t rows = 2000, cols = 512;
  std::vector<float> m(static_cast<size_t>(rows * cols), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int n = 0; n < 6; ++n) m[static_cast<size_t>(r * cols + static_cast<int64_t>(rng.unit() * cols))] = rng.uniform(1.0);
  }
  const PackedMatrix a = pack(m, rows, cols, Path::Auto);
  std::vector<float> dense_x(static_cast<size_t>(cols), 1.0f), sparse_x(static_cast<size_t>(cols), 0.0f);
  sparse_x[3] = sparse_x[300] = 1.0f;
  EXPECT_EQ(a.path_for(dense_x.data()), Path::Rows);
  EXPECT_EQ(a.path_for(sparse_x.data()), Path::Columns);
  std::vector<float> zero_x(static_cast<size_t>(cols), -0.0f);
  EXPECT_EQ(a.path_for(zero_x.data()), Path::Columns);
  std::vector<float> y(static_cast<size_t>(rows), 1.0f);
  a.multiply(zero_x.data(), y.data());
  for (float v : y) ASSERT_EQ(float_bits(v), 0u);
  // A matrix with (almost) no nonzeros stays on its rows: they cost no more than the
  // column path's fixed cost.
  const PackedMatrix empty = pack(std::vector<float>(static_cast<size_t>(rows * cols), 0.0f), rows, cols, Path::Auto);
  EXPECT_EQ(empty.path_for(sparse_x.data()), Path::Rows);
  EXPECT_EQ(pack(std::vector<float>(static_cast<size_t>(rows * cols), 0.0f), rows, cols, Path::Columns)
                .path_for(sparse_x.data()),
            Path::Columns);
  // Dense formats have no column path; Rows keeps no column copy.
  PackedMatrix::Options dense;
  dense.force = PackedMatrix::Format::DenseF32;
  dense.path = Path::Columns;
  EXPECT_EQ(PackedMatrix::pack(m, rows, cols, dense, "d").path_for(sparse_x.data()), Path::Rows);
  EXPECT_LT(pack(m, rows, cols, Path::Rows).bytes(), a.bytes());
}

TEST(ColumnPath, AutoDecidesByTheRuleAtItsEdges) {
  // Auto takes the columns iff x is finite, at most half of x's entries are nonzero, and
  // the active columns' stored weights E satisfy 4 E + 64 <= nonzeros and E <= 2 rows
  // (packed_matrix.cpp). The plan stops counting once E is past that budget, so the
  // decision is checked where it flips: columns switched on one at a time (E grows by a
  // column's count) on matrices of 0 to ~250 nonzeros, tall and flat (either bound binds).
  TinyRandom rng(27);
  int64_t flips = 0, checked = 0;
  for (int matrix = 0; matrix < 60; ++matrix) {
    const int64_t rows = matrix % 3 == 0 ? 8 : 200, cols = 300;
    const auto target = static_cast<int64_t>(rng.unit() * 250.0);
    std::vector<float> m(static_cast<size_t>(rows * cols), 0.0f);
    for (int64_t n = 0; n < target; ++n) {
      // Columns of 1 to ~20 weights, and a few -0 weights (stored: they count).
      const auto c = static_cast<int64_t>(rng.unit() * rng.unit() * 40.0);
      const auto r = static_cast<int64_t>(rng.unit() * static_cast<double>(rows));
      m[static_cast<size_t>(r * cols + c)] = n % 17 == 5 ? -0.0f : rng.uniform(1.0) + 2.0f;
    }
    std::vector<int64_t> per_column(static_cast<size_t>(cols), 0);
    int64_t nonzeros = 0;
    for (int64_t i = 0; i < rows * cols; ++i) {
      if (float_bits(m[static_cast<size_t>(i)]) != 0) {
        ++per_column[static_cast<size_t>(i % cols)];
        ++nonzeros;
      }
    }
    const PackedMatrix a = pack(m, rows, cols, Path::Auto);
    std::vector<int64_t> order(static_cast<size_t>(cols));
    for (int64_t j = 0; j < cols; ++j) order[static_cast<size_t>(j)] = j;
    for (int64_t j = cols - 1; j > 0; --j) {
      std::swap(order[static_cast<size_t>(j)], order[static_cast<size_t>(rng.unit() * static_cast<double>(j + 1))]);
    }
    std::vector<float> x(static_cast<size_t>(cols), 0.0f);
    int64_t entries = 0;
    Path last = Path::Columns;
    for (int64_t step = 0; step <= cols / 2; ++step) {
      if (step > 0) {
        const int64_t j = order[static_cast<size_t>(step - 1)];
        x[static_cast<size_t>(j)] = 1.0f;
        entries += per_column[static_cast<size_t>(j)];
      }
      const bool columns = nonzeros >= 64 && 4 * entries + 64 <= nonzeros && entries <= 2 * rows;
      const Path path = a.path_for(x.data());
      ASSERT_EQ(path, columns ? Path::Columns : Path::Rows)
          << "matrix " << matrix << " step " << step << ": E " << entries << ", nonzeros " << nonzeros << ", rows " << rows;
      flips += step > 0 && path != last;
      last = path;
      ++checked;
    }
  }
  EXPECT_GT(flips, 20);
  EXPECT_GT(checked, 5000);
}

TEST(ColumnPath, ThreadCountDoesNotChangeBits) {
  // Several row bands (ColumnMatrix::kBandRows) and enough active weights for the bands
  // to run in parallel; multiply_all mixing column-path and row-path jobs.
  TinyRandom rng(24);
  const int64_t rows = 3 * ColumnMatrix::kBandRows + 123, cols = 700;
  std::vector<float> m(static_cast<size_t>(rows * cols), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int n = 0; n < 40; ++n) {
      m[static_cast<size_t>(r * cols + static_cast<int64_t>(rng.unit() * cols))] = wild_value(rng, 0.0);
    }
  }
  const PackedMatrix big = pack(m, rows, cols, Path::Columns);
  std::vector<float> x(static_cast<size_t>(cols));
  for (float& v : x) v = wild_value(rng, 0.8);  // ~100K active weights: parallel bands
  const std::vector<float> want = dense_product(m, rows, cols, x);

  std::vector<float> small_m(static_cast<size_t>(100 * cols));
  for (float& v : small_m) v = wild_value(rng, 0.9);
  const PackedMatrix small_rows = pack(small_m, 100, cols, Path::Rows);
  const PackedMatrix small_columns = pack(small_m, 100, cols, Path::Columns);
  const std::vector<float> small_want = dense_product(small_m, 100, cols, x);

  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> y(static_cast<size_t>(rows), -1.0f);
    big.multiply(x.data(), y.data());
    expect_bits(y, want, "threads " + std::to_string(threads));
    std::vector<float> y1(static_cast<size_t>(rows)), y2(100), y3(100);
    const PackedMatrix::Job jobs[] = {{&small_rows, x.data(), y2.data()},
                                      {&big, x.data(), y1.data()},
                                      {&small_columns, x.data(), y3.data()}};
    PackedMatrix::multiply_all(jobs);
    expect_bits(y1, want, "multiply_all big");
    expect_bits(y2, small_want, "multiply_all rows");
    expect_bits(y3, small_want, "multiply_all columns");
  }
  omp_set_num_threads(saved);
}

TEST(ColumnPath, ListedLiveRowsOfEveryKindGiveTheDenseBits) {
  // A matrix of mostly empty rows keeps its live rows in three lists (packed_matrix.h):
  // one term; two terms in two lanes; the rest (two terms in one lane, more terms), each
  // evaluated its own way. Rows of each kind with -0 weights (a product of -0 summed from
  // +0 is +0), cancelling pairs, and inputs with -0, infinities and NaN, on the row path
  // in one thread (each list from its start) and in parallel row blocks (each list from a
  // binary search), against the dense rows.
  TinyRandom rng(26);
  const int64_t rows = 9001, cols = 200;  // row work over kParallelMinWork: parallel blocks
  std::vector<float> m(static_cast<size_t>(rows * cols), 0.0f);
  const auto at = [&](int64_t r, int64_t c) -> float& { return m[static_cast<size_t>(r * cols + c)]; };
  const auto value = [&](int kind) {
    return kind == 0 ? -0.0f : kind == 1 ? 1.5f : wild_value(rng, 0.0);
  };
  for (int64_t r = 0; r < rows; r += 3) {  // a third of the rows live
    const int kind = static_cast<int>(r / 3 % 5);
    const auto c0 = static_cast<int64_t>(rng.unit() * 60.0);
    switch (kind) {
      case 0:  // one term, often -0
        at(r, c0) = value(static_cast<int>(r % 3));
        break;
      case 1:  // two lanes, one term each (lanes c0 and c0 + 1)
        at(r, c0) = value(static_cast<int>(r % 4));
        at(r, c0 + 1) = r % 2 ? -at(r, c0) : value(static_cast<int>(r % 3));
        break;
      case 2:  // one lane, two terms (c0 and c0 + 64)
        at(r, c0) = value(2);
        at(r, c0 + 64) = value(static_cast<int>(r % 3));
        break;
      default:  // three to six terms anywhere
        for (int n = 0; n < 3 + static_cast<int>(r % 4); ++n) at(r, static_cast<int64_t>(rng.unit() * 199.0)) = value(2);
        break;
    }
  }
  const PackedMatrix rows_path = pack(m, rows, cols, Path::Rows);
  const int saved = omp_get_max_threads();
  for (int trial = 0; trial < 24; ++trial) {
    std::vector<float> x(static_cast<size_t>(cols));
    for (float& v : x) v = wild_value(rng, trial < 2 ? 1.0 : 0.3);
    if (trial % 4 == 3) x[static_cast<size_t>(rng.unit() * 199.0)] = std::numeric_limits<float>::infinity();
    if (trial % 8 == 5) x[static_cast<size_t>(rng.unit() * 199.0)] = std::numeric_limits<float>::quiet_NaN();
    // The dense rows with the +0 weights left out (dot.h's sparse rule: with an infinite
    // or NaN input the dense row would be NaN through 0 * inf where CSR has no term).
    std::vector<float> want(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      float lanes[dot::kLanes] = {};
      for (int64_t c = 0; c < cols; ++c) {
        const float w = at(r, c);
        if (float_bits(w) != 0) lanes[c % dot::kLanes] = lanes[c % dot::kLanes] + w * x[static_cast<size_t>(c)];
      }
      want[static_cast<size_t>(r)] = dot::combine_lanes(lanes);
    }
    if (trial % 4 != 3 && trial % 8 != 5) expect_bits(want, dense_product(m, rows, cols, x), "the rule");
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      std::vector<float> got(static_cast<size_t>(rows), -1.0f);
      rows_path.multiply(x.data(), got.data());
      expect_bits(got, want, "trial " + std::to_string(trial) + " threads " + std::to_string(threads));
    }
  }
  omp_set_num_threads(saved);
}

TEST(ColumnPath, MultiplyWordsWritesMultiplysBitsOnTheStoredWordsOnly) {
  // Tall matrices whose stored rows sit in a few 64-row words (what the machine's
  // down_proj and out_proj look like): multiply_words must give multiply()'s bits on every
  // row of the words mark_stored_rows names and leave every other row as it was, on each
  // path (columns, rows, auto), with rows of one term or many, under and over half the
  // rows live (the listed live rows or not), dense formats, several bands and threads.
  TinyRandom rng(25);
  const float kSentinel = std::bit_cast<float>(0x7fc01234u);  // a quiet NaN no product writes
  const int64_t kShapes[][2] = {{64, 5}, {200, 30}, {1000, 90}, {ColumnMatrix::kBandRows + 300, 40}};
  int64_t outside = 0, inside = 0;
  const int saved = omp_get_max_threads();
  for (const auto& shape : kShapes) {
    const int64_t rows = shape[0], cols = shape[1];
    for (int variant = 0; variant < 6; ++variant) {
      // Which words hold rows: every fourth word (variant 0-3), or most of them (4, 5: the
      // live rows are then over half and not listed). Terms per stored row: 1 or several.
      const bool most = variant >= 4;
      const int terms = variant % 2 == 0 ? 1 : 5;
      std::vector<float> m(static_cast<size_t>(rows * cols), 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t word = r / 64;
        if (most ? word % 5 == 4 : word % 4 != 1) continue;
        if (!most && rng.unit() < 0.5) continue;  // a word with some empty rows
        for (int n = 0; n < terms; ++n) {
          m[static_cast<size_t>(r * cols + static_cast<int64_t>(rng.unit() * static_cast<double>(cols)))] = wild_value(rng, 0.0);
        }
      }
      PackedMatrix::Options dense;
      dense.force = PackedMatrix::Format::DenseF32;
      const PackedMatrix matrices[] = {pack(m, rows, cols, Path::Columns), pack(m, rows, cols, Path::Rows),
                                       pack(m, rows, cols, Path::Auto), PackedMatrix::pack(m, rows, cols, dense, "dense")};
      for (const PackedMatrix& matrix : matrices) {
        std::vector<uint8_t> used(static_cast<size_t>(rows), 0);
        matrix.mark_stored_rows(used);
        std::vector<uint32_t> words;
        for (int64_t r = 0; r < rows; ++r) {
          if (used[static_cast<size_t>(r)] != 0 && (words.empty() || words.back() != r / 64)) {
            words.push_back(static_cast<uint32_t>(r / 64));
          }
        }
        std::vector<uint8_t> in_word(static_cast<size_t>(rows), 0);
        for (const uint32_t w : words) {
          for (int64_t r = 64 * int64_t{w}; r < std::min(rows, 64 * int64_t{w} + 64); ++r) in_word[static_cast<size_t>(r)] = 1;
        }
        for (int trial = 0; trial < 6; ++trial) {
          std::vector<float> x(static_cast<size_t>(cols));
          for (float& v : x) v = wild_value(rng, trial == 0 ? 1.0 : rng.unit());
          std::vector<float> want(static_cast<size_t>(rows), -1.0f);
          matrix.multiply(x.data(), want.data());
          expect_bits(want, dense_product(m, rows, cols, x), "multiply");
          for (int threads : {1, 2}) {
            omp_set_num_threads(threads);
            std::vector<float> got(static_cast<size_t>(rows), kSentinel);
            matrix.multiply_words(x.data(), got.data(), words);
            for (int64_t r = 0; r < rows; ++r) {
              const auto i = static_cast<size_t>(r);
              if (in_word[i] != 0) {
                ASSERT_EQ(float_bits(got[i]), float_bits(want[i])) << "row " << r << " shape " << rows << "x" << cols
                                                                   << " variant " << variant << " trial " << trial;
                ++inside;
              } else {
                // Outside the words: +0 in multiply()'s product, and not written here
                // (a dense matrix may write its +0 there: it has no notion of empty rows).
                ASSERT_EQ(float_bits(want[i]), 0u) << "row " << r;
                if (matrix.format() == PackedMatrix::Format::SparseCsr) {
                  ASSERT_EQ(float_bits(got[i]), float_bits(kSentinel)) << "row " << r << " written";
                  ++outside;
                }
              }
            }
          }
        }
      }
    }
  }
  omp_set_num_threads(saved);
  EXPECT_GT(inside, 100000);
  EXPECT_GT(outside, 100000);
}

// A tiny checkpoint whose residual stream lives in a few dims: the embeddings and
// every matrix that writes the residual (out_proj, o_proj, down_proj) are zero outside
// `live` dims, and the weights are mostly zero, so most neurons read only zero dims and
// are idle. Every product then sees inputs with many exact zeros.
io::Qwen35Weights mostly_zero_residual(uint64_t seed, bool tied) {
  TinySpec spec;
  spec.seed = seed;
  spec.hidden = 128;
  spec.intermediate = 192;
  spec.vocab = 150;
  spec.zero_fraction = 0.93;
  spec.tied = tied;
  io::Qwen35Weights w = testing::make_tiny_weights(spec);
  const int64_t h = spec.hidden;
  std::vector<bool> live(static_cast<size_t>(h), false);
  // 10 of 128 dims, five pairs in the same lane (i and i + 64).
  for (int64_t i : {0, 64, 5, 69, 17, 81, 36, 100, 63, 127}) live[static_cast<size_t>(i)] = true;
  for (int64_t t = 0; t < spec.vocab; ++t) {
    for (int64_t i = 0; i < h; ++i) {
      if (!live[static_cast<size_t>(i)]) w.embed_tokens[static_cast<size_t>(t * h + i)] = 0.0f;
    }
  }
  auto zero_dead_rows = [&](std::vector<float>& m) {
    const auto cols = static_cast<int64_t>(m.size()) / h;
    for (int64_t r = 0; r < h; ++r) {
      if (live[static_cast<size_t>(r)]) continue;
      std::fill(m.begin() + r * cols, m.begin() + (r + 1) * cols, 0.0f);
    }
  };
  for (io::LayerWeights& l : w.layers) {
    zero_dead_rows(l.down_proj);
    zero_dead_rows(l.type == LayerType::LinearAttention ? l.linear.out_proj : l.full.o_proj);
  }
  return w;
}

std::vector<std::vector<float>> run_logits(const Model& model, int steps) {
  std::vector<std::vector<float>> out;
  State state = model.new_state();
  for (int s = 0; s < steps; ++s) {
    std::vector<float> logits(static_cast<size_t>(model.config().vocab_size));
    model.forward((s * 37 + 11) % model.config().vocab_size, state, logits);
    out.push_back(std::move(logits));
  }
  return out;
}

TEST(ColumnPath, WholeModelWithAMostlyZeroResidual) {
  const int saved = omp_get_max_threads();
  for (uint64_t seed : {31u, 32u}) {
    const bool tied = seed == 32;
    const io::Qwen35Weights weights = mostly_zero_residual(seed, tied);
    ModelOptions dense, rows, columns, automatic;
    dense.storage = WeightStorage::Dense;
    dense.allow_bf16 = false;
    rows.storage = columns.storage = automatic.storage = WeightStorage::Sparse;
    rows.sparse_path = SparsePath::Rows;
    columns.sparse_path = SparsePath::Columns;
    // Every product runs (the counts below): no sublayer is skipped as idle.
    rows.idle_sublayers = columns.idle_sublayers = automatic.idle_sublayers = IdleSublayers::Compute;
    const Model reference(weights, dense);
    omp_set_num_threads(1);
    const auto want = run_logits(reference, 24);
    // The logits depend on the live dims only through the sparse weights: they must not
    // be all zero, or the comparison would say little.
    int nonzero = 0;
    for (const auto& step : want) {
      for (float v : step) nonzero += v != 0.0f;
    }
    EXPECT_GT(nonzero, 100);
    for (const ModelOptions* options : {&rows, &columns, &automatic}) {
      const Model model(weights, *options);
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        const int64_t before = PackedMatrix::column_products();
        const auto got = run_logits(model, 24);
        const int64_t column_calls = PackedMatrix::column_products() - before;
        if (options == &rows) {
          EXPECT_EQ(column_calls, 0);
        }
        if (options == &columns) {  // every product of every step: 8 per GDN layer, 7 per
                                    // attention layer, and the head
          int64_t per_step = 1;
          for (LayerType type : weights.config.layer_types) per_step += type == LayerType::LinearAttention ? 8 : 7;
          EXPECT_EQ(column_calls, 24 * per_step);
        }
        if (options == &automatic) {
          EXPECT_GT(column_calls, 24 * 5);  // most layers' gate/up at least
        }
        for (size_t s = 0; s < want.size(); ++s) {
          expect_bits(got[s], want[s], "seed " + std::to_string(seed) + " threads " + std::to_string(threads) +
                                           " step " + std::to_string(s));
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace qpu::engine
