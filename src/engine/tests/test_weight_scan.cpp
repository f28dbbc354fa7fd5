// weight_scan's block scans against the plain per-value loops they replace, on random
// mostly-zero matrices (fixed seeds): +0 and -0 runs, lone nonzeros at every offset of a
// block of 16, bf16 and non-bf16 values, subnormals, inf and NaN, lengths and column
// counts that are not multiples of 16 (tails), and empty input.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/packed_matrix.h"
#include "engine/weight_scan.h"

namespace qpu::engine {
namespace {

float special(std::mt19937_64& rng) {
  switch (rng() % 10) {
    case 0: return -0.0f;
    case 1: return std::numeric_limits<float>::infinity();
    case 2: return -std::numeric_limits<float>::infinity();
    case 3: return std::numeric_limits<float>::quiet_NaN();
    case 4: return std::numeric_limits<float>::denorm_min();
    case 5: return std::bit_cast<float>(0x00010000u);  // a subnormal bf16 number
    case 6: return 1.0f;                               // bf16
    case 7: return std::bit_cast<float>(0x3f800001u);  // not bf16
    case 8: return -128.0f;
    default: return std::bit_cast<float>(static_cast<uint32_t>(rng()));
  }
}

// A rows x cols matrix, mostly +0, with runs of -0 and `density` other values.
std::vector<float> sparse_matrix(std::mt19937_64& rng, int64_t rows, int64_t cols, double density, bool finite_only) {
  std::vector<float> m(static_cast<size_t>(rows * cols), 0.0f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (float& v : m) {
    const double r = u(rng);
    if (r < density) {
      v = special(rng);
      if (finite_only && !std::isfinite(v)) v = 0.5f;
    } else if (r < density * 2) {
      v = -0.0f;
    }
  }
  return m;
}

TEST(WeightScan, AgreesWithThePlainLoops) {
  std::mt19937_64 rng(20261130);
  int cases = 0, not_finite = 0, bf16 = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t cols = 1 + static_cast<int64_t>(rng() % 70);
    const int64_t rows = static_cast<int64_t>(rng() % 9);
    const double density = trial % 4 == 0 ? 0.0 : std::pow(10.0, -static_cast<double>(rng() % 4));
    const std::vector<float> m = sparse_matrix(rng, rows, cols, density, trial % 3 == 0);
    const std::string at = "trial " + std::to_string(trial);

    int64_t zeros = 0;
    bool all_bf16 = true, finite = true;
    std::vector<uint8_t> used_plain(static_cast<size_t>(cols), 0), used(static_cast<size_t>(cols), 0);
    for (size_t i = 0; i < m.size(); ++i) {
      const uint32_t b = std::bit_cast<uint32_t>(m[i]);
      zeros += b == 0 ? 1 : 0;
      all_bf16 = all_bf16 && (b & 0xffffu) == 0;
      finite = finite && std::isfinite(m[i]);
      if (m[i] != 0.0f) used_plain[i % static_cast<size_t>(cols)] = 1;
    }
    const weight_scan::Census c = weight_scan::census(m);
    ASSERT_EQ(c.plus_zeros, zeros) << at;
    ASSERT_EQ(c.all_bf16, all_bf16) << at;
    ASSERT_EQ(weight_scan::all_finite(m), finite) << at;
    weight_scan::mark_nonzero_columns(m, cols, used);
    ASSERT_EQ(used, used_plain) << at;
    std::vector<int64_t> plain, listed = {7};  // cleared first
    for (size_t i = 0; i < m.size(); ++i)
      if (std::bit_cast<uint32_t>(m[i]) != 0) plain.push_back(static_cast<int64_t>(i));
    weight_scan::census_listing(m, static_cast<int64_t>(m.size()), listed);  // no limit: every one
    ASSERT_EQ(listed, plain) << at;
    ++cases;
    not_finite += finite ? 0 : 1;
    bf16 += all_bf16 ? 1 : 0;
  }
  EXPECT_EQ(cases, 2000);
  EXPECT_GT(not_finite, 100);  // both answers of every scan were exercised
  EXPECT_GT(bf16, 100);
  EXPECT_LT(bf16, 1900);
}

TEST(WeightScan, CensusListingListsWhileWithinTheLimit) {
  std::mt19937_64 rng(77);
  int complete = 0, abandoned = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    const int64_t n = static_cast<int64_t>(rng() % 200);
    const std::vector<float> m = sparse_matrix(rng, 1, n, std::pow(10.0, -static_cast<double>(rng() % 3)), false);
    std::vector<int64_t> plain;
    for (int64_t i = 0; i < n; ++i)
      if (std::bit_cast<uint32_t>(m[static_cast<size_t>(i)]) != 0) plain.push_back(i);
    const int64_t limit = static_cast<int64_t>(rng() % 30);
    std::vector<int64_t> listed = {123};  // cleared first
    const weight_scan::Census c = weight_scan::census_listing(m, limit, listed);
    const weight_scan::Census plain_census = weight_scan::census(m);
    ASSERT_EQ(c.plus_zeros, plain_census.plus_zeros) << trial;
    ASSERT_EQ(c.all_bf16, plain_census.all_bf16) << trial;
    if (static_cast<int64_t>(plain.size()) <= limit) {
      ASSERT_EQ(listed, plain) << trial;
      ++complete;
    } else {
      ASSERT_TRUE(listed.empty()) << trial;
      ++abandoned;
    }
  }
  EXPECT_GT(complete, 200);
  EXPECT_GT(abandoned, 200);
}

TEST(WeightScan, PackedMatricesAnswerAsTheirDenseValues) {
  // PackedMatrix::all_finite and mark_nonzero_columns from the stored values, in every
  // format, against the plain loops over the dense matrix.
  std::mt19937_64 rng(4242);
  int sparse = 0, bf16 = 0, auto_sparse = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 12), cols = 1 + static_cast<int64_t>(rng() % 50);
    std::vector<float> m = sparse_matrix(rng, rows, cols, std::pow(10.0, -static_cast<double>(rng() % 3)), trial % 2 == 0);
    if (trial % 3 == 0)
      for (float& v : m) v = std::bit_cast<float>(std::bit_cast<uint32_t>(v) & 0xffff0000u);  // bf16 numbers
    bool finite = true;
    std::vector<uint8_t> plain(static_cast<size_t>(cols), 0);
    bool all_bf16 = true;
    for (size_t i = 0; i < m.size(); ++i) {
      finite = finite && std::isfinite(m[i]);
      if (m[i] != 0.0f) plain[i % static_cast<size_t>(cols)] = 1;
      all_bf16 = all_bf16 && (std::bit_cast<uint32_t>(m[i]) & 0xffffu) == 0;
    }
    for (const PackedMatrix::Format f :
         {PackedMatrix::Format::DenseF32, PackedMatrix::Format::DenseBf16, PackedMatrix::Format::SparseCsr}) {
      if (f == PackedMatrix::Format::DenseBf16 && !all_bf16) continue;
      PackedMatrix::Options o;
      o.force = f;
      const PackedMatrix p = PackedMatrix::pack(m, rows, cols, o, "m");
      std::vector<uint8_t> used(static_cast<size_t>(cols), 0);
      p.mark_nonzero_columns(used);
      ASSERT_EQ(used, plain) << trial;
      ASSERT_EQ(p.all_finite(), finite) << trial;
      sparse += f == PackedMatrix::Format::SparseCsr ? 1 : 0;
      bf16 += f == PackedMatrix::Format::DenseBf16 ? 1 : 0;
    }
    // Auto: CSR rows from the census's listing (most of these are > 90 % +0), against the
    // same matrix stored dense (the formats give the same bits, dot.h): every row's
    // product on x, every row's copy, the nonzero count.
    const PackedMatrix a = PackedMatrix::pack(m, rows, cols, PackedMatrix::Options{}, "m");
    PackedMatrix::Options dense_options;
    dense_options.force = PackedMatrix::Format::DenseF32;
    const PackedMatrix dense = PackedMatrix::pack(m, rows, cols, dense_options, "m");
    if (a.format() == PackedMatrix::Format::SparseCsr) {
      ++auto_sparse;
      std::vector<float> x(static_cast<size_t>(cols)), ya(static_cast<size_t>(rows)), yb(static_cast<size_t>(rows));
      for (float& v : x) v = static_cast<float>(static_cast<int64_t>(rng() % 17) - 8) * 0.25f;
      a.multiply(x.data(), ya.data());
      dense.multiply(x.data(), yb.data());
      for (size_t r = 0; r < ya.size(); ++r)
        ASSERT_EQ(std::bit_cast<uint32_t>(ya[r]), std::bit_cast<uint32_t>(yb[r])) << trial << " row " << r;
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        a.copy_row(r, row.data());
        for (int64_t k = 0; k < cols; ++k)
          ASSERT_EQ(std::bit_cast<uint32_t>(row[static_cast<size_t>(k)]),
                    std::bit_cast<uint32_t>(m[static_cast<size_t>(r * cols + k)]))
              << trial << " row " << r << " col " << k;
      }
      ASSERT_EQ(a.nonzeros(), dense.nonzeros()) << trial;
    }
  }
  EXPECT_GT(sparse, 500);
  EXPECT_GT(bf16, 150);
  EXPECT_GT(auto_sparse, 100);
}

TEST(WeightScan, LoneValuesAtEveryOffsetOfABlock) {
  // One value in a long +0 vector, at every position of two blocks and the tail: each
  // must be seen (a block test that skips a non-zero block fails here).
  for (const float v : {-0.0f, 1.0f, std::bit_cast<float>(0x00000001u), std::bit_cast<float>(0x80000001u),
                        std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                        std::bit_cast<float>(0x3f800001u)}) {
    for (size_t at = 0; at < 37; ++at) {
      std::vector<float> m(37, 0.0f);
      m[at] = v;
      const uint32_t b = std::bit_cast<uint32_t>(v);
      const weight_scan::Census c = weight_scan::census(m);
      EXPECT_EQ(c.plus_zeros, b == 0 ? 37 : 36);
      EXPECT_EQ(c.all_bf16, (b & 0xffffu) == 0);
      EXPECT_EQ(weight_scan::all_finite(m), static_cast<bool>(std::isfinite(v)));
      std::vector<uint8_t> used(37, 0);
      weight_scan::mark_nonzero_columns(m, 37, used);
      for (size_t k = 0; k < 37; ++k) EXPECT_EQ(used[k], k == at && v != 0.0f ? 1 : 0) << at;
      std::vector<int64_t> listed;
      weight_scan::census_listing(m, 37, listed);
      EXPECT_EQ(listed, std::vector<int64_t>{static_cast<int64_t>(at)});  // -0 counts: it is kept in CSR
    }
  }
  const std::vector<float> none;
  EXPECT_EQ(weight_scan::census(none).plus_zeros, 0);
  EXPECT_TRUE(weight_scan::census(none).all_bf16);
  EXPECT_TRUE(weight_scan::all_finite(none));
}

}  // namespace
}  // namespace qpu::engine
