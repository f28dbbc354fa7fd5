#include "reference/trace_stats.h"

#include <bit>
#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/float_bits.h"

namespace qpu::reference {
namespace {

constexpr size_t kBinadeCount = kMaxBinade - kMinBinade + 1;

double parse_bound(const std::string& text, const std::string& spec) {
  if (text.rfind("2^", 0) == 0) {
    char* end = nullptr;
    const long k = std::strtol(text.c_str() + 2, &end, 10);
    if (end == text.c_str() + 2 || *end != '\0' || k < -1074 || k > 1023)
      fail("window '{}': '{}' is not 2^K with an integer K in [-1074, 1023]", spec, text);
    return std::ldexp(1.0, static_cast<int>(k));
  }
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v < 0)
    fail("window '{}': '{}' is not a non-negative number or 2^K", spec, text);
  return v;
}

std::string float_text(float x) { return fmt::format("{:.6g}", static_cast<double>(x)); }

nlohmann::json kind_json(const TraceKindStats& s, const std::vector<TraceWindow>& windows, int band) {
  nlohmann::json j;
  j["records"] = s.records;
  j["values"] = s.values;
  j["zeros"] = s.zeros;
  j["subnormals"] = s.subnormals;
  j["infs"] = s.infs;
  j["nans"] = s.nans;
  nlohmann::json outside = nlohmann::json::object();
  for (size_t w = 0; w < windows.size(); w++) outside[windows[w].name] = s.outside[w];
  j["outside"] = outside;
  if (s.nonzero_finite() > 0) {
    j["min_abs"] = s.min_abs;
    j["max_abs"] = s.max_abs;
    j["min_abs_hex"] = fmt::format("{:a}", static_cast<double>(s.min_abs));
    j["max_abs_hex"] = fmt::format("{:a}", static_cast<double>(s.max_abs));
    j["min_binade"] = s.min_binade();
    j["max_binade"] = s.max_binade();
    j["distinct_binades"] = s.distinct_binades();
    j["bands_needed"] = s.bands_needed(band);
    const auto [first, out] = s.best_band(band);
    j["best_band"] = {{"first_binade", first}, {"last_binade", first + band - 1}, {"outside", out}};
    nlohmann::json hist = nlohmann::json::object();
    for (size_t i = 0; i < kBinadeCount; i++) {
      if (s.binades[i] != 0) hist[std::to_string(static_cast<int>(i) + kMinBinade)] = s.binades[i];
    }
    j["binades"] = hist;
  }
  return j;
}

}  // namespace

int float_binade(float x) {
  const uint32_t bits = float_bits(x) & 0x7fffffffu;
  const auto biased = static_cast<int>(bits >> 23);
  if (biased == 0) return std::bit_width(bits) - 1 - 149;  // subnormal: the top set bit
  return biased - 127;
}

bool TraceWindow::contains(double magnitude) const {
  const bool above = lo_closed ? magnitude >= lo : magnitude > lo;
  const bool below = hi_closed ? magnitude <= hi : magnitude < hi;
  return above && below;
}

TraceWindow parse_trace_window(const std::string& spec) {
  const size_t eq = spec.find('=');
  const size_t comma = spec.find(',');
  if (eq == std::string::npos || eq == 0 || comma == std::string::npos || comma < eq || spec.size() < eq + 5)
    fail("window '{}': expected NAME=[LO,HI] (brackets [ ] closed, ( ) open)", spec);
  TraceWindow w;
  w.name = spec.substr(0, eq);
  w.text = spec.substr(eq + 1);
  const char open = w.text.front(), close = w.text.back();
  if ((open != '[' && open != '(') || (close != ']' && close != ')'))
    fail("window '{}': expected NAME=[LO,HI] (brackets [ ] closed, ( ) open)", spec);
  w.lo_closed = open == '[';
  w.hi_closed = close == ']';
  const size_t c = w.text.find(',');
  w.lo = parse_bound(w.text.substr(1, c - 1), spec);
  w.hi = parse_bound(w.text.substr(c + 1, w.text.size() - c - 2), spec);
  if (!(w.lo < w.hi)) fail("window '{}': LO must be below HI", spec);
  return w;
}

std::vector<TraceWindow> default_trace_windows() {
  return {parse_trace_window("npu=[2^-78,2^36]"), parse_trace_window("token=[2^-101,2^37]"),
          parse_trace_window("gdn=[18,2^50)")};
}

int TraceKindStats::min_binade() const {
  for (size_t i = 0; i < kBinadeCount; i++) {
    if (binades[i] != 0) return static_cast<int>(i) + kMinBinade;
  }
  return 0;
}

int TraceKindStats::max_binade() const {
  for (size_t i = kBinadeCount; i-- > 0;) {
    if (binades[i] != 0) return static_cast<int>(i) + kMinBinade;
  }
  return 0;
}

int TraceKindStats::distinct_binades() const {
  int n = 0;
  for (uint64_t c : binades) n += c != 0;
  return n;
}

int TraceKindStats::bands_needed(int width) const {
  int bands = 0;
  size_t covered_to = 0;  // binade indices below this are covered
  for (size_t i = 0; i < kBinadeCount; i++) {
    if (binades[i] == 0 || i < covered_to) continue;
    bands++;  // greedy from the lowest uncovered binade is optimal for intervals
    covered_to = i + static_cast<size_t>(width);
  }
  return bands;
}

std::pair<int, uint64_t> TraceKindStats::best_band(int width) const {
  uint64_t best = 0;
  size_t best_start = 0;
  for (size_t start = 0; start + static_cast<size_t>(width) <= kBinadeCount; start++) {
    uint64_t inside = 0;
    for (size_t i = start; i < start + static_cast<size_t>(width); i++) inside += binades[i];
    if (inside > best) {
      best = inside;
      best_start = start;
    }
  }
  // A band starting at the lowest binade seen, when every band holds nothing better.
  if (best == 0 && nonzero_finite() > 0) best_start = static_cast<size_t>(min_binade() - kMinBinade);
  return {static_cast<int>(best_start) + kMinBinade, nonzero_finite() - best};
}

TraceStats::TraceStats(std::vector<TraceWindow> windows)
    : windows_(std::move(windows)), kinds_(trace_kinds().size()) {
  for (auto& k : kinds_) k.outside.assign(windows_.size(), 0);
}

void TraceStats::add(TraceKind kind, std::span<const float> values) {
  TraceKindStats& s = kinds_.at(static_cast<size_t>(kind) - 1);
  s.records++;
  s.values += values.size();
  for (const float x : values) {
    if (std::isnan(x) || std::isinf(x)) {
      (std::isnan(x) ? s.nans : s.infs)++;
      for (auto& o : s.outside) o++;
      continue;
    }
    if (x == 0.0f) {
      s.zeros++;
      continue;
    }
    const float a = std::fabs(x);
    if (a < 0x1p-126f) s.subnormals++;
    if (s.max_abs == 0.0f || a < s.min_abs) s.min_abs = a;  // max_abs is 0 until the first value
    if (a > s.max_abs) s.max_abs = a;
    s.binades[static_cast<size_t>(float_binade(a) - kMinBinade)]++;
    for (size_t w = 0; w < windows_.size(); w++) {
      if (!windows_[w].contains(static_cast<double>(a))) s.outside[w]++;
    }
  }
}

void TraceStats::add_file(const std::string& path) {
  TraceReader reader(path);
  const Llama2Config& c = reader.header().config;
  if (files_ == 0) {
    config_ = c;
  } else if (c.dim != config_.dim || c.hidden_dim != config_.hidden_dim || c.n_layers != config_.n_layers ||
             c.n_heads != config_.n_heads || c.n_kv_heads != config_.n_kv_heads ||
             c.vocab_size != config_.vocab_size || c.seq_len != config_.seq_len) {
    fail("{}: trace of another model than the files before it", path);
  }
  TraceRecord r;
  while (reader.next(r)) add(r.kind, r.values);
  files_++;
  infos_.push_back(reader.header().info);
}

TraceKindStats TraceStats::all_floats() const {
  TraceKindStats total;
  total.outside.assign(windows_.size(), 0);
  bool first = true;
  for (const TraceKindInfo& info : trace_kinds()) {
    const TraceKindStats& s = kind(info.kind);
    if (info.is_token || s.values == 0) continue;
    total.records += s.records;
    total.values += s.values;
    total.zeros += s.zeros;
    total.subnormals += s.subnormals;
    total.infs += s.infs;
    total.nans += s.nans;
    for (size_t i = 0; i < kBinadeCount; i++) total.binades[i] += s.binades[i];
    for (size_t w = 0; w < windows_.size(); w++) total.outside[w] += s.outside[w];
    if (s.nonzero_finite() == 0) continue;
    if (first || s.min_abs < total.min_abs) total.min_abs = s.min_abs;
    if (first || s.max_abs > total.max_abs) total.max_abs = s.max_abs;
    first = false;
  }
  return total;
}

std::string TraceStats::text(int band) const {
  std::string out = fmt::format("{} trace file(s); windows:", files_);
  for (const auto& w : windows_) out += fmt::format(" {}={}", w.name, w.text);
  out += fmt::format("; band = {} binades\n", band);
  out += fmt::format("{:<17} {:>11} {:>9} {:>6} {:>5} {:>12} {:>12} {:>11} {:>4}", "kind", "values", "zeros",
                     "subn", "inf", "min|x|", "max|x|", "binades", "#bin");
  for (const auto& w : windows_) out += fmt::format(" {:>9}", "out " + w.name);
  out += fmt::format(" {:>5} {:>9}\n", fmt::format("{}b", band), "out best");
  const auto line = [&](std::string_view name, const TraceKindStats& s) {
    out += fmt::format("{:<17} {:>11} {:>9} {:>6} {:>5}", name, s.values, s.zeros, s.subnormals, s.infs + s.nans);
    if (s.nonzero_finite() > 0) {
      out += fmt::format(" {:>12} {:>12} {:>11} {:>4}", float_text(s.min_abs), float_text(s.max_abs),
                         fmt::format("{}..{}", s.min_binade(), s.max_binade()), s.distinct_binades());
    } else {
      out += fmt::format(" {:>12} {:>12} {:>11} {:>4}", "-", "-", "-", 0);
    }
    for (uint64_t o : s.outside) out += fmt::format(" {:>9}", o);
    out += fmt::format(" {:>5} {:>9}\n", s.bands_needed(band), s.best_band(band).second);
  };
  for (const TraceKindInfo& info : trace_kinds()) {
    const TraceKindStats& s = kind(info.kind);
    if (s.records == 0) continue;
    line(info.is_token ? std::string(info.name) + " (id)" : std::string(info.name), s);
  }
  line("ALL FLOATS", all_floats());
  return out;
}

std::string TraceStats::json(int band) const {
  nlohmann::json j;
  j["files"] = files_;
  j["infos"] = infos_;
  j["band"] = band;
  j["model"] = {{"dim", config_.dim},           {"hidden_dim", config_.hidden_dim},
                {"n_layers", config_.n_layers}, {"n_heads", config_.n_heads},
                {"n_kv_heads", config_.n_kv_heads}, {"vocab_size", config_.vocab_size},
                {"seq_len", config_.seq_len}};
  nlohmann::json windows = nlohmann::json::array();
  for (const auto& w : windows_) windows.push_back({{"name", w.name}, {"interval", w.text}});
  j["windows"] = windows;
  nlohmann::json kinds = nlohmann::json::array();
  for (const TraceKindInfo& info : trace_kinds()) {
    const TraceKindStats& s = kind(info.kind);
    if (s.records == 0) continue;
    nlohmann::json k = kind_json(s, windows_, band);
    k["kind"] = info.name;
    k["id"] = static_cast<uint32_t>(info.kind);
    k["is_token"] = info.is_token;
    kinds.push_back(k);
  }
  j["kinds"] = kinds;
  j["all_floats"] = kind_json(all_floats(), windows_, band);
  return j.dump(1) + "\n";
}

}  // namespace qpu::reference
