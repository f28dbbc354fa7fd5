#pragma once
// Writes compiled weights as a Hugging Face checkpoint directory (config.json +
// model.safetensors, fp32) that stock transformers loads as Qwen3_5ForCausalLM.
#include <filesystem>

#include "io/qwen35_weights.h"

namespace qpu::npu {

void export_checkpoint(const io::Qwen35Weights& weights, const std::filesystem::path& dir);

}  // namespace qpu::npu
