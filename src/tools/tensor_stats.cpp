#include "tools/tensor_stats.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "tools/float_features.h"

namespace qpu::tools {

const char* row_kind_name(RowKind kind) {
  switch (kind) {
    case RowKind::Zero: return "zero";
    case RowKind::Plain: return "plain";
    case RowKind::Term: return "one_or_two_terms";
    case RowKind::Extreme: return "extreme";
    case RowKind::LowBitSparse: return "low_bit_sparse";
  }
  return "?";
}

RowKind classify_row(uint64_t nonzero, uint64_t short_dyadic, bool extreme, uint64_t row_length, int storage) {
  if (nonzero == 0) return RowKind::Zero;
  // A learned row has no exact zeros at all; one or two terms out of many is the
  // signature of a sum made exact by construction (toolkit: rule of one term).
  if ((nonzero == 1 && row_length >= 4) || (nonzero == 2 && row_length >= 8)) return RowKind::Term;
  if (extreme) return RowKind::Extreme;
  if (storage >= 8 && nonzero * 4 <= row_length && short_dyadic * 2 >= nonzero) return RowKind::LowBitSparse;
  return RowKind::Plain;
}

double TensorStats::rms() const {
  const uint64_t finite = elements - nonfinite;
  return finite ? std::sqrt(sum_squares / static_cast<double>(finite)) : 0;
}

double TensorStats::kurtosis() const {
  const uint64_t finite = elements - nonfinite;
  if (finite == 0 || sum_squares == 0) return 0;
  const double m2 = sum_squares / static_cast<double>(finite);
  const double m4 = sum_fourth / static_cast<double>(finite);
  const double k = m4 / (m2 * m2);
  return std::isfinite(k) ? k : 0;
}

int TensorStats::median_binade() const {
  if (nonzero == 0) return 0;
  uint64_t covered = 0;
  for (size_t i = 0; i < binades.size(); ++i) {
    covered += binades[i];
    if (2 * covered >= nonzero) return static_cast<int>(i) + kMinBinade;
  }
  return kMaxBinade;
}

int TensorStats::precision_bits() const {
  if (nonzero == 0) return 0;
  uint64_t covered = 0;
  for (int b = 1; b < 54; ++b) {
    covered += significant_bits[static_cast<size_t>(b)];
    if (covered * 100 >= nonzero * 99) return b;
  }
  return 53;
}

namespace {

// The part of the statistics one chunk of rows contributes.
struct Partial {
  uint64_t zeros = 0, nonfinite = 0, nonzero = 0, integer = 0, short_dyadic = 0, power_of_two = 0;
  uint64_t huge = 0, tiny = 0, huge_short = 0, tiny_short = 0;
  std::array<uint64_t, 54> significant_bits{};
  std::array<uint64_t, kBinades> binades{};
  bool any_finite = false;
  double min = 0, max = 0, min_abs_nonzero = 0, max_abs = 0;
  double sum = 0, sum_squares = 0, sum_fourth = 0;
  RowCounts rows;
};

// Per-thread column state: nonzeros seen, and whether they were all the same bits.
struct Columns {
  enum State : uint8_t { None, Constant, Varies };
  std::vector<uint64_t> nonzero;
  std::vector<uint64_t> first_bits;
  std::vector<uint8_t> state;
  explicit Columns(size_t n) : nonzero(n, 0), first_bits(n, 0), state(n, None) {}
  void see(size_t c, double x) {
    ++nonzero[c];
    const uint64_t bits = std::bit_cast<uint64_t>(x);
    if (state[c] == None) {
      state[c] = Constant;
      first_bits[c] = bits;
    } else if (state[c] == Constant && first_bits[c] != bits) {
      state[c] = Varies;
    }
  }
};

// The hot loop. Accumulators live in a local Partial (not the caller's), so the
// compiler can keep them in registers: nothing else can alias a local.
template <typename T, T (*Load)(const std::byte*), size_t Size>
void scan_rows(const std::byte* data, uint64_t row_begin, uint64_t row_end, uint64_t cols, bool matrix, int storage,
               Partial& result, Columns* columns, RowKind* kinds) {
  Partial out;
  uint64_t zeros = 0, nonfinite = 0, nonzero = 0, integer = 0, short_dyadic = 0, power_of_two = 0;
  // Four lanes (by column mod 4) for the histograms and sums: consecutive values
  // mostly hit the same bucket, and one counter or one sum would make every
  // element wait for the previous one. The lanes are combined in a fixed order.
  constexpr size_t kLanes = 4;
  std::array<std::array<uint64_t, 54>, kLanes> bits_hist{};
  std::array<std::array<uint64_t, kBinades>, kLanes> binade_hist{};
  std::array<double, kLanes> sum{}, sum_squares{}, sum_fourth{};
  T lo = 0, hi = 0, abs_lo = 0, abs_hi = 0;
  bool any_finite = false;
  for (uint64_t r = row_begin; r < row_end; ++r) {
    uint64_t row_nonzero = 0, row_short = 0, row_pow2 = 0;
    bool row_extreme = false;
    const std::byte* p = data + r * cols * Size;
    for (uint64_t c = 0; c < cols; ++c, p += Size) {
      const T x = Load(p);
      if (x == 0) {
        ++zeros;
        continue;
      }
      ++row_nonzero;
      if (columns) columns->see(c, static_cast<double>(x));
      if (!std::isfinite(x)) {
        ++nonfinite;
        continue;
      }
      ++nonzero;
      const DyadicForm f = dyadic_form(x);
      const size_t lane = c % kLanes;
      ++bits_hist[lane][static_cast<size_t>(f.significant_bits)];
      ++binade_hist[lane][static_cast<size_t>(std::clamp(f.exponent, kMinBinade, kMaxBinade) - kMinBinade)];
      const bool is_short = f.significant_bits <= kShortBits;
      const bool pow2 = f.significant_bits == 1;
      integer += f.lsb_exponent >= 0;
      short_dyadic += is_short;
      power_of_two += pow2;
      row_short += is_short;
      row_pow2 += pow2;
      if (f.exponent >= kHugeExponent) {
        ++out.huge;
        out.huge_short += is_short;
        row_extreme = true;
      } else if (f.exponent <= kTinyExponent) {
        ++out.tiny;
        out.tiny_short += is_short;
        row_extreme = true;
      }
      const T a = std::fabs(x);
      if (!any_finite) {
        any_finite = true;
        lo = hi = x;
        abs_lo = abs_hi = a;
      } else {
        lo = std::min(lo, x);
        hi = std::max(hi, x);
        abs_lo = std::min(abs_lo, a);
        abs_hi = std::max(abs_hi, a);
      }
      const auto d = static_cast<double>(x);
      const double d2 = d * d;
      sum[lane] += d;
      sum_squares[lane] += d2;
      sum_fourth[lane] += d2 * d2;
    }
    if (!matrix) continue;
    const RowKind kind = classify_row(row_nonzero, row_short, row_extreme, cols, storage);
    if (kinds) kinds[r] = kind;
    RowCounts& rc = out.rows;
    switch (kind) {
      case RowKind::Zero: ++rc.zero; break;
      case RowKind::Plain: ++rc.plain; break;
      case RowKind::Term: ++rc.term; break;
      case RowKind::Extreme: ++rc.extreme; break;
      case RowKind::LowBitSparse: ++rc.low_bit_sparse; break;
    }
    rc.one_nonzero += row_nonzero == 1;
    rc.one_hot += row_nonzero == 1 && row_pow2 == 1;
    rc.two_nonzero += row_nonzero == 2;
  }
  out.zeros = zeros;
  out.nonfinite = nonfinite;
  out.nonzero = nonzero;
  out.integer = integer;
  out.short_dyadic = short_dyadic;
  out.power_of_two = power_of_two;
  for (size_t lane = 0; lane < kLanes; ++lane) {
    for (size_t b = 0; b < out.significant_bits.size(); ++b) out.significant_bits[b] += bits_hist[lane][b];
    for (size_t b = 0; b < out.binades.size(); ++b) out.binades[b] += binade_hist[lane][b];
    out.sum += sum[lane];
    out.sum_squares += sum_squares[lane];
    out.sum_fourth += sum_fourth[lane];
  }
  out.any_finite = any_finite;
  out.min = static_cast<double>(lo);
  out.max = static_cast<double>(hi);
  out.min_abs_nonzero = static_cast<double>(abs_lo);
  out.max_abs = static_cast<double>(abs_hi);
  result = out;
}

// 16- and 8-bit formats have few bit patterns: one histogram increment per element
// replaces all per-value work, and every value statistic is computed afterwards
// from the histogram, pattern by pattern (exactly, and in a fixed order). Only
// what depends on position (rows, columns) is tracked per element, through a
// table of per-pattern flags.
struct PatternTable {
  enum Flag : uint8_t { Nonzero = 1, Short = 2, Extreme = 4, Pow2 = 8 };
  std::vector<float> value;
  std::vector<uint8_t> flags;
};

PatternTable make_pattern_table(io::DType dtype) {
  const size_t n = size_t{1} << (8 * io::dtype_size(dtype));
  PatternTable t;
  t.value.resize(n);
  t.flags.assign(n, 0);
  for (size_t b = 0; b < n; ++b) {
    std::byte raw[2];
    const auto bits = static_cast<uint16_t>(b);
    std::memcpy(raw, &bits, 2);
    float x = 0;
    switch (dtype) {
      case io::DType::BF16: x = load_bf16(raw); break;
      case io::DType::F16: x = load_f16(raw); break;
      case io::DType::F8_E4M3: x = load_f8_e4m3(raw); break;
      case io::DType::F8_E5M2: x = load_f8_e5m2(raw); break;
      default: break;
    }
    t.value[b] = x;
    if (x == 0) continue;
    t.flags[b] |= PatternTable::Nonzero;
    if (!std::isfinite(x)) continue;
    const DyadicForm f = dyadic_form(x);
    if (f.significant_bits <= kShortBits) t.flags[b] |= PatternTable::Short;
    if (f.significant_bits == 1) t.flags[b] |= PatternTable::Pow2;
    if (f.exponent >= kHugeExponent || f.exponent <= kTinyExponent) t.flags[b] |= PatternTable::Extreme;
  }
  return t;
}

template <typename Bits>
void scan_pattern_rows(const std::byte* data, uint64_t row_begin, uint64_t row_end, uint64_t cols, bool matrix,
                       int storage, const PatternTable& table, uint64_t* histogram, Partial& result,
                       Columns* columns, RowKind* kinds) {
  RowCounts rc;
  const uint8_t* flags = table.flags.data();
  for (uint64_t r = row_begin; r < row_end; ++r) {
    uint64_t row_nonzero = 0, row_short = 0, row_pow2 = 0;
    bool row_extreme = false;
    const std::byte* p = data + r * cols * sizeof(Bits);
    for (uint64_t c = 0; c < cols; ++c, p += sizeof(Bits)) {
      Bits b;
      std::memcpy(&b, p, sizeof(Bits));
      ++histogram[b];
      const uint8_t f = flags[b];
      if (!(f & PatternTable::Nonzero)) continue;
      ++row_nonzero;
      row_short += (f & PatternTable::Short) != 0;
      row_pow2 += (f & PatternTable::Pow2) != 0;
      row_extreme |= (f & PatternTable::Extreme) != 0;
      if (columns) columns->see(c, static_cast<double>(table.value[b]));
    }
    if (!matrix) continue;
    const RowKind kind = classify_row(row_nonzero, row_short, row_extreme, cols, storage);
    if (kinds) kinds[r] = kind;
    switch (kind) {
      case RowKind::Zero: ++rc.zero; break;
      case RowKind::Plain: ++rc.plain; break;
      case RowKind::Term: ++rc.term; break;
      case RowKind::Extreme: ++rc.extreme; break;
      case RowKind::LowBitSparse: ++rc.low_bit_sparse; break;
    }
    rc.one_nonzero += row_nonzero == 1;
    rc.one_hot += row_nonzero == 1 && row_pow2 == 1;
    rc.two_nonzero += row_nonzero == 2;
  }
  result.rows = rc;
}

// The value statistics of a histogram of patterns.
void add_pattern_statistics(const PatternTable& table, const std::vector<uint64_t>& histogram, TensorStats& s) {
  bool any = false;
  for (size_t b = 0; b < histogram.size(); ++b) {
    const uint64_t n = histogram[b];
    if (n == 0) continue;
    const float x = table.value[b];
    if (x == 0) {
      s.zeros += n;
      continue;
    }
    if (!std::isfinite(x)) {
      s.nonfinite += n;
      continue;
    }
    s.nonzero += n;
    const DyadicForm f = dyadic_form(x);
    s.significant_bits[static_cast<size_t>(f.significant_bits)] += n;
    s.binades[static_cast<size_t>(std::clamp(f.exponent, kMinBinade, kMaxBinade) - kMinBinade)] += n;
    const bool is_short = f.significant_bits <= kShortBits;
    if (f.lsb_exponent >= 0) s.integer += n;
    if (is_short) s.short_dyadic += n;
    if (f.significant_bits == 1) s.power_of_two += n;
    if (f.exponent >= kHugeExponent) {
      s.huge += n;
      if (is_short) s.huge_short += n;
    } else if (f.exponent <= kTinyExponent) {
      s.tiny += n;
      if (is_short) s.tiny_short += n;
    }
    const auto d = static_cast<double>(x);
    const double a = std::fabs(d);
    if (!any) {
      any = true;
      s.min = s.max = d;
      s.min_abs_nonzero = s.max_abs = a;
    } else {
      s.min = std::min(s.min, d);
      s.max = std::max(s.max, d);
      s.min_abs_nonzero = std::min(s.min_abs_nonzero, a);
      s.max_abs = std::max(s.max_abs, a);
    }
    const auto count = static_cast<double>(n);
    s.sum += count * d;
    s.sum_squares += count * (d * d);
    s.sum_fourth += count * (d * d * d * d);
  }
}

void merge(TensorStats& s, const Partial& p, bool& any_finite) {
  s.zeros += p.zeros;
  s.nonfinite += p.nonfinite;
  s.nonzero += p.nonzero;
  s.integer += p.integer;
  s.short_dyadic += p.short_dyadic;
  s.power_of_two += p.power_of_two;
  s.huge += p.huge;
  s.tiny += p.tiny;
  s.huge_short += p.huge_short;
  s.tiny_short += p.tiny_short;
  for (size_t b = 0; b < s.significant_bits.size(); ++b) s.significant_bits[b] += p.significant_bits[b];
  for (size_t b = 0; b < s.binades.size(); ++b) s.binades[b] += p.binades[b];
  if (p.any_finite) {
    if (!any_finite) {
      s.min = p.min;
      s.max = p.max;
      s.min_abs_nonzero = p.min_abs_nonzero;
      s.max_abs = p.max_abs;
      any_finite = true;
    } else {
      s.min = std::min(s.min, p.min);
      s.max = std::max(s.max, p.max);
      s.min_abs_nonzero = std::min(s.min_abs_nonzero, p.min_abs_nonzero);
      s.max_abs = std::max(s.max_abs, p.max_abs);
    }
  }
  s.sum += p.sum;
  s.sum_squares += p.sum_squares;
  s.sum_fourth += p.sum_fourth;
  RowCounts& r = s.row_counts;
  r.zero += p.rows.zero;
  r.plain += p.rows.plain;
  r.term += p.rows.term;
  r.extreme += p.rows.extreme;
  r.low_bit_sparse += p.rows.low_bit_sparse;
  r.one_nonzero += p.rows.one_nonzero;
  r.one_hot += p.rows.one_hot;
  r.two_nonzero += p.rows.two_nonzero;
}

// Integer and bool tensors: only zeros and the range (their meaning depends on a
// quantization scheme the audit does not know).
template <typename T>
void scan_integers(std::span<const std::byte> raw, TensorStats& s) {
  bool any = false;
  for (size_t i = 0; i + sizeof(T) <= raw.size(); i += sizeof(T)) {
    T v;
    std::memcpy(&v, raw.data() + i, sizeof(T));
    if (v == 0) {
      ++s.zeros;
    } else {
      ++s.nonzero;
    }
    const auto d = static_cast<double>(v);
    if (!any) {
      s.min = s.max = d;
      any = true;
    } else {
      s.min = std::min(s.min, d);
      s.max = std::max(s.max, d);
    }
  }
}

// Runs of consecutive zero columns and of rails (same value); the lists keep the
// first kMaxRuns runs, the counts are exact.
class RunCollector {
 public:
  RunCollector(std::vector<ColumnRun>& kept, uint64_t& count) : kept_(kept), count_(count) {}
  void add(uint64_t c, uint64_t value_bits) {
    if (open_ && current_.last + 1 == c && bits_ == value_bits) {
      current_.last = c;
      return;
    }
    close();
    current_ = {c, c, std::bit_cast<double>(value_bits)};
    bits_ = value_bits;
    open_ = true;
  }
  void close() {
    if (!open_) return;
    ++count_;
    if (kept_.size() < kMaxRuns) kept_.push_back(current_);
    open_ = false;
  }

 private:
  std::vector<ColumnRun>& kept_;
  uint64_t& count_;
  ColumnRun current_;
  uint64_t bits_ = 0;
  bool open_ = false;
};

void column_runs(const std::vector<uint64_t>& nonzero, const std::vector<uint8_t>& constant,
                 const std::vector<uint64_t>& bits, TensorStats& s) {
  RunCollector zero_runs(s.zero_column_runs, s.zero_column_run_count);
  RunCollector rail_runs(s.rail_column_runs, s.rail_column_run_count);
  for (size_t c = 0; c < nonzero.size(); ++c) {
    if (nonzero[c] == 0) {
      ++s.zero_columns;
      zero_runs.add(c, 0);
    } else if (constant[c] && nonzero[c] >= kRailMinRows && std::isfinite(std::bit_cast<double>(bits[c]))) {
      ++s.rail_columns;
      rail_runs.add(c, bits[c]);
    }
  }
  zero_runs.close();
  rail_runs.close();
}

}  // namespace

TensorStats compute_tensor_stats(io::DType dtype, std::span<const int64_t> shape, std::span<const std::byte> raw) {
  TensorStats s;
  s.dtype = dtype;
  s.shape.assign(shape.begin(), shape.end());
  s.storage_bits = storage_bits(dtype);
  uint64_t elements = 1;
  for (int64_t d : shape) elements *= static_cast<uint64_t>(d);
  s.elements = elements;
  if (raw.size() != elements * io::dtype_size(dtype))
    fail("tensor of shape [{}] needs {} bytes of {}, got {}", shape.size(), elements * io::dtype_size(dtype),
         io::dtype_name(dtype), raw.size());
  if (elements == 0) return s;
  if (shape.size() >= 2) {
    s.rows = static_cast<uint64_t>(shape[0]);
    s.cols = elements / s.rows;
  } else {
    s.rows = elements;
    s.cols = 1;
  }
  s.matrix = shape.size() >= 2 && s.rows >= 2 && s.cols >= 2;

  switch (dtype) {
    case io::DType::I64: scan_integers<int64_t>(raw, s); return s;
    case io::DType::I32: scan_integers<int32_t>(raw, s); return s;
    case io::DType::I16: scan_integers<int16_t>(raw, s); return s;
    case io::DType::I8: scan_integers<int8_t>(raw, s); return s;
    case io::DType::U64: scan_integers<uint64_t>(raw, s); return s;
    case io::DType::U32: scan_integers<uint32_t>(raw, s); return s;
    case io::DType::U16: scan_integers<uint16_t>(raw, s); return s;
    case io::DType::U8:
    case io::DType::BOOL: scan_integers<uint8_t>(raw, s); return s;
    default: break;
  }

  const uint64_t rows_per_chunk = std::max<uint64_t>(1, kChunkElements / s.cols);
  const uint64_t chunks = (s.rows + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<Partial> partials(chunks);
  // Per-row kinds and per-thread column states are kept only while they stay
  // small next to the tensor itself (a lying shape must not make us allocate).
  const bool keep_kinds = s.matrix && s.rows <= kMaxTrackedRows;
  s.columns_analysed = s.matrix && s.cols <= kMaxTrackedColumns;
  if (keep_kinds) s.row_kinds.assign(s.rows, RowKind::Zero);
  const int threads = chunks > 1 ? omp_get_max_threads() : 1;
  std::vector<Columns> columns;
  if (s.columns_analysed) columns.assign(static_cast<size_t>(threads), Columns(s.cols));

  const std::byte* data = raw.data();
  const int storage = s.storage_bits;
  const bool matrix = s.matrix;
  const bool track_columns = s.columns_analysed;
  const uint64_t cols = s.cols;
  const uint64_t rows = s.rows;
  RowKind* kinds = keep_kinds ? s.row_kinds.data() : nullptr;
  const bool patterns = io::dtype_size(dtype) <= 2;
  PatternTable table;
  std::vector<std::vector<uint64_t>> histograms;  // per thread (integer counts: order-free)
  if (patterns) {
    table = make_pattern_table(dtype);
    histograms.assign(static_cast<size_t>(threads), std::vector<uint64_t>(table.value.size(), 0));
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (uint64_t chunk = 0; chunk < chunks; ++chunk) {
    const uint64_t begin = chunk * rows_per_chunk;
    const uint64_t end = std::min(rows, begin + rows_per_chunk);
    const auto thread = static_cast<size_t>(omp_get_thread_num());
    Columns* mine = track_columns ? &columns[thread] : nullptr;
    Partial& out = partials[chunk];
    switch (dtype) {
      case io::DType::F64: scan_rows<double, load_f64, 8>(data, begin, end, cols, matrix, storage, out, mine, kinds); break;
      case io::DType::F32: scan_rows<float, load_f32, 4>(data, begin, end, cols, matrix, storage, out, mine, kinds); break;
      case io::DType::BF16:
      case io::DType::F16:
        scan_pattern_rows<uint16_t>(data, begin, end, cols, matrix, storage, table, histograms[thread].data(), out,
                                    mine, kinds);
        break;
      case io::DType::F8_E4M3:
      case io::DType::F8_E5M2:
        scan_pattern_rows<uint8_t>(data, begin, end, cols, matrix, storage, table, histograms[thread].data(), out,
                                   mine, kinds);
        break;
      default: break;
    }
  }
  bool any_finite = false;
  for (const Partial& p : partials) merge(s, p, any_finite);
  if (patterns) {
    std::vector<uint64_t> histogram(table.value.size(), 0);
    for (const auto& h : histograms) {
      for (size_t b = 0; b < h.size(); ++b) histogram[b] += h[b];
    }
    add_pattern_statistics(table, histogram, s);
  }

  if (s.columns_analysed) {
    // Combine the threads' column states: order-free (counts, and "all equal").
    std::vector<uint64_t> nonzero(cols, 0), bits(cols, 0);
    std::vector<uint8_t> constant(cols, 1);
    std::vector<uint8_t> seen(cols, 0);
    for (const Columns& t : columns) {
      for (size_t c = 0; c < cols; ++c) {
        nonzero[c] += t.nonzero[c];
        if (t.state[c] == Columns::None) continue;
        if (t.state[c] == Columns::Varies) constant[c] = 0;
        if (seen[c] && bits[c] != t.first_bits[c]) constant[c] = 0;
        seen[c] = 1;
        bits[c] = t.first_bits[c];
      }
    }
    column_runs(nonzero, constant, bits, s);
  }
  return s;
}

}  // namespace qpu::tools
