// The norm's support (docs/engine.md, "Where a 256-position cycle goes in the engine"):
//   * ColumnMatrix::list_columns_in (the column plan from the blocks an x can be nonzero
//     in) against count() + list_columns() over the whole x: the same count, finiteness
//     and list, for x holding every kind of value inside the blocks and +-0 outside;
//   * PackedMatrix::multiply_all with a Support against the same jobs without one, bit
//     for bit, on every format and path, jobs sharing an x and not;
//   * elementwise::LiveNorm with read_blocks (only the blocks the products store a column
//     in are written) against numerics::rms_norm: the read blocks up to the sign of zeros,
//     +0 elsewhere, written_blocks() exact, and every product of the matrices that define
//     the read blocks bit for bit (with and without the support), -0 weights, inf/NaN
//     scales and x included.
// The whole model: IdleSublayers.NormSupportGivesThePlainModelBits. And the reason the
// residual's -0 pass runs once per forward (AnAddGivesMinusZeroOnlyFromTwoMinusZeros).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/float_bits.h"
#include "engine/column_matrix.h"
#include "engine/elementwise.h"
#include "engine/numerics.h"
#include "engine/packed_matrix.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using testing::live_bits;
using testing::TinyRandom;

using testing::kInf;
using testing::kNaN;
using testing::same;

bool has_block(const std::vector<uint64_t>& blocks, int64_t b) { return (blocks[b / 64] >> (b % 64) & 1u) != 0; }

std::vector<uint64_t> random_blocks(TinyRandom& rng, int64_t n, double p) {
  const int64_t blocks = n / 16;
  std::vector<uint64_t> bits(static_cast<size_t>((blocks + 63) / 64), 0);
  for (int64_t b = 0; b < blocks; ++b) {
    if (rng.unit() < p) bits[static_cast<size_t>(b / 64)] |= uint64_t{1} << (b % 64);
  }
  return bits;
}

// A value of any kind: ordinary, -0/+0, subnormal, huge, and with `wild` inf/NaN.
float any_value(TinyRandom& rng, bool wild) {
  const double w = rng.unit();
  return w < 0.3    ? (rng.unit() < 0.5 ? 0.0f : -0.0f)
         : w < 0.4  ? rng.uniform(1.0) * 1e-40f
         : w < 0.5  ? rng.uniform(1.0) * 3e19f
         : w < 0.55 && wild ? (rng.unit() < 0.5 ? -kInf : kNaN)
                    : std::ldexp(rng.uniform(1.0), static_cast<int>(rng.unit() * 40.0) - 20);
}

// +-0 outside `blocks` and the tail; anything inside (a fraction `density` not +-0).
std::vector<float> supported_x(TinyRandom& rng, int64_t n, const std::vector<uint64_t>& blocks, double density,
                               bool wild) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const bool inside = i >= n / 16 * 16 || has_block(blocks, i / 16);
    x[static_cast<size_t>(i)] = inside && rng.unit() < density ? any_value(rng, wild)
                                                               : (rng.unit() < 0.5 ? 0.0f : -0.0f);
  }
  return x;
}

TEST(NormSupport, BlockScanGivesTheFullScanPlan) {
  TinyRandom rng(91);
  int64_t checked = 0, not_finite = 0;
  for (const int64_t n : {1, 15, 16, 40, 64, 1024, 4480, 4483}) {
    // A matrix of n columns (count() is the scan of its width).
    const ColumnMatrix m = ColumnMatrix::from_csr(1, n, {0, 0}, {}, {});
    for (int trial = 0; trial < 60; ++trial) {
      const double p = trial % 10 == 0 ? 1.0 : trial % 10 == 1 ? 0.0 : 0.2;
      const std::vector<uint64_t> blocks = random_blocks(rng, n, p);
      const std::vector<float> x = supported_x(rng, n, blocks, trial % 3 == 0 ? 1.0 : 0.3, trial % 4 == 3);
      ColumnMatrix::Plan want = m.count(x.data());
      std::vector<int32_t> want_list, got_list;
      ColumnMatrix::list_columns(x.data(), n, want, want_list);
      ColumnMatrix::Plan got;
      ColumnMatrix::list_columns_in(x.data(), n, blocks.data(), got, got_list);
      const std::string what = "n " + std::to_string(n) + " trial " + std::to_string(trial);
      ASSERT_EQ(got.active_cols, want.active_cols) << what;
      ASSERT_EQ(got.x_finite, want.x_finite) << what;
      for (int64_t a = 0; a < want.active_cols; ++a) ASSERT_EQ(got.active[a], want.active[a]) << what << " entry " << a;
      not_finite += !want.x_finite;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 480);
  EXPECT_GT(not_finite, 40);
}

// Matrices reading random blocks of columns (and the tail), with -0 weights stored.
std::vector<float> block_weights(TinyRandom& rng, int64_t rows, int64_t n, const std::vector<uint64_t>& blocks,
                                 double density) {
  std::vector<float> w(static_cast<size_t>(rows * n), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      const bool inside = c >= n / 16 * 16 || has_block(blocks, c / 16);
      if (inside && rng.unit() < density) w[static_cast<size_t>(r * n + c)] = rng.unit() < 0.1 ? -0.0f : rng.uniform(1.0);
    }
  }
  return w;
}

std::vector<PackedMatrix> every_storage(const std::vector<float>& w, int64_t rows, int64_t n) {
  std::vector<PackedMatrix> matrices;
  for (const auto path : {PackedMatrix::Path::Rows, PackedMatrix::Path::Columns, PackedMatrix::Path::Auto}) {
    PackedMatrix::Options o;
    o.force = PackedMatrix::Format::SparseCsr;
    o.path = path;
    matrices.push_back(PackedMatrix::pack(w, rows, n, o, "w"));
  }
  PackedMatrix::Options dense;
  dense.force = PackedMatrix::Format::DenseF32;
  matrices.push_back(PackedMatrix::pack(w, rows, n, dense, "w dense"));
  return matrices;
}

TEST(NormSupport, ProductsWithASupportGiveTheUnsupportedBits) {
  TinyRandom rng(92);
  const int64_t supported_before = PackedMatrix::supported_plans();
  const int64_t columns_before = PackedMatrix::column_products();
  int64_t compared = 0;
  for (const int64_t n : {40, 256, 4480}) {
    for (const int64_t rows : {24, 1024}) {
      // The support may be wider than what the matrices read: the plan does not depend on it.
      const std::vector<uint64_t> read = random_blocks(rng, n, 0.3);
      const std::vector<PackedMatrix> a = every_storage(block_weights(rng, rows, n, read, 0.3), rows, n);
      const std::vector<PackedMatrix> b = every_storage(block_weights(rng, rows, n, read, 0.05), rows, n);
      for (int trial = 0; trial < 12; ++trial) {
        const std::vector<uint64_t> blocks = random_blocks(rng, n, trial % 6 == 0 ? 1.0 : 0.15);
        const std::vector<float> x = supported_x(rng, n, blocks, trial % 5 == 0 ? 1.0 : 0.2, trial % 4 == 3);
        const std::vector<float> other = supported_x(rng, n, blocks, 0.2, false);
        for (size_t i = 0; i < a.size(); ++i) {
          std::vector<float> want_a(rows), want_b(rows), want_c(rows), got_a(rows), got_b(rows), got_c(rows);
          // Two jobs share x (gate and up), one reads another vector.
          const PackedMatrix::Job want[] = {{&a[i], x.data(), want_a.data()}, {&b[i], x.data(), want_b.data()},
                                            {&b[i], other.data(), want_c.data()}};
          const PackedMatrix::Job got[] = {{&a[i], x.data(), got_a.data()}, {&b[i], x.data(), got_b.data()},
                                           {&b[i], other.data(), got_c.data()}};
          PackedMatrix::multiply_all(want);
          PackedMatrix::multiply_all(got, {x.data(), n, blocks.data()});
          const std::string what = "n " + std::to_string(n) + " rows " + std::to_string(rows) + " trial " +
                                   std::to_string(trial) + " " + format_name(a[i].format()) + " storage " +
                                   std::to_string(i);
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_TRUE(same(got_a[r], want_a[r])) << what << " a row " << r;
            ASSERT_TRUE(same(got_b[r], want_b[r])) << what << " b row " << r;
            ASSERT_TRUE(same(got_c[r], want_c[r])) << what << " c row " << r;
          }
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 3 * 2 * 12 * 4);
  EXPECT_GT(PackedMatrix::supported_plans() - supported_before, 100);
  EXPECT_GT(PackedMatrix::column_products() - columns_before, 200);
}

// x of a machine: live blocks with values of every kind, +-0 elsewhere.
std::vector<float> residual(TinyRandom& rng, int64_t n, double live, bool wild) {
  std::vector<uint64_t> blocks = random_blocks(rng, n, live);
  return supported_x(rng, n, blocks, 0.3, wild);
}

// One buffer over many calls (the blocks one call writes are cleared by the next), the
// read blocks those of two matrices (as Model's gate and up), scales with inf/NaN blocks
// inside and outside them, x with inf/NaN (r = 0: NaN in out).
TEST(NormSupport, LiveNormOnReadBlocksGivesTheProductsBits) {
  TinyRandom rng(93);
  int64_t ran = 0, products = 0, skipped_blocks = 0;
  for (const int64_t n : {64, 200, 1030, 4480}) {
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<float> scale(static_cast<size_t>(n));
      for (float& s : scale) s = 1.0f + rng.uniform(0.9);
      if (variant == 1) scale[static_cast<size_t>(n / 3)] = kInf;
      if (variant == 2) scale[static_cast<size_t>(n - 1)] = kNaN;
      if (variant == 3) scale[0] = -0.0f;
      const std::vector<int32_t> odd = elementwise::non_finite_blocks(scale.data(), n);
      const std::vector<uint64_t> wired = random_blocks(rng, n, 0.2);
      const std::vector<float> wa = block_weights(rng, 24, n, wired, 0.3);
      const std::vector<float> wb = block_weights(rng, 24, n, wired, 0.05);
      const std::vector<PackedMatrix> a = every_storage(wa, 24, n);
      const std::vector<PackedMatrix> b = every_storage(wb, 24, n);
      for (size_t i = 0; i < a.size(); ++i) {
        // The read blocks as Model computes them (a dense matrix reads every column).
        std::vector<uint8_t> used(static_cast<size_t>(n), 0);
        a[i].mark_stored_columns(used);
        b[i].mark_stored_columns(used);
        std::vector<uint64_t> read((static_cast<size_t>(n / 16) + 63) / 64, 0);
        for (int64_t d = 0; d < n / 16 * 16; ++d) {
          if (used[static_cast<size_t>(d)] != 0) read[static_cast<size_t>(d / 16 / 64)] |= uint64_t{1} << (d / 16 % 64);
        }
        elementwise::LiveNorm norm;
        std::vector<float> out(static_cast<size_t>(n), 7.0f);  // garbage before the first call
        for (int call = 0; call < 30; ++call) {
          const std::string what = "n " + std::to_string(n) + " variant " + std::to_string(variant) + " storage " +
                                   std::to_string(i) + " call " + std::to_string(call);
          const std::vector<float> x = residual(rng, n, call % 3 == 0 ? 0.0 : 0.08, call % 7 == 6);
          const std::vector<uint64_t> bits = live_bits(x);
          std::vector<float> want(static_cast<size_t>(n));
          numerics::rms_norm(x.data(), n, scale.data(), 1e-6f, want.data());
          if (!norm.run(x.data(), n, scale.data(), 1e-6f, bits.data(), odd, out.data(), read.data())) {
            norm.forget();  // as Model does after writing out densely
            out = want;
            continue;
          }
          ++ran;
          const uint64_t* written = norm.written_blocks();
          for (int64_t blk = 0; blk < n / 16; ++blk) {
            const bool is_read = has_block(read, blk);
            const bool is_written = (written[blk / 64] >> (blk % 64) & 1u) != 0;
            ASSERT_TRUE(is_read || !is_written) << what << " block " << blk << " written but not read";
            skipped_blocks += !is_read;
            for (int64_t j = 16 * blk; j < 16 * blk + 16; ++j) {
              const float g = out[static_cast<size_t>(j)], e = want[static_cast<size_t>(j)];
              if (!is_written) {
                ASSERT_EQ(float_bits(g), 0u) << what << " [" << j << "] outside the written blocks";
              } else {
                ASSERT_TRUE(same(g, e) || (g == 0.0f && e == 0.0f)) << what << " [" << j << "]";
              }
              // Every value a product of these matrices reads is in a written block.
              if (is_read && (e != 0.0f || std::isnan(e))) {
                ASSERT_TRUE(is_written) << what << " [" << j << "]";
              }
            }
          }
          for (int64_t j = n / 16 * 16; j < n; ++j) {  // the tail: always written
            const float g = out[static_cast<size_t>(j)], e = want[static_cast<size_t>(j)];
            ASSERT_TRUE(same(g, e) || (g == 0.0f && e == 0.0f)) << what << " tail [" << j << "]";
          }
          std::vector<float> ya(24), yb(24), ea(24), eb(24);
          const PackedMatrix::Job jobs[] = {{&a[i], out.data(), ya.data()}, {&b[i], out.data(), yb.data()}};
          PackedMatrix::multiply_all(jobs, {out.data(), n, written});
          a[i].multiply(want.data(), ea.data());
          b[i].multiply(want.data(), eb.data());
          for (size_t r = 0; r < 24; ++r) {
            ASSERT_TRUE(same(ya[r], ea[r])) << what << " a row " << r;
            ASSERT_TRUE(same(yb[r], eb[r])) << what << " b row " << r;
          }
          a[i].multiply(out.data(), ya.data());  // and without the support
          for (size_t r = 0; r < 24; ++r) ASSERT_TRUE(same(ya[r], ea[r])) << what << " a row " << r << " (unsupported)";
          products += 3;
        }
      }
    }
  }
  EXPECT_GT(ran, 600);
  EXPECT_GT(products, 1800);
  EXPECT_GT(skipped_blocks, 10000);  // the sparse layers left most blocks unwritten
}

// Model::forward runs its x + (+0) pass over the residual once per forward (not after
// every sublayer that ran): x starts as the embedding row, and every later write is an
// add, which gives -0 only from two -0s. Checked for the kernels' add over values of
// every kind, -0 pairs included.
TEST(NormSupport, AnAddGivesMinusZeroOnlyFromTwoMinusZeros) {
  TinyRandom rng(94);
  const int64_t n = 4096;
  std::vector<float> x(n), y(n);
  int64_t minus_zero_sums = 0;
  for (int trial = 0; trial < 50; ++trial) {
    for (int64_t i = 0; i < n; ++i) {
      x[static_cast<size_t>(i)] = any_value(rng, true);
      // Often the negation of x (an exact +0 sum) or a zero of either sign.
      const double u = rng.unit();
      y[static_cast<size_t>(i)] = u < 0.3 ? -x[static_cast<size_t>(i)] : any_value(rng, true);
    }
    const std::vector<float> before = x;
    elementwise::kernels().add(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<size_t>(i);
      const bool minus_zero = float_bits(x[k]) == 0x80000000u;
      const bool both = float_bits(before[k]) == 0x80000000u && float_bits(y[k]) == 0x80000000u;
      ASSERT_EQ(minus_zero, both) << describe_float(before[k]) << " + " << describe_float(y[k]);
      minus_zero_sums += minus_zero;
    }
  }
  EXPECT_GT(minus_zero_sums, 1000);
}

}  // namespace
}  // namespace qpu::engine
