// The canonical summation order (dot.h): every vector code path equals the scalar
// reference bit for bit, the order is the documented one, and the storage formats
// and thread counts do not change a single bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"
#include "common/float_bits.h"
#include "engine/dot.h"
#include "engine/packed_matrix.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using testing::round_bf16;
using testing::TinyRandom;

std::vector<float> random_vector(TinyRandom& rng, int64_t n, double scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = rng.uniform(scale);
  return v;
}

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = static_cast<uint16_t>(float_bits(v[i]) >> 16);
  return b;
}

TEST(Dot, OrderIsLaneByLaneThenTree) {
  // Lane 0 gets 2^24, then 1, then 1: each +1 is a tie that rounds back to 2^24 (even).
  // Any other grouping (e.g. 1 + 1 first) would give 2^24 + 2.
  std::vector<float> w(192, 1.0f), x(192, 0.0f);
  x[0] = 16777216.0f;
  x[64] = 1.0f;
  x[128] = 1.0f;
  EXPECT_EQ(float_bits(dot::dot_reference(w.data(), x.data(), 192)), float_bits(16777216.0f));
  EXPECT_EQ(float_bits(dot::dot_f32(w.data(), x.data(), 192)), float_bits(16777216.0f));

  // Tree, first stage: (p0 + p16) + (p32 + p48). With 2^24 in lane 0 and 1 in lanes 32
  // and 48 the two ones meet first: 2^24 + 2, exact.
  std::fill(x.begin(), x.end(), 0.0f);
  x[0] = 16777216.0f;
  x[32] = 1.0f;
  x[48] = 1.0f;
  EXPECT_EQ(dot::dot_f32(w.data(), x.data(), 64), 16777218.0f);
  // Halving stage: lane 8 meets lane 0 first (2^24 + 1 rounds back to 2^24), lanes 4
  // and 12 first make 2, which then survives: 2^24 + 2.
  std::fill(x.begin(), x.end(), 0.0f);
  x[0] = 16777216.0f;
  x[8] = 1.0f;
  x[4] = 1.0f;
  x[12] = 1.0f;
  EXPECT_EQ(dot::dot_f32(w.data(), x.data(), 64), 16777218.0f);
}

TEST(Dot, EveryCodePathEqualsTheReference) {
  TinyRandom rng(7);
  for (int64_t n : {0, 1, 5, 15, 16, 17, 63, 64, 65, 127, 128, 129, 200, 1024, 1031, 3584}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> w = random_vector(rng, n, 1.0);
      std::vector<float> x = random_vector(rng, n, 100.0);
      std::vector<float> wb(w.size());
      for (size_t i = 0; i < w.size(); ++i) wb[i] = round_bf16(w[i]);
      const std::vector<uint16_t> bits = to_bf16_bits(wb);
      const float expect = dot::dot_reference(w.data(), x.data(), n);
      const float expect_bf16 = dot::dot_reference(wb.data(), x.data(), n);
      for (dot::Isa isa : {dot::Isa::Generic, dot::Isa::Avx2, dot::Isa::Avx512}) {
        if (!dot::isa_supported(isa)) continue;
        float got = -1.0f, got_bf16 = -1.0f;
        dot::rows_f32_with(isa, w.data(), n, x.data(), &got, 0, 1);
        dot::rows_bf16_with(isa, bits.data(), n, x.data(), &got_bf16, 0, 1);
        ASSERT_EQ(float_bits(got), float_bits(expect)) << dot::isa_name(isa) << " n=" << n;
        ASSERT_EQ(float_bits(got_bf16), float_bits(expect_bf16)) << dot::isa_name(isa) << " n=" << n;
      }
    }
  }
}

TEST(Dot, EmptyAndZeroRowsArePlusZero) {
  std::vector<float> w(70, 0.0f), x(70, -3.0f);
  w[5] = -0.0f;
  EXPECT_EQ(float_bits(dot::dot_f32(w.data(), x.data(), 70)), 0u);
  EXPECT_EQ(float_bits(dot::dot_f32(w.data(), x.data(), 0)), 0u);
  // Exact cancellation is +0 as well.
  w[1] = 2.0f;
  w[65] = -2.0f;
  EXPECT_EQ(float_bits(dot::dot_f32(w.data(), x.data(), 70)), 0u);
}

// Builds a matrix with a given fraction of zeros (some of them -0) and extreme values.
std::vector<float> sparse_matrix(TinyRandom& rng, int64_t rows, int64_t cols, double zeros) {
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (float& v : m) {
    const double u = rng.unit();
    if (u < zeros * 0.8) v = 0.0f;
    else if (u < zeros) v = -0.0f;
    else v = rng.uniform(1.0) * (rng.unit() < 0.1 ? 1e30f : 1.0f);
  }
  // An all-zero row, and (when wide enough) a row whose lane 0 cancels exactly.
  for (int64_t c = 0; c < cols; ++c) m[static_cast<size_t>(c)] = 0.0f;
  if (cols > 64) {
    m[static_cast<size_t>(cols)] = 3.0f;
    m[static_cast<size_t>(cols + 64)] = -3.0f;
  }
  return m;
}

TEST(PackedMatrix, DenseSparseAndBf16AgreeBitForBit) {
  TinyRandom rng(11);
  for (double zeros : {0.0, 0.5, 0.95, 0.999}) {
    for (int64_t cols : {1, 63, 64, 130, 1000}) {
      const int64_t rows = 37;
      std::vector<float> m = sparse_matrix(rng, rows, cols, zeros);
      for (float& v : m) v = round_bf16(v);
      PackedMatrix::Options dense, sparse, f32;
      dense.force = PackedMatrix::Format::DenseBf16;
      sparse.force = PackedMatrix::Format::SparseCsr;
      f32.force = PackedMatrix::Format::DenseF32;
      const PackedMatrix a = PackedMatrix::pack(m, rows, cols, f32, "a");
      const PackedMatrix b = PackedMatrix::pack(m, rows, cols, dense, "b");
      const PackedMatrix c = PackedMatrix::pack(m, rows, cols, sparse, "c");
      ASSERT_EQ(c.format(), PackedMatrix::Format::SparseCsr);
      for (int trial = 0; trial < 10; ++trial) {
        std::vector<float> x = random_vector(rng, cols, trial % 2 ? 1e-30 : 10.0);
        x[0] = 0.0f;  // a zero input with nonzero weights
        std::vector<float> ya(rows), yb(rows), yc(rows);
        a.multiply(x.data(), ya.data());
        b.multiply(x.data(), yb.data());
        c.multiply(x.data(), yc.data());
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(float_bits(yb[r]), float_bits(ya[r])) << "bf16 row " << r;
          ASSERT_EQ(float_bits(yc[r]), float_bits(ya[r])) << "csr row " << r << " zeros " << zeros;
          ASSERT_EQ(float_bits(ya[r]), float_bits(dot::dot_reference(&m[r * cols], x.data(), cols)));
        }
        EXPECT_EQ(float_bits(ya[0]), 0u);  // the all-zero row is +0 in every format
      }
    }
  }
}

TEST(PackedMatrix, FewNonzerosPerRowMatchTheDenseTreeBitForBit) {
  // The CSR kernel evaluates only the occupied lanes of the combine tree. Rows with
  // 0..80 nonzeros at random columns (lanes shared or not), values that cancel exactly,
  // products that underflow to +-0, -0 weights and +-0 inputs.
  TinyRandom rng(12);
  const int64_t cols = 300, rows = 64;
  PackedMatrix::Options sparse, f32;
  sparse.force = PackedMatrix::Format::SparseCsr;
  f32.force = PackedMatrix::Format::DenseF32;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> m(static_cast<size_t>(rows * cols), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const auto nnz = static_cast<int64_t>(rng.unit() * (r % 8 == 0 ? 80 : 6));
      for (int64_t n = 0; n < nnz; ++n) {
        const auto c = static_cast<int64_t>(rng.unit() * static_cast<double>(cols));
        const double u = rng.unit();
        m[r * cols + c] = u < 0.1 ? -0.0f : u < 0.2 ? 1e-30f : rng.uniform(4.0);
      }
      if (r % 5 == 1) {  // an exact cancellation inside a lane and across lanes
        m[r * cols + 7] = 2.5f;
        m[r * cols + 71] = -2.5f;
        m[r * cols + 8] = -1.25f;
      }
    }
    const PackedMatrix a = PackedMatrix::pack(m, rows, cols, f32, "a");
    const PackedMatrix c = PackedMatrix::pack(m, rows, cols, sparse, "c");
    std::vector<float> x(static_cast<size_t>(cols));
    for (float& v : x) {
      const double u = rng.unit();
      v = u < 0.1 ? 0.0f : u < 0.2 ? -0.0f : u < 0.3 ? -1e-30f : rng.uniform(3.0);
    }
    x[7] = 1.0f;
    x[71] = 1.0f;
    x[8] = 2.0f;
    std::vector<float> ya(rows), yc(rows);
    a.multiply(x.data(), ya.data());
    c.multiply(x.data(), yc.data());
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(float_bits(yc[r]), float_bits(ya[r])) << "trial " << trial << " row " << r;
    }
  }
}

TEST(PackedMatrix, SparseSkipsZeroTimesInfinity) {
  // The documented difference: 0 * inf is NaN in the dense sum, absent from CSR.
  std::vector<float> m{0.0f, 2.0f, 0.0f, 1.0f};
  std::vector<float> x{std::numeric_limits<float>::infinity(), 1.5f, 0.0f, 1.0f};
  PackedMatrix::Options dense, sparse;
  dense.force = PackedMatrix::Format::DenseF32;
  sparse.force = PackedMatrix::Format::SparseCsr;
  float yd = 0, ys = 0;
  PackedMatrix::pack(m, 1, 4, dense, "d").multiply(x.data(), &yd);
  PackedMatrix::pack(m, 1, 4, sparse, "s").multiply(x.data(), &ys);
  EXPECT_TRUE(std::isnan(yd));
  EXPECT_EQ(ys, 4.0f);
}

TEST(PackedMatrix, ChoosesTheSmallestExactFormat) {
  TinyRandom rng(3);
  std::vector<float> m = random_vector(rng, 64 * 64, 1.0);
  PackedMatrix::Options automatic;
  EXPECT_EQ(PackedMatrix::pack(m, 64, 64, automatic, "m").format(), PackedMatrix::Format::DenseF32);
  for (float& v : m) v = round_bf16(v);
  EXPECT_EQ(PackedMatrix::pack(m, 64, 64, automatic, "m").format(), PackedMatrix::Format::DenseBf16);
  for (size_t i = 0; i < m.size(); ++i) if (i % 20) m[i] = 0.0f;
  const PackedMatrix s = PackedMatrix::pack(m, 64, 64, automatic, "m");
  EXPECT_EQ(s.format(), PackedMatrix::Format::SparseCsr);
  EXPECT_EQ(s.nonzeros(), 64 * 64 / 20 + 1);
  // copy_row returns the exact values, -0 included.
  m[1] = -0.0f;
  const PackedMatrix t = PackedMatrix::pack(m, 64, 64, automatic, "m");
  std::vector<float> row(64);
  t.copy_row(0, row.data());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(float_bits(row[i]), float_bits(m[i])) << i;
}

TEST(PackedMatrix, RejectsBadShapesAndNonBf16Values) {
  std::vector<float> m(10, 0.5f);
  EXPECT_THROW(PackedMatrix::pack(m, 3, 3, {}, "w"), Error);
  m[3] = 0.1f;  // not a bf16 number
  PackedMatrix::Options bf16;
  bf16.force = PackedMatrix::Format::DenseBf16;
  EXPECT_THROW(PackedMatrix::pack(m, 2, 5, bf16, "w"), Error);
}

TEST(PackedMatrix, MultiplyAllEqualsSeparateProducts) {
  TinyRandom rng(6);
  std::vector<float> a = random_vector(rng, 1000 * 70, 1.0), b = random_vector(rng, 5 * 70, 1.0);
  std::vector<float> c = sparse_matrix(rng, 41, 33, 0.95);
  PackedMatrix::Options sparse;
  sparse.force = PackedMatrix::Format::SparseCsr;
  const PackedMatrix ma = PackedMatrix::pack(a, 1000, 70, {}, "a"), mb = PackedMatrix::pack(b, 5, 70, {}, "b");
  const PackedMatrix mc = PackedMatrix::pack(c, 41, 33, sparse, "c");
  const std::vector<float> x = random_vector(rng, 70, 2.0), xc = random_vector(rng, 33, 2.0);
  std::vector<float> ya(1000), yb(5), yc(41), za(1000), zb(5), zc(41);
  ma.multiply(x.data(), ya.data());
  mb.multiply(x.data(), yb.data());
  mc.multiply(xc.data(), yc.data());
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    const PackedMatrix::Job jobs[] = {{&ma, x.data(), za.data()}, {&mb, x.data(), zb.data()}, {&mc, xc.data(), zc.data()}};
    PackedMatrix::multiply_all(jobs);
    for (int r = 0; r < 1000; ++r) ASSERT_EQ(float_bits(za[r]), float_bits(ya[r]));
    for (int r = 0; r < 5; ++r) ASSERT_EQ(float_bits(zb[r]), float_bits(yb[r]));
    for (int r = 0; r < 41; ++r) ASSERT_EQ(float_bits(zc[r]), float_bits(yc[r]));
  }
  omp_set_num_threads(saved);
}

TEST(PackedMatrix, ThreadCountDoesNotChangeBits) {
  TinyRandom rng(5);
  const int64_t rows = 3001, cols = 515;
  std::vector<float> m = random_vector(rng, rows * cols, 1.0);
  const PackedMatrix p = PackedMatrix::pack(m, rows, cols, {}, "m");
  std::vector<float> x = random_vector(rng, cols, 3.0);
  std::vector<float> first(rows);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3, 7}) {
    omp_set_num_threads(threads);
    std::vector<float> y(rows);
    p.multiply(x.data(), y.data());
    if (threads == 1) first = y;
    for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(float_bits(y[r]), float_bits(first[r])) << threads;
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace qpu::engine
