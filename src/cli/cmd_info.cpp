// `qpu info CHECKPOINT_DIR [--json]`: what a Qwen3.5 checkpoint holds (config,
// layer pattern, parameters by group / tensor kind / dtype, files) and whether its
// tensors match its config -- from the headers only, so it is instant.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command_registry.h"
#include "io/checkpoint_summary.h"

namespace {

qpu::cli::Runner setup(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  app.add_option("checkpoint", *dir, "Checkpoint directory (config.json + safetensors)")->required();
  app.add_flag("--json", *json, "Print a JSON document instead of text");
  return [dir, json] {
    const auto summary = qpu::io::summarize_checkpoint(*dir);
    if (*json) {
      std::printf("%s\n", qpu::io::summary_to_json(summary).dump(2).c_str());
    } else {
      std::fputs(qpu::io::format_summary(summary).c_str(), stdout);
    }
    // A checkpoint whose tensors do not match its config is reported, and fails.
    return summary.check.empty() ? 0 : 1;
  };
}

qpu::cli::Registration reg{"info", "Describe a Qwen3.5 checkpoint directory", setup};

}  // namespace
