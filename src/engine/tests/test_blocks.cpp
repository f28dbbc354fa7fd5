// Each block on inputs whose results are known exactly: RoPE against torch's own
// inverse frequencies and at position 0, attention over one or two equal positions,
// the GQA and GVA head mappings, the conv state shift and the delta-rule memory
// (exactness toolkit P8).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "common/float_bits.h"
#include "engine/gated_attention.h"
#include "engine/gated_delta_net.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using testing::TinyRandom;

// torch: 1.0 / (1e7 ** (torch.arange(0, 64, 2, dtype=torch.float) / 64)), as bits.
constexpr uint32_t kTorchInvFreq1e7x64[32] = {
    0x3f800000u, 0x3f1ab32bu, 0x3ebaf81bu, 0x3e61f835u, 0x3e088d77u, 0x3da50956u, 0x3d47763fu,
    0x3cf11177u, 0x3c91ad39u, 0x3c301052u, 0x3bd4ca15u, 0x3b80967du, 0x3b1b690du, 0x3abbd3edu,
    0x3a6301e2u, 0x3a092e02u, 0x39a5cb60u, 0x394860c1u, 0x38f22ce2u, 0x3892587eu, 0x3830df52u,
    0x37d5c441u, 0x37812dabu, 0x371c1fc4u, 0x36bcb0c1u, 0x36640cc6u, 0x3609cf4au, 0x35a68e4cu,
    0x35494c57u, 0x34f3499du, 0x3493048eu, 0x3431af44u};
// Same for theta 10000, rotary dim 16.
constexpr uint32_t kTorchInvFreq1e4x16[8] = {0x3f800000u, 0x3ea1e89bu, 0x3dcccccdu, 0x3d0186e3u,
                                             0x3c23d70au, 0x3b4f3e38u, 0x3a83126fu, 0x39a5cb60u};

TEST(Rope, InverseFrequenciesMatchTorch) {
  const std::vector<float> a = rope_inv_freq(1e7, 64);
  ASSERT_EQ(a.size(), 32u);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(float_bits(a[i]), kTorchInvFreq1e7x64[i]) << i;
  const std::vector<float> b = rope_inv_freq(10000.0, 16);
  ASSERT_EQ(b.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(float_bits(b[i]), kTorchInvFreq1e4x16[i]) << i;
}

TEST(Rope, PositionZeroIsTheIdentity) {
  TinyRandom rng(4);
  const std::vector<float> inv = rope_inv_freq(1e7, 64);
  std::vector<float> c(32), s(32);
  rope_cos_sin(inv, 0, c.data(), s.data());
  std::vector<float> x(256);
  for (float& v : x) v = rng.uniform(5.0);
  std::vector<float> y = x;
  apply_rope(y.data(), 64, c.data(), s.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(float_bits(y[i]), float_bits(x[i])) << i;
}

TEST(Rope, RotatesPairsIAndIPlusHalf) {
  TinyRandom rng(5);
  const std::vector<float> inv = rope_inv_freq(10000.0, 16);
  for (int64_t pos : {1, 7, 100, 5000}) {
    std::vector<float> c(8), s(8), x(32);
    rope_cos_sin(inv, pos, c.data(), s.data());
    for (float& v : x) v = rng.uniform(3.0);
    std::vector<float> y = x;
    apply_rope(y.data(), 16, c.data(), s.data());
    for (int i = 0; i < 8; ++i) {
      // transformers' angle is the fp32 product position * inv_freq (inv_freq checked above).
      const auto ang = static_cast<double>(static_cast<float>(pos) * inv[i]);
      const double x1 = x[i], x2 = x[i + 8];
      EXPECT_NEAR(y[i], x1 * std::cos(ang) - x2 * std::sin(ang), 1e-6) << pos << " " << i;
      EXPECT_NEAR(y[i + 8], x2 * std::cos(ang) + x1 * std::sin(ang), 1e-6) << pos << " " << i;
    }
    for (int i = 16; i < 32; ++i) EXPECT_EQ(float_bits(y[i]), float_bits(x[i]));  // pass-through dims
  }
}

// hidden = heads * head_dim; v_proj reads h directly (one-hot rows), o_proj is the
// identity and the gate rows are 0 (sigmoid(0) = 0.5 exactly): out = 0.5 * attention.
GatedAttention probe_attention(int64_t heads, int64_t kv_heads, int64_t d, double partial, TinyRandom& rng) {
  const int64_t hidden = heads * d;
  io::FullAttentionWeights w;
  w.q_proj.assign(static_cast<size_t>(2 * heads * d * hidden), 0.0f);
  for (int64_t hh = 0; hh < heads; ++hh) {
    for (int64_t r = 0; r < d; ++r) {
      for (int64_t c = 0; c < hidden; ++c) w.q_proj[(2 * hh * d + r) * hidden + c] = rng.uniform(0.5);
    }
  }
  w.k_proj.resize(static_cast<size_t>(kv_heads * d * hidden));
  for (float& v : w.k_proj) v = rng.uniform(0.5);
  w.v_proj.assign(static_cast<size_t>(kv_heads * d * hidden), 0.0f);
  for (int64_t r = 0; r < kv_heads * d; ++r) w.v_proj[r * hidden + r] = 1.0f;
  w.o_proj.assign(static_cast<size_t>(hidden * hidden), 0.0f);
  for (int64_t r = 0; r < hidden; ++r) w.o_proj[r * hidden + r] = 1.0f;
  w.q_norm.assign(static_cast<size_t>(d), 0.0f);
  w.k_norm.assign(static_cast<size_t>(d), 0.0f);
  const auto rot = static_cast<int64_t>(static_cast<double>(d) * partial);
  return GatedAttention(std::move(w), {hidden, heads, kv_heads, d, rot, 1e7}, 1e-6f, {}, "attn");
}

TEST(GatedAttention, OnePositionReturnsVExactlyWithGroupedHeads) {
  TinyRandom rng(8);
  const int64_t heads = 4, kv_heads = 2, d = 8;
  const GatedAttention attn = probe_attention(heads, kv_heads, d, 0.25, rng);
  std::vector<float> h(heads * d), out(heads * d), keys, values;
  for (float& v : h) v = rng.uniform(4.0);
  attn.step(h.data(), 0, keys, values, out.data());
  ASSERT_EQ(keys.size(), static_cast<size_t>(kv_heads * d));
  for (int64_t hh = 0; hh < heads; ++hh) {
    for (int64_t c = 0; c < d; ++c) {
      // query head hh reads kv head hh / (heads / kv_heads): v = h[(hh/2) * d + c]
      EXPECT_EQ(float_bits(out[hh * d + c]), float_bits(h[(hh / 2) * d + c] * 0.5f)) << hh << " " << c;
    }
  }
}

TEST(GatedAttention, TwoEqualPositionsAverageExactly) {
  // Without RoPE (partial factor 0) the same input gives the same key twice: the two
  // scores are equal, softmax gives 1/2 each, and 0.5 v + 0.5 v = v exactly.
  TinyRandom rng(9);
  const int64_t heads = 2, kv_heads = 1, d = 16;
  const GatedAttention attn = probe_attention(heads, kv_heads, d, 0.0, rng);
  std::vector<float> h(heads * d), out(heads * d), keys, values;
  for (float& v : h) v = rng.uniform(4.0);
  attn.step(h.data(), 0, keys, values, out.data());
  attn.step(h.data(), 1, keys, values, out.data());
  for (int64_t hh = 0; hh < heads; ++hh) {
    for (int64_t c = 0; c < d; ++c) EXPECT_EQ(float_bits(out[hh * d + c]), float_bits(h[c] * 0.5f));
  }
}

TEST(GatedAttention, RejectsACacheOfTheWrongLength) {
  TinyRandom rng(10);
  const GatedAttention attn = probe_attention(2, 1, 8, 0.25, rng);
  std::vector<float> h(16), out(16), keys(8), values(8);
  EXPECT_THROW(attn.step(h.data(), 0, keys, values, out.data()), Error);
}

// A GDN layer wired for exact memory (toolkit P8): hidden = conv channels + 1 rail,
// in_proj_qkv = identity (the conv input is h itself), conv taps [0,0,0,1] (the conv
// is the identity on the current token), beta = sigmoid(20) = 1, softplus(-200) = 0
// so g = -0 and exp(g) = 1.
struct MemoryGdn {
  static constexpr int64_t kHk = 2, kHv = 4, kD = 4;
  GatedDeltaNetShape shape{0, kHk, kHv, kD, kD, 4};
  GatedDeltaNet gdn;
  int64_t channels = 0, rail = 0;

  MemoryGdn() {
    channels = shape.conv_dim();
    rail = channels;
    shape.hidden = channels + 1;
    const int64_t hidden = shape.hidden;
    io::LinearAttentionWeights w;
    w.in_proj_qkv.assign(static_cast<size_t>(channels * hidden), 0.0f);
    for (int64_t c = 0; c < channels; ++c) w.in_proj_qkv[c * hidden + c] = 1.0f;
    w.in_proj_z.assign(static_cast<size_t>(shape.value_dim() * hidden), 0.0f);
    w.in_proj_b.assign(static_cast<size_t>(kHv * hidden), 0.0f);
    w.in_proj_a.assign(static_cast<size_t>(kHv * hidden), 0.0f);
    for (int64_t j = 0; j < kHv; ++j) {
      w.in_proj_b[j * hidden + rail] = 20.0f;
      w.in_proj_a[j * hidden + rail] = -200.0f;
    }
    w.conv1d.assign(static_cast<size_t>(channels * 4), 0.0f);
    for (int64_t c = 0; c < channels; ++c) w.conv1d[c * 4 + 3] = 1.0f;
    w.dt_bias.assign(kHv, 0.0f);
    w.A_log.assign(kHv, 0.5f);
    w.norm.assign(kD, 1.0f);
    w.out_proj.assign(static_cast<size_t>(hidden * shape.value_dim()), 0.0f);
    gdn = GatedDeltaNet(std::move(w), shape, 1e-6f, {}, "gdn");
  }

  // q head m one-hot at q_index[m], k head m one-hot at k_index[m] (pre-silu 64 ->
  // l2norm exactly 1), value head j = base + 4j + c (>= 18: silu is the identity).
  std::vector<float> input(const int64_t* q_index, const int64_t* k_index, float base) const {
    std::vector<float> h(static_cast<size_t>(shape.hidden), 0.0f);
    for (int64_t m = 0; m < kHk; ++m) {
      h[m * kD + q_index[m]] = 64.0f;
      h[kHk * kD + m * kD + k_index[m]] = 64.0f;
    }
    for (int64_t j = 0; j < kHv; ++j) {
      for (int64_t c = 0; c < kD; ++c) h[2 * kHk * kD + j * kD + c] = base + static_cast<float>(4 * j + c);
    }
    h[rail] = 1.0f;
    return h;
  }
};

TEST(GatedDeltaNet, DeltaRuleWritesAndOverwritesExactlyWithGroupedHeads) {
  MemoryGdn m;
  std::vector<float> conv(m.shape.conv_state_size(), 0.0f), state(m.shape.recurrent_state_size(), 0.0f);
  std::vector<float> out(m.shape.hidden);
  const int64_t q_index[2] = {1, 2}, k_index[2] = {0, 3};
  const std::vector<float> h1 = m.input(q_index, k_index, 20.0f);
  const std::vector<float> h2 = m.input(q_index, k_index, 50.0f);

  for (int step = 0; step < 2; ++step) {
    const std::vector<float>& h = step == 0 ? h1 : h2;
    m.gdn.step(h.data(), conv, state, step == 0, out.data());
    const float base = step == 0 ? 20.0f : 50.0f;
    for (int64_t j = 0; j < MemoryGdn::kHv; ++j) {
      // Value head j uses key head j / 2 (grouped), whose one-hot row is k_index[j / 2].
      const int64_t row = k_index[j / 2];
      for (int64_t i = 0; i < MemoryGdn::kD; ++i) {
        for (int64_t c = 0; c < MemoryGdn::kD; ++c) {
          const float expect = i == row ? base + static_cast<float>(4 * j + c) : 0.0f;
          ASSERT_EQ(float_bits(state[(j * MemoryGdn::kD + i) * MemoryGdn::kD + c]), float_bits(expect))
              << "step " << step << " head " << j << " row " << i << " col " << c;
        }
      }
    }
  }
  // The conv state holds the last three inputs of each channel, oldest first.
  for (int64_t c = 0; c < m.channels; ++c) {
    EXPECT_EQ(conv[c * 3 + 0], 0.0f);
    EXPECT_EQ(conv[c * 3 + 1], h1[c]);
    EXPECT_EQ(conv[c * 3 + 2], h2[c]);
  }
}

TEST(GatedDeltaNet, ConvStateShiftsOneColumnPerStep) {
  MemoryGdn m;
  std::vector<float> conv(m.shape.conv_state_size(), 0.0f), state(m.shape.recurrent_state_size(), 0.0f);
  std::vector<float> out(m.shape.hidden);
  const int64_t q_index[2] = {0, 0}, k_index[2] = {0, 0};
  std::vector<std::vector<float>> inputs;
  for (int step = 0; step < 5; ++step) {
    inputs.push_back(m.input(q_index, k_index, 20.0f + static_cast<float>(step)));
    m.gdn.step(inputs.back().data(), conv, state, step == 0, out.data());
  }
  for (int64_t c = 0; c < m.channels; ++c) {
    for (int t = 0; t < 3; ++t) EXPECT_EQ(conv[c * 3 + t], inputs[2 + t][c]) << c << " " << t;
  }
}

TEST(GatedDeltaNet, RejectsWrongStateSizes) {
  MemoryGdn m;
  std::vector<float> conv(3), state(m.shape.recurrent_state_size()), out(m.shape.hidden);
  std::vector<float> h(m.shape.hidden, 0.0f);
  EXPECT_THROW(m.gdn.step(h.data(), conv, state, true, out.data()), Error);
}

}  // namespace
}  // namespace qpu::engine
