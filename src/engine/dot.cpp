#include "engine/dot.h"

#include <cstring>

#include "engine/simd_lanes.h"

namespace qpu::engine::dot {
namespace {

using simd::f32x16;
using simd::load;
using simd::u32x16;
typedef uint16_t u16x16 __attribute__((vector_size(32)));  // bf16 rows

struct F32Row {
  const float* w;
  [[gnu::always_inline]] f32x16 load16(int64_t j) const { return load<f32x16>(w + j); }
  [[gnu::always_inline]] float at(int64_t j) const { return w[j]; }
};

struct Bf16Row {
  const uint16_t* w;
  [[gnu::always_inline]] f32x16 load16(int64_t j) const {
    const u32x16 bits = __builtin_convertvector(load<u16x16>(w + j), u32x16) << 16;
    return load<f32x16>(&bits);
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

template <class Row>
[[gnu::always_inline]] inline float dot_impl(Row row, const float* x, int64_t n) {
  // a0..a3 hold lanes 0-15, 16-31, 32-47, 48-63; zero-initialized = +0.
  f32x16 a0{}, a1{}, a2{}, a3{};
  const int64_t full = n - n % kLanes;
  for (int64_t j = 0; j < full; j += kLanes) {
    a0 = a0 + row.load16(j) * load<f32x16>(x + j);
    a1 = a1 + row.load16(j + 16) * load<f32x16>(x + j + 16);
    a2 = a2 + row.load16(j + 32) * load<f32x16>(x + j + 32);
    a3 = a3 + row.load16(j + 48) * load<f32x16>(x + j + 48);
  }
  if (full != n) {
    // Tail indices j go to lane j mod 64, still in ascending order per lane.
    alignas(64) float p[kLanes];
    std::memcpy(p, &a0, 64);
    std::memcpy(p + 16, &a1, 64);
    std::memcpy(p + 32, &a2, 64);
    std::memcpy(p + 48, &a3, 64);
    for (int64_t j = full; j < n; ++j) p[j - full] = p[j - full] + row.at(j) * x[j];
    a0 = load<f32x16>(p);
    a1 = load<f32x16>(p + 16);
    a2 = load<f32x16>(p + 32);
    a3 = load<f32x16>(p + 48);
  }
  const f32x16 s = (a0 + a1) + (a2 + a3);
  alignas(64) float t[16];
  std::memcpy(t, &s, 64);
  return halve16(t);
}

#define QPU_DOT_VARIANT(suffix, target_attr)                                                   \
  target_attr void rows_f32_##suffix(const float* w, int64_t n, const float* x, float* y,     \
                                     int64_t b, int64_t e) {                                   \
    for (int64_t r = b; r < e; ++r) y[r] = dot_impl(F32Row{w + r * n}, x, n);                  \
  }                                                                                            \
  target_attr void rows_bf16_##suffix(const uint16_t* w, int64_t n, const float* x, float* y, \
                                      int64_t b, int64_t e) {                                  \
    for (int64_t r = b; r < e; ++r) y[r] = dot_impl(Bf16Row{w + r * n}, x, n);                 \
  }

QPU_DOT_VARIANT(generic, )
QPU_DOT_VARIANT(avx2, __attribute__((target("avx2"))))
QPU_DOT_VARIANT(avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))))
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
