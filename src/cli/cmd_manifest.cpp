// `qpu manifest CHECKPOINT [-o FILE]`: the SHA-256 of every file and of every
// tensor (dtype + shape + raw bytes as stored) of a checkpoint directory or
// .safetensors file, as JSON (docs/audit.md). Invalid safetensors files are listed
// under "errors" (and reported on stderr); their other hashes are still written.
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command_registry.h"
#include "io/safetensors_writer.h"
#include "tools/manifest.h"

namespace {

qpu::cli::Runner setup(CLI::App& app) {
  auto checkpoint = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  app.add_option("checkpoint", *checkpoint, "Checkpoint directory or file")->required();
  app.add_option("-o,--output", *output, "Write the manifest here instead of stdout");
  return [checkpoint, output] {
    const auto manifest = qpu::tools::compute_manifest(*checkpoint);
    for (const auto& e : manifest.errors) std::fprintf(stderr, "qpu manifest: warning: %s\n", e.error.c_str());
    const std::string text = qpu::tools::manifest_to_json(manifest).dump(2) + "\n";
    if (output->empty()) {
      std::fputs(text.c_str(), stdout);
    } else {
      qpu::io::write_file_atomically(*output, text);
      std::fprintf(stderr, "qpu manifest: %zu files, %zu tensors -> %s\n", manifest.files.size(),
                   manifest.tensors.size(), output->c_str());
    }
    return 0;
  };
}

qpu::cli::Registration reg{"manifest", "SHA-256 of every file and tensor of a checkpoint", setup};

}  // namespace
