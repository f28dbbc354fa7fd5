// export_checkpoint (npu/export.h): a compiled checkpoint written with a dtype per
// tensor (BF16 where every value is a bf16 number, F32 otherwise) reads back bit for
// bit, and the safetensors file says which tensors took which dtype.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>

#include "io/dtype.h"
#include "io/qwen35_layout.h"
#include "io/safetensors.h"
#include "npu/export.h"
#include "npu/inbox.h"

namespace qpu::npu {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("qpu-export-test-" + name + "-" + std::to_string(std::random_device{}()));
  fs::remove_all(dir);
  return dir;
}

bool bf16_tensor(const std::vector<float>& values) {
  for (float v : values)
    if (!io::f32_to_bf16_exact(v)) return false;
  return true;
}

TEST(Export, EachTensorTakesBf16OnlyWhenExactAndReadsBackBitForBit) {
  io::Qwen35Weights w = build_inbox_checkpoint({}).compiled.weights;
  // A tensor that would be BF16 gets one value that is not a bf16 number.
  auto& gate = w.layers.at(0).gate_proj;
  ASSERT_FALSE(gate.empty());
  ASSERT_TRUE(bf16_tensor(gate));
  gate[gate.size() / 2] = 1.0f + 0x1p-20f;
  const fs::path dir = fresh_dir("inbox");
  const ExportStats stats = export_checkpoint(w, dir);

  const io::Qwen35Weights back = io::load_qwen35(dir);
  const io::SafetensorsFile file(dir / "model.safetensors");
  int64_t bf16 = 0, f32 = 0, bytes = 0;
  const auto slots = io::qwen35_weight_slots(w);
  const auto back_slots = io::qwen35_weight_slots(back);
  ASSERT_EQ(slots.size(), back_slots.size());
  for (size_t s = 0; s < slots.size(); ++s) {
    const auto& a = *slots[s].values;
    const auto& b = *back_slots[s].values;
    ASSERT_EQ(a.size(), b.size()) << slots[s].name;
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << slots[s].name << "[" << i << "]";
    const io::TensorInfo& t = file.get(slots[s].name);
    EXPECT_EQ(t.dtype, bf16_tensor(a) ? io::DType::BF16 : io::DType::F32) << slots[s].name;
    ++(t.dtype == io::DType::BF16 ? bf16 : f32);
    bytes += static_cast<int64_t>(t.nbytes());
  }
  if (!w.lm_head.empty()) {  // untied: the value head is its own tensor
    const io::TensorInfo& t = file.get(io::kLmHeadName);
    EXPECT_EQ(t.dtype, bf16_tensor(w.lm_head) ? io::DType::BF16 : io::DType::F32);
    ++(t.dtype == io::DType::BF16 ? bf16 : f32);
    bytes += static_cast<int64_t>(t.nbytes());
    ASSERT_EQ(back.lm_head.size(), w.lm_head.size());
    for (size_t i = 0; i < w.lm_head.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(w.lm_head[i]), std::bit_cast<uint32_t>(back.lm_head[i])) << "lm_head[" << i << "]";
  }
  EXPECT_EQ(file.get(slots[0].name).dtype, bf16_tensor(w.embed_tokens) ? io::DType::BF16 : io::DType::F32);
  for (const auto& slot : slots)
    if (slot.values == &w.layers[0].gate_proj) {
      EXPECT_EQ(file.get(slot.name).dtype, io::DType::F32) << slot.name;
    }
  EXPECT_GT(bf16, 0);
  EXPECT_GT(f32, 0);
  EXPECT_EQ(stats.bf16_tensors, bf16);
  EXPECT_EQ(stats.f32_tensors, f32);
  EXPECT_EQ(stats.bytes, bytes);
  std::printf("inbox checkpoint: %lld BF16 and %lld F32 tensors, %lld bytes of tensor data (all F32: %lld)\n",
              static_cast<long long>(bf16), static_cast<long long>(f32), static_cast<long long>(bytes),
              static_cast<long long>([&] {
                int64_t n = 0;
                for (const auto& s : slots) n += static_cast<int64_t>(s.values->size()) * 4;
                return n + static_cast<int64_t>(w.lm_head.size()) * 4;
              }()));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qpu::npu
