#include "tools/audit.h"

#include <omp.h>

#include <chrono>
#include <fstream>
#include <span>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/qwen35_config.h"
#include "tools/checkpoint_source.h"
#include "tools/mapped_pages.h"

namespace qpu::tools {

namespace fs = std::filesystem;

namespace {

// config.json is small; a bigger one is not a config (and is not read).
constexpr uintmax_t kMaxConfigBytes = 16 << 20;

// The config only names things (architecture, layer types); the weights are audited
// whatever it says, so its problems are warnings.
void read_config(const fs::path& dir, AuditReport& report) {
  const fs::path path = dir / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec || size > kMaxConfigBytes) {
    report.warnings.push_back(fmt::format("{}: not read ({} bytes)", path.string(), size));
    return;
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  const std::string body = text.str();
  const auto config = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    report.warnings.push_back(fmt::format("{}: not a JSON object; auditing the weights without it", path.string()));
    return;
  }
  auto string_field = [](const nlohmann::json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  report.model_type = string_field(config, "model_type");
  if (const auto it = config.find("architectures"); it != config.end() && it->is_array() && !it->empty() &&
                                                    (*it)[0].is_string())
    report.architecture = (*it)[0].get<std::string>();
  const nlohmann::json* text_config = &config;
  if (const auto it = config.find("text_config"); it != config.end() && it->is_object()) text_config = &*it;
  if (const auto it = text_config->find("num_hidden_layers"); it != text_config->end() && it->is_number_integer())
    report.config_layers = it->get<int64_t>();

  if (report.model_type != "qwen3_5" && report.model_type != "qwen3_5_text") return;
  try {
    const io::Qwen35Config qwen = io::parse_qwen35_config(config, path.string());
    // Label the decoder stack's layers (either prefix: the loader picks by tensors).
    for (const std::string& stack : {qwen.tensor_prefix + "layers", std::string("model.layers"),
                                    std::string("model.language_model.layers")}) {
      bool found = false;
      for (LayerAudit& layer : report.layers) {
        if (layer.stack != stack || layer.index < 0 || layer.index >= static_cast<int64_t>(qwen.layer_types.size()))
          continue;
        layer.type = io::layer_type_name(qwen.layer_types[static_cast<size_t>(layer.index)]);
        found = true;
      }
      if (found) break;
    }
  } catch (const Error& e) {
    report.warnings.push_back(e.what());
  }
}

void check_layer_count(AuditReport& report) {
  if (report.config_layers <= 0) return;
  std::map<std::string, int64_t> per_stack;
  for (const LayerAudit& l : report.layers) ++per_stack[l.stack];
  int64_t most = 0;
  std::string stack;
  for (const auto& [name, count] : per_stack) {
    if (count > most) {
      most = count;
      stack = name;
    }
  }
  if (most != report.config_layers)
    report.warnings.push_back(fmt::format("config.json says {} layers, the largest layer stack ({}) has {}",
                                          report.config_layers, stack.empty() ? "none" : stack, most));
}

}  // namespace

AuditReport audit_checkpoint(const fs::path& path) {
  const auto start = std::chrono::steady_clock::now();
  const CheckpointSource source(path);
  AuditReport report;
  report.path = path.string();
  report.unread_files = source.unread_pickles();

  // Collect the validated spans first; scanning reads nothing else.
  struct Job {
    const io::SafetensorsFile* file;
    const io::TensorInfo* info;
  };
  std::vector<Job> jobs;
  for (const io::SafetensorsFile* file : source.files()) {
    report.files.push_back(source.relative_name(*file));
    for (const io::TensorInfo& info : file->tensors()) jobs.push_back({file, &info});
  }
  report.tensors.resize(jobs.size());

  // Small tensors (one chunk) in parallel with each other, large ones one at a
  // time with their chunks in parallel: all cores busy either way.
  std::vector<size_t> small, large;
  for (size_t i = 0; i < jobs.size(); ++i) {
    (jobs[i].info->numel() <= kChunkElements ? small : large).push_back(i);
  }
  auto scan = [&](size_t i) {
    TensorAudit& t = report.tensors[i];
    const io::TensorInfo& info = *jobs[i].info;
    t.file = source.relative_name(*jobs[i].file);
    t.name = info.name;
    t.where = parse_tensor_name(info.name);
    t.stats = compute_tensor_stats(info.dtype, info.shape, jobs[i].file->raw(info));
  };
  // An exception must not leave an OpenMP region: keep the first and rethrow.
  std::string error;
  const auto n_small = static_cast<int64_t>(small.size());
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t k = 0; k < n_small; ++k) {
    try {
      scan(small[static_cast<size_t>(k)]);
    } catch (const std::exception& e) {
#pragma omp critical(qpu_audit_error)
      if (error.empty()) error = e.what();
    }
  }
  if (!error.empty()) fail("{}", error);
  for (size_t i : large) {
    scan(i);
    // Keeps the resident size near one tensor however large the checkpoint.
    release_pages(jobs[i].file->raw(*jobs[i].info));
  }
  for (const Job& job : jobs) report.bytes_scanned += job.info->nbytes();

  for (TensorAudit& t : report.tensors) judge_tensor(t);
  compare_with_neighbours(report.tensors);
  judge_layers(report);
  if (source.is_directory()) read_config(source.root(), report);
  check_layer_count(report);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace qpu::tools
