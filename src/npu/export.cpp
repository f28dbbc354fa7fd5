#include "npu/export.h"

#include <map>
#include <string>

#include "io/dtype.h"
#include "io/qwen35_layout.h"
#include "io/qwen35_save.h"

namespace qpu::npu {

namespace {

bool all_bf16(const std::vector<float>& values) {
  for (float v : values)
    if (!io::f32_to_bf16_exact(v)) return false;
  return true;
}

}  // namespace

// Names, shapes and config.json come from io's one layout; only the dtype is chosen here.
ExportStats export_checkpoint(const io::Qwen35Weights& weights, const std::filesystem::path& dir) {
  std::map<std::string, io::DType, std::less<>> dtypes;
  ExportStats stats;
  auto choose = [&](const std::string& name, const std::vector<float>& values) {
    const bool bf16 = all_bf16(values);
    dtypes[name] = bf16 ? io::DType::BF16 : io::DType::F32;
    ++(bf16 ? stats.bf16_tensors : stats.f32_tensors);
    stats.bytes += static_cast<int64_t>(values.size()) * (bf16 ? 2 : 4);
  };
  for (const auto& slot : io::qwen35_weight_slots(weights)) choose(slot.name, *slot.values);
  if (!weights.lm_head.empty()) choose(io::kLmHeadName, weights.lm_head);

  std::filesystem::create_directories(dir);
  io::SaveOptions options;
  options.dtype_for = [&dtypes](std::string_view name) { return dtypes.find(name)->second; };
  io::save_qwen35(dir, weights, options);
  return stats;
}

}  // namespace qpu::npu
