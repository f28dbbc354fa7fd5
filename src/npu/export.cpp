#include "npu/export.h"

#include "io/qwen35_save.h"

namespace qpu::npu {

// Compiled weights hold arbitrary fp32 values (nested weights, 2^64 gates), so every
// tensor is stored as F32; names, shapes and config.json come from io's one layout.
void export_checkpoint(const io::Qwen35Weights& weights, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  io::SaveOptions options;
  options.dtype = io::DType::F32;
  io::save_qwen35(dir, weights, options);
}

}  // namespace qpu::npu
