#pragma once
// Subcommands register themselves at static-initialization time:
//
//   static qpu::cli::Registration reg{"info", "Describe a Qwen3.5 checkpoint", setup_info};
//
// setup_info receives the CLI11 subcommand, adds its options, and returns the
// function to run when the subcommand is chosen (exit code as return value).
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace qpu::cli {

using Runner = std::function<int()>;
using Setup = std::function<Runner(CLI::App& subcommand)>;

struct Command {
  std::string name;
  std::string description;
  Setup setup;
};

std::vector<Command>& registry();

struct Registration {
  Registration(std::string name, std::string description, Setup setup);
};

}  // namespace qpu::cli
