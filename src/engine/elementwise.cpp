#include "engine/elementwise.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "engine/numerics.h"
#include "engine/simd_lanes.h"

namespace qpu::engine::elementwise {
namespace {

using simd::f32x16;
using simd::f32x8;
using simd::i32x8;
using simd::load;
using simd::store;
using simd::u32x16;
using simd::u32x4;
using simd::u32x8;

typedef uint64_t u64x2 __attribute__((vector_size(16)));

// Any bit set in the 32 or 64 bytes: OR-ed down by halves in vector registers. The halves are
// shuffles of the vector itself and the last step a std::bit_cast, all in registers: the
// earlier memcpy into a vector of 64-bit lanes made GCC's AVX2 code store the two ymm
// halves and reload them as 64-bit words, a store-forwarding stall that was the top of
// silu_mul's profile (docs/engine.md, "The zero tests: AVX2 code for 64-byte vectors").
[[gnu::always_inline]] inline bool any(u32x8 h) {
  const u32x4 q = __builtin_shufflevector(h, h, 0, 1, 2, 3) | __builtin_shufflevector(h, h, 4, 5, 6, 7);
  const u64x2 w = std::bit_cast<u64x2>(q);
  return (w[0] | w[1]) != 0;
}

[[gnu::always_inline]] inline bool any(u32x16 v) {
  return any(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) |
             __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15));
}

// A block holds an input x with x != 0, i.e. not +-0 (NaN counts: NaN != 0). On the
// bits: dropping the sign bit leaves 0 exactly for +-0 (integer ops, no float compare,
// which baseline x86-64 would split into scalar compares for 16 lanes).
[[gnu::always_inline]] inline bool any_nonzero(f32x16 v) {
  return any(std::bit_cast<u32x16>(v) << 1);
}

[[gnu::always_inline]] inline void add_impl(float* x, const float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) store(x + i, load<f32x16>(x + i) + load<f32x16>(y + i));
  for (; i < n; ++i) x[i] = x[i] + y[i];
}

[[gnu::always_inline]] inline void scale_mul_impl(const float* x, float r, const float* scale, float* out,
                                                  int64_t n) {
  f32x16 rv;
  for (int l = 0; l < kBlock; ++l) rv[l] = r;  // exact copies of r (a -0 or NaN r included)
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) store(out + i, (load<f32x16>(x + i) * rv) * load<f32x16>(scale + i));
  for (; i < n; ++i) out[i] = (x[i] * r) * scale[i];
}

[[gnu::always_inline]] inline void scale_mul_plain_impl(const float* x, float r, const float* scale,
                                                        const uint64_t* plain, float* out, int64_t n) {
  f32x16 rv;
  for (int l = 0; l < kBlock; ++l) rv[l] = r;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    const f32x16 xb = load<f32x16>(x + i);
    const int64_t b = i / kBlock;
    if (plain != nullptr && ((plain[b / 64] >> (b % 64)) & 1) != 0 && !any_nonzero(xb)) {
      store(out + i, xb);  // (+-0 * r) * s = +-0 with x's sign
      continue;
    }
    store(out + i, (xb * rv) * load<f32x16>(scale + i));
  }
  for (; i < n; ++i) out[i] = (x[i] * r) * scale[i];
}

[[gnu::always_inline]] inline void mul_impl(const float* x, float m, float* out, int64_t n) {
  f32x16 mv;
  for (int l = 0; l < kBlock; ++l) mv[l] = m;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) store(out + i, load<f32x16>(x + i) * mv);
  for (; i < n; ++i) out[i] = x[i] * m;
}

[[gnu::always_inline]] inline void div_impl(const float* x, float d, float* out, int64_t n) {
  f32x16 dv;
  for (int l = 0; l < kBlock; ++l) dv[l] = d;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) store(out + i, load<f32x16>(x + i) / dv);
  for (; i < n; ++i) out[i] = x[i] / d;
}

// numerics::silu of 8 values, written to out (which may be a): a vector select where every
// lane lies in one of silu's exact windows (g for +-0 and g >= 18, -0 for -inf < g < -89:
// a compiled layer's gates are +-0 or far out), numerics::silu lane by lane otherwise.
// Lanes of 8, not 16: GCC 12 lowers compares and selects of 64-byte vectors on an AVX2
// target lane by lane through the stack.
[[gnu::always_inline]] inline void silu8(const float* a, float* out) {
  const f32x8 g = load<f32x8>(a);
  const i32x8 identity = (g == 0.0f) | (g >= 18.0f);
  const i32x8 minus_zero = (g < -89.0f) & (g > -std::numeric_limits<float>::infinity());
  if (!any(std::bit_cast<u32x8>(~(identity | minus_zero)))) {
    const f32x8 zero{};
    store(out, identity ? g : -zero);  // -zero: -0 in every lane
    return;
  }
  for (int l = 0; l < 8; ++l) out[l] = numerics::silu(a[l]);
}

// silu(g) = g for g = +-0, so an all-zero block is g * up.
[[gnu::always_inline]] inline void silu_mul_impl(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    const f32x16 g = load<f32x16>(gate + i);
    if (!any_nonzero(g)) {
      store(gate + i, g * load<f32x16>(up + i));
      continue;
    }
    silu8(gate + i, gate + i);
    silu8(gate + i + 8, gate + i + 8);
    store(gate + i, load<f32x16>(gate + i) * load<f32x16>(up + i));
  }
  for (; i < n; ++i) gate[i] = numerics::silu(gate[i]) * up[i];
}

// silu(z) = z for z = +-0, so an all-zero block of z is (w * (o * r)) * z.
[[gnu::always_inline]] inline void gated_norm_impl(const float* w, const float* o, float r, const float* z,
                                                   float* y, int64_t n) {
  f32x16 rv;
  for (int l = 0; l < kBlock; ++l) rv[l] = r;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    const f32x16 zb = load<f32x16>(z + i);
    if (!any_nonzero(zb)) {
      store(y + i, (load<f32x16>(w + i) * (load<f32x16>(o + i) * rv)) * zb);
      continue;
    }
    for (int64_t j = i; j < i + kBlock; ++j) y[j] = (w[j] * (o[j] * r)) * numerics::silu(z[j]);
  }
  for (; i < n; ++i) y[i] = (w[i] * (o[i] * r)) * numerics::silu(z[i]);
}

// One channel exactly as torch_causal_conv1d_update sums it: taps left to right from +0.
// kHistory >= 0: the history length as a constant (taps = 4 in every Qwen3.5 config), so
// the shift is two register moves; with a run-time length GCC turns it into a call to
// memmove per channel, which cost more than the channel's arithmetic on the looped
// machine (docs/engine.md, "Cost per machine cycle"). The same operations either way.
template <int kHistory>
[[gnu::always_inline]] inline float conv_channel_sum(const float* wc, int64_t runtime_history, float* past,
                                                     float input) {
  const int64_t history = kHistory >= 0 ? kHistory : runtime_history;
  float acc = 0.0f;
  for (int64_t t = 0; t < history; ++t) acc = acc + wc[t] * past[t];
  acc = acc + wc[history] * input;
  for (int64_t t = 0; t + 1 < history; ++t) past[t] = past[t + 1];
  if (history > 0) past[history - 1] = input;
  return acc;
}

template <int kHistory>
[[gnu::always_inline]] inline void conv_silu_channels(const float* weight, int64_t taps, bool taps_finite,
                                                      float* state, const float* in, float* out,
                                                      int64_t channels, uint8_t* zero_inputs) {
  const int64_t history = kHistory >= 0 ? kHistory : taps - 1;
  int64_t c = 0;
  for (; c + kBlock <= channels; c += kBlock) {
    // 8-lane words: GCC 12 on AVX2 moved a 64-byte vector loaded here through the stack.
    const u32x8 in_bits = load<u32x8>(in + c) | load<u32x8>(in + c + 8);
    const bool input_zero = !any(in_bits);
    bool history_zero = false;  // known without reading it
    if (zero_inputs != nullptr) {
      uint8_t& count = zero_inputs[c / kBlock];
      history_zero = count >= history;
      count = input_zero ? static_cast<uint8_t>(std::min<int64_t>(count + 1, history)) : 0;
    }
    if (taps_finite) {
      if (input_zero && history_zero) {
        store(out + c, f32x16{});
        continue;
      }
      // The bits of the block's inputs and histories, OR-ed: 0 only if all are +0.
      u32x8 bits = in_bits;
      const float* past = state + c * history;
      for (int64_t k = 0; k < kBlock * history; k += 8) bits |= load<u32x8>(past + k);
      if (!any(bits)) {
        store(out + c, f32x16{});
        continue;
      }
    }
    // The sums first, then silu over the block (silu8: mostly in its windows).
    for (int64_t ch = c; ch < c + kBlock; ++ch) {
      out[ch] = conv_channel_sum<kHistory>(weight + ch * taps, history, state + ch * history, in[ch]);
    }
    silu8(out + c, out + c);
    silu8(out + c + 8, out + c + 8);
  }
  for (; c < channels; ++c) {
    out[c] = numerics::silu(conv_channel_sum<kHistory>(weight + c * taps, history, state + c * history, in[c]));
  }
}

[[gnu::always_inline]] inline void conv_silu_impl(const float* weight, int64_t taps, bool taps_finite,
                                                  float* state, const float* in, float* out,
                                                  int64_t channels, uint8_t* zero_inputs) {
  if (taps == 4) {
    conv_silu_channels<3>(weight, taps, taps_finite, state, in, out, channels, zero_inputs);
  } else {
    conv_silu_channels<-1>(weight, taps, taps_finite, state, in, out, channels, zero_inputs);
  }
}

[[gnu::always_inline]] inline int64_t nonzero_indices_impl(const float* x, int64_t n, int32_t* rows) {
  int64_t count = 0;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    if (!any_nonzero(load<f32x16>(x + i))) continue;
    for (int64_t j = i; j < i + kBlock; ++j) {
      rows[count] = static_cast<int32_t>(j);  // branch-free: overwritten unless x[j] counts
      count += x[j] != 0.0f;
    }
  }
  for (; i < n; ++i) {
    rows[count] = static_cast<int32_t>(i);
    count += x[i] != 0.0f;
  }
  return count;
}

// argmax: the scan `if (x[i] > x[best]) best = i` from best = 0 ends on the first index
// whose value equals M, the largest non-NaN value, when x[0] is not NaN (NaN never
// compares greater, and the first time the scan meets M it moves there, since M is
// greater than every earlier value; -0 and +0 are equal, so the first of them is kept);
// with a NaN x[0] it never moves. So: M from 8 lane maxima that start at x[0] and take
// only values greater than them (the order does not matter for the maximum of non-NaN
// values: ties between -0 and +0 are settled by the second pass, which looks for the first
// x[i] == M), then the first index equal to M. Also counts the x[i] > above on the way.
// 8 lanes, not the 16 of the other kernels: GCC 12 lowers a select or compare of 64-byte
// vectors on an AVX2 target lane by lane through the stack (the host's pick over a
// 26K-token vocabulary was a tenth of a value-token cycle); 32-byte ones stay in ymm
// registers, and baseline x86-64 splits them into two SSE halves. Any lane count gives
// the same M, count and index.
constexpr int64_t kArgmaxLanes = 8;

[[gnu::always_inline]] inline int64_t argmax_impl(const float* x, int64_t n, float above, int64_t* count_above) {
  int64_t count = 0;
  f32x8 best, limit;
  for (int l = 0; l < kArgmaxLanes; ++l) {
    best[l] = x[0];
    limit[l] = above;
  }
  i32x8 counts{};
  int64_t i = 0;
  for (; i + kArgmaxLanes <= n; i += kArgmaxLanes) {
    const f32x8 v = load<f32x8>(x + i);
    best = v > best ? v : best;
    counts += v > limit;  // a true lane is -1
  }
  float m = x[0];
  for (int l = 0; l < kArgmaxLanes; ++l) {
    count -= counts[l];
    if (best[l] > m) m = best[l];
  }
  for (int64_t j = i; j < n; ++j) {
    if (x[j] > m) m = x[j];
    count += x[j] > above;
  }
  if (count_above != nullptr) *count_above = count;
  if (std::isnan(x[0])) return 0;
  int64_t j = 0;
  f32x8 mv;
  for (int l = 0; l < kArgmaxLanes; ++l) mv[l] = m;
  for (; j + kArgmaxLanes <= n; j += kArgmaxLanes) {
    const i32x8 hit = load<f32x8>(x + j) == mv;
    if (any(std::bit_cast<u32x8>(hit))) break;
  }
  for (; j < n; ++j)
    if (x[j] == m) return j;
  return 0;  // not reached: M is one of the x[i]
}

// live_words: one word per 64 inputs. A float is +-0 iff its bits without the sign are
// 0, and non-finite iff its exponent bits are all ones. Generic: 4 lanes (SSE2, as the
// baseline target allows); AVX2: 8; AVX-512: 16, with the nonzero test straight into a
// mask register. The tail past the last full block runs the scalar test.
[[gnu::always_inline]] inline bool live_tail(const float* x, int64_t k, int64_t n, uint64_t& bits) {
  bool finite = true;
  for (; k < n; ++k) {
    const uint32_t u = std::bit_cast<uint32_t>(x[k]);
    bits |= static_cast<uint64_t>((u << 1) != 0) << k;
    finite = finite && (u & 0x7f800000u) != 0x7f800000u;
  }
  return finite;
}

bool live_words_generic(const float* x, int64_t n, uint64_t* live) {
  bool finite = true;
  const __m128i no_sign = _mm_set1_epi32(0x7fffffff), exponent = _mm_set1_epi32(0x7f800000);
  __m128i special = _mm_setzero_si128();
  for (int64_t base = 0; base < n; base += 64) {
    const float* xw = x + base;
    const int64_t m = std::min<int64_t>(64, n - base);
    uint64_t bits = 0;
    int64_t k = 0;
    for (; k + 4 <= m; k += 4) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xw + k));
      const int zero = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(_mm_and_si128(v, no_sign), _mm_setzero_si128())));
      bits |= static_cast<uint64_t>(~zero & 0xf) << k;
      special = _mm_or_si128(special, _mm_cmpeq_epi32(_mm_and_si128(v, exponent), exponent));
    }
    finite = live_tail(xw, k, m, bits) && finite;
    live[base / 64] = bits;
  }
  return finite && _mm_movemask_ps(_mm_castsi128_ps(special)) == 0;
}

__attribute__((target("avx2"))) bool live_words_avx2(const float* x, int64_t n, uint64_t* live) {
  bool finite = true;
  const __m256i no_sign = _mm256_set1_epi32(0x7fffffff), exponent = _mm256_set1_epi32(0x7f800000);
  __m256i special = _mm256_setzero_si256();
  for (int64_t base = 0; base < n; base += 64) {
    const float* xw = x + base;
    const int64_t m = std::min<int64_t>(64, n - base);
    uint64_t bits = 0;
    int64_t k = 0;
    for (; k + 8 <= m; k += 8) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xw + k));
      const int zero =
          _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(v, no_sign), _mm256_setzero_si256())));
      bits |= static_cast<uint64_t>(~zero & 0xff) << k;
      special = _mm256_or_si256(special, _mm256_cmpeq_epi32(_mm256_and_si256(v, exponent), exponent));
    }
    finite = live_tail(xw, k, m, bits) && finite;
    live[base / 64] = bits;
  }
  return finite && _mm256_movemask_ps(_mm256_castsi256_ps(special)) == 0;
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) bool live_words_avx512(const float* x, int64_t n,
                                                                                       uint64_t* live) {
  bool finite = true;
  const __m512i no_sign = _mm512_set1_epi32(0x7fffffff), exponent = _mm512_set1_epi32(0x7f800000);
  __mmask16 special = 0;
  for (int64_t base = 0; base < n; base += 64) {
    const float* xw = x + base;
    const int64_t m = std::min<int64_t>(64, n - base);
    uint64_t bits = 0;
    int64_t k = 0;
    for (; k + 16 <= m; k += 16) {
      const __m512i v = _mm512_loadu_si512(xw + k);
      bits |= static_cast<uint64_t>(_mm512_test_epi32_mask(v, no_sign)) << k;
      special |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(v, exponent), exponent);
    }
    finite = live_tail(xw, k, m, bits) && finite;
    live[base / 64] = bits;
  }
  return finite && special == 0;
}

#define QPU_ELEMENTWISE_VARIANT(suffix, target_attr)                                                      \
  target_attr void add_##suffix(float* x, const float* y, int64_t n) { add_impl(x, y, n); }               \
  target_attr void scale_mul_##suffix(const float* x, float r, const float* scale, float* out, int64_t n) { \
    scale_mul_impl(x, r, scale, out, n);                                                                  \
  }                                                                                                       \
  target_attr void scale_mul_plain_##suffix(const float* x, float r, const float* scale, const uint64_t* plain, \
                                            float* out, int64_t n) {                                      \
    scale_mul_plain_impl(x, r, scale, plain, out, n);                                                     \
  }                                                                                                       \
  target_attr void mul_##suffix(const float* x, float m, float* out, int64_t n) { mul_impl(x, m, out, n); } \
  target_attr void div_##suffix(const float* x, float d, float* out, int64_t n) { div_impl(x, d, out, n); } \
  target_attr void silu_mul_##suffix(float* gate, const float* up, int64_t n) { silu_mul_impl(gate, up, n); } \
  target_attr void gated_norm_##suffix(const float* w, const float* o, float r, const float* z, float* y,  \
                                       int64_t n) {                                                       \
    gated_norm_impl(w, o, r, z, y, n);                                                                    \
  }                                                                                                       \
  target_attr void conv_silu_##suffix(const float* weight, int64_t taps, bool taps_finite, float* state,  \
                                      const float* in, float* out, int64_t channels) {                    \
    conv_silu_impl(weight, taps, taps_finite, state, in, out, channels, nullptr);                         \
  }                                                                                                       \
  target_attr void conv_silu_tracked_##suffix(const float* weight, int64_t taps, bool taps_finite,        \
                                              float* state, const float* in, float* out, int64_t channels, \
                                              uint8_t* zero_inputs) {                                     \
    conv_silu_impl(weight, taps, taps_finite, state, in, out, channels, zero_inputs);                     \
  }                                                                                                       \
  target_attr int64_t nonzero_indices_##suffix(const float* x, int64_t n, int32_t* rows) {                \
    return nonzero_indices_impl(x, n, rows);                                                              \
  }                                                                                                       \
  target_attr int64_t argmax_##suffix(const float* x, int64_t n, float above, int64_t* count_above) {    \
    return argmax_impl(x, n, above, count_above);                                                         \
  }                                                                                                       \
  constexpr Kernels kernels_##suffix{add_##suffix,        scale_mul_##suffix, scale_mul_plain_##suffix,   \
                                     mul_##suffix,                                                        \
                                     div_##suffix,        silu_mul_##suffix,  gated_norm_##suffix,        \
                                     conv_silu_##suffix,  conv_silu_tracked_##suffix,                 \
                                     nonzero_indices_##suffix, live_words_##suffix, \
                                     argmax_##suffix};

QPU_ELEMENTWISE_VARIANT(generic, )
QPU_ELEMENTWISE_VARIANT(avx2, __attribute__((target("avx2"))))
QPU_ELEMENTWISE_VARIANT(avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))))
#undef QPU_ELEMENTWISE_VARIANT

}  // namespace

const Kernels& kernels_for(dot::Isa isa) {
  switch (isa) {
    case dot::Isa::Avx512: return kernels_avx512;
    case dot::Isa::Avx2: return kernels_avx2;
    case dot::Isa::Generic: break;
  }
  return kernels_generic;
}

const Kernels& kernels() {
  static const Kernels& active = kernels_for(dot::active_isa());
  return active;
}

void rms_norm(const float* x, int64_t n, const float* scale, float eps, float* out, const uint64_t* plain) {
  const float r = numerics::rsqrt(numerics::mean_square_plus_eps(x, n, eps));
  if (plain != nullptr && std::isfinite(r) && !std::signbit(r)) {
    kernels().scale_mul_plain(x, r, scale, plain, out, n);
  } else {
    kernels().scale_mul(x, r, scale, out, n);
  }
}

float sum_squares_live(const float* x, int64_t n, const uint64_t* live) {
  // Lane l of dim j is j mod 64 = the bit index in its word; each lane adds its squares
  // in ascending j from +0, as dot_f32 does, then the same combine tree.
  float lanes[dot::kLanes] = {};
  const int64_t words = (n + 63) / 64;
  for (int64_t w = 0; w < words; ++w) {
    const float* xw = x + 64 * w;
    for (uint64_t bits = live[w]; bits != 0; bits &= bits - 1) {
      const int k = std::countr_zero(bits);
      lanes[k] = lanes[k] + xw[k] * xw[k];
    }
  }
  return dot::combine_lanes(lanes);
}

bool LiveNorm::run(const float* x, int64_t n, const float* scale, float eps, const uint64_t* live,
                   const std::vector<int32_t>& odd_blocks, float* out, const uint64_t* read_blocks) {
  const int64_t words = (n + 63) / 64;
  int64_t live_dims = 0;
  for (int64_t w = 0; w < words; ++w) {
    // std::popcount is a libgcc call on baseline x86-64 (no POPCNT): the bit trick inline.
    uint64_t v = live[w];
    v = v - ((v >> 1) & 0x5555555555555555u);
    v = (v & 0x3333333333333333u) + ((v >> 2) & 0x3333333333333333u);
    live_dims += static_cast<int64_t>((((v + (v >> 4)) & 0x0f0f0f0f0f0f0f0fu) * 0x0101010101010101u) >> 56);
  }
  // The scalar sum of squares and the per-block writes beat the two vector passes only
  // for a sparse x (a machine's residual: a few hundred live dims of thousands).
  if (8 * live_dims > n) return false;
  const float r = numerics::rsqrt(sum_squares_live(x, n, live) / static_cast<float>(n) + eps);
  if (!std::isfinite(r)) return false;
  const Kernels& k = kernels();
  const int64_t blocks = n / kBlock;
  if (!known_ || n_ != n || out_ != out) {
    std::fill(out, out + n, 0.0f);
    written_.clear();
    known_ = true;
    n_ = n;
    out_ = out;
  } else {
    for (const int32_t b : written_) std::fill(out + b * kBlock, out + (b + 1) * kBlock, 0.0f);
    written_.clear();
  }
  written_bits_.assign(static_cast<size_t>((blocks + 63) / 64), 0);
  const auto read = [&](int64_t b) { return read_blocks == nullptr || (read_blocks[b / 64] >> (b % 64) & 1u) != 0; };
  const auto write = [&](int64_t b) {
    k.scale_mul(x + b * kBlock, r, scale + b * kBlock, out + b * kBlock, kBlock);
    written_.push_back(static_cast<int32_t>(b));
    written_bits_[static_cast<size_t>(b / 64)] |= uint64_t{1} << (b % 64);
  };
  for (int64_t w = 0; w < words; ++w) {
    for (uint64_t bits = live[w]; bits != 0;) {
      const int64_t b = 4 * w + std::countr_zero(bits) / 16;  // the block of the lowest live dim
      bits &= ~(uint64_t{0xffff} << (16 * (b % 4)));
      if (b >= blocks) break;  // the tail, below
      if (read(b)) write(b);
    }
  }
  for (const int32_t b : odd_blocks) {  // (+-0 * r) * inf = NaN: computed
    if (read(b) && (written_bits_[static_cast<size_t>(b / 64)] >> (b % 64) & 1u) == 0) write(b);
  }
  for (int64_t i = blocks * kBlock; i < n; ++i) out[i] = (x[i] * r) * scale[i];  // rewritten every call
  return true;
}

std::vector<int32_t> non_finite_blocks(const float* scale, int64_t n) {
  std::vector<int32_t> odd;
  for (int64_t b = 0; b < n / kBlock; ++b) {
    bool finite = true;
    for (int64_t i = b * kBlock; i < (b + 1) * kBlock; ++i) finite = finite && std::isfinite(scale[i]);
    if (!finite) odd.push_back(static_cast<int32_t>(b));
  }
  return odd;
}

std::vector<uint64_t> plain_blocks(const float* scale, int64_t n) {
  std::vector<uint64_t> plain(static_cast<size_t>((n / kBlock + 63) / 64), 0);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    bool ok = true;
    for (int64_t i = b * kBlock; i < (b + 1) * kBlock; ++i) ok = ok && std::isfinite(scale[i]) && !std::signbit(scale[i]);
    if (ok) plain[static_cast<size_t>(b / 64)] |= uint64_t{1} << (b % 64);
  }
  return plain;
}

bool all_zero(const float* x, int64_t n) {
  uint32_t bits = 0;
#pragma omp simd reduction(| : bits)
  for (int64_t i = 0; i < n; ++i) bits |= std::bit_cast<uint32_t>(x[i]) << 1;  // the sign dropped
  return bits == 0;
}

void l2norm(float* x, int64_t n) {
  // An all-+-0 head (an idle one of a compiled layer, most of them on a cycle): the
  // canonical dot of +-0s is +0 (every product is +0, summed from +0), so r = rsqrt(1e-6),
  // finite and positive, and x * r = x with its sign: the vector is left as it is.
  if (all_zero(x, n)) return;
  const float r = numerics::rsqrt(dot::dot_f32(x, x, n) + 1e-6f);
  kernels().mul(x, r, x, n);
}

float mean_square_plus_eps(const float* x, int64_t n, float eps) {
  // All +-0: the dot is +0 (as in l2norm) without the 64-lane sum.
  if (all_zero(x, n)) return 0.0f / static_cast<float>(n) + eps;
  return numerics::mean_square_plus_eps(x, n, eps);
}

}  // namespace qpu::engine::elementwise
