#include "engine/weight_scan.h"

#include <bit>
#include <cstring>

namespace qpu::engine::weight_scan {

namespace {

constexpr int64_t kBlock = 16;

// The OR of the bits of 16 values (a fixed-length loop the compiler unrolls/vectorizes).
inline uint32_t or_bits(const float* p) {
  uint32_t b[kBlock];
  std::memcpy(b, p, sizeof b);
  uint32_t acc = 0;
  for (int64_t i = 0; i < kBlock; ++i) acc |= b[i];
  return acc;
}

inline uint32_t bits(float v) { return std::bit_cast<uint32_t>(v); }

// census and census_listing: `list` is null (no listing) or the listing while it lasts.
Census census_impl(std::span<const float> values, int64_t limit, std::vector<int64_t>* list) {
  Census c;
  uint32_t low = 0;  // OR of the low 16 bits of every value
  const float* p = values.data();
  const auto n = static_cast<int64_t>(values.size());
  const auto one = [&](int64_t j) {
    const uint32_t b = bits(p[j]);
    low |= b;
    if (b == 0) {
      ++c.plus_zeros;
    } else if (list) {
      if (static_cast<int64_t>(list->size()) < limit) {
        list->push_back(j);
      } else {  // too many: the caller scans again
        list->clear();
        list = nullptr;
      }
    }
  };
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    if (or_bits(p + i) == 0) {  // 16 values of +0
      c.plus_zeros += kBlock;
      continue;
    }
    for (int64_t j = i; j < i + kBlock; ++j) one(j);
  }
  for (; i < n; ++i) one(i);
  c.all_bf16 = (low & 0xffffu) == 0;
  return c;
}

}  // namespace

Census census(std::span<const float> values) { return census_impl(values, 0, nullptr); }

Census census_listing(std::span<const float> values, int64_t limit, std::vector<int64_t>& listed) {
  listed.clear();
  return census_impl(values, limit, &listed);
}

void mark_nonzero_columns(std::span<const float> values, int64_t cols, std::vector<uint8_t>& used) {
  if (cols <= 0) return;
  const auto n = static_cast<int64_t>(values.size());
  for (int64_t row = 0; row + cols <= n; row += cols) {
    const float* r = values.data() + row;
    int64_t c = 0;
    for (; c + kBlock <= cols; c += kBlock) {
      // Every value +-0 ((a | b) & m = (a & m) | (b & m); -0 has only the sign bit)?
      if ((or_bits(r + c) & 0x7fffffffu) == 0) continue;
      for (int64_t j = c; j < c + kBlock; ++j)
        if (r[j] != 0.0f) used[static_cast<size_t>(j)] = 1;
    }
    for (; c < cols; ++c)
      if (r[c] != 0.0f) used[static_cast<size_t>(c)] = 1;
  }
}

bool all_finite(std::span<const float> values) {
  // Not finite: the exponent field all ones (inf, NaN).
  const float* p = values.data();
  const auto n = static_cast<int64_t>(values.size());
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    uint32_t b[kBlock];
    std::memcpy(b, p + i, sizeof b);
    uint32_t bad = 0;
    // |bits| > the largest finite's bits, as a signed compare (SSE2 has no unsigned one).
    for (int64_t j = 0; j < kBlock; ++j) bad |= static_cast<int32_t>(b[j] & 0x7fffffffu) > 0x7f7fffff ? 1u : 0u;
    if (bad != 0) return false;
  }
  for (; i < n; ++i)
    if ((bits(p[i]) & 0x7f800000u) == 0x7f800000u) return false;
  return true;
}

}  // namespace qpu::engine::weight_scan
