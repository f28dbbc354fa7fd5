#pragma once
// The 16-lane fp32 vectors the engine's kernels (dot.cpp, elementwise.cpp) are written
// in: GCC vector extensions, lowered to one zmm, two ymm or four xmm registers depending
// on the target of the enclosing function. The arithmetic is lane-wise IEEE either way
// (-ffp-contract=off), so a lane computes the bits of the scalar loop.
#include <cstdint>
#include <cstring>
#include <type_traits>

// These values never cross a function boundary (every kernel inlines them), so GCC's
// note about the calling convention of 64-byte vectors is moot; this header is only for
// the kernel files.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace qpu::engine::simd {

typedef float f32x16 __attribute__((vector_size(64)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
// The target's own widths (8 lanes: one AVX2 ymm; 4: one SSE xmm). GCC 12 keeps a
// 64-byte vector that lives across a loop, or that a compare or select makes, in memory
// on an AVX2 target, so such code uses these (docs/engine.md, "The zero tests").
typedef float f32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x4 __attribute__((vector_size(16)));
typedef uint32_t u32x4 __attribute__((vector_size(16)));

// Unaligned loads and stores (memcpy: no alignment or aliasing assumptions).
template <typename T>
[[gnu::always_inline]] inline T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
[[gnu::always_inline]] inline void store(void* p, T v) {
  if constexpr (sizeof(T) == 64 && sizeof(v[0]) == 4) {
    // In two 32-byte halves taken by shuffles: a 64-byte memcpy made GCC's AVX2 code
    // spill the two ymm registers and copy them out as four xmm loads and stores.
    typedef std::remove_cvref_t<decltype(v[0])> Lane;
    typedef Lane Half __attribute__((vector_size(32)));
    const Half lo = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
    const Half hi = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    std::memcpy(p, &lo, sizeof lo);
    std::memcpy(static_cast<char*>(p) + sizeof lo, &hi, sizeof hi);
  } else {
    std::memcpy(p, &v, sizeof v);
  }
}

}  // namespace qpu::engine::simd
