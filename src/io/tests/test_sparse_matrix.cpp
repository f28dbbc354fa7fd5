// io::SparseMatrixBuilder against the dense array it stands for: random sequences of
// `m[i] += w` and `m[i] = w` (repeated positions, cancellations to +0, -0, sets after
// adds) replayed on a dense array of +0 give the same bits as the builder's entries.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "common/float_bits.h"
#include "io/sparse_matrix.h"

namespace qpu::io {
namespace {

float draw(std::mt19937_64& rng) {
  switch (rng() % 8) {
    case 0: return -0.0f;
    case 1: return 0.0f;
    case 2: return 1.0f;  // with case 3: sums that cancel to +0
    case 3: return -1.0f;
    default: {
      // Not powers of two: sums round, so their order shows in the bits.
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      return static_cast<float>((2.0 * u - 1.0) * 3.0);
    }
  }
}

void expect_same_bits(const std::vector<float>& want, const std::vector<float>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(float_bits(want[i]), float_bits(got[i])) << "position " << i << ": " << want[i] << " vs " << got[i];
}

TEST(SparseMatrixBuilder, EntriesAreTheDenseArraysBits) {
  int64_t entries = 0, minus_zeros = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 9), cols = 1 + static_cast<int64_t>(rng() % 11);
    std::vector<float> dense(static_cast<size_t>(rows * cols), 0.0f);
    SparseMatrixBuilder b(rows, cols);
    const int writes = static_cast<int>(rng() % 60);
    const int64_t hot = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows * cols));  // many writes here
    for (int k = 0; k < writes; ++k) {
      const int64_t p = rng() % 3 == 0 ? hot : static_cast<int64_t>(rng() % static_cast<uint64_t>(rows * cols));
      const float w = draw(rng);
      if (rng() % 5 == 0) {
        dense[static_cast<size_t>(p)] = w;
        b.set(p, w);
      } else {
        dense[static_cast<size_t>(p)] += w;
        b.add(p, w);
      }
    }
    const SparseMatrix m = b.finish();
    SCOPED_TRACE("seed " + std::to_string(seed));
    EXPECT_EQ(m.rows, rows);
    EXPECT_EQ(m.cols, cols);
    EXPECT_NO_THROW(m.check("m"));
    expect_same_bits(dense, m.dense());
    const SparseMatrix again = SparseMatrix::from_dense(dense, rows, cols);
    EXPECT_EQ(again.positions, m.positions);
    expect_same_bits(again.values, m.values);
    entries += static_cast<int64_t>(m.values.size());
    for (float v : m.values) minus_zeros += float_bits(v) == 0x80000000u;
  }
  // The cases are not trivial: many entries, some of them -0 (a set of -0 is a value).
  EXPECT_GT(entries, 2000);
  EXPECT_GT(minus_zeros, 10);
}

TEST(SparseMatrixBuilder, WritesOutsideTheMatrixAreErrors) {
  SparseMatrixBuilder b(3, 4);
  EXPECT_THROW(b.add(12, 1.0f), Error);
  EXPECT_THROW(b.set(-1, 1.0f), Error);
  EXPECT_THROW(SparseMatrixBuilder(-1, 4), Error);
  b.add(11, 2.0f);
  const SparseMatrix m = b.finish();
  EXPECT_EQ(m.positions, std::vector<int64_t>{11});
}

TEST(SparseMatrix, CheckRejectsWhatIsNotAMatrixsEntries) {
  SparseMatrix m;
  m.rows = 2;
  m.cols = 3;
  m.positions = {1, 4};
  m.values = {1.0f, -0.0f};
  EXPECT_NO_THROW(m.check("m"));
  SparseMatrix bad = m;
  bad.positions = {4, 1};  // not ascending
  EXPECT_THROW(bad.check("m"), Error);
  bad = m;
  bad.positions = {1, 1};  // repeated
  EXPECT_THROW(bad.check("m"), Error);
  bad = m;
  bad.positions = {1, 6};  // outside
  EXPECT_THROW(bad.check("m"), Error);
  bad = m;
  bad.values = {1.0f, 0.0f};  // a listed +0
  EXPECT_THROW(bad.check("m"), Error);
  bad = m;
  bad.values = {1.0f};  // one value short
  EXPECT_THROW(bad.check("m"), Error);
  EXPECT_THROW(bad.dense(), Error);
  EXPECT_THROW(SparseMatrix::from_dense(std::vector<float>(5), 2, 3), Error);
}

}  // namespace
}  // namespace qpu::io
