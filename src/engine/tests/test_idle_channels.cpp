// The elementwise kernels that skip idle channels (elementwise.h) against the plain
// scalar loops of the dense path, bit for bit: each kernel on every supported
// instruction set with inputs full of +0, -0, subnormals, inf and NaN; whole tiny
// checkpoints (random, and rich in exact zeros of both signs in weights and inputs) with
// ModelOptions::elementwise SkipZeros against Dense, logits, hidden state and every
// State vector, at 1, 2 and 3 threads; and CSR products over mostly empty rows.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/float_bits.h"
#include "engine/dot.h"
#include "engine/elementwise.h"
#include "engine/model.h"
#include "engine/numerics.h"
#include "engine/packed_matrix.h"
#include "conv_reference.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using testing::TinyRandom;
using testing::TinySpec;

using testing::kInf;
using testing::kNaN;
using testing::same;

// Mostly exact zeros of both signs in runs (so whole 16-blocks are idle), with ordinary
// values, subnormals, tiny values whose squares underflow, and (when wild) inf and NaN.
std::vector<float> sparse_values(TinyRandom& rng, int64_t n, double zeros, bool wild) {
  std::vector<float> v(static_cast<size_t>(n));
  double run_zero = rng.unit() < zeros;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 8 == 0) run_zero = rng.unit() < zeros;  // runs of 8: some blocks all zero
    const double u = rng.unit();
    float x = 0.0f;
    if (run_zero) {
      x = u < 0.6 ? 0.0f : -0.0f;
    } else if (u < 0.2) {
      x = u < 0.1 ? 0.0f : -0.0f;
    } else if (u < 0.25) {
      x = rng.uniform(1.0) * 1e-40f;  // subnormal
    } else if (u < 0.3) {
      x = rng.uniform(1.0) * 1e-25f;  // square underflows to 0
    } else if (wild && u < 0.32) {
      x = u < 0.31 ? (rng.unit() < 0.5 ? kInf : -kInf) : kNaN;
    } else {
      x = std::ldexp(rng.uniform(1.0), static_cast<int>(rng.unit() * 24.0) - 12);
    }
    v[static_cast<size_t>(i)] = x;
  }
  return v;
}

// Bits equal, except that two NaNs count as equal whatever their payloads: which NaN an
// operation with two NaN operands returns depends on the operand order the compiler
// picked, in the scalar loops as much as in the vector ones.
void expect_same(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(same(got[i], want[i])) << what << " [" << i << "]: " << describe_float(got[i]) << " vs "
                                       << describe_float(want[i]);
  }
}

std::vector<dot::Isa> supported_isas() {
  std::vector<dot::Isa> isas;
  for (dot::Isa isa : {dot::Isa::Generic, dot::Isa::Avx2, dot::Isa::Avx512}) {
    if (dot::isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Lengths around the 16-float block: empty, tails only, exact blocks, blocks + tail.
const int64_t kLengths[] = {0, 1, 5, 15, 16, 17, 31, 32, 33, 64, 100, 257, 1536};

TEST(IdleChannels, ElementwiseKernelsGiveTheScalarLoopBits) {
  TinyRandom rng(31);
  int64_t checked = 0;
  for (dot::Isa isa : supported_isas()) {
    const elementwise::Kernels& k = elementwise::kernels_for(isa);
    for (int64_t n : kLengths) {
      for (int trial = 0; trial < 12; ++trial) {
        const std::string what = std::string(dot::isa_name(isa)) + " n " + std::to_string(n) + " trial " +
                                 std::to_string(trial);
        const double zeros = trial == 0 ? 1.0 : trial == 1 ? 0.0 : rng.unit();
        const bool wild = trial % 3 == 2;
        const std::vector<float> a = sparse_values(rng, n, zeros, wild);
        const std::vector<float> b = sparse_values(rng, n, trial % 2 ? zeros : 0.0, wild);
        const std::vector<float> w = sparse_values(rng, n, 0.1, wild);
        const float scalars[] = {rng.uniform(3.0), 1.0f, 0.0f, 1e-30f, kInf, kNaN, -2.5f};
        const float r = scalars[trial % 7];

        std::vector<float> got = a, want = a;
        k.add(got.data(), b.data(), n);
        for (int64_t i = 0; i < n; ++i) want[i] = want[i] + b[i];
        expect_same(got, want, what + " add");

        got.assign(a.size(), -1.0f);
        k.scale_mul(a.data(), r, w.data(), got.data(), n);
        for (int64_t i = 0; i < n; ++i) want[i] = (a[i] * r) * w[i];
        expect_same(got, want, what + " scale_mul");
        got = a;  // in place, as the attention's k_norm uses it
        k.scale_mul(got.data(), r, w.data(), got.data(), n);
        expect_same(got, want, what + " scale_mul in place");

        got = a;
        k.mul(got.data(), r, got.data(), n);
        for (int64_t i = 0; i < n; ++i) want[i] = a[i] * r;
        expect_same(got, want, what + " mul");

        got.assign(a.size(), -1.0f);
        k.div(a.data(), r, got.data(), n);
        for (int64_t i = 0; i < n; ++i) want[i] = a[i] / r;
        expect_same(got, want, what + " div");

        got = a;
        k.silu_mul(got.data(), b.data(), n);
        for (int64_t i = 0; i < n; ++i) want[i] = numerics::silu(a[i]) * b[i];
        expect_same(got, want, what + " silu_mul");

        got.assign(a.size(), -1.0f);
        k.gated_norm(w.data(), b.data(), r, a.data(), got.data(), n);
        for (int64_t i = 0; i < n; ++i) want[i] = (w[i] * (b[i] * r)) * numerics::silu(a[i]);
        expect_same(got, want, what + " gated_norm");

        std::vector<int32_t> rows(static_cast<size_t>(n) + 1, -7);
        const int64_t count = k.nonzero_indices(a.data(), n, rows.data());
        std::vector<int32_t> want_rows;
        for (int64_t i = 0; i < n; ++i) {
          if (a[i] != 0.0f) want_rows.push_back(static_cast<int32_t>(i));
        }
        ASSERT_EQ(count, static_cast<int64_t>(want_rows.size())) << what;
        for (size_t i = 0; i < want_rows.size(); ++i) ASSERT_EQ(rows[i], want_rows[i]) << what;
        checked += n;
      }
    }
  }
  EXPECT_GT(checked, 30000);
}

using testing::conv_reference;

TEST(IdleChannels, ConvUpdateGivesTheScalarLoopBitsAndState) {
  TinyRandom rng(32);
  int64_t skipped_blocks = 0;
  for (dot::Isa isa : supported_isas()) {
    const elementwise::Kernels& k = elementwise::kernels_for(isa);
    for (int64_t taps : {1, 2, 4, 5}) {
      for (int64_t channels : {1, 15, 16, 17, 48, 100, 1536}) {
        for (int trial = 0; trial < 8; ++trial) {
          const std::string what = std::string(dot::isa_name(isa)) + " taps " + std::to_string(taps) +
                                   " channels " + std::to_string(channels) + " trial " + std::to_string(trial);
          const bool wild = trial % 4 == 3;
          std::vector<float> weight = sparse_values(rng, channels * taps, trial % 2 ? 0.5 : 0.05, false);
          if (wild) weight[static_cast<size_t>(rng.unit() * static_cast<double>(weight.size()))] = kInf;
          bool finite = true;
          for (float v : weight) finite = finite && std::isfinite(v);
          // Histories: idle runs of +0 (skippable), -0 runs (not), live values.
          std::vector<float> state = sparse_values(rng, channels * (taps - 1), trial == 0 ? 1.0 : 0.7, wild);
          // Idle blocks of 16 channels: +0 history (on even trials) and +0 inputs on most
          // steps, so that they become skippable once their history has shifted out.
          std::vector<bool> idle_block(static_cast<size_t>(channels / 16 + 1));
          for (size_t b = 0; b < idle_block.size(); ++b) idle_block[b] = rng.unit() < 0.6;
          for (int64_t c = 0; c < channels; ++c) {
            if (trial % 2 == 0 && idle_block[static_cast<size_t>(c / 16)]) {
              std::fill_n(state.begin() + c * (taps - 1), taps - 1, 0.0f);
            }
          }
          std::vector<float> dense_state = state, skip_state = state;
          for (int step = 0; step < 8; ++step) {  // several steps: the history shifts
            std::vector<float> in = sparse_values(rng, channels, step % 2 ? 1.0 : 0.8, wild);
            for (int64_t c = 0; c < channels; ++c) {
              if (idle_block[static_cast<size_t>(c / 16)] && step % 4 != 3) in[static_cast<size_t>(c)] = 0.0f;
            }
            if (step == 5) {
              for (float& v : in) v = (&v - in.data()) % 3 == 0 ? -0.0f : 0.0f;  // -0 inputs
            }
            std::vector<float> want(static_cast<size_t>(channels)), got(static_cast<size_t>(channels), -1.0f);
            conv_reference(weight, taps, dense_state, in, want, channels);
            // What the kernel may skip: finite taps, history and input all +0 bits.
            for (int64_t c = 0; c + 16 <= channels && finite; c += 16) {
              bool idle = true;
              for (int64_t ch = c; ch < c + 16; ++ch) {
                idle = idle && float_bits(in[ch]) == 0;
                for (int64_t t = 0; t + 1 < taps; ++t) idle = idle && float_bits(skip_state[ch * (taps - 1) + t]) == 0;
              }
              skipped_blocks += idle;
            }
            k.conv_silu(weight.data(), taps, finite, skip_state.data(), in.data(), got.data(), channels);
            expect_same(got, want, what + " step " + std::to_string(step) + " out");
            expect_same(skip_state, dense_state, what + " step " + std::to_string(step) + " state");
          }
        }
      }
    }
  }
  EXPECT_GT(skipped_blocks, 1000);  // the skip itself was exercised
}

// The looped machine's live conv blocks: one or two live channels (a rail, a written RAM
// value) among +0 ones, taps 4 (the kernel's fixed-history variant) and others.
// Channels that look idle but are not (a -0 in the input or history: the shift must move
// its bits; a subnormal; an inf/NaN history with finite taps: w * inf is not +-0) sit
// next to them, and the taps hold +0, -0 and negative values (w * +0 = -0 for w < 0).
TEST(IdleChannels, LiveBlocksGiveTheScalarLoopBitsAndState) {
  TinyRandom rng(33);
  int64_t skippable_channels = 0;  // +0 channels in blocks that are not all +0 (computed)
  for (dot::Isa isa : supported_isas()) {
    const elementwise::Kernels& k = elementwise::kernels_for(isa);
    for (int64_t taps : {1, 2, 4, 5}) {
      const int64_t history = taps - 1, channels = 160;  // 10 blocks
      for (int trial = 0; trial < 6; ++trial) {
        const std::string what = std::string(dot::isa_name(isa)) + " taps " + std::to_string(taps) + " trial " +
                                 std::to_string(trial);
        std::vector<float> weight(static_cast<size_t>(channels * taps));
        for (float& w : weight) {
          const double u = rng.unit();
          w = u < 0.2 ? 0.0f : u < 0.3 ? -0.0f : rng.uniform(2.0);
        }
        const bool finite = trial % 3 != 2;
        if (!finite) weight[7] = -kInf;  // one inf tap: no channel may be skipped
        std::vector<float> state(static_cast<size_t>(channels * history), 0.0f);
        std::vector<float> dense_state = state, skip_state = state;
        for (int step = 0; step < 12; ++step) {
          std::vector<float> in(static_cast<size_t>(channels), 0.0f);
          for (int64_t b = 0; b < channels / 16; ++b) {
            // One or two live channels per block (the rail at a fixed place, so that
            // its history stays live), and now and then an odd zero or special value.
            in[static_cast<size_t>(b * 16 + b % 16)] = rng.uniform(4.0) + 0.5f;
            if (rng.unit() < 0.5) in[static_cast<size_t>(b * 16 + static_cast<int64_t>(rng.unit() * 16.0))] = rng.uniform(1.0);
            const int64_t odd = b * 16 + static_cast<int64_t>(rng.unit() * 16.0);
            const double u = rng.unit();
            if (u < 0.3) {
              in[static_cast<size_t>(odd)] = -0.0f;
            } else if (u < 0.4) {
              in[static_cast<size_t>(odd)] = 1e-41f;
            } else if (u < 0.45 && trial % 2 == 1) {
              in[static_cast<size_t>(odd)] = rng.unit() < 0.5 ? kInf : kNaN;
            }
          }
          if (history > 0 && step % 5 == 4) dense_state[3] = skip_state[3] = -0.0f;  // a -0 written by hand
          for (int64_t b = 0; b < channels / 16 && finite; ++b) {
            bool block_zero = true;
            int64_t zero_channels = 0;
            for (int64_t ch = b * 16; ch < b * 16 + 16; ++ch) {
              bool zero = float_bits(in[static_cast<size_t>(ch)]) == 0;
              for (int64_t t = 0; t < history; ++t) zero = zero && float_bits(skip_state[static_cast<size_t>(ch * history + t)]) == 0;
              zero_channels += zero;
              block_zero = block_zero && zero;
            }
            if (!block_zero) skippable_channels += zero_channels;
          }
          std::vector<float> want(static_cast<size_t>(channels)), got(static_cast<size_t>(channels), -1.0f);
          conv_reference(weight, taps, dense_state, in, want, channels);
          k.conv_silu(weight.data(), taps, finite, skip_state.data(), in.data(), got.data(), channels);
          expect_same(got, want, what + " step " + std::to_string(step) + " out");
          expect_same(skip_state, dense_state, what + " step " + std::to_string(step) + " state");
        }
      }
    }
  }
  EXPECT_GT(skippable_channels, 10000);  // the mix the machine has was exercised
}

// silu's window path (silu8: a group of 8 whose values all lie in numerics::silu's exact
// windows is computed without the exp): values drawn from the windows' edges and insides
// (+-0, 18 and up, +inf, below -89 down to -FLT_MAX) with, in most groups, some from
// outside them (pred(18), -89 itself, next(-89), -inf, NaN, ordinary values, and 10 and -85,
// where silu is neither x nor -0).
const float kSiluInside[] = {0.0f, -0.0f, 18.0f, std::nextafter(18.0f, kInf), 100.0f, 1e30f, kInf,
                             std::nextafter(-89.0f, -kInf), -90.0f, -1e30f, -std::numeric_limits<float>::max()};
const float kSiluOutside[] = {std::nextafter(18.0f, 0.0f), -89.0f, std::nextafter(-89.0f, 0.0f), -kInf, kNaN,
                              1.0f, -1.0f, 1e-40f, -17.5f, 10.0f, -85.0f};

bool in_silu_windows(float g) { return g == 0.0f || g >= 18.0f || (g < -89.0f && g > -kInf); }

// Gates for silu_mul: every lane inside the windows (pure) or each lane outside them with
// probability 1/40; counts the groups of 8 of each kind.
std::vector<float> window_gates(TinyRandom& rng, int64_t n, bool pure, int64_t counts[2]) {
  const auto pick = [&rng](const auto& values) {
    return values[static_cast<size_t>(rng.unit() * static_cast<double>(std::size(values)))];
  };
  std::vector<float> g(static_cast<size_t>(n));
  for (float& v : g) v = !pure && rng.unit() < 0.025 ? pick(kSiluOutside) : pick(kSiluInside);
  for (int64_t b = 0; b + 8 <= n; b += 8) {
    bool inside = true;
    for (int64_t i = b; i < b + 8; ++i) inside &= in_silu_windows(g[static_cast<size_t>(i)]);
    ++counts[inside ? 0 : 1];
  }
  return g;
}

// silu_mul over such gates, times ups with +-0, subnormals, +-inf and NaN: the scalar
// loop's bits on every instruction set.
TEST(IdleChannels, SiluMulWindowGroupsGiveTheScalarLoopBits) {
  const float ups[] = {0.0f, -0.0f, 1.0f, -3.0f, 1e-40f, -1e-40f, kInf, -kInf, kNaN, 1e30f, 0.5f};
  TinyRandom rng(1213);
  int64_t groups[2] = {0, 0};
  for (dot::Isa isa : supported_isas()) {
    const elementwise::Kernels& k = elementwise::kernels_for(isa);
    for (int trial = 0; trial < 400; ++trial) {
      const int64_t n = kLengths[trial % std::size(kLengths)];
      const std::vector<float> gate = window_gates(rng, n, trial % 3 == 0, groups);
      std::vector<float> up(gate.size());
      for (float& u : up) u = rng.unit() < 0.5 ? ups[static_cast<size_t>(rng.unit() * std::size(ups))] : rng.uniform(4.0);
      std::vector<float> got = gate, want(gate.size());
      for (size_t i = 0; i < gate.size(); ++i) want[i] = numerics::silu(gate[i]) * up[i];
      k.silu_mul(got.data(), up.data(), n);
      expect_same(got, want, std::string(dot::isa_name(isa)) + " trial " + std::to_string(trial) + " silu_mul");
    }
  }
  // Both kinds of group occur, so both paths run.
  EXPECT_GT(groups[0], 500);
  EXPECT_GT(groups[1], 500);
}

// The conv's silu on sums in and out of the windows: one tap of weight 1 on the input
// (the history weights +0 and the history +0, so the sum is +0 + 1 * in = in up to the sign
// of zero), inputs drawn as the gates above; then the same with live histories.
TEST(IdleChannels, ConvSiluWindowGroupsGiveTheScalarLoopBits) {
  TinyRandom rng(1214);
  int64_t groups[2] = {0, 0};
  for (dot::Isa isa : supported_isas()) {
    const elementwise::Kernels& k = elementwise::kernels_for(isa);
    for (int trial = 0; trial < 200; ++trial) {
      const int64_t taps = 4, channels = kLengths[trial % std::size(kLengths)];
      const std::vector<float> in = window_gates(rng, channels, trial % 3 == 0, groups);
      std::vector<float> weight(static_cast<size_t>(channels * taps), 0.0f), state(static_cast<size_t>(channels * (taps - 1)), 0.0f);
      for (int64_t c = 0; c < channels; ++c) weight[static_cast<size_t>(c * taps + taps - 1)] = 1.0f;
      if (trial % 2 == 1) {  // live histories: sums of four terms
        for (float& w : weight) w = w == 0.0f ? static_cast<float>(static_cast<int>(rng.unit() * 5.0) - 2) : w;
        for (float& h : state) h = kSiluInside[static_cast<size_t>(rng.unit() * 4.0)];  // +-0, 18, next(18)
      }
      bool finite = true;
      for (float w : weight) finite = finite && std::isfinite(w);
      std::vector<float> want_state = state, got_state = state, want(in.size()), got(in.size(), -1.0f);
      testing::conv_reference(weight, taps, want_state, in, want, channels);
      std::vector<uint8_t> zero_inputs(static_cast<size_t>((channels + 15) / 16), 0);
      k.conv_silu_tracked(weight.data(), taps, finite, got_state.data(), in.data(), got.data(), channels,
                          zero_inputs.data());
      const std::string what = std::string(dot::isa_name(isa)) + " trial " + std::to_string(trial);
      expect_same(got, want, what + " conv out");
      expect_same(got_state, want_state, what + " conv state");
    }
  }
  EXPECT_GT(groups[0], 200);
  EXPECT_GT(groups[1], 200);
}

TEST(IdleChannels, IdleBlocksFollowTheSignsOfZero) {
  // Hand-checked values: silu(-0) * 3 = -0, silu(+0) * -3 = -0, silu(-0) * NaN = NaN,
  // a +0 history with a -0 input sums to +0 but stores -0 in the history.
  const elementwise::Kernels& k = elementwise::kernels();
  std::vector<float> gate(16, 0.0f), up(16, 3.0f);
  gate[1] = -0.0f;
  up[2] = -3.0f;
  up[3] = kNaN;
  k.silu_mul(gate.data(), up.data(), 16);
  EXPECT_EQ(float_bits(gate[0]), 0u);
  EXPECT_EQ(float_bits(gate[1]), 0x80000000u);
  EXPECT_EQ(float_bits(gate[2]), 0x80000000u);
  EXPECT_TRUE(std::isnan(gate[3]));

  std::vector<float> weight(16 * 4, -1.0f), state(16 * 3, 0.0f), in(16, 0.0f), out(16, 7.0f);
  in[5] = -0.0f;
  k.conv_silu(weight.data(), 4, true, state.data(), in.data(), out.data(), 16);
  for (float v : out) EXPECT_EQ(float_bits(v), 0u);  // +0 + (-1 * -0) = +0 + +0 = +0
  EXPECT_EQ(float_bits(state[5 * 3 + 2]), 0x80000000u);
  // An inf tap: inf * +0 = NaN, so the block is computed, not skipped.
  std::vector<float> zeros_state(16 * 3, 0.0f), zeros_in(16, 0.0f);
  weight[0] = kInf;
  k.conv_silu(weight.data(), 4, false, zeros_state.data(), zeros_in.data(), out.data(), 16);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(float_bits(out[1]), 0u);
}

// Weights rich in exact zeros of both signs: most q/k/v/z channels, gate and up rows
// exactly zero (so whole blocks of the conv, of silu(z) and of silu(gate) are idle),
// -0 weights, zero conv taps, and embeddings that are all +0, all -0, or sparse.
io::Qwen35Weights zero_rich(const TinySpec& spec, uint64_t seed) {
  io::Qwen35Weights w = testing::make_tiny_weights(spec);
  TinyRandom rng(seed);
  const int64_t h = spec.hidden;
  auto zero_rows = [&](std::vector<float>& m, int64_t rows, double share) {
    for (int64_t r = 0; r < rows; ++r) {
      if (rng.unit() < share) {
        const float z = rng.unit() < 0.3 ? -0.0f : 0.0f;
        std::fill_n(m.begin() + r * h, h, z);
      }
    }
  };
  for (io::LayerWeights& l : w.layers) {
    const int64_t inter = spec.intermediate;
    // Neurons in runs of 16: gate or up rows zero for whole blocks.
    for (int64_t r = 0; r < inter; r += 16) {
      if (rng.unit() < 0.7) {
        for (int64_t n = r; n < std::min(inter, r + 16); ++n) std::fill_n(l.gate_proj.begin() + n * h, h, 0.0f);
      }
    }
    zero_rows(l.up_proj, inter, 0.3);
    if (l.type == io::LayerType::LinearAttention) {
      const int64_t conv_dim = 2 * spec.k_heads * spec.k_dim + spec.v_heads * spec.v_dim;
      for (int64_t c = 0; c < conv_dim; c += 16) {
        if (rng.unit() < 0.75) std::fill_n(l.linear.in_proj_qkv.begin() + c * h, std::min<int64_t>(16, conv_dim - c) * h, 0.0f);
      }
      zero_rows(l.linear.in_proj_z, spec.v_heads * spec.v_dim, 0.6);
      for (float& v : l.linear.conv1d) {
        if (rng.unit() < 0.2) v = rng.unit() < 0.5 ? 0.0f : -0.0f;
      }
    }
    for (float& v : l.down_proj) {
      if (rng.unit() < 0.1) v = -0.0f;
    }
  }
  for (int64_t t = 0; t < spec.vocab; ++t) {
    float* row = w.embed_tokens.data() + t * h;
    if (t % 4 == 0) std::fill_n(row, h, 0.0f);
    if (t % 4 == 1) std::fill_n(row, h, -0.0f);
    if (t % 4 == 2) {
      for (int64_t i = 0; i < h; ++i) {
        if (rng.unit() < 0.9) row[i] = rng.unit() < 0.5 ? 0.0f : -0.0f;
      }
    }
  }
  return w;
}

void expect_state_same(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                       const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t l = 0; l < a.size(); ++l) expect_same(a[l], b[l], what + " layer " + std::to_string(l));
}

// Two models that differ only in ModelOptions::elementwise give the same bits: logits,
// hidden state and every state vector after every step, at 1, 2 and 3 threads. The
// tokens visit the all-zero embedding rows often (idle steps between live ones).
void expect_models_agree(const io::Qwen35Weights& weights, ModelOptions base, const std::string& what,
                         int steps) {
  ModelOptions dense = base, skip = base;
  dense.elementwise = Elementwise::Dense;
  skip.elementwise = Elementwise::SkipZeros;
  const Model a(weights, dense), b(weights, skip);
  const int64_t vocab = weights.config.vocab_size;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    State sa = a.new_state(), sb = b.new_state();
    std::vector<float> la(vocab), lb(vocab), ha(weights.config.hidden_size), hb(weights.config.hidden_size);
    for (int step = 0; step < steps; ++step) {
      const int64_t token = step % 3 == 0 ? (step * 4) % vocab : (step * 37 + 11) % vocab;
      const std::string at = what + " threads " + std::to_string(threads) + " step " + std::to_string(step);
      a.forward(token, sa, la, ha);
      b.forward(token, sb, lb, hb);
      expect_same(lb, la, at + " logits");
      expect_same(hb, ha, at + " hidden");
      expect_state_same(sb.conv_state, sa.conv_state, at + " conv_state");
      expect_state_same(sb.recurrent_state, sa.recurrent_state, at + " recurrent_state");
      expect_state_same(sb.key_cache, sa.key_cache, at + " key_cache");
      expect_state_same(sb.value_cache, sa.value_cache, at + " value_cache");
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  omp_set_num_threads(saved);
}

TinySpec spec_for(uint64_t seed) {
  TinySpec spec;
  spec.seed = seed;
  spec.layers = {io::LayerType::LinearAttention, io::LayerType::FullAttention, io::LayerType::LinearAttention,
                 io::LayerType::LinearAttention};
  spec.bf16 = seed % 2 == 0;
  spec.tied = seed % 3 == 0;
  spec.zero_fraction = seed % 3 == 1 ? 0.95 : 0.0;  // CSR storage and the column path
  if (seed % 2 == 1) {  // widths that are not multiples of 16, v_dim over one block
    spec.hidden = 80;
    spec.intermediate = 200;
    spec.k_dim = 24;
    spec.v_dim = 40;
  }
  return spec;
}

TEST(IdleChannels, RandomCheckpointsGiveTheDenseBits) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    ModelOptions options;
    options.gdn = seed % 2 ? GdnRecurrence::SkipZeros : GdnRecurrence::Dense;
    expect_models_agree(testing::make_tiny_weights(spec_for(seed)), options, "random seed " + std::to_string(seed), 16);
    if (HasFatalFailure()) return;
  }
}

TEST(IdleChannels, ZeroRichCheckpointsGiveTheDenseBits) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    for (GdnRecurrence gdn : {GdnRecurrence::SkipZeros, GdnRecurrence::Dense}) {
      ModelOptions options;
      options.gdn = gdn;
      options.sparse_path = seed % 2 ? SparsePath::Auto : SparsePath::Rows;
      const std::string what = "zero-rich seed " + std::to_string(seed) +
                               (gdn == GdnRecurrence::Dense ? " gdn dense" : " gdn skip");
      expect_models_agree(zero_rich(spec_for(seed), 200 + seed), options, what, 16);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(IdleChannels, WideIdleLayerGivesTheDenseBits) {
  // Wide enough that the GDN heads run in parallel and products in parallel regions,
  // with most channels idle on most tokens.
  TinySpec spec;
  spec.seed = 41;
  spec.hidden = 256;
  spec.intermediate = 384;
  spec.vocab = 120;
  spec.layers = {io::LayerType::LinearAttention, io::LayerType::LinearAttention};
  spec.k_heads = 4;
  spec.v_heads = 8;
  spec.k_dim = 64;
  spec.v_dim = 64;
  expect_models_agree(zero_rich(spec, 43), {}, "wide", 10);
}

TEST(IdleChannels, NonFiniteInputsGiveTheDenseBits) {
  // inf and NaN in the residual stream (an embedding row) and an inf conv tap: with the
  // recurrence and the products in their dense forms (their exact-zero skips are exact
  // for finite values only, engine.md), the elementwise kernels still give the dense bits.
  TinySpec spec = spec_for(5);
  io::Qwen35Weights w = zero_rich(spec, 77);
  w.embed_tokens[static_cast<size_t>(3 * spec.hidden + 7)] = kInf;
  w.embed_tokens[static_cast<size_t>(6 * spec.hidden + 1)] = kNaN;
  w.layers[2].linear.conv1d[9] = -kInf;
  ModelOptions options;
  options.gdn = GdnRecurrence::Dense;
  options.sparse_path = SparsePath::Rows;
  expect_models_agree(w, options, "non-finite", 8);
}

// m (rows x cols) packed as CSR on the rows path: its products with 4 vectors x =
// draw(trial) equal want(x) bit for bit on 1, 2 and 3 threads.
template <class Draw, class Want>
void expect_csr_rows(const std::vector<float>& m, int64_t rows, int64_t cols, Draw draw, Want want) {
  PackedMatrix::Options o;
  o.force = PackedMatrix::Format::SparseCsr;
  o.path = PackedMatrix::Path::Rows;
  const PackedMatrix csr = PackedMatrix::pack(m, rows, cols, o, "m");
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    for (int trial = 0; trial < 4; ++trial) {
      const std::vector<float> x = draw(trial);
      const std::vector<float> expected = want(x);
      std::vector<float> got(static_cast<size_t>(rows), -1.0f);
      csr.multiply(x.data(), got.data());
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_EQ(float_bits(got[r]), float_bits(expected[r]))
            << rows << " x " << cols << " row " << r << " trial " << trial << " threads " << threads;
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST(IdleChannels, MostlyEmptyCsrRowsGiveTheDenseRowBits) {
  // CSR matrices whose rows are mostly empty evaluate only their live rows: the same
  // bits as the dense rows (empty rows +0), serial and in parallel (> 32K multiply-adds).
  TinyRandom rng(51);
  for (const auto& shape : {std::pair<int64_t, int64_t>{40, 70}, {1024, 64}, {9000, 40}}) {
    const int64_t rows = shape.first, cols = shape.second;
    std::vector<float> m(static_cast<size_t>(rows * cols), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      if (rng.unit() < 0.2) {
        for (int n = 0; n < 3; ++n) m[static_cast<size_t>(r * cols + static_cast<int64_t>(rng.unit() * static_cast<double>(cols)))] = rng.uniform(2.0);
      } else if (rng.unit() < 0.1) {
        m[static_cast<size_t>(r * cols)] = -0.0f;  // a -0 weight is stored: the row is live
      }
    }
    expect_csr_rows(
        m, rows, cols, [&](int trial) { return sparse_values(rng, cols, trial == 0 ? 1.0 : 0.5, false); },
        [&](const std::vector<float>& x) {
          std::vector<float> want(static_cast<size_t>(rows));
          dot::rows_f32(m.data(), cols, x.data(), want.data(), 0, rows);
          return want;
        });
  }
}

// y = m x in the dense order with the unstored (+0) weights left out, as CSR defines it
// (dense 0 * inf would be NaN); a stored -0 weight multiplies x like any other.
std::vector<float> csr_order_rows(const std::vector<float>& m, int64_t rows, int64_t cols, const std::vector<float>& x) {
  std::vector<float> y(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float lanes[dot::kLanes] = {};
    for (int64_t c = 0; c < cols; ++c) {
      const float w = m[static_cast<size_t>(r * cols + c)];
      if (float_bits(w) != 0) lanes[c % dot::kLanes] = lanes[c % dot::kLanes] + w * x[static_cast<size_t>(c)];
    }
    y[static_cast<size_t>(r)] = dot::combine_lanes(lanes);
  }
  return y;
}

TEST(IdleChannels, MostlyEmptyCsrRowsOfOneLaneAndOfManyLanes) {
  // The live-row list sums a row whose weights all sit in one lane (columns c, c + 64,
  // c + 128, ...) in place, and hands the others to the row program (up to 12 lanes) or
  // to the full 64-lane tree (more): every kind against the dense rows, with -0 and
  // subnormal weights and x with +-0, subnormals, inf and NaN (the dense order with the
  // unstored +0 weights left out, as CSR defines it), serial and in parallel.
  TinyRandom rng(53);
  int64_t one_lane = 0, many_lanes = 0;
  for (const auto& shape : {std::pair<int64_t, int64_t>{40, 200}, {4480, 300}, {9000, 130}}) {
    const int64_t rows = shape.first, cols = shape.second;
    std::vector<float> m(static_cast<size_t>(rows * cols), 0.0f);
    const auto weight = [&] {
      const double u = rng.unit();
      return u < 0.05 ? -0.0f : u < 0.1 ? 1e-40f : rng.uniform(2.0);
    };
    for (int64_t r = 0; r < rows; ++r) {
      const double u = rng.unit();
      if (u < 0.6) continue;  // empty
      if (u < 0.8) {          // one lane, 1 to 4 terms
        const int64_t lane = static_cast<int64_t>(rng.unit() * 64.0);
        const int terms = 1 + static_cast<int>(rng.unit() * 4.0);
        for (int t = 0; t < terms && lane + 64 * t < cols; ++t) m[static_cast<size_t>(r * cols + lane + 64 * t)] = weight();
        ++one_lane;
      } else {  // 2 to 30 terms anywhere: a few lanes or more than 12
        const int terms = 2 + static_cast<int>(rng.unit() * 29.0);
        for (int t = 0; t < terms; ++t) {
          m[static_cast<size_t>(r * cols + static_cast<int64_t>(rng.unit() * static_cast<double>(cols)))] = weight();
        }
        ++many_lanes;
      }
    }
    expect_csr_rows(
        m, rows, cols, [&](int trial) { return sparse_values(rng, cols, trial == 0 ? 0.0 : 0.5, trial == 3); },
        [&](const std::vector<float>& x) { return csr_order_rows(m, rows, cols, x); });
  }
  EXPECT_GT(one_lane, 1500);
  EXPECT_GT(many_lanes, 700);
}

TEST(IdleChannels, SingleTermCsrRowsGiveTheDenseRowBits) {
  // CSR matrices with at most one stored value per row (a compiled in_proj_z) skip the
  // row program: 0 + w * x[c] per row, +0 for an empty row. Against the dense rows with
  // -0 and subnormal weights, x with +-0, subnormals, products that underflow, inf and
  // NaN (0 * inf in the dense sum: only where the weight is stored as -0, like CSR does),
  // half the rows live (so the live-row list does not take them), serial and parallel.
  TinyRandom rng(52);
  const int saved = omp_get_max_threads();
  int64_t checked = 0;
  for (const auto& shape : {std::pair<int64_t, int64_t>{40, 70}, {1024, 1024}, {9000, 40}}) {
    const int64_t rows = shape.first, cols = shape.second;
    for (const bool wild : {false, true}) {
      std::vector<float> m(static_cast<size_t>(rows * cols), 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        if (rng.unit() < 0.4) continue;  // empty
        const double u = rng.unit();
        const float w = u < 0.05 ? -0.0f : u < 0.1 ? 1e-40f : u < 0.15 ? -1e-30f : rng.uniform(4.0);
        m[static_cast<size_t>(r * cols + static_cast<int64_t>(rng.unit() * static_cast<double>(cols)))] = w;
      }
      PackedMatrix::Options o;
      o.force = PackedMatrix::Format::SparseCsr;
      o.path = PackedMatrix::Path::Rows;
      const PackedMatrix csr = PackedMatrix::pack(m, rows, cols, o, "m");
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        for (int trial = 0; trial < 4; ++trial) {
          std::vector<float> x = sparse_values(rng, cols, trial == 0 ? 0.0 : 0.5, wild);
          if (trial == 3) x[0] = 1e-30f;  // products that underflow to +-0
          const std::vector<float> want = csr_order_rows(m, rows, cols, x);
          std::vector<float> got(static_cast<size_t>(rows), -1.0f);
          csr.multiply(x.data(), got.data());
          for (int64_t r = 0; r < rows; ++r, ++checked) {
            ASSERT_TRUE(same(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)]))
                << rows << " x " << cols << " row " << r << ": " << describe_float(got[static_cast<size_t>(r)]) << " vs "
                << describe_float(want[static_cast<size_t>(r)]);
          }
        }
      }
    }
  }
  omp_set_num_threads(saved);
  EXPECT_GT(checked, 100000);
}

}  // namespace
}  // namespace qpu::engine
