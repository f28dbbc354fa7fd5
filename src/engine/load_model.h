#pragma once
// A Qwen3.5 checkpoint directory into an engine model, streamed: the files are mapped,
// every tensor is checked against config.json before anything is built
// (io::Qwen35Reader), and the layers are read, upcast and packed one at a time
// (Model's LayerSource), so the peak is the packed model plus a layer per build thread
// in fp32, not the whole checkpoint in fp32 beside it. The model is the one
// Model(io::load_qwen35(dir), options) builds, bit for bit.
#include <filesystem>

#include "engine/model.h"

namespace qpu::engine {

Model load_model(const std::filesystem::path& checkpoint_dir, const ModelOptions& options = {});

}  // namespace qpu::engine
