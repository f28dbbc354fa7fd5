#include "engine/column_matrix.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/dot.h"

namespace qpu::engine {
namespace {

// One product w * x[j] waiting for its row's combine. Terms of a row form a list in
// the order they were made, which is ascending j (columns are visited in ascending j).
struct Term {
  float value;
  int32_t next;   // next term of the same row, -1 at the end
  uint32_t lane;  // j mod 64
};

// Per-thread bookkeeping of one band, reused across calls (no allocation when warm).
// head[r] is -1 for every row between calls: a call resets exactly the rows it touched.
struct Scratch {
  std::vector<int32_t> head;     // [kBandRows]: first term of row r, -1 = untouched
  std::vector<int32_t> tail;     // [kBandRows]: last term of row r (valid when head >= 0)
  std::vector<int32_t> touched;  // rows with a term, in order of their first term
  std::vector<Term> terms;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// lane = kLaneOfKey[dot::tree_key(lane)] (the key is a permutation of the 6 lane bits).
constexpr auto kLaneOfKey = [] {
  std::array<uint8_t, dot::kLanes> lane_of{};
  for (uint32_t l = 0; l < dot::kLanes; ++l) lane_of[dot::tree_key(l)] = static_cast<uint8_t>(l);
  return lane_of;
}();

// The canonical sum of one row from its terms: lanes in ascending j from +0, then the
// combine tree pruned to the lanes that got a term (dot.h, column_matrix.h).
inline float combine_row(const Term* terms, int32_t t) {
  if (terms[t].next < 0) return 0.0f + terms[t].value;  // one lane, one term: +0 + p
  float lanes[dot::kLanes];
  uint64_t occupied = 0;
  for (; t >= 0; t = terms[t].next) {
    const uint32_t l = terms[t].lane;
    const uint64_t bit = uint64_t{1} << l;
    if (occupied & bit) {
      lanes[l] = lanes[l] + terms[t].value;
    } else {
      lanes[l] = 0.0f + terms[t].value;  // a lane starts at +0 (a -0 product gives +0)
      occupied |= bit;
    }
  }
  // The tree pruned to the occupied lanes: leaves in tree-key order, evaluated on a
  // stack. level[i] is the level at which stack entry i meets the entry after it (the
  // highest differing key bit); two neighbours merge once the next leaf meets them
  // higher up. (The CSR kernel runs the same evaluation from a stored program.)
  uint64_t keys = 0;
  for (uint64_t m = occupied; m != 0; m &= m - 1) keys |= uint64_t{1} << dot::tree_key(static_cast<uint32_t>(std::countr_zero(m)));
  float stack[dot::kLanes];
  int level[dot::kLanes];
  int top = 0;
  while (keys != 0) {
    const auto key = static_cast<uint32_t>(std::countr_zero(keys));
    keys &= keys - 1;
    const int next = keys != 0 ? 32 - std::countl_zero(key ^ static_cast<uint32_t>(std::countr_zero(keys))) : 7;
    stack[top] = lanes[kLaneOfKey[key]];
    level[top] = next;
    ++top;
    while (top >= 2 && level[top - 2] < next) {
      stack[top - 2] = stack[top - 2] + stack[top - 1];
      level[top - 2] = next;
      --top;
    }
  }
  return stack[0];
}

}  // namespace

ColumnMatrix ColumnMatrix::from_csr(int64_t rows, int64_t cols, const std::vector<int64_t>& row_start,
                                    const std::vector<uint32_t>& col_index, const std::vector<float>& values) {
  ColumnMatrix m;
  // Offsets and per-column counts are 32-bit (count() sums them in int32 lanes).
  if (values.size() >= std::numeric_limits<int32_t>::max()) return m;  // no column copy
  m.rows_ = rows;
  m.cols_ = cols;
  const int64_t bands = m.bands();
  const auto stride = static_cast<size_t>(cols + 1);
  m.col_entries_.assign(static_cast<size_t>(cols), 0);
  m.start_.assign(static_cast<size_t>(bands) * stride, 0);
  for (int64_t r = 0; r < rows; ++r) {
    uint32_t* start = m.start_.data() + static_cast<size_t>(r / kBandRows) * stride;
    for (int64_t k = row_start[r]; k < row_start[r + 1]; ++k) {
      ++start[col_index[k] + 1];
      ++m.col_entries_[col_index[k]];
      m.weights_finite_ = m.weights_finite_ && std::isfinite(values[k]);
    }
  }
  m.nonempty_.assign(static_cast<size_t>((cols + 63) / 64), 0);
  for (int64_t j = 0; j < cols; ++j) {
    if (m.col_entries_[static_cast<size_t>(j)] != 0) m.nonempty_[static_cast<size_t>(j / 64)] |= uint64_t{1} << (j % 64);
  }
  // Offsets, band after band.
  uint32_t total = 0;
  for (int64_t b = 0; b < bands; ++b) {
    uint32_t* start = m.start_.data() + static_cast<size_t>(b) * stride;
    start[0] = total;
    for (int64_t j = 0; j < cols; ++j) start[j + 1] += start[j];
    total = start[cols];
  }
  m.entries_.resize(values.size());
  std::vector<uint32_t> next(m.start_);  // fill position per (band, column)
  for (int64_t r = 0; r < rows; ++r) {  // ascending rows: each column's entries stay sorted
    uint32_t* fill = next.data() + static_cast<size_t>(r / kBandRows) * stride;
    for (int64_t k = row_start[r]; k < row_start[r + 1]; ++k) {
      m.entries_[fill[col_index[k]]++] = Entry{static_cast<uint32_t>(r % kBandRows), values[k]};
    }
  }
  return m;
}

size_t ColumnMatrix::bytes() const {
  return col_entries_.size() * sizeof(uint32_t) + start_.size() * sizeof(uint32_t) + entries_.size() * sizeof(Entry);
}

// The vector values never cross a function boundary (always_inline), so GCC's note
// about their calling convention is moot.
#pragma GCC diagnostic ignored "-Wpsabi"

// 4 inputs at a time (GCC vector extensions, one SSE register on baseline x86-64; wider
// vectors without AVX enabled get split into scalar compares): the scan runs on every
// sparse product, so it must cost far less than the product.
typedef float f32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));

namespace {
constexpr int64_t kScan = 4;
[[gnu::always_inline]] inline f32x4 load4(const float* p) {
  f32x4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline bool any(i32x4 m) {
  uint64_t half[2];
  std::memcpy(half, &m, sizeof half);
  return (half[0] | half[1]) != 0;
}
}  // namespace

namespace {
// How many of x[0..n) are nonzero (+0 and -0 are zeros; NaN counts) and whether all are
// finite (v - v is NaN for inf and NaN), one vector F of inputs at a time. The count
// runs on every sparse product, so it must cost far less than the product: AVX2 and
// AVX-512 get 8 and 16 lanes (the same counts, whatever the width; baseline x86-64
// keeps 4, where wider GCC vectors would be split into scalar compares).
template <typename F, typename I>
[[gnu::always_inline]] inline ColumnMatrix::Plan count_impl(const float* x, int64_t n) {
  constexpr int64_t kWidth = sizeof(F) / sizeof(float);
  const F zero{};
  I count{}, finite = zero == zero;
  int64_t j = 0;
  for (; j + kWidth <= n; j += kWidth) {
    F v;
    std::memcpy(&v, x + j, sizeof v);
    count -= v != zero;  // -1 where nonzero
    finite &= (v - v) == zero;
  }
  int64_t nonzero = 0;
  bool all_finite = true;
  for (int64_t i = 0; i < kWidth; ++i) {
    nonzero += count[i];
    all_finite = all_finite && finite[i] != 0;
  }
  for (; j < n; ++j) {
    const float v = x[j];
    nonzero += v != 0.0f;
    all_finite = all_finite && v - v == 0.0f;
  }
  return ColumnMatrix::Plan{nullptr, nonzero, 0, all_finite};
}

typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));

ColumnMatrix::Plan count_generic(const float* x, int64_t n) { return count_impl<f32x4, i32x4>(x, n); }
__attribute__((target("avx2"))) ColumnMatrix::Plan count_avx2(const float* x, int64_t n) {
  return count_impl<f32x8, i32x8>(x, n);
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) ColumnMatrix::Plan count_avx512(const float* x,
                                                                                              int64_t n) {
  return count_impl<f32x16, i32x16>(x, n);
}

using CountKernel = ColumnMatrix::Plan (*)(const float*, int64_t);
CountKernel pick_count() {
  switch (dot::active_isa()) {
    case dot::Isa::Avx512: return count_avx512;
    case dot::Isa::Avx2: return count_avx2;
    case dot::Isa::Generic: break;
  }
  return count_generic;
}
}  // namespace

ColumnMatrix::Plan ColumnMatrix::count(const float* x) const {
  // Reads x only: x was just written and is in the cache, the matrix may not be.
  static const CountKernel kernel = pick_count();
  return kernel(x, cols_);
}

void ColumnMatrix::list_active(const float* x, Plan& plan, std::vector<int32_t>& active) const {
  list_columns(x, cols_, plan, active);
  plan.active_entries = active_entries(plan);
}

namespace {
// The ascending j < n with x[j] != 0 (+0 and -0 are zeros, NaN counts: the bits without
// the sign are nonzero) written to list; returns the count. Most blocks of a sparse x are
// all zero and cost one test.
int64_t list_nonzero_generic(const float* x, int64_t n, int32_t* list) {
  int64_t count = 0;
  const f32x4 zero{};
  int64_t j = 0;
  for (; j + kScan <= n; j += kScan) {
    if (!any(load4(x + j) != zero)) continue;
    for (int64_t i = j; i < j + kScan; ++i) {
      list[count] = static_cast<int32_t>(i);  // branch-free: overwritten unless x[i] counts
      count += x[i] != 0.0f;
    }
  }
  for (; j < n; ++j) {
    list[count] = static_cast<int32_t>(j);
    count += x[j] != 0.0f;
  }
  return count;
}

// 8 inputs per test (the same list): machines without AVX-512 list every sparse input
// this way, once per computed sublayer and projection.
__attribute__((target("avx2"))) int64_t list_nonzero_avx2(const float* x, int64_t n, int32_t* list) {
  int64_t count = 0;
  const __m256i no_sign = _mm256_set1_epi32(0x7fffffff);
  const __m256i zero = _mm256_setzero_si256();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256i bits = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j)), no_sign);
    const auto zeros = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(bits, zero))));
    for (uint32_t m = ~zeros & 0xffu; m != 0; m &= m - 1) list[count++] = static_cast<int32_t>(j + std::countr_zero(m));
  }
  for (; j < n; ++j) {
    list[count] = static_cast<int32_t>(j);
    count += x[j] != 0.0f;
  }
  return count;
}

// 16 inputs per test, the nonzero lanes straight from the mask (the same list).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) int64_t list_nonzero_avx512(const float* x, int64_t n,
                                                                                            int32_t* list) {
  int64_t count = 0;
  const __m512i no_sign = _mm512_set1_epi32(0x7fffffff);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    for (uint32_t m = _mm512_test_epi32_mask(_mm512_loadu_si512(x + j), no_sign); m != 0; m &= m - 1) {
      list[count++] = static_cast<int32_t>(j + std::countr_zero(m));
    }
  }
  for (; j < n; ++j) {
    list[count] = static_cast<int32_t>(j);
    count += x[j] != 0.0f;
  }
  return count;
}
}  // namespace

void ColumnMatrix::list_columns(const float* x, int64_t cols, Plan& plan, std::vector<int32_t>& active) {
  if (static_cast<int64_t>(active.size()) < cols) active.resize(static_cast<size_t>(cols));
  plan.active = active.data();
  if (plan.active_cols == 0) return;  // an all-zero x (an idle micro-op): nothing to list
  static const auto kernel = dot::active_isa() == dot::Isa::Avx512 ? list_nonzero_avx512
                             : dot::active_isa() == dot::Isa::Avx2 ? list_nonzero_avx2
                                                                   : list_nonzero_generic;
  kernel(x, cols, active.data());
}

void ColumnMatrix::list_columns_in(const float* x, int64_t cols, const uint64_t* blocks, Plan& plan,
                                   std::vector<int32_t>& active) {
  if (static_cast<int64_t>(active.size()) < cols) active.resize(static_cast<size_t>(cols));
  int32_t* list = active.data();
  int64_t count = 0;
  bool finite = true;
  // One float: listed when not +-0 (NaN counts, as in count()); x - x is NaN for inf/NaN.
  const auto visit = [&](int64_t j) {
    const float v = x[j];
    list[count] = static_cast<int32_t>(j);  // branch-free: overwritten unless v counts
    count += v != 0.0f || v != v;
    finite = finite && v - v == 0.0f;
  };
  const int64_t full = cols / 16;
  for (int64_t w = 0; w * 64 < full; ++w) {
    for (uint64_t bits = blocks[w]; bits != 0; bits &= bits - 1) {
      const int64_t b = 64 * w + std::countr_zero(bits);
      if (b >= full) break;
      for (int64_t j = 16 * b; j < 16 * b + 16; ++j) visit(j);
    }
  }
  for (int64_t j = 16 * full; j < cols; ++j) visit(j);
  plan = Plan{list, count, 0, finite};
}

int64_t ColumnMatrix::active_entries(const Plan& plan) const {
  int64_t entries = 0;
  for (int64_t a = 0; a < plan.active_cols; ++a) entries += col_entries_[static_cast<size_t>(plan.active[a])];
  return entries;
}

int64_t ColumnMatrix::narrow(Plan& plan, const uint64_t* active_bits, std::vector<int32_t>& own,
                             int64_t entry_limit) const {
  if (static_cast<int64_t>(own.size()) < cols_) own.resize(static_cast<size_t>(cols_));
  int64_t entries = 0, count = 0;
  int32_t* list = own.data();
  if (plan.active_cols > 0) {
    for (size_t w = 0; w < nonempty_.size(); ++w) {
      if (active_bits[w] == 0) continue;  // an idle word: no need to read this matrix's (cold) word
      for (uint64_t bits = active_bits[w] & nonempty_[w]; bits != 0; bits &= bits - 1) {
        const auto j = static_cast<int32_t>(64 * w + static_cast<size_t>(std::countr_zero(bits)));
        list[count++] = j;
        entries += col_entries_[static_cast<size_t>(j)];
      }
      if (entries > entry_limit) break;  // over the caller's budget: the plan is turned down
    }
  }
  plan.active = list;
  plan.active_cols = count;
  plan.active_entries = entries;
  return entries;
}

void ColumnMatrix::multiply_band(int64_t band, const float* x, const Plan& plan, float* y,
                                 const std::span<const uint32_t>* fill_words) const {
  const int64_t row0 = band * kBandRows;
  const int64_t band_rows = std::min(rows_, row0 + kBandRows) - row0;
  float* yb = y + row0;
  fill_zero(y, row0, row0 + band_rows, fill_words);  // rows without a term: +0, as the dense row gives

  Scratch& s = scratch();
  if (s.head.empty()) {
    s.head.assign(kBandRows, -1);
    s.tail.assign(kBandRows, 0);
    s.touched.assign(kBandRows, 0);
  }
  if (static_cast<int64_t>(s.terms.size()) < plan.active_entries) {
    s.terms.resize(static_cast<size_t>(plan.active_entries));
  }
  int32_t* head = s.head.data();
  int32_t* tail = s.tail.data();
  int32_t* touched = s.touched.data();
  Term* terms = s.terms.data();

  // Products of the active columns in ascending j, appended to their row's list.
  const uint32_t* start = start_.data() + static_cast<size_t>(band) * static_cast<size_t>(cols_ + 1);
  int32_t term_count = 0, touched_count = 0;
  // The active columns sit at scattered places of a matrix that is usually not in the
  // cache (a stack of layers): fetch their offsets and first entries ahead of use, or
  // every column costs a memory round trip.
  constexpr int64_t kAhead = 8;
  const Entry* entries = entries_.data();
  for (int64_t a = 0; a < plan.active_cols; ++a) {
    if (a + 2 * kAhead < plan.active_cols) __builtin_prefetch(start + plan.active[a + 2 * kAhead]);
    if (a + kAhead < plan.active_cols) {
      const Entry* ahead = entries + start[plan.active[a + kAhead]];
      __builtin_prefetch(ahead);
      __builtin_prefetch(ahead + 8);
    }
    const int32_t j = plan.active[a];
    const float xj = x[j];
    const auto lane = static_cast<uint32_t>(j) % static_cast<uint32_t>(dot::kLanes);
    for (uint32_t k = start[j]; k < start[j + 1]; ++k) {
      const Entry e = entries[k];
      const int32_t t = term_count++;
      terms[t] = Term{e.weight * xj, -1, lane};
      if (head[e.row] < 0) {
        head[e.row] = t;
        touched[touched_count++] = static_cast<int32_t>(e.row);
      } else {
        terms[tail[e.row]].next = t;
      }
      tail[e.row] = t;
    }
  }
  for (int32_t i = 0; i < touched_count; ++i) {
    const int32_t r = touched[i];
    yb[r] = combine_row(terms, head[r]);
    head[r] = -1;
  }
}

bool ColumnMatrix::same_storage(const ColumnMatrix& other) const {
  const auto same_entries = [](const std::vector<Entry>& a, const std::vector<Entry>& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const Entry& x, const Entry& y) {
             return x.row == y.row && std::bit_cast<uint32_t>(x.weight) == std::bit_cast<uint32_t>(y.weight);
           });
  };
  return rows_ == other.rows_ && cols_ == other.cols_ && weights_finite_ == other.weights_finite_ &&
         col_entries_ == other.col_entries_ && nonempty_ == other.nonempty_ && start_ == other.start_ &&
         same_entries(entries_, other.entries_);
}

}  // namespace qpu::engine
