// qpu: one executable, many subcommands. main only wires CLI11 to the registry
// and turns every qpu::Error into "qpu: message" with exit code 1.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>

#include "cli/command_registry.h"
#include "common/error.h"
#include "engine/dot.h"

int main(int argc, char** argv) {
  CLI::App app{"qpu: a processing unit compiled into a language model's weights"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "qpu 0.1");

  auto commands = qpu::cli::registry();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::map<CLI::App*, qpu::cli::Runner> runners;
  for (const auto& command : commands) {
    CLI::App* sub = app.add_subcommand(command.name, command.description);
    runners[sub] = command.setup(*sub);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    // The engine's kernels are picked here, before any work: a bad QPU_ISA is an error
    // with nothing done (picked inside a parallel build it could not be reported).
    qpu::engine::dot::active_isa();
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) return run();
    }
  } catch (const qpu::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "qpu: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr, "qpu: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "qpu: internal error: %s\n", e.what());
    return 2;
  }
  return 1;
}
