#pragma once
// Value ranges of golden traces (`qpu trace-stats`): per record kind, the magnitudes and
// binades (float exponents) seen, the special values, and how many values fall outside
// the windows the NPU can hold (docs/npu-machine.md sections 3.4, 3.5).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "reference/trace.h"
#include "reference/trace_file.h"

namespace qpu::reference {

// The binade of a finite nonzero float: floor(log2 |x|), -149 (smallest subnormal) .. 127.
int float_binade(float x);
inline constexpr int kMinBinade = -149;
inline constexpr int kMaxBinade = 127;

// An interval of magnitudes |x|, e.g. "npu=[2^-78,2^36]" or "gdn=[18,2^50)". Only
// nonzero values are tested against it: an exact 0 is representable everywhere.
struct TraceWindow {
  std::string name;
  double lo = 0, hi = 0;
  bool lo_closed = true, hi_closed = true;
  std::string text;  // the interval as given, e.g. "[2^-78,2^36]"
  bool contains(double magnitude) const;
};
// "NAME=[LO,HI]" with ( or ) for open ends; LO and HI are numbers or 2^K.
TraceWindow parse_trace_window(const std::string& spec);
// npu=[2^-78,2^36] (the NPU's value window), token=[2^-101,2^37] (the machine design study 3.5's
// part-token window) and gdn=[18,2^50) (a GDN RAM cell, 3.4).
std::vector<TraceWindow> default_trace_windows();

struct TraceKindStats {
  uint64_t records = 0, values = 0, zeros = 0, subnormals = 0, infs = 0, nans = 0;
  float min_abs = 0, max_abs = 0;  // over finite nonzero values; 0 when there are none
  std::array<uint64_t, kMaxBinade - kMinBinade + 1> binades{};  // count per binade
  std::vector<uint64_t> outside;  // per window: finite nonzero values outside it (+ infs, nans)

  uint64_t nonzero_finite() const { return values - zeros - infs - nans; }
  int min_binade() const;  // of nonzero finite values; only valid when nonzero_finite() > 0
  int max_binade() const;
  int distinct_binades() const;
  // Fewest bands of `width` consecutive binades that cover every binade seen.
  int bands_needed(int width) const;
  // The band of `width` binades holding the most values: its first binade and the
  // number of nonzero finite values outside it.
  std::pair<int, uint64_t> best_band(int width) const;
};

class TraceStats {
 public:
  explicit TraceStats(std::vector<TraceWindow> windows = default_trace_windows());
  // Adds every record of a trace file. All files must come from the same model.
  void add_file(const std::string& path);
  void add(TraceKind kind, std::span<const float> values);

  const std::vector<TraceWindow>& windows() const { return windows_; }
  const TraceKindStats& kind(TraceKind kind) const { return kinds_[static_cast<size_t>(kind) - 1]; }
  // Every computed float (the token-id kinds left out).
  TraceKindStats all_floats() const;
  uint64_t files() const { return files_; }

  // One line per kind present, then the all-floats total; `band` is the binade width
  // of one GDN cell range (45 in the machine design study 3.4, docs/journal).
  std::string text(int band) const;
  std::string json(int band) const;

 private:
  std::vector<TraceWindow> windows_;
  std::vector<TraceKindStats> kinds_;  // indexed by kind id - 1
  Llama2Config config_{};
  uint64_t files_ = 0;
  std::vector<std::string> infos_;
};

}  // namespace qpu::reference
