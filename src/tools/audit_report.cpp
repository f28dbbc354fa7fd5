// The audit's two outputs: JSON (schema in docs/audit.md; every number that a
// script might compare is an exact count) and the text table.
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "tools/audit.h"
#include "tools/audit_text.h"
#include "tools/float_features.h"

namespace qpu::tools {

using nlohmann::json;

std::string format_value(double value) {
  if (value == 0) return std::signbit(value) ? "-0" : "0";
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  const DyadicForm f = dyadic_form(value);
  if (f.significant_bits == 1 && (f.exponent > 10 || f.exponent < -10))
    return fmt::format("{}2^{}", value < 0 ? "-" : "", f.exponent);
  return fmt::format("{:.6g}", value);
}

namespace {

// JSON has no infinities: non-finite statistics become strings.
json number(double value) {
  if (std::isfinite(value)) return value;
  return format_value(value);
}

json evidence_json(const Evidence& e) {
  return {{"code", e.code}, {"strength", strength_name(e.strength)}, {"tensor", e.tensor}, {"message", e.message}};
}

json runs_json(const std::vector<ColumnRun>& runs, bool with_value) {
  json out = json::array();
  for (const ColumnRun& r : runs) {
    json j = {{"first", r.first}, {"last", r.last}};
    if (with_value) j["value"] = number(r.value);
    out.push_back(std::move(j));
  }
  return out;
}

json stats_json(const TensorStats& s) {
  json j = {
      {"elements", s.elements},
      {"zeros", s.zeros},
      {"nonzero", s.nonzero},
      {"nonfinite", s.nonfinite},
      {"density", s.density()},
      {"min", number(s.min)},
      {"max", number(s.max)},
  };
  if (s.storage_bits == 0) return j;
  j["storage_bits"] = s.storage_bits;
  j["precision_bits"] = s.precision_bits();
  j["integer"] = s.integer;
  j["short_dyadic"] = s.short_dyadic;
  j["power_of_two"] = s.power_of_two;
  j["huge"] = s.huge;
  j["tiny"] = s.tiny;
  j["huge_short"] = s.huge_short;
  j["tiny_short"] = s.tiny_short;
  j["max_abs"] = number(s.max_abs);
  j["min_abs_nonzero"] = number(s.min_abs_nonzero);
  j["mean"] = number(s.elements > s.nonfinite ? s.sum / static_cast<double>(s.elements - s.nonfinite) : 0);
  j["rms"] = number(s.rms());
  j["kurtosis"] = number(s.kurtosis());
  j["median_binade"] = s.median_binade();
  json hist = json::object();
  for (size_t b = 1; b < s.significant_bits.size(); ++b) {
    if (s.significant_bits[b]) hist[std::to_string(b)] = s.significant_bits[b];
  }
  j["significant_bits"] = std::move(hist);
  if (s.matrix) {
    const RowCounts& r = s.row_counts;
    j["rows"] = {{"count", s.rows},         {"length", s.cols},
                 {"zero", r.zero},          {"plain", r.plain},
                 {"one_or_two_terms", r.term}, {"extreme", r.extreme},
                 {"low_bit_sparse", r.low_bit_sparse}, {"one_nonzero", r.one_nonzero},
                 {"one_hot", r.one_hot},    {"two_nonzero", r.two_nonzero}};
    if (s.columns_analysed) {
      j["columns"] = {{"zero", s.zero_columns},
                      {"zero_runs", runs_json(s.zero_column_runs, false)},
                      {"zero_run_count", s.zero_column_run_count},
                      {"rails", s.rail_columns},
                      {"rail_runs", runs_json(s.rail_column_runs, true)},
                      {"rail_run_count", s.rail_column_run_count}};
    }
  }
  return j;
}

}  // namespace

json audit_to_json(const AuditReport& report) {
  json tensors = json::array();
  for (const TensorAudit& t : report.tensors) {
    json j = {{"name", t.name},
              {"file", t.file},
              {"dtype", io::dtype_name(t.stats.dtype)},
              {"shape", t.stats.shape},
              {"role", tensor_role_name(t.where.role)},
              {"layer", t.where.layer ? json(t.where.layer_id()) : json(nullptr)},
              {"kind", t.where.kind},
              {"verdict", verdict_name(t.verdict)},
              {"stats", stats_json(t.stats)},
              {"evidence", json::array()}};
    for (const Evidence& e : t.evidence) j["evidence"].push_back(evidence_json(e));
    if (!t.row_runs.empty()) {
      json runs = json::array();
      for (const RowRun& r : t.row_runs) runs.push_back({{"first", r.first}, {"last", r.last}, {"kind", r.kind}});
      j["row_runs"] = std::move(runs);
      j["row_run_count"] = t.row_run_count;
    }
    tensors.push_back(std::move(j));
  }
  json layers = json::array();
  for (const LayerAudit& l : report.layers) {
    json j = {{"id", l.id},
              {"stack", l.stack},
              {"index", l.index},
              {"type", l.type},
              {"verdict", verdict_name(l.verdict)},
              {"tensors", json::array()},
              {"evidence", json::array()}};
    for (size_t i : l.tensors) j["tensors"].push_back(report.tensors[i].name);
    for (const Evidence& e : l.evidence) j["evidence"].push_back(evidence_json(e));
    layers.push_back(std::move(j));
  }
  json outside = json::array();
  for (size_t i : report.outside_layers) outside.push_back(report.tensors[i].name);
  const AuditSummary& s = report.summary;
  return {
      {"format", "qpu-audit-v1"},
      {"path", report.path},
      {"model", {{"architecture", report.architecture}, {"model_type", report.model_type},
                 {"num_hidden_layers", report.config_layers}}},
      {"warnings", report.warnings},
      {"files", report.files},
      {"unread_files", report.unread_files},
      {"summary",
       {{"verdict", s.verdict},
        {"message", s.message},
        {"layers_by_verdict", s.layers_by_verdict},
        {"tensors_by_verdict", s.tensors_by_verdict},
        {"compiled_layers", s.compiled_layers},
        {"mixed_layers", s.mixed_layers},
        {"unusual_layers", s.unusual_layers},
        {"inert_layers", s.inert_layers},
        {"flagged_tensors_outside_layers", s.flagged_tensors_outside_layers},
        {"bytes_scanned", report.bytes_scanned},
        {"seconds", report.seconds}}},
      {"layers", std::move(layers)},
      {"outside_layers", std::move(outside)},
      {"tensors", std::move(tensors)},
      // Filled by later analyses that need the NPU's layout (docs/audit.md).
      {"extensions", {{"nested_model", nullptr}, {"disassembly", nullptr}}},
  };
}

namespace {

// The most telling evidence first: compiled, then unusual, then notes.
std::string evidence_lines(const std::vector<Evidence>& evidence, const std::string& indent, size_t limit) {
  std::string out;
  size_t shown = 0;
  for (Strength strength : {Strength::Compiled, Strength::Unusual, Strength::Note}) {
    for (const Evidence& e : evidence) {
      if (e.strength != strength) continue;
      if (shown++ == limit) {
        out += fmt::format("{}... ({} more)\n", indent, evidence.size() - limit);
        return out;
      }
      out += fmt::format("{}[{}] {}: {}\n", indent, e.code, e.tensor, e.message);
    }
  }
  return out;
}

std::string short_stats(const TensorStats& s) {
  if (s.storage_bits == 0) return fmt::format("{} values, {} zero", s.elements, s.zeros);
  return fmt::format("density {:.4g}, short {:.3g}%, pow2 {:.3g}%, int {:.3g}%, {} bits, |x| in [{}, {}], rms {:.4g}",
                     s.density(), 100 * s.fraction_of_nonzero(s.short_dyadic),
                     100 * s.fraction_of_nonzero(s.power_of_two), 100 * s.fraction_of_nonzero(s.integer),
                     s.precision_bits(), format_value(s.min_abs_nonzero), format_value(s.max_abs), s.rms());
}

}  // namespace

std::string format_audit(const AuditReport& report, bool show_tensors) {
  std::string out = fmt::format("qpu audit {}\n", report.path);
  if (!report.architecture.empty() || !report.model_type.empty())
    out += fmt::format("model: {} ({}), {} layers in config\n", report.architecture, report.model_type,
                       report.config_layers);
  out += fmt::format("files: {} ({} tensors, {:.1f} MiB scanned in {:.2f} s)\n", report.files.size(),
                     report.tensors.size(), static_cast<double>(report.bytes_scanned) / 1048576.0, report.seconds);
  for (const auto& f : report.unread_files) out += fmt::format("not read (pickle, may run code when loaded): {}\n", f);
  for (const auto& w : report.warnings) out += fmt::format("warning: {}\n", w);

  out += "\nlayers:\n";
  size_t id_width = 5;
  for (const LayerAudit& l : report.layers) id_width = std::max(id_width, l.id.size());
  for (const LayerAudit& l : report.layers) {
    out += fmt::format("  {:<{}}  {:<16}  {}\n", l.id, id_width, l.type.empty() ? "-" : l.type, verdict_name(l.verdict));
    if (l.verdict != Verdict::Learned) out += evidence_lines(l.evidence, "      ", 6);
  }
  if (!report.outside_layers.empty()) {
    out += "\noutside the layers:\n";
    for (size_t i : report.outside_layers) {
      const TensorAudit& t = report.tensors[i];
      out += fmt::format("  {}  {}  {}\n", t.name, tensor_role_name(t.where.role), verdict_name(t.verdict));
      out += evidence_lines(t.evidence, "      ", 6);
    }
  }
  if (show_tensors) {
    out += "\ntensors:\n";
    for (const TensorAudit& t : report.tensors) {
      out += fmt::format("  {} {} {} {}: {}\n", t.name, io::dtype_name(t.stats.dtype), io::format_shape(t.stats.shape),
                         verdict_name(t.verdict), short_stats(t.stats));
    }
  }
  out += fmt::format("\nsummary: {}\n", report.summary.message);
  for (const auto& [verdict, count] : report.summary.layers_by_verdict) out += fmt::format("  {} layers {}\n", count, verdict);
  return out;
}

}  // namespace qpu::tools
