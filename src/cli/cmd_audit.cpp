// `qpu audit CHECKPOINT [--json] [--tensors] [--threads N] [--fail-on-compiled]`
//
// Tells ordinary learned weights from computation compiled into weights, per layer
// and tensor, with the evidence (docs/audit.md). CHECKPOINT is a checkpoint
// directory (safetensors + config.json; any architecture) or one .safetensors file.
// Only validated tensor spans are read; pickled files are listed, never loaded.
// Exit code 0, or 2 with --fail-on-compiled when compiled computation is found.
#include <omp.h>

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command_registry.h"
#include "common/error.h"
#include "tools/audit.h"

namespace {

struct AuditOptions {
  std::string checkpoint;
  bool json = false;
  bool tensors = false;
  int threads = 0;
  bool fail_on_compiled = false;
};

qpu::cli::Runner setup(CLI::App& app) {
  auto o = std::make_shared<AuditOptions>();
  app.add_option("checkpoint", o->checkpoint, "Checkpoint directory or .safetensors file")->required();
  app.add_flag("--json", o->json, "Print the full report as JSON (schema: docs/audit.md)");
  app.add_flag("--tensors", o->tensors, "Also list every tensor's statistics in the text report");
  app.add_option("--threads", o->threads, "OpenMP threads (default: all cores)");
  app.add_flag("--fail-on-compiled", o->fail_on_compiled, "Exit with code 2 when compiled computation is found");
  return [o] {
    if (o->threads < 0) qpu::fail("--threads must be positive, got {}", o->threads);
    if (o->threads > 0) omp_set_num_threads(o->threads);
    const qpu::tools::AuditReport report = qpu::tools::audit_checkpoint(o->checkpoint);
    if (o->json) {
      // File names come from the file system and may not be UTF-8: replace, never throw.
      const auto text = qpu::tools::audit_to_json(report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
      std::printf("%s\n", text.c_str());
    } else {
      std::fputs(qpu::tools::format_audit(report, o->tensors).c_str(), stdout);
    }
    return o->fail_on_compiled && report.summary.verdict == "compiled" ? 2 : 0;
  };
}

qpu::cli::Registration reg{"audit", "Tell learned weights from computation compiled into a checkpoint", setup};

}  // namespace
