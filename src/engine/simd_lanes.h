#pragma once
// The 16-lane fp32 vectors the engine's kernels (dot.cpp, elementwise.cpp) are written
// in: GCC vector extensions, lowered to one zmm, two ymm or four xmm registers depending
// on the target of the enclosing function. The arithmetic is lane-wise IEEE either way
// (-ffp-contract=off), so a lane computes the bits of the scalar loop.
#include <cstdint>
#include <cstring>

// These values never cross a function boundary (every kernel inlines them), so GCC's
// note about the calling convention of 64-byte vectors is moot; this header is only for
// the kernel files.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace qpu::engine::simd {

typedef float f32x16 __attribute__((vector_size(64)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));

// Unaligned loads and stores (memcpy: no alignment or aliasing assumptions).
template <typename T>
[[gnu::always_inline]] inline T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
[[gnu::always_inline]] inline void store(void* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace qpu::engine::simd
