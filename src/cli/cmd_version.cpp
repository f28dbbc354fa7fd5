// `qpu version`: build facts that matter for exactness (compiler, FP flags).
#include <cstdio>

#include "cli/command_registry.h"

namespace {

qpu::cli::Runner setup(CLI::App&) {
  return [] {
    std::printf("qpu 0.1 (built with %s, -ffp-contract=off)\n", __VERSION__);
    return 0;
  };
}

qpu::cli::Registration reg{"version", "Print the version and build facts", setup};

}  // namespace
