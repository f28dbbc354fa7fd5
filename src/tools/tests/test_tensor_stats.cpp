// compute_tensor_stats on tensors built value by value, so every count is known
// from the construction.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "common/error.h"
#include "tools/tensor_stats.h"
#include "tools_test_helpers.h"

namespace qpu::tools {
namespace {

std::vector<std::byte> as_f32_bytes(const std::vector<float>& v) {
  std::vector<std::byte> out(v.size() * 4);
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<std::byte> as_bf16_bytes(const std::vector<float>& v) {
  std::vector<std::byte> out(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t b;
    std::memcpy(&b, &v[i], 4);
    EXPECT_EQ(b & 0xffffu, 0u) << "not a bf16 value: " << v[i];
    const auto h = static_cast<uint16_t>(b >> 16);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

TensorStats stats_f32(const std::vector<float>& v, std::vector<int64_t> shape) {
  const auto bytes = as_f32_bytes(v);
  return compute_tensor_stats(io::DType::F32, shape, bytes);
}

TEST(ClassifyRow, Rules) {
  // (nonzero, short, extreme, length, storage bits) -> kind
  EXPECT_EQ(classify_row(0, 0, false, 100, 24), RowKind::Zero);
  EXPECT_EQ(classify_row(1, 0, false, 4, 24), RowKind::Term);
  EXPECT_EQ(classify_row(1, 0, false, 3, 24), RowKind::Plain);  // too short to mean anything
  EXPECT_EQ(classify_row(2, 0, false, 8, 24), RowKind::Term);
  EXPECT_EQ(classify_row(2, 0, false, 7, 24), RowKind::Plain);
  EXPECT_EQ(classify_row(3, 0, true, 100, 24), RowKind::Extreme);
  EXPECT_EQ(classify_row(25, 13, false, 100, 24), RowKind::LowBitSparse);
  EXPECT_EQ(classify_row(26, 13, false, 100, 24), RowKind::Plain);   // more than 1/4 nonzero
  EXPECT_EQ(classify_row(25, 12, false, 100, 24), RowKind::Plain);   // fewer than half short
  EXPECT_EQ(classify_row(25, 25, false, 100, 4), RowKind::Plain);    // FP8: every value is short
}

TEST(TensorStats, HandBuiltMatrix) {
  const float big = 0x1p112f, small = 0x1p-64f;
  // 6 rows of 8:
  std::vector<float> v = {
      0, 0, 0, 0, 0, 0, 0, 0,                                    // zero row
      0, 0, 1.0f, 0, 0, 0, 0, 0,                                 // one-hot
      0, 0, 0, 0, 0, 0.1f, 0, 0,                                 // one term, 24 bits
      big, 0, 0, 0, 0, 0, 0, small,                              // two terms, both extreme
      0.1f, 0.2f, 0.3f, -0.4f, 0.7f, -0.9f, 0.11f, 0.13f,        // plain
      0.1f, 0.2f, 0.3f, -0.4f, 0.7f, -0.9f, 0.11f, 30000001.0f,  // extreme (not short: 3e7+1 has 25 bits -> rounds)
  };
  const TensorStats s = stats_f32(v, {6, 8});
  EXPECT_TRUE(s.matrix);
  EXPECT_EQ(s.rows, 6u);
  EXPECT_EQ(s.cols, 8u);
  EXPECT_EQ(s.elements, 48u);
  EXPECT_EQ(s.zeros, 8u + 7 + 7 + 6);
  EXPECT_EQ(s.nonzero, 1u + 1 + 2 + 8 + 8);
  EXPECT_EQ(s.nonfinite, 0u);
  // Integers: 1.0, 2^112 and 30000001.0f (= 30000000, 2^7 * 234375).
  EXPECT_EQ(s.integer, 3u);
  EXPECT_EQ(s.power_of_two, 3u);     // 1, 2^112, 2^-64
  EXPECT_EQ(s.short_dyadic, 3u);     // the same three (0.1f etc. have 24 bits; 0.7f? 24 too)
  EXPECT_EQ(s.huge, 2u);             // 2^112 and 3e7
  EXPECT_EQ(s.huge_short, 1u);
  EXPECT_EQ(s.tiny, 1u);
  EXPECT_EQ(s.tiny_short, 1u);
  EXPECT_EQ(s.max_abs, static_cast<double>(big));
  EXPECT_EQ(s.min_abs_nonzero, static_cast<double>(small));
  EXPECT_EQ(s.row_counts.zero, 1u);
  EXPECT_EQ(s.row_counts.term, 3u);
  EXPECT_EQ(s.row_counts.plain, 1u);
  EXPECT_EQ(s.row_counts.extreme, 1u);
  EXPECT_EQ(s.row_counts.one_nonzero, 2u);
  EXPECT_EQ(s.row_counts.one_hot, 1u);
  EXPECT_EQ(s.row_counts.two_nonzero, 1u);
  const std::vector<RowKind> kinds = {RowKind::Zero, RowKind::Term,  RowKind::Term,
                                      RowKind::Term, RowKind::Plain, RowKind::Extreme};
  EXPECT_EQ(s.row_kinds, kinds);
  EXPECT_EQ(s.zero_columns, 0u);
  EXPECT_EQ(s.rail_columns, 0u);
}

TEST(TensorStats, SignificantBitHistogramAndPrecision) {
  // 0.1f has 24 bits; 1.5 has 2; 0.75 has 2; 1 has 1.
  const TensorStats s = stats_f32({0.1f, 1.5f, 0.75f, 1.0f, -0.1f}, {5});
  EXPECT_FALSE(s.matrix);
  EXPECT_EQ(s.significant_bits[24], 2u);
  EXPECT_EQ(s.significant_bits[2], 2u);
  EXPECT_EQ(s.significant_bits[1], 1u);
  EXPECT_EQ(s.precision_bits(), 24);
  EXPECT_EQ(stats_f32({1.0f, 2.0f, 0.5f, -4.0f}, {4}).precision_bits(), 1);
}

TEST(TensorStats, RailsAndZeroColumns) {
  std::mt19937_64 rng(3);
  const int rows = 20, cols = 6;
  std::vector<float> v = testing::gaussian(rng, rows * cols, 1.0);
  for (int r = 0; r < rows; ++r) {
    v[r * cols + 1] = 0;          // zero column 1
    v[r * cols + 2] = 0;          // zero column 2
    v[r * cols + 4] = 0x1p51f;    // rails 4 and 5 (same value: one run)
    v[r * cols + 5] = 0x1p51f;
  }
  v[3 * cols + 5] = 0;            // a zero in a rail column: still a rail (nonzeros all equal)
  const TensorStats s = stats_f32(v, {rows, cols});
  EXPECT_EQ(s.zero_columns, 2u);
  ASSERT_EQ(s.zero_column_runs.size(), 1u);
  EXPECT_EQ(s.zero_column_runs[0].first, 1u);
  EXPECT_EQ(s.zero_column_runs[0].last, 2u);
  EXPECT_EQ(s.rail_columns, 2u);
  ASSERT_EQ(s.rail_column_runs.size(), 1u);
  EXPECT_EQ(s.rail_column_runs[0].first, 4u);
  EXPECT_EQ(s.rail_column_runs[0].last, 5u);
  EXPECT_EQ(s.rail_column_runs[0].value, 0x1p51);

  // 15 equal values are below kRailMinRows: not a rail.
  std::vector<float> w = testing::gaussian(rng, 15 * 4, 1.0);
  for (int r = 0; r < 15; ++r) w[r * 4] = 8.0f;
  EXPECT_EQ(stats_f32(w, {15, 4}).rail_columns, 0u);
}

// Run lists are bounded, their counts exact: 150 separate zero columns.
TEST(TensorStats, RunListsAreBounded) {
  std::mt19937_64 rng(4);
  const int rows = 20, cols = 300;
  std::vector<float> v = testing::gaussian(rng, rows * cols, 1.0);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; c += 2) v[static_cast<size_t>(r * cols + c)] = 0;
  }
  const TensorStats s = stats_f32(v, {rows, cols});
  EXPECT_EQ(s.zero_columns, 150u);
  EXPECT_EQ(s.zero_column_run_count, 150u);
  ASSERT_EQ(s.zero_column_runs.size(), kMaxRuns);
  EXPECT_EQ(s.zero_column_runs.back().first, 2 * (kMaxRuns - 1));
}

// Chunks are fixed, so every count and every sum is the same at any thread count.
TEST(TensorStats, SameResultAtAnyThreadCount) {
  std::mt19937_64 rng(5);
  const int rows = 3000, cols = 300;  // several chunks
  std::vector<float> v = testing::student_t(rng, static_cast<size_t>(rows) * cols, 3.0, 0.02);
  for (int r = 0; r < rows; r += 7) v[static_cast<size_t>(r) * cols + r % cols] = 0;
  for (int r = 0; r < rows; r += 13) v[static_cast<size_t>(r) * cols] = 0x1p40f;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const TensorStats one = stats_f32(v, {rows, cols});
  omp_set_num_threads(4);
  const TensorStats four = stats_f32(v, {rows, cols});
  omp_set_num_threads(saved);
  EXPECT_EQ(one.nonzero, four.nonzero);
  EXPECT_EQ(one.zeros, four.zeros);
  EXPECT_EQ(one.huge, four.huge);
  EXPECT_EQ(one.significant_bits, four.significant_bits);
  EXPECT_EQ(std::bit_cast<uint64_t>(one.sum), std::bit_cast<uint64_t>(four.sum));
  EXPECT_EQ(std::bit_cast<uint64_t>(one.sum_squares), std::bit_cast<uint64_t>(four.sum_squares));
  EXPECT_EQ(std::bit_cast<uint64_t>(one.sum_fourth), std::bit_cast<uint64_t>(four.sum_fourth));
  EXPECT_EQ(one.row_kinds, four.row_kinds);
  EXPECT_EQ(one.rail_columns, four.rail_columns);
  EXPECT_EQ(one.zero_columns, four.zero_columns);
  EXPECT_EQ(one.huge, static_cast<uint64_t>((rows + 12) / 13));

  // The pattern-histogram path of the 16-bit formats, too.
  const auto bf16 = as_bf16_bytes(testing::quantized_bf16(v));
  omp_set_num_threads(1);
  const TensorStats b1 = compute_tensor_stats(io::DType::BF16, std::vector<int64_t>{rows, cols}, bf16);
  omp_set_num_threads(3);
  const TensorStats b3 = compute_tensor_stats(io::DType::BF16, std::vector<int64_t>{rows, cols}, bf16);
  omp_set_num_threads(saved);
  EXPECT_EQ(b1.significant_bits, b3.significant_bits);
  EXPECT_EQ(b1.binades, b3.binades);
  EXPECT_EQ(std::bit_cast<uint64_t>(b1.sum_fourth), std::bit_cast<uint64_t>(b3.sum_fourth));
  EXPECT_EQ(b1.row_kinds, b3.row_kinds);
  EXPECT_EQ(b1.huge, one.huge);
}

// The same values stored as BF16 and as F32 have the same features.
TEST(TensorStats, StorageDoesNotChangeFeatures) {
  std::mt19937_64 rng(7);
  const std::vector<float> v = testing::quantized_bf16(testing::gaussian(rng, 64 * 32, 0.02));
  const auto f32 = stats_f32(v, {64, 32});
  const auto bf16_bytes = as_bf16_bytes(v);
  const auto bf16 = compute_tensor_stats(io::DType::BF16, std::vector<int64_t>{64, 32}, bf16_bytes);
  EXPECT_EQ(f32.significant_bits, bf16.significant_bits);
  EXPECT_EQ(f32.short_dyadic, bf16.short_dyadic);
  EXPECT_EQ(f32.precision_bits(), 8);
  EXPECT_EQ(bf16.precision_bits(), 8);
  EXPECT_EQ(f32.storage_bits, 24);
  EXPECT_EQ(bf16.storage_bits, 8);
  EXPECT_EQ(f32.row_kinds, bf16.row_kinds);
}

TEST(TensorStats, IntegerTensorsOnlyCountZerosAndRange) {
  const std::vector<int32_t> v = {0, 5, -7, 0, 3};
  std::vector<std::byte> raw(v.size() * 4);
  std::memcpy(raw.data(), v.data(), raw.size());
  const auto s = compute_tensor_stats(io::DType::I32, std::vector<int64_t>{5}, raw);
  EXPECT_EQ(s.storage_bits, 0);
  EXPECT_EQ(s.zeros, 2u);
  EXPECT_EQ(s.nonzero, 3u);
  EXPECT_EQ(s.min, -7.0);
  EXPECT_EQ(s.max, 5.0);
}

TEST(TensorStats, NonFiniteAndEmpty) {
  const auto s = stats_f32({INFINITY, NAN, 1.0f, 0.0f}, {4});
  EXPECT_EQ(s.nonfinite, 2u);
  EXPECT_EQ(s.nonzero, 1u);
  EXPECT_EQ(s.zeros, 1u);
  const auto empty = stats_f32({}, {0, 5});
  EXPECT_EQ(empty.elements, 0u);
  EXPECT_FALSE(empty.matrix);
  const auto scalar = stats_f32({2.5f}, {});
  EXPECT_EQ(scalar.elements, 1u);
  EXPECT_EQ(scalar.nonzero, 1u);
}

TEST(TensorStats, RejectsAMismatchedSpan) {
  const std::vector<std::byte> raw(12);
  EXPECT_THROW(compute_tensor_stats(io::DType::F32, std::vector<int64_t>{4}, raw), Error);
}

}  // namespace
}  // namespace qpu::tools
