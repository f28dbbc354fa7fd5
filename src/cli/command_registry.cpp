#include "cli/command_registry.h"

#include <algorithm>

namespace qpu::cli {

std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

Registration::Registration(std::string name, std::string description, Setup setup) {
  registry().push_back({std::move(name), std::move(description), std::move(setup)});
}

}  // namespace qpu::cli
