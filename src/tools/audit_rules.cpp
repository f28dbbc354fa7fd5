// The verdict rules of `qpu audit` (docs/audit.md, "Verdict rule"). Every compiled-
// strength feature is one a learned matrix cannot show by chance: trained or
// randomly initialised weights are continuous values rounded to the storage format,
// so they have (almost) no exact zeros, no values beyond 2^24 or below 2^-40, no
// columns of identical values, and only the fraction 2^(4-p) of short dyadic values
// that p-bit rounding predicts.
#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "tools/audit.h"
#include "tools/audit_text.h"
#include "tools/float_features.h"

namespace qpu::tools {

namespace {

// Structured rows needed for the row evidence (a few stray rows prove nothing).
constexpr uint64_t kMinStructuredRows = 4;
// Sparse low-bit tensor: mostly zeros, and the nonzeros mostly short dyadic.
constexpr double kSparseDensity = 0.10;
constexpr double kSparseLowBitShort = 0.5;
// A learned matrix has essentially no exact zeros.
constexpr double kUnusualDensity = 0.5;
// Low-bit values: this many times the short fraction p-bit rounding predicts.
constexpr double kLowBitExcess = 8.0;
constexpr double kLowBitMinFraction = 0.25;
constexpr uint64_t kMinValuesForFractions = 64;
// Neighbour comparison.
constexpr size_t kNeighbourCount = 4;  // nearest same-kind tensors compared
constexpr double kNeighbourDensityGap = 0.5;
constexpr double kNeighbourBinadeGap = 6;  // median |x| 64x larger or smaller
constexpr double kNeighbourPrecisionGap = 8;
constexpr double kNeighbourShortGap = 0.5;

std::string percent(double fraction) { return fmt::format("{:.3g}%", 100.0 * fraction); }

std::string describe_rows(const TensorStats& s) {
  const RowCounts& r = s.row_counts;
  std::vector<std::string> parts;
  if (r.term) {
    std::string t = fmt::format("{} with one or two nonzeros", r.term);
    if (r.one_nonzero) t += fmt::format(" ({} with one, {} of them one-hot +-2^e)", r.one_nonzero, r.one_hot);
    parts.push_back(t);
  }
  if (r.low_bit_sparse) parts.push_back(fmt::format("{} sparse with short dyadic values", r.low_bit_sparse));
  if (r.extreme) parts.push_back(fmt::format("{} holding extreme values", r.extreme));
  std::string joined;
  for (size_t i = 0; i < parts.size(); ++i) joined += (i ? ", " : "") + parts[i];
  return fmt::format("{} of {} rows are structured: {}; {} plain, {} zero", r.structured(), s.rows, joined, r.plain,
                     r.zero);
}

std::string describe_runs(const std::vector<ColumnRun>& runs, bool with_value, size_t limit = 6) {
  std::string out;
  for (size_t i = 0; i < runs.size() && i < limit; ++i) {
    if (i) out += ", ";
    out += runs[i].first == runs[i].last ? fmt::format("{}", runs[i].first)
                                         : fmt::format("{}..{}", runs[i].first, runs[i].last);
    if (with_value) out += " = " + format_value(runs[i].value);
  }
  if (runs.size() > limit) out += ", ...";
  return out;
}

bool all_equal_vector(const TensorStats& s) {
  return !s.matrix && s.elements >= 2 && s.nonfinite == 0 && (s.nonzero == 0 || (s.zeros == 0 && s.min == s.max));
}

// Row runs of the kinds unlike the majority of nonzero rows.
std::vector<RowRun> minority_runs(const TensorStats& s, uint64_t& count) {
  std::vector<RowRun> runs;
  count = 0;
  if (s.row_kinds.empty()) return runs;
  auto group = [](RowKind k) { return k == RowKind::Zero ? "zero" : is_structured(k) ? "structured" : "plain"; };
  const RowCounts& r = s.row_counts;
  const char* majority = r.structured() > r.plain ? "structured" : "plain";
  RowRun current;
  bool open = false;
  auto close = [&] {
    if (!open) return;
    ++count;
    if (runs.size() < kMaxRuns) runs.push_back(current);
    open = false;
  };
  for (uint64_t i = 0; i < s.row_kinds.size(); ++i) {
    const char* g = group(s.row_kinds[i]);
    if (std::string_view(g) == majority) {
      close();
      continue;
    }
    if (open && current.kind == g) {
      current.last = i;
      continue;
    }
    close();
    current = {i, i, g};
    open = true;
  }
  close();
  return runs;
}

}  // namespace

const char* verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::Learned: return "learned";
    case Verdict::Compiled: return "compiled";
    case Verdict::Mixed: return "mixed";
    case Verdict::Unusual: return "unusual";
    case Verdict::Zero: return "zero";
    case Verdict::Inert: return "inert";
    case Verdict::NotAnalysed: return "not_analysed";
  }
  return "?";
}

const char* strength_name(Strength strength) {
  switch (strength) {
    case Strength::Compiled: return "compiled";
    case Strength::Unusual: return "unusual";
    case Strength::Note: return "note";
  }
  return "?";
}

void judge_tensor(TensorAudit& t) {
  const TensorStats& s = t.stats;
  t.evidence.clear();
  t.row_runs.clear();
  auto add = [&](const char* code, Strength strength, std::string message) {
    t.evidence.push_back({code, strength, t.name, std::move(message)});
  };
  if (s.storage_bits == 0) {
    t.verdict = Verdict::NotAnalysed;
    add("not_float", Strength::Note,
        fmt::format("{} data (integer or packed): only zeros and range counted", io::dtype_name(s.dtype)));
    return;
  }
  if (s.nonzero + s.nonfinite == 0) {
    t.verdict = Verdict::Zero;
    if (s.elements) add("all_zero", Strength::Note, fmt::format("all {} values are exact zeros", s.elements));
    return;
  }

  const RowCounts& rc = s.row_counts;
  const uint64_t structured = rc.structured();
  bool compiled = false, structural = false;

  // Compiled-strength evidence.
  // A few structured rows prove little next to many plain ones; but when every
  // nonzero row is structured (a layer that hosts one or two operations) even one
  // is enough: a learned matrix is never almost entirely zero.
  if (s.matrix && (structured >= kMinStructuredRows || (structured > 0 && rc.plain == 0))) {
    compiled = structural = true;
    add("structured_rows", Strength::Compiled, describe_rows(s));
  }
  if (s.rail_columns > 0) {
    compiled = structural = true;
    add("rails", Strength::Compiled,
        fmt::format("{} columns hold one identical nonzero value in every nonzero row (>= {} rows): columns {}",
                    s.rail_columns, kRailMinRows, describe_runs(s.rail_column_runs, true)));
  }
  const uint64_t exact_extremes = s.huge_short + s.tiny_short;
  if (exact_extremes >= 2) {
    compiled = true;
    std::vector<std::string> parts;
    if (s.huge_short)
      parts.push_back(fmt::format("{} >= 2^{} (max |x| {})", s.huge_short, kHugeExponent, format_value(s.max_abs)));
    if (s.tiny_short)
      parts.push_back(fmt::format("{} below 2^{} (min |x| {})", s.tiny_short, kTinyExponent + 1,
                                  format_value(s.min_abs_nonzero)));
    add("exact_extremes", Strength::Compiled,
        fmt::format("{} exact constants (<= {} significant bits) beyond any learned magnitude: {}", exact_extremes,
                    kShortBits, parts.size() == 2 ? parts[0] + ", " + parts[1] : parts[0]));
  }
  const double short_fraction = s.fraction_of_nonzero(s.short_dyadic);
  const bool sparse_low_bit =
      s.storage_bits >= 8 && s.nonzero >= 16 && s.density() <= kSparseDensity && short_fraction >= kSparseLowBitShort;
  if (sparse_low_bit) {
    compiled = true;
    add("sparse_low_bit", Strength::Compiled,
        fmt::format("{} of values are nonzero and {} of those are short dyadic ({} powers of two)",
                    percent(s.density()), percent(short_fraction), s.power_of_two));
  }

  // Unusual-strength evidence.
  bool unusual = false;
  if (s.huge + s.tiny > exact_extremes || (exact_extremes == 1)) {
    unusual = true;
    add("extreme_values", Strength::Unusual,
        fmt::format("{} values >= 2^{} and {} nonzero below 2^{} (max |x| {}, min |x| {})", s.huge, kHugeExponent,
                    s.tiny, kTinyExponent + 1, format_value(s.max_abs), format_value(s.min_abs_nonzero)));
  }
  if (s.nonfinite) {
    unusual = true;
    add("nonfinite", Strength::Unusual, fmt::format("{} infinite or NaN values", s.nonfinite));
  }
  const int precision = s.precision_bits();
  const double expected_short = std::ldexp(1.0, std::min(0, kShortBits - precision));
  // Matrices only: vectors (norms, biases) are often one initial constant. Both
  // findings below are implied by sparse_low_bit when that holds.
  if (!sparse_low_bit && s.matrix && s.storage_bits >= 8 && s.nonzero >= kMinValuesForFractions) {
    if (precision <= kShortBits) {
      unusual = true;
      add("low_bit_values", Strength::Unusual,
          fmt::format("99% of the nonzero values fit in {} significant bits where {} are stored (very low precision "
                      "quantization, or constructed values)",
                      precision, s.storage_bits));
    } else if (short_fraction >= std::max(kLowBitMinFraction, kLowBitExcess * expected_short)) {
      unusual = true;
      add("low_bit_values", Strength::Unusual,
          fmt::format("{} of the nonzero values are short dyadic where rounding to {} bits predicts {}",
                      percent(short_fraction), precision, percent(expected_short)));
    }
  }
  if (!sparse_low_bit && s.matrix && s.elements >= kMinValuesForFractions && s.density() < kUnusualDensity) {
    unusual = true;
    add("sparse", Strength::Unusual, fmt::format("{} of values are exact zeros", percent(1.0 - s.density())));
  }

  // Notes.
  if (s.matrix && rc.zero > 0 && rc.plain > 0)
    add("zero_rows", Strength::Note, fmt::format("{} all-zero rows", rc.zero));
  if (s.zero_columns > 0 && rc.plain > 0)
    add("zero_columns", Strength::Note,
        fmt::format("{} all-zero columns: {}", s.zero_columns, describe_runs(s.zero_column_runs, false)));
  if (all_equal_vector(s))
    add("constant_vector", Strength::Note,
        fmt::format("all {} values equal {} (an initialisation value)", s.elements, format_value(s.min)));

  if (compiled) {
    const bool learned_part = s.matrix && rc.plain >= kMinStructuredRows && rc.plain > structured;
    t.verdict = learned_part && structural ? Verdict::Mixed : learned_part ? Verdict::Unusual : Verdict::Compiled;
    if (t.verdict == Verdict::Unusual) {
      // Exact constants in a few rows of an otherwise learned matrix: flagged, but
      // there is no computation's structure to point at.
      for (auto& e : t.evidence) {
        if (e.strength == Strength::Compiled) e.strength = Strength::Unusual;
      }
    }
  } else {
    t.verdict = unusual ? Verdict::Unusual : Verdict::Learned;
  }

  const bool show_rows = t.where.role == TensorRole::Embedding || t.where.role == TensorRole::LmHead ||
                         t.verdict == Verdict::Mixed;
  if (show_rows && s.matrix) {
    t.row_runs = minority_runs(s, t.row_run_count);
    if (rc.plain > 0 && structured > 0) {
      std::string where;
      for (size_t i = 0; i < t.row_runs.size() && i < 6; ++i) {
        const RowRun& r = t.row_runs[i];
        if (r.kind != "structured" && r.kind != "plain") continue;
        where += fmt::format("{}{}..{}", where.empty() ? "" : ", ", r.first, r.last);
      }
      add("row_kinds", Strength::Note,
          fmt::format("{} structured rows and {} plain rows: the minority at rows {}", structured, rc.plain, where));
    }
  }
}

void compare_with_neighbours(std::vector<TensorAudit>& tensors) {
  // (stack, kind) -> tensors in layer order
  std::map<std::pair<std::string, std::string>, std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorAudit& t = tensors[i];
    if (!t.where.layer || !t.stats.matrix || t.stats.storage_bits == 0) continue;
    if (t.verdict == Verdict::Zero || t.verdict == Verdict::NotAnalysed) continue;
    groups[{t.where.stack, t.where.kind}].push_back(i);
  }
  // The verdicts on their own: the comparison must not depend on its own order.
  std::vector<Verdict> own(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) own[i] = tensors[i].verdict;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  struct Features {
    double density, binade, precision, short_fraction;
  };
  auto features = [&](size_t i) {
    const TensorStats& s = tensors[i].stats;
    return Features{s.density(), static_cast<double>(s.median_binade()), static_cast<double>(s.precision_bits()),
                    s.fraction_of_nonzero(s.short_dyadic)};
  };
  for (auto& [key, members] : groups) {
    std::sort(members.begin(), members.end(),
              [&](size_t a, size_t b) { return *tensors[a].where.layer < *tensors[b].where.layer; });
    for (size_t m = 0; m < members.size(); ++m) {
      // The reference: the nearest same-kind tensors that look learned on their
      // own (compiled neighbours must not drag the reference along).
      std::vector<size_t> candidates;
      for (size_t j = 0; j < members.size(); ++j) {
        if (j != m && (own[members[j]] == Verdict::Learned || own[members[j]] == Verdict::Unusual))
          candidates.push_back(j);
      }
      std::stable_sort(candidates.begin(), candidates.end(), [&](size_t a, size_t b) {
        const auto da = a > m ? a - m : m - a, db = b > m ? b - m : m - b;
        return da < db;
      });
      if (candidates.size() > kNeighbourCount) candidates.resize(kNeighbourCount);
      // With a single reference one cannot tell which of the two is odd.
      if (candidates.size() < 2) continue;
      std::vector<size_t> reference;
      for (size_t j : candidates) reference.push_back(members[j]);
      std::sort(reference.begin(), reference.end(),
                [&](size_t a, size_t b) { return *tensors[a].where.layer < *tensors[b].where.layer; });

      // A feature counts when it is far from a strict majority of the references
      // (one odd neighbour among them cannot make a tensor look odd).
      TensorAudit& t = tensors[members[m]];
      const Features mine = features(members[m]);
      std::vector<std::string> gaps;
      auto check = [&](double Features::*field, double gap, const char* what, bool as_percent) {
        size_t far = 0;
        std::vector<double> values;
        for (size_t r : reference) {
          const double v = features(r).*field;
          values.push_back(v);
          far += std::fabs(mine.*field - v) >= gap;
        }
        if (2 * far <= reference.size()) return;
        const double med = median(values);
        gaps.push_back(as_percent ? fmt::format("{} {} vs {}", what, percent(mine.*field), percent(med))
                                  : fmt::format("{} {:.4g} vs {:.4g}", what, mine.*field, med));
      };
      check(&Features::density, kNeighbourDensityGap, "density", false);
      check(&Features::binade, kNeighbourBinadeGap, "binade of the median |x|", false);
      check(&Features::precision, kNeighbourPrecisionGap, "precision bits", false);
      check(&Features::short_fraction, kNeighbourShortGap, "short dyadic", true);
      if (gaps.empty()) continue;
      std::string message = "differs from the same tensor in layers ";
      for (size_t r = 0; r < reference.size(); ++r)
        message += fmt::format("{}{}", r ? ", " : "", *tensors[reference[r]].where.layer);
      message += ": ";
      for (size_t g = 0; g < gaps.size(); ++g) message += (g ? ", " : "") + gaps[g];
      const bool already_flagged = t.verdict == Verdict::Compiled || t.verdict == Verdict::Mixed;
      t.evidence.push_back({"neighbours", already_flagged ? Strength::Note : Strength::Unusual, t.name, message});
      if (t.verdict == Verdict::Learned) t.verdict = Verdict::Unusual;
    }
  }
}

void judge_layers(AuditReport& report) {
  report.layers.clear();
  report.outside_layers.clear();
  std::map<std::pair<std::string, int64_t>, size_t> index;
  for (size_t i = 0; i < report.tensors.size(); ++i) {
    const TensorName& w = report.tensors[i].where;
    if (!w.layer) {
      report.outside_layers.push_back(i);
      continue;
    }
    auto [it, inserted] = index.try_emplace({w.stack, *w.layer}, report.layers.size());
    if (inserted) {
      LayerAudit layer;
      layer.id = w.layer_id();
      layer.stack = w.stack;
      layer.index = *w.layer;
      report.layers.push_back(std::move(layer));
    }
    report.layers[it->second].tensors.push_back(i);
  }
  std::sort(report.layers.begin(), report.layers.end(), [](const LayerAudit& a, const LayerAudit& b) {
    return std::tie(a.stack, a.index) < std::tie(b.stack, b.index);
  });

  for (LayerAudit& layer : report.layers) {
    bool any_compiled = false, any_mixed = false, any_learned_matrix = false, any_unusual = false;
    bool any_matrix = false, all_matrices_zero = true, all_zero = true;
    for (size_t i : layer.tensors) {
      const TensorAudit& t = report.tensors[i];
      const bool matrix = t.stats.shape.size() >= 2;
      if (matrix) {
        any_matrix = true;
        if (t.verdict != Verdict::Zero) all_matrices_zero = false;
      }
      if (t.verdict != Verdict::Zero) all_zero = false;
      any_compiled |= t.verdict == Verdict::Compiled;
      any_mixed |= t.verdict == Verdict::Mixed;
      any_unusual |= t.verdict == Verdict::Unusual;
      any_learned_matrix |= matrix && t.verdict == Verdict::Learned;
      for (const Evidence& e : t.evidence) {
        if (e.strength != Strength::Note || e.code == "neighbours" || e.code == "row_kinds")
          layer.evidence.push_back(e);
      }
    }
    if (any_matrix ? all_matrices_zero : all_zero) {
      layer.verdict = Verdict::Inert;
    } else if (any_mixed || (any_compiled && any_learned_matrix)) {
      layer.verdict = Verdict::Mixed;
    } else if (any_compiled) {
      layer.verdict = Verdict::Compiled;
    } else if (any_unusual) {
      layer.verdict = Verdict::Unusual;
    } else {
      layer.verdict = Verdict::Learned;
    }
  }

  AuditSummary& s = report.summary;
  s = AuditSummary{};
  for (const TensorAudit& t : report.tensors) ++s.tensors_by_verdict[verdict_name(t.verdict)];
  for (const LayerAudit& l : report.layers) {
    ++s.layers_by_verdict[verdict_name(l.verdict)];
    if (l.verdict == Verdict::Compiled) s.compiled_layers.push_back(l.id);
    if (l.verdict == Verdict::Mixed) s.mixed_layers.push_back(l.id);
    if (l.verdict == Verdict::Unusual) s.unusual_layers.push_back(l.id);
    if (l.verdict == Verdict::Inert) s.inert_layers.push_back(l.id);
  }
  bool outside_unusual = false;
  for (size_t i : report.outside_layers) {
    const TensorAudit& t = report.tensors[i];
    if (t.verdict == Verdict::Compiled || t.verdict == Verdict::Mixed) s.flagged_tensors_outside_layers.push_back(t.name);
    outside_unusual |= t.verdict == Verdict::Unusual;
  }
  const size_t flagged_layers = s.compiled_layers.size() + s.mixed_layers.size();
  if (flagged_layers || !s.flagged_tensors_outside_layers.empty()) {
    s.verdict = "compiled";
    s.message = fmt::format("COMPILED COMPUTATION DETECTED: {} of {} layers compiled, {} mixed", s.compiled_layers.size(),
                            report.layers.size(), s.mixed_layers.size());
    if (!s.flagged_tensors_outside_layers.empty())
      s.message += fmt::format("; {} flagged tensors outside the layers", s.flagged_tensors_outside_layers.size());
  } else if (!s.unusual_layers.empty() || !s.inert_layers.empty() || outside_unusual) {
    s.verdict = "unusual";
    s.message = fmt::format("no compiled computation found, but {} layers are unusual and {} inert",
                            s.unusual_layers.size(), s.inert_layers.size());
    if (outside_unusual) s.message += " (and tensors outside the layers are unusual)";
  } else {
    s.verdict = "learned";
    s.message = fmt::format("no compiled computation found: all {} layers look like ordinary learned weights",
                            report.layers.size());
  }
}

}  // namespace qpu::tools
