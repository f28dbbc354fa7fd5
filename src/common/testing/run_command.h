#pragma once
// Test support: run a command line as a user would (through the shell), with its stdout
// captured through a pipe and its stderr through a file, for the tests of the `qpu`
// binary's subcommands.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace qpu::testing {

struct CommandResult {
  int status = -1;  // the exit status (-1: the process did not exit normally, or no pipe)
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `command` with stderr redirected to `err_file` (read back, then removed).
inline CommandResult run_command(const std::string& command, const std::filesystem::path& err_file) {
  CommandResult r;
  FILE* pipe = ::popen((command + " 2>'" + err_file.string() + "'").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.out.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_file);
  std::stringstream ss;
  ss << err.rdbuf();
  r.err = ss.str();
  err.close();
  std::error_code ignored;
  std::filesystem::remove(err_file, ignored);
  return r;
}

}  // namespace qpu::testing
