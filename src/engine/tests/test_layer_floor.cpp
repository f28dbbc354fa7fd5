// The per-layer floor of a deep looped machine (docs/engine.md, "The per-layer floor"):
// the bookkeeping that lets a layer whose residual is mostly exact zeros cost its live
// dims, each against the plain computation it replaces:
//   * elementwise::sum_squares_live (the RMSNorm's sum of squares from the live bitmap)
//     against dot::dot_f32(x, x) bit for bit;
//   * elementwise::LiveNorm (normed written only on live blocks, one buffer reused over
//     many calls) against numerics::rms_norm up to the sign of zeros, and the products
//     of both outputs bit for bit on every storage format and path (the reason the sign
//     may differ); the cases where it must not run (a dense x, a NaN r);
//   * GatedDeltaNet's dead conv blocks (no in_proj_qkv row) and dead value heads (q, k,
//     v in dead blocks, empty z/b/a rows, decay 1) left out while the dead blocks are at
//     rest, against the plain scalar step on the same weights over many steps: outputs,
//     conv and recurrent state bit for bit, with a hand-written dead-block history
//     (counts reset to 0: must run), live z rows in otherwise dead heads, decays != 1,
//     inf/NaN inputs and the first token; the same test covers heads at rest (k = q =
//     +0, decay 1) answered without the recurrence, with live v (an inf one: the dense
//     write must still run) and live or +-0 z.
// The whole-model effect is covered by the IdleSublayers / IdleChannels / IdleMixers
// model tests (fast paths against the plain ones, every State vector) and by
// machine_cycle_bench's replay of a real machine's recorded argmaxes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/float_bits.h"
#include "engine/dot.h"
#include "engine/elementwise.h"
#include "engine/gated_delta_net.h"
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

// A machine-like residual: `live` blocks of 16 hold values (ordinary, huge, tiny,
// subnormal, and with `wild` inf/NaN), every other dim +0 or -0 at random.
std::vector<float> residual(TinyRandom& rng, int64_t n, double live, bool wild) {
  std::vector<float> x(static_cast<size_t>(n));
  bool block_live = false;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 16 == 0) block_live = rng.unit() < live;
    const double u = rng.unit();
    float v = u < 0.5 ? 0.0f : -0.0f;
    if (block_live && u < 0.3) {
      const double w = rng.unit();
      v = w < 0.1   ? rng.uniform(1.0) * 1e-40f                                              // subnormal
          : w < 0.2 ? rng.uniform(1.0) * 3e19f                                               // squares overflow
          : w < 0.25 && wild ? (rng.unit() < 0.5 ? kInf : kNaN)
                    : std::ldexp(rng.uniform(1.0), static_cast<int>(rng.unit() * 40.0) - 20);
    }
    x[static_cast<size_t>(i)] = v;
  }
  return x;
}

TEST(LayerFloor, LiveSumOfSquaresIsTheCanonicalDot) {
  TinyRandom rng(71);
  int64_t checked = 0, overflowed = 0;
  for (int64_t n : {1, 15, 16, 63, 64, 65, 130, 1024, 2368, 4544}) {
    for (int trial = 0; trial < 60; ++trial) {
      const std::vector<float> x = residual(rng, n, trial % 6 == 0 ? 0.9 : 0.1, trial % 4 == 3);
      const std::vector<uint64_t> live = live_bits(x);
      const float want = dot::dot_f32(x.data(), x.data(), n);
      const float got = elementwise::sum_squares_live(x.data(), n, live.data());
      ASSERT_TRUE(same(got, want)) << "n " << n << " trial " << trial << ": " << describe_float(got) << " vs "
                                   << describe_float(want);
      ASSERT_EQ(float_bits(got), float_bits(dot::dot_reference(x.data(), x.data(), n))) << "n " << n;
      overflowed += std::isinf(want);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 600);
  EXPECT_GT(overflowed, 20);
}

// One buffer, many calls with changing live blocks (the blocks written by one call must
// be cleared by the next), scales with inf/NaN blocks and a partial tail.
TEST(LayerFloor, LiveNormMatchesRmsNormUpToZeroSignsAndProductsMatchExactly) {
  TinyRandom rng(72);
  int64_t ran = 0, declined = 0, products = 0;
  for (int64_t n : {40, 64, 200, 1030, 4544}) {
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<float> scale(static_cast<size_t>(n));
      for (float& s : scale) s = 1.0f + rng.uniform(0.9);
      if (variant == 1) scale[static_cast<size_t>(n / 3)] = kInf;  // an odd block: (+-0 * r) * inf = NaN
      if (variant == 2) scale[static_cast<size_t>(n - 1)] = kNaN;  // in the tail (n % 16 != 0) or a block
      if (variant == 3) scale[0] = -0.0f;                          // (x * r) * -0: signs flip, zeros stay zeros
      const std::vector<int32_t> odd = elementwise::non_finite_blocks(scale.data(), n);
      // A matrix that reads every column (so every dim of out reaches a product) on
      // every format and path.
      std::vector<float> w(static_cast<size_t>(24 * n), 0.0f);
      for (size_t i = 0; i < w.size(); ++i) {
        if (rng.unit() < 0.2 || i % static_cast<size_t>(n) == i / static_cast<size_t>(n)) w[i] = rng.uniform(1.0);
      }
      std::vector<PackedMatrix> matrices;
      for (const auto path : {PackedMatrix::Path::Rows, PackedMatrix::Path::Columns, PackedMatrix::Path::Auto}) {
        PackedMatrix::Options o;
        o.force = PackedMatrix::Format::SparseCsr;
        o.path = path;
        matrices.push_back(PackedMatrix::pack(w, 24, n, o, "w"));
      }
      PackedMatrix::Options dense;
      dense.force = PackedMatrix::Format::DenseF32;
      matrices.push_back(PackedMatrix::pack(w, 24, n, dense, "w dense"));

      elementwise::LiveNorm norm;
      std::vector<float> out(static_cast<size_t>(n), 7.0f);  // garbage before the first call
      for (int call = 0; call < 40; ++call) {
        const std::string what = "n " + std::to_string(n) + " variant " + std::to_string(variant) + " call " +
                                 std::to_string(call);
        const double live = call % 10 == 9 ? 0.9 : call % 3 == 0 ? 0.0 : 0.06;
        const std::vector<float> x = residual(rng, n, live, call % 7 == 6);
        const std::vector<uint64_t> bits = live_bits(x);
        std::vector<float> want(static_cast<size_t>(n));
        numerics::rms_norm(x.data(), n, scale.data(), 1e-6f, want.data());
        int64_t live_dims = 0;
        for (uint64_t b : bits) live_dims += __builtin_popcountll(b);
        const float r = numerics::rsqrt(dot::dot_f32(x.data(), x.data(), n) / static_cast<float>(n) + 1e-6f);
        const bool should_run = 8 * live_dims <= n && std::isfinite(r);
        const bool did_run = norm.run(x.data(), n, scale.data(), 1e-6f, bits.data(), odd, out.data());
        ASSERT_EQ(did_run, should_run) << what;
        if (!did_run) {
          ++declined;
          norm.forget();  // as Model does after writing out densely
          out = want;
          continue;
        }
        ++ran;
        for (int64_t i = 0; i < n; ++i) {
          const float g = out[static_cast<size_t>(i)], e = want[static_cast<size_t>(i)];
          ASSERT_TRUE(same(g, e) || (g == 0.0f && e == 0.0f)) << what << " [" << i << "] " << describe_float(g)
                                                               << " vs " << describe_float(e);
        }
        for (const PackedMatrix& m : matrices) {
          std::vector<float> y_got(24), y_want(24);
          m.multiply(out.data(), y_got.data());
          m.multiply(want.data(), y_want.data());
          for (size_t i = 0; i < 24; ++i) {
            ASSERT_TRUE(same(y_got[i], y_want[i])) << what << " row " << i << " " << format_name(m.format());
          }
          ++products;
        }
      }
    }
  }
  EXPECT_GT(ran, 400);
  EXPECT_GT(declined, 60);
  EXPECT_GT(products, 1600);
}

// A GDN layer whose heads are live or dead by wiring (the machine's layers use a few of
// their heads), stepped by the fast model (dead blocks and heads left out) and by the
// plain one (scalar loops, nothing left out) from the same state.
TEST(LayerFloor, DeadConvBlocksAndHeadsGiveThePlainStepBits) {
  const GatedDeltaNetShape shape{48, 4, 8, 16, 16, 4};  // conv_dim 256: 16 blocks; 2 value heads per key head
  int64_t dead_heads = 0, dead_blocks = 0, steps = 0, written_by_hand = 0;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    TinyRandom rng(80 + seed);
    const int64_t hidden = shape.hidden, dk = shape.k_head_dim, dv = shape.v_head_dim;
    const int64_t key_dim = shape.key_dim(), conv_dim = shape.conv_dim();
    std::vector<uint8_t> live_v(static_cast<size_t>(shape.num_v_heads)), live_k(static_cast<size_t>(shape.num_k_heads));
    for (size_t j = 0; j < live_v.size(); ++j) live_v[j] = rng.unit() < 0.3 ? 1 : 0;
    // seed % 4 == 3: key heads live at random only, so some live v heads have k = q = +0
    // (heads at rest whose v, and with an inf input delta, is live).
    for (size_t m = 0; m < live_k.size(); ++m) {
      const bool by_v = seed % 4 != 3 && (live_v[2 * m] | live_v[2 * m + 1]) != 0;
      live_k[m] = by_v || rng.unit() < 0.3 ? 1 : 0;
    }
    const auto sparse_row = [&](std::vector<float>& w, int64_t row) {
      for (int64_t c = 0; c < hidden; ++c) {
        if (rng.unit() < 0.15) w[static_cast<size_t>(row * hidden + c)] = rng.uniform(1.0);
      }
    };
    io::LinearAttentionWeights w;
    w.in_proj_qkv.assign(static_cast<size_t>(conv_dim * hidden), 0.0f);
    w.in_proj_z.assign(static_cast<size_t>(shape.value_dim() * hidden), 0.0f);
    w.in_proj_b.assign(static_cast<size_t>(shape.num_v_heads * hidden), 0.0f);
    w.in_proj_a.assign(static_cast<size_t>(shape.num_v_heads * hidden), 0.0f);
    for (int64_t m = 0; m < shape.num_k_heads; ++m) {
      if (live_k[static_cast<size_t>(m)] == 0) continue;
      for (int64_t c = 0; c < dk; ++c) {
        sparse_row(w.in_proj_qkv, m * dk + c);
        sparse_row(w.in_proj_qkv, key_dim + m * dk + c);
      }
    }
    for (int64_t j = 0; j < shape.num_v_heads; ++j) {
      const bool live = live_v[static_cast<size_t>(j)] != 0;
      for (int64_t c = 0; c < dv; ++c) {
        if (live) sparse_row(w.in_proj_qkv, 2 * key_dim + j * dv + c);
        if (live || (seed % 4 == 1 && c == 3)) sparse_row(w.in_proj_z, j * dv + c);  // a live z row: not dead
      }
      if (live) {
        sparse_row(w.in_proj_b, j);
        sparse_row(w.in_proj_a, j);
      }
    }
    w.conv1d.resize(static_cast<size_t>(conv_dim * shape.conv_kernel));
    for (float& v : w.conv1d) v = rng.uniform(1.0);
    w.dt_bias.resize(static_cast<size_t>(shape.num_v_heads));
    w.A_log.resize(static_cast<size_t>(shape.num_v_heads));
    for (int64_t j = 0; j < shape.num_v_heads; ++j) {
      w.dt_bias[static_cast<size_t>(j)] = rng.uniform(1.0);
      // decay exactly 1 (exp(-exp(-40) * softplus(.)) rounds to 1) except in some heads
      w.A_log[static_cast<size_t>(j)] = rng.unit() < 0.25 ? rng.uniform(1.0) : -40.0f;
    }
    w.norm.resize(static_cast<size_t>(dv));
    for (float& v : w.norm) v = rng.uniform(2.0);
    w.out_proj.resize(static_cast<size_t>(hidden * shape.value_dim()));
    for (float& v : w.out_proj) v = rng.unit() < 0.3 ? rng.uniform(1.0) : 0.0f;

    PackedMatrix::Options o;
    o.force = PackedMatrix::Format::SparseCsr;
    io::LinearAttentionWeights copy = w;
    const GatedDeltaNet fast(std::move(w), shape, 1e-6f, o, "fast", true, true);
    const GatedDeltaNet plain(std::move(copy), shape, 1e-6f, o, "plain", true, false);
    ASSERT_EQ(plain.dead_value_heads(), 0);
    dead_heads += fast.dead_value_heads();
    dead_blocks += fast.dead_conv_blocks();

    std::vector<float> conv_f(static_cast<size_t>(shape.conv_state_size()), 0.0f), conv_p = conv_f;
    std::vector<float> rec_f(static_cast<size_t>(shape.recurrent_state_size()), 0.0f), rec_p = rec_f;
    std::vector<uint8_t> counts(static_cast<size_t>(fast.conv_blocks()), 3);  // a new state: all +0
    for (int step = 0; step < 40; ++step) {
      const std::string what = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      std::vector<float> h(static_cast<size_t>(hidden), 0.0f);
      if (step % 5 != 2) {  // else an idle input: every projection +0
        for (float& v : h) {
          const double u = rng.unit();
          v = u < 0.5 ? (u < 0.25 ? 0.0f : -0.0f) : rng.uniform(2.0);
        }
        if (seed % 3 == 2 && step == 31) h[static_cast<size_t>(step % hidden)] = kInf;
        if (seed % 3 == 2 && step == 37) h[static_cast<size_t>(step % hidden)] = kNaN;
      }
      if (step == 20 && seed % 2 == 0) {
        // Hand-written history in every block (dead ones included): the counts say unknown.
        for (size_t i = 0; i < conv_f.size(); i += 7) conv_f[i] = conv_p[i] = rng.uniform(1.0);
        std::fill(counts.begin(), counts.end(), uint8_t{0});
        ++written_by_hand;
      }
      std::vector<float> out_f(static_cast<size_t>(hidden)), out_p(static_cast<size_t>(hidden));
      fast.step(h.data(), conv_f, rec_f, step == 0, out_f.data(), counts);
      plain.step(h.data(), conv_p, rec_p, step == 0, out_p.data());
      for (size_t i = 0; i < out_f.size(); ++i) {
        ASSERT_TRUE(same(out_f[i], out_p[i])) << what << " out[" << i << "] " << describe_float(out_f[i]) << " vs "
                                              << describe_float(out_p[i]);
      }
      for (size_t i = 0; i < conv_f.size(); ++i) ASSERT_TRUE(same(conv_f[i], conv_p[i])) << what << " conv " << i;
      for (size_t i = 0; i < rec_f.size(); ++i) ASSERT_TRUE(same(rec_f[i], rec_p[i])) << what << " state " << i;
      ++steps;
    }
  }
  EXPECT_EQ(steps, 16 * 40);
  EXPECT_GT(dead_heads, 12);
  EXPECT_GT(dead_blocks, 80);
  EXPECT_EQ(written_by_hand, 8);
}

}  // namespace
}  // namespace qpu::engine
