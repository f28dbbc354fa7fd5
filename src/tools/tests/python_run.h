#pragma once
// Running the project's Python scripts (stock transformers) from a test, as a process
// (common/testing/run_command.h: stdout and stderr apart).
#include <filesystem>
#include <string>
#include <vector>

#include "common/testing/run_command.h"

namespace qpu::tools::testing {

inline std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// QPU_PYTHON script args...; its stderr passes through a file in `scratch`.
inline qpu::testing::CommandResult run_python(const std::string& script, const std::vector<std::string>& args,
                                              const std::filesystem::path& scratch) {
  std::string command = quoted(QPU_PYTHON) + " " + quoted(script);
  for (const std::string& a : args) command += " " + quoted(a);
  return qpu::testing::run_command(command, scratch / "python.err");
}

}  // namespace qpu::tools::testing
