#pragma once
// Running the project's Python scripts (stock transformers) from a test: a temporary
// directory that removes itself, and a command whose stdout and stderr are captured.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace qpu::tools::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  bool ok() const { return !path_.empty(); }

 private:
  std::filesystem::path path_;
};

struct PythonRun {
  int status = -1;
  std::string output;  // stdout and stderr together
};

inline std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// QPU_PYTHON script args... with the output captured in log_dir/python.log.
inline PythonRun run_python(const std::string& script, const std::vector<std::string>& args,
                            const std::filesystem::path& log_dir) {
  std::string command = quoted(QPU_PYTHON) + " " + quoted(script);
  for (const std::string& a : args) command += " " + quoted(a);
  const std::filesystem::path log = log_dir / "python.log";
  command += " > " + quoted(log.string()) + " 2>&1";
  PythonRun run;
  run.status = std::system(command.c_str());
  std::ifstream in(log);
  run.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return run;
}

}  // namespace qpu::tools::testing
