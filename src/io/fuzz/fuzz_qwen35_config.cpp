// libFuzzer target: config.json text. parse_qwen35_config must accept it or throw
// qpu::Error (never crash, never overflow, never throw anything else).
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/qwen35_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto json = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  try {
    const auto config = qpu::io::parse_qwen35_config(json, "fuzz");
    (void)config.linear_conv_dim();
  } catch (const qpu::Error&) {
  }
  return 0;
}
