#pragma once
// Writes compiled weights as a Hugging Face checkpoint directory (config.json +
// model.safetensors) that stock transformers loads as Qwen3_5ForCausalLM.
//
// Dtype per tensor: BF16 when every value of the tensor is a bf16 number (routing
// +-1, powers of two, 128-gates, zeros: most of a compiled layer), F32 otherwise
// (nested weights, cutoffs). Widening bf16 to fp32 is exact, so the engine and
// transformers (dtype=float32) compute with exactly the compiled values either way;
// the file shrinks by what the exact tensors save.
#include <cstdint>
#include <filesystem>

#include "io/qwen35_weights.h"

namespace qpu::npu {

struct ExportStats {
  int64_t bf16_tensors = 0, f32_tensors = 0;
  int64_t bytes = 0;  // tensor data written
};

ExportStats export_checkpoint(const io::Qwen35Weights& weights, const std::filesystem::path& dir);

}  // namespace qpu::npu
