// The bookkeeping that cuts the cost of a looped machine's cycle (docs/engine.md, "Cost
// per machine cycle"), each against the plain computation it replaces, bit for bit:
//   * elementwise live_words (the residual facts of the idle-sublayer test) on every
//     instruction set against a scalar test of every float;
//   * conv_silu_tracked (per-block counts of +0 inputs, so that an idle block with a
//     known +0 history is not read) against the scalar conv loop over many steps, with
//     counts started at "all +0" and at "unknown", -0/subnormal/inf/NaN inputs, taps
//     1, 2, 4, 5 and non-finite taps;
//   * RMSNorm copying idle blocks of x without reading their scale (plain_blocks), and
//     the all-+-0 shortcuts of l2norm and the mean square, against numerics' loops;
//   * PackedMatrix::multiply_all sharing one scan of x between the column-path jobs
//     with the same x, against separate multiply() calls on the row path.
// The whole-model effect (the same logits and State bits with the fast paths) is covered
// by the IdleSublayers / IdleChannels model tests and by machine_cycle_bench's replay.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/float_bits.h"
#include "engine/dot.h"
#include "engine/elementwise.h"
#include "engine/numerics.h"
#include "engine/packed_matrix.h"
#include "conv_reference.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using testing::TinyRandom;

using testing::kInf;
using testing::kNaN;
using testing::same;

std::vector<dot::Isa> supported_isas() {
  std::vector<dot::Isa> isas;
  for (dot::Isa isa : {dot::Isa::Generic, dot::Isa::Avx2, dot::Isa::Avx512}) {
    if (dot::isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Mostly +0 and -0 in runs (whole blocks idle), with ordinary values, subnormals and,
// when wild, inf and NaN.
float sparse_value(TinyRandom& rng, bool run_zero, bool wild) {
  const double u = rng.unit();
  if (run_zero) return u < 0.7 ? 0.0f : -0.0f;
  if (u < 0.3) return u < 0.15 ? 0.0f : -0.0f;
  if (u < 0.35) return rng.uniform(1.0) * 1e-40f;  // subnormal
  if (wild && u < 0.4) return u < 0.38 ? (rng.unit() < 0.5 ? kInf : -kInf) : kNaN;
  return std::ldexp(rng.uniform(1.0), static_cast<int>(rng.unit() * 40.0) - 20);
}

std::vector<float> sparse_vector(TinyRandom& rng, int64_t n, double zero_runs, bool wild) {
  std::vector<float> v(static_cast<size_t>(n));
  bool run_zero = true;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 8 == 0) run_zero = rng.unit() < zero_runs;
    v[static_cast<size_t>(i)] = sparse_value(rng, run_zero, wild);
  }
  return v;
}

void expect_same(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(same(got[i], want[i])) << what << " [" << i << "]: " << describe_float(got[i]) << " vs "
                                       << describe_float(want[i]);
  }
}

TEST(CycleFastPaths, LiveWordsAreTheBitsOfEveryFloat) {
  TinyRandom rng(51);
  int64_t checked = 0, non_finite = 0;
  for (dot::Isa isa : supported_isas()) {
    const elementwise::Kernels& k = elementwise::kernels_for(isa);
    for (int64_t n : {1, 3, 15, 16, 17, 63, 64, 65, 100, 127, 128, 200, 1024, 2368}) {
      for (int trial = 0; trial < 40; ++trial) {
        const std::string what = std::string(dot::isa_name(isa)) + " n " + std::to_string(n) + " trial " +
                                 std::to_string(trial);
        std::vector<float> x = sparse_vector(rng, n, trial == 0 ? 1.0 : rng.unit(), trial % 4 == 3);
        if (trial == 1) x[static_cast<size_t>(n - 1)] = kNaN;  // in the scalar tail
        if (trial == 2) x[0] = -kInf;
        std::vector<uint64_t> live(static_cast<size_t>((n + 63) / 64), ~uint64_t{0});
        const bool finite = k.live_words(x.data(), n, live.data());
        bool want_finite = true;
        std::vector<uint64_t> want(live.size(), 0);
        for (int64_t i = 0; i < n; ++i) {
          const float v = x[static_cast<size_t>(i)];
          if (v != 0.0f || std::isnan(v)) want[static_cast<size_t>(i / 64)] |= uint64_t{1} << (i % 64);
          want_finite = want_finite && std::isfinite(v);
        }
        ASSERT_EQ(finite, want_finite) << what;
        for (size_t w = 0; w < live.size(); ++w) ASSERT_EQ(live[w], want[w]) << what << " word " << w;
        ++checked;
        non_finite += !want_finite;
      }
    }
  }
  EXPECT_GT(checked, 500);
  EXPECT_GT(non_finite, 100);  // both answers were exercised
}

// RMSNorm whose idle blocks of x copy x instead of reading their scale (plain_blocks),
// against numerics::rms_norm: scales with +0, -0 (not plain), negative, subnormal, inf
// and NaN values; x with all-zero blocks of either sign, inf (then r = +0) and NaN (r NaN:
// no block may be copied). Also the all-zero shortcuts of l2norm and the mean square.
TEST(CycleFastPaths, PlainScaleBlocksGiveTheRmsNormBits) {
  TinyRandom rng(54);
  int64_t copied_blocks = 0, checked = 0;
  for (dot::Isa isa : supported_isas()) {
    const elementwise::Kernels& k = elementwise::kernels_for(isa);
    for (int64_t n : {16, 40, 64, 160, 1024, 2368}) {
      for (int trial = 0; trial < 30; ++trial) {
        const std::string what = std::string(dot::isa_name(isa)) + " n " + std::to_string(n) + " trial " +
                                 std::to_string(trial);
        std::vector<float> scale(static_cast<size_t>(n));
        for (float& s : scale) {
          const double u = rng.unit();
          s = u < 0.05 ? 0.0f : u < 0.08 ? -0.0f : u < 0.12 ? -rng.uniform(1.0) - 1.5f : u < 0.13 ? 1e-41f
            : u < 0.135 && trial % 3 == 0 ? kInf : u < 0.14 && trial % 3 == 0 ? kNaN : 1.0f + rng.uniform(0.5);
        }
        if (trial % 4 == 0) std::fill(scale.begin(), scale.end(), 1.0f + rng.uniform(0.5));  // every block plain
        std::vector<float> x = sparse_vector(rng, n, trial == 1 ? 1.0 : 0.9, trial % 5 == 4);
        const std::vector<uint64_t> plain = elementwise::plain_blocks(scale.data(), n);
        for (int64_t b = 0; b < n / 16; ++b) {
          bool want_plain = true;
          for (int64_t i = b * 16; i < b * 16 + 16; ++i) {
            want_plain = want_plain && std::isfinite(scale[static_cast<size_t>(i)]) && !std::signbit(scale[static_cast<size_t>(i)]);
          }
          ASSERT_EQ(((plain[static_cast<size_t>(b / 64)] >> (b % 64)) & 1) != 0, want_plain) << what << " block " << b;
          bool zero = true;
          for (int64_t i = b * 16; i < b * 16 + 16; ++i) zero = zero && x[static_cast<size_t>(i)] == 0.0f;
          copied_blocks += want_plain && zero;
        }
        std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), -1.0f);
        const float eps = 1e-6f;
        numerics::rms_norm(x.data(), n, scale.data(), eps, want.data());
        elementwise::rms_norm(x.data(), n, scale.data(), eps, got.data(), plain.data());
        expect_same(got, want, what + " rms_norm");
        // The kernel alone, with the r values the caller lets through (finite, sign clear).
        for (const float r : {0.0f, 1e-30f, 0.75f, 3e30f}) {
          std::vector<float> plain_out(static_cast<size_t>(n), -1.0f), full(static_cast<size_t>(n));
          k.scale_mul_plain(x.data(), r, scale.data(), plain.data(), plain_out.data(), n);
          for (int64_t i = 0; i < n; ++i) full[static_cast<size_t>(i)] = (x[static_cast<size_t>(i)] * r) * scale[static_cast<size_t>(i)];
          expect_same(plain_out, full, what + " scale_mul_plain r " + std::to_string(r));
        }
        // l2norm and the mean square on heads of 16 and 64, many of them all +-0.
        for (int64_t h = 0; h + 64 <= n; h += 64) {
          std::vector<float> head(x.begin() + h, x.begin() + h + 64), plain_head = head;
          numerics::l2norm(plain_head.data(), 16);
          elementwise::l2norm(head.data(), 16);
          expect_same(head, plain_head, what + " l2norm");
          ASSERT_EQ(float_bits(elementwise::mean_square_plus_eps(head.data(), 64, eps)),
                    float_bits(numerics::mean_square_plus_eps(head.data(), 64, eps)))
              << what << " mean square";
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(copied_blocks, 5000);
  EXPECT_GT(checked, 300);
}

using testing::conv_reference;

// The machine's pattern: blocks that are idle for long stretches (their history shifts
// out to +0 and the counts reach taps-1, so the tracked kernel stops reading them), then
// fire for a step or two with live, -0, subnormal or non-finite inputs.
TEST(CycleFastPaths, TrackedConvGivesTheScalarLoopBitsAndState) {
  TinyRandom rng(52);
  int64_t known_idle_blocks = 0, steps = 0;
  for (dot::Isa isa : supported_isas()) {
    const elementwise::Kernels& k = elementwise::kernels_for(isa);
    for (int64_t taps : {1, 2, 4, 5}) {
      const int64_t history = taps - 1;
      for (int64_t channels : {16, 40, 160}) {  // 40: two blocks and a tail
        for (int trial = 0; trial < 6; ++trial) {
          const std::string what = std::string(dot::isa_name(isa)) + " taps " + std::to_string(taps) +
                                   " channels " + std::to_string(channels) + " trial " + std::to_string(trial);
          std::vector<float> weight(static_cast<size_t>(channels * taps));
          for (float& w : weight) {
            const double u = rng.unit();
            w = u < 0.2 ? 0.0f : u < 0.3 ? -0.0f : rng.uniform(2.0);
          }
          const bool finite = trial % 3 != 2;
          if (!finite) weight[static_cast<size_t>(taps / 2)] = kInf;  // no block may be skipped
          const bool wild = trial % 2 == 1;
          const int64_t blocks = channels / 16;
          // Trials 0, 1, 2: a state of +0s with counts at taps-1 (what new_state gives);
          // 3, 4, 5: a live state with counts 0 (unknown).
          const bool from_zero = trial < 3;
          std::vector<float> want_state(static_cast<size_t>(channels * history), 0.0f);
          if (!from_zero) want_state = sparse_vector(rng, channels * history, 0.5, wild);
          std::vector<float> got_state = want_state;
          std::vector<uint8_t> counts(static_cast<size_t>(blocks), static_cast<uint8_t>(from_zero ? history : 0));
          std::vector<double> fire(static_cast<size_t>(blocks + 1));
          for (double& f : fire) f = rng.unit() * 0.4;  // per block: how often it has input
          for (int step = 0; step < 40; ++step) {
            std::vector<float> in(static_cast<size_t>(channels), 0.0f);
            for (int64_t c = 0; c < channels; ++c) {
              if (rng.unit() < fire[static_cast<size_t>(c / 16)]) in[static_cast<size_t>(c)] = sparse_value(rng, false, wild);
            }
            if (step % 9 == 4) in[static_cast<size_t>(rng.unit() * static_cast<double>(channels))] = -0.0f;  // not +0 bits
            for (int64_t b = 0; b < blocks; ++b) known_idle_blocks += counts[static_cast<size_t>(b)] >= history;
            std::vector<float> want(static_cast<size_t>(channels)), got(static_cast<size_t>(channels), -1.0f);
            conv_reference(weight, taps, want_state, in, want, channels);
            k.conv_silu_tracked(weight.data(), taps, finite, got_state.data(), in.data(), got.data(), channels,
                                counts.data());
            expect_same(got, want, what + " step " + std::to_string(step) + " out");
            expect_same(got_state, want_state, what + " step " + std::to_string(step) + " state");
            // The counts never claim more than the truth: count n means the block's
            // newest n history slots (of every channel) are +0 bits.
            for (int64_t b = 0; b < blocks; ++b) {
              const int64_t n = counts[static_cast<size_t>(b)];
              ASSERT_LE(n, history) << what;
              for (int64_t ch = b * 16; ch < b * 16 + 16; ++ch) {
                for (int64_t t = history - n; t < history; ++t) {
                  ASSERT_EQ(float_bits(want_state[static_cast<size_t>(ch * history + t)]), 0u)
                      << what << " step " << step << " block " << b << " count " << n;
                }
              }
            }
            ++steps;
          }
        }
      }
    }
  }
  EXPECT_GT(known_idle_blocks, 5000);  // the skip without reading the history ran
  EXPECT_GT(steps, 1000);
}

// A random CSR matrix (mostly empty columns, a few dense ones, -0 and tiny weights).
PackedMatrix sparse_matrix(TinyRandom& rng, int64_t rows, int64_t cols, PackedMatrix::Path path,
                           const std::string& name) {
  std::vector<float> w(static_cast<size_t>(rows * cols), 0.0f);
  for (int64_t c = 0; c < cols; ++c) {
    const double density = rng.unit() < 0.1 ? 0.5 : 0.02;
    for (int64_t r = 0; r < rows; ++r) {
      const double u = rng.unit();
      if (u >= density) continue;
      w[static_cast<size_t>(r * cols + c)] = u < density * 0.1 ? -0.0f : u < density * 0.2 ? 1e-30f : rng.uniform(2.0);
    }
  }
  PackedMatrix::Options o;
  o.force = PackedMatrix::Format::SparseCsr;
  o.path = path;
  return PackedMatrix::pack(w, rows, cols, o, name);
}

// multiply_all's jobs share one scan of x when their x is the same pointer and width
// (the GDN's in_proj_*, the MLP's gate and up); interleaved x's, wider matrices on the
// same pointer, dense, non-finite and all-zero x must not reuse a stale scan.
TEST(CycleFastPaths, SharedColumnScansGiveTheRowPathBits) {
  TinyRandom rng(53);
  int64_t column_jobs = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const std::string what = "trial " + std::to_string(trial);
    const int64_t cols = 64 + static_cast<int64_t>(rng.unit() * 400.0), wide = cols + 32;
    const PackedMatrix::Path path = trial % 3 == 2 ? PackedMatrix::Path::Columns : PackedMatrix::Path::Auto;
    std::vector<PackedMatrix> ms;
    for (int64_t rows : {300, 7, 130, 64}) ms.push_back(sparse_matrix(rng, rows, cols, path, what));
    ms.push_back(sparse_matrix(rng, 90, wide, path, what));  // the same x pointer, wider
    std::vector<PackedMatrix> rows_only;
    std::vector<std::vector<float>> xs;
    for (int v = 0; v < 2; ++v) {
      const double zero_runs = trial % 5 == 0 ? 1.0 : trial % 5 == 1 ? 0.1 : 0.97;
      xs.push_back(sparse_vector(rng, wide, zero_runs, trial % 7 == 3));
    }
    // Jobs: x0, x0, x1, x0, x1 on the narrow matrices, then x0 on the wide one.
    const int which[] = {0, 0, 1, 0, 1};
    const int matrix[] = {0, 1, 2, 3, 0};
    std::vector<std::vector<float>> got(6), want(6);
    std::vector<PackedMatrix::Job> jobs;
    for (int j = 0; j < 5; ++j) {
      const PackedMatrix& m = ms[static_cast<size_t>(matrix[j])];
      got[static_cast<size_t>(j)].assign(static_cast<size_t>(m.rows()), -1.0f);
      jobs.push_back({&m, xs[static_cast<size_t>(which[j])].data(), got[static_cast<size_t>(j)].data()});
      column_jobs += m.path_for(xs[static_cast<size_t>(which[j])].data()) == PackedMatrix::Path::Columns;
    }
    got[5].assign(static_cast<size_t>(ms[4].rows()), -1.0f);
    jobs.push_back({&ms[4], xs[0].data(), got[5].data()});
    PackedMatrix::multiply_all(jobs);
    // The reference: the same matrices on the row path, one product at a time.
    for (int j = 0; j < 6; ++j) {
      const PackedMatrix& m = *jobs[static_cast<size_t>(j)].matrix;
      std::vector<float> dense(static_cast<size_t>(m.rows() * m.cols()), 0.0f);
      for (int64_t r = 0; r < m.rows(); ++r) m.copy_row(r, dense.data() + r * m.cols());
      PackedMatrix::Options o;
      o.force = PackedMatrix::Format::SparseCsr;
      o.path = PackedMatrix::Path::Rows;
      const PackedMatrix plain = PackedMatrix::pack(dense, m.rows(), m.cols(), o, what + " rows");
      want[static_cast<size_t>(j)].assign(static_cast<size_t>(m.rows()), -2.0f);
      plain.multiply(jobs[static_cast<size_t>(j)].x, want[static_cast<size_t>(j)].data());
      expect_same(got[static_cast<size_t>(j)], want[static_cast<size_t>(j)], what + " job " + std::to_string(j));
    }
  }
  EXPECT_GT(column_jobs, 80);  // the shared scans were used
}

}  // namespace
}  // namespace qpu::engine
