#pragma once
// One exception type for every user-facing failure (bad file, bad flag, bad shape).
// The CLI catches it, prints "qpu: <message>" and exits non-zero; nothing else
// in the project prints errors itself.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace qpu {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// qpu::fail("{}: tensor {} has shape {}", file, name, shape) throws qpu::Error.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace qpu
