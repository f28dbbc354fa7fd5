// PackedMatrix::pack from a matrix's entries (io::SparseMatrix) against pack from its
// dense array: the same format and the same stored arrays, bit for bit (same_storage),
// for random matrices of every density, with -0 and bf16 and non-bf16 values, under
// every option; and the same products.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/error.h"
#include "common/float_bits.h"
#include "engine/packed_matrix.h"

namespace qpu::engine {
namespace {

std::vector<float> random_matrix(std::mt19937_64& rng, int64_t rows, int64_t cols, double density, bool bf16) {
  std::vector<float> m(static_cast<size_t>(rows * cols), 0.0f);
  for (float& v : m) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    if (u >= density) continue;
    if (rng() % 16 == 0) {
      v = -0.0f;  // stored, not a +0
      continue;
    }
    v = static_cast<float>((static_cast<double>(rng() >> 11) * 0x1.0p-53 - 0.5) * 4.0);
    if (bf16) v = std::bit_cast<float>(std::bit_cast<uint32_t>(v) & 0xffff0000u);
  }
  return m;
}

TEST(PackEntries, SameStorageAsTheDensePacking) {
  std::vector<PackedMatrix::Options> options(6);
  options[1].path = PackedMatrix::Path::Rows;
  options[2].path = PackedMatrix::Path::Columns;
  options[3].force = PackedMatrix::Format::SparseCsr;
  options[4].force = PackedMatrix::Format::DenseF32;
  options[5].allow_bf16 = false;
  int64_t formats[3] = {0, 0, 0};
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    std::mt19937_64 rng(seed);
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 90), cols = 1 + static_cast<int64_t>(rng() % 150);
    const double density = std::vector<double>{0.0, 0.002, 0.02, 0.08, 0.12, 0.5, 1.0}[rng() % 7];
    const bool bf16 = rng() % 2 == 0;
    const std::vector<float> dense = random_matrix(rng, rows, cols, density, bf16);
    const io::SparseMatrix entries = io::SparseMatrix::from_dense(dense, rows, cols);
    std::vector<float> x(static_cast<size_t>(cols)), y_dense(static_cast<size_t>(rows)), y_entries(y_dense.size());
    for (float& v : x) v = rng() % 3 == 0 ? 0.0f : static_cast<float>(static_cast<int64_t>(rng() % 2001) - 1000) / 37.0f;
    for (size_t o = 0; o < options.size(); ++o) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " options " + std::to_string(o));
      const PackedMatrix a = PackedMatrix::pack(dense, rows, cols, options[o], "m");
      const PackedMatrix b = PackedMatrix::pack(entries, options[o], "m");
      EXPECT_EQ(a.format(), b.format());
      EXPECT_TRUE(a.same_storage(b));
      a.multiply(x.data(), y_dense.data());
      b.multiply(x.data(), y_entries.data());
      for (size_t r = 0; r < y_dense.size(); ++r) ASSERT_EQ(float_bits(y_dense[r]), float_bits(y_entries[r])) << r;
      ++formats[static_cast<int>(a.format())];
    }
  }
  // Every format was packed both ways.
  for (int64_t n : formats) EXPECT_GT(n, 40);
}

// same_storage itself tells matrices apart (else the test above could not fail).
TEST(PackEntries, SameStorageSeesOneChangedBit) {
  std::mt19937_64 rng(7);
  std::vector<float> dense = random_matrix(rng, 20, 70, 0.05, false);
  dense[5] = 1.5f;
  const PackedMatrix a = PackedMatrix::pack(dense, 20, 70, {}, "m");
  EXPECT_TRUE(a.same_storage(PackedMatrix::pack(dense, 20, 70, {}, "m")));
  dense[5] = std::bit_cast<float>(std::bit_cast<uint32_t>(1.5f) + 1);
  EXPECT_FALSE(a.same_storage(PackedMatrix::pack(dense, 20, 70, {}, "m")));
  dense[5] = 1.5f;
  dense[6] = -0.0f;  // a stored -0 where a +0 was
  EXPECT_FALSE(a.same_storage(PackedMatrix::pack(dense, 20, 70, {}, "m")));
}

TEST(PackEntries, BadEntriesAreErrorsNamingTheMatrix) {
  io::SparseMatrix m;
  m.rows = 2;
  m.cols = 3;
  m.positions = {2, 1};
  m.values = {1.0f, 2.0f};
  try {
    PackedMatrix::pack(m, {}, "layers.4.mlp.up_proj");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.4.mlp.up_proj"), std::string::npos) << e.what();
  }
  m.positions = {1, 2};
  io::SparseMatrix copy = m;
  EXPECT_THROW(pack_matrix(copy, 3, 2, {}, "m"), Error);  // another shape
  copy = m;
  EXPECT_NO_THROW(pack_matrix(copy, 2, 3, {}, "m"));
  EXPECT_TRUE(copy.positions.empty());  // consumed
}

}  // namespace
}  // namespace qpu::engine
