#include "engine/dot.h"

#include <bit>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/error.h"
#include "engine/simd_lanes.h"

namespace qpu::engine::dot {
namespace {

using simd::f32x16;
using simd::f32x4;
using simd::f32x8;
using simd::load;
using simd::u32x16;
using simd::u32x4;
using simd::u32x8;
typedef uint16_t u16x16 __attribute__((vector_size(32)));  // bf16 rows

// The kernel runs on V-lane vectors, V = the target's native width (4 for baseline
// x86-64, 8 for AVX2, 16 for AVX-512): a vector type wider than the target's registers is
// lowered by GCC into a stack-resident variable, and the loop-carried accumulators of a
// 16-lane kernel compiled for AVX2 were stored and reloaded (in pieces) on every step.
// The lanes are the same whatever V: 64 / V accumulators, accumulator a holding lanes
// a*V .. a*V + V - 1, so every lane sums the same terms in the same order.
typedef uint16_t u16x8 __attribute__((vector_size(16)));
typedef uint16_t u16x4 __attribute__((vector_size(8)));

template <int V>
struct Lanes;
template <>
struct Lanes<16> {
  using F = f32x16;
  using U32 = u32x16;
  using U16 = u16x16;
};
template <>
struct Lanes<8> {
  using F = f32x8;
  using U32 = u32x8;
  using U16 = u16x8;
};
template <>
struct Lanes<4> {
  using F = f32x4;
  using U32 = u32x4;
  using U16 = u16x4;
};

struct F32Row {
  const float* w;
  template <int V>
  [[gnu::always_inline]] typename Lanes<V>::F load_lanes(int64_t j) const {
    return load<typename Lanes<V>::F>(w + j);
  }
  [[gnu::always_inline]] float at(int64_t j) const { return w[j]; }
};

struct Bf16Row {
  const uint16_t* w;
  template <int V>
  [[gnu::always_inline]] typename Lanes<V>::F load_lanes(int64_t j) const {
    using L = Lanes<V>;
    const typename L::U32 bits = __builtin_convertvector(load<typename L::U16>(w + j), typename L::U32) << 16;
    return std::bit_cast<typename L::F>(bits);
  }
  [[gnu::always_inline]] float at(int64_t j) const { return bf16_to_float(w[j]); }
};

// s[i] += s[i+8], s[i] += s[i+4], s[i] += s[i+2], s[0] + s[1].
[[gnu::always_inline]] inline float halve16(float* s) {
  for (int i = 0; i < 8; ++i) s[i] = s[i] + s[i + 8];
  for (int i = 0; i < 4; ++i) s[i] = s[i] + s[i + 4];
  for (int i = 0; i < 2; ++i) s[i] = s[i] + s[i + 2];
  return s[0] + s[1];
}

template <int V, class Row>
[[gnu::always_inline]] inline float dot_impl(Row row, const float* x, int64_t n) {
  using F = typename Lanes<V>::F;
  constexpr int kAcc = kLanes / V;
  F acc[kAcc];
#pragma GCC unroll 16
  for (int a = 0; a < kAcc; ++a) acc[a] = F{};  // +0
  const int64_t full = n - n % kLanes;
  for (int64_t j = 0; j < full; j += kLanes) {
#pragma GCC unroll 16
    for (int a = 0; a < kAcc; ++a) {
      acc[a] = acc[a] + row.template load_lanes<V>(j + a * V) * load<F>(x + j + a * V);
    }
  }
  alignas(64) float p[kLanes];
#pragma GCC unroll 16
  for (int a = 0; a < kAcc; ++a) simd::store(p + a * V, acc[a]);
  // Tail indices j go to lane j mod 64, still in ascending order per lane.
  for (int64_t j = full; j < n; ++j) p[j - full] = p[j - full] + row.at(j) * x[j];
  // Lane i of the 16-lane sum: (lane i + lane i+16) + (lane i+32 + lane i+48), then halve16.
  alignas(64) float t[16];
#pragma GCC unroll 16
  for (int c = 0; c < 16; c += V) {
    const F s = (load<F>(p + c) + load<F>(p + c + 16)) + (load<F>(p + c + 32) + load<F>(p + c + 48));
    simd::store(t + c, s);
  }
  return halve16(t);
}

#define QPU_DOT_VARIANT(suffix, target_attr, lanes)                                            \
  target_attr void rows_f32_##suffix(const float* w, int64_t n, const float* x, float* y,     \
                                     int64_t b, int64_t e) {                                   \
    for (int64_t r = b; r < e; ++r) y[r] = dot_impl<lanes>(F32Row{w + r * n}, x, n);           \
  }                                                                                            \
  target_attr void rows_bf16_##suffix(const uint16_t* w, int64_t n, const float* x, float* y, \
                                      int64_t b, int64_t e) {                                  \
    for (int64_t r = b; r < e; ++r) y[r] = dot_impl<lanes>(Bf16Row{w + r * n}, x, n);          \
  }

QPU_DOT_VARIANT(generic, , 4)
QPU_DOT_VARIANT(avx2, __attribute__((target("avx2"))), 8)
QPU_DOT_VARIANT(avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))), 16)
#undef QPU_DOT_VARIANT

using RowsF32 = void (*)(const float*, int64_t, const float*, float*, int64_t, int64_t);
using RowsBf16 = void (*)(const uint16_t*, int64_t, const float*, float*, int64_t, int64_t);

RowsF32 f32_kernel(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return rows_f32_avx512;
    case Isa::Avx2: return rows_f32_avx2;
    case Isa::Generic: break;
  }
  return rows_f32_generic;
}

RowsBf16 bf16_kernel(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return rows_bf16_avx512;
    case Isa::Avx2: return rows_bf16_avx2;
    case Isa::Generic: break;
  }
  return rows_bf16_generic;
}

Isa pick_isa() {
  if (const char* named = std::getenv("QPU_ISA"); named != nullptr && *named != '\0') {
    const std::string_view name(named);
    for (const Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
      if (name != isa_name(isa)) continue;
      if (!isa_supported(isa)) fail("QPU_ISA={}: this CPU does not have the {} instructions", name, name);
      return isa;
    }
    fail("QPU_ISA={}: not an instruction set the kernels have (generic, avx2 or avx512)", name);
  }
  if (isa_supported(Isa::Avx512)) return Isa::Avx512;
  if (isa_supported(Isa::Avx2)) return Isa::Avx2;
  return Isa::Generic;
}

struct Active {
  Isa isa = pick_isa();
  RowsF32 f32 = f32_kernel(isa);
  RowsBf16 bf16 = bf16_kernel(isa);
};

const Active& active() {
  static const Active a;
  return a;
}

}  // namespace

bool isa_supported(Isa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    case Isa::Avx2: return __builtin_cpu_supports("avx2");
    case Isa::Generic: return true;
  }
  return false;
}

Isa active_isa() { return active().isa; }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    case Isa::Generic: break;
  }
  return "generic";
}

float combine_lanes(const float* lanes) {
  float s[16];
  for (int i = 0; i < 16; ++i) s[i] = (lanes[i] + lanes[i + 16]) + (lanes[i + 32] + lanes[i + 48]);
  return halve16(s);
}

float dot_f32(const float* w, const float* x, int64_t n) {
  float y = 0.0f;
  active().f32(w, n, x, &y, 0, 1);
  return y;
}

float dot_bf16(const uint16_t* w, const float* x, int64_t n) {
  float y = 0.0f;
  active().bf16(w, n, x, &y, 0, 1);
  return y;
}

void rows_f32(const float* w, int64_t n, const float* x, float* y, int64_t row_begin, int64_t row_end) {
  active().f32(w, n, x, y, row_begin, row_end);
}

void rows_bf16(const uint16_t* w, int64_t n, const float* x, float* y, int64_t row_begin,
               int64_t row_end) {
  active().bf16(w, n, x, y, row_begin, row_end);
}

void rows_f32_with(Isa isa, const float* w, int64_t n, const float* x, float* y, int64_t row_begin,
                   int64_t row_end) {
  f32_kernel(isa)(w, n, x, y, row_begin, row_end);
}

void rows_bf16_with(Isa isa, const uint16_t* w, int64_t n, const float* x, float* y,
                    int64_t row_begin, int64_t row_end) {
  bf16_kernel(isa)(w, n, x, y, row_begin, row_end);
}

float dot_reference(const float* w, const float* x, int64_t n) {
  float lanes[kLanes] = {};
  for (int64_t j = 0; j < n; ++j) {
    const float product = w[j] * x[j];
    lanes[j % kLanes] = lanes[j % kLanes] + product;
  }
  return combine_lanes(lanes);
}

}  // namespace qpu::engine::dot
