#include "tools/checkpoint_source.h"

#include <algorithm>

#include "common/error.h"

namespace qpu::tools {

namespace fs = std::filesystem;

namespace {

bool is_pickle_name(const std::string& name) {
  for (const char* ext : {".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle"}) {
    if (name.ends_with(ext)) return true;
  }
  return false;
}

}  // namespace

CheckpointSource::CheckpointSource(const fs::path& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) fail("{}: no such file or directory", path.string());
  if (fs::is_directory(status)) {
    root_ = path;
    directory_ = true;
    std::vector<std::string> safetensors;
    for (const auto& entry : fs::directory_iterator(path)) {
      const std::string name = entry.path().filename().string();
      if (!entry.is_regular_file()) continue;
      if (name.ends_with(".safetensors")) safetensors.push_back(name);
      if (is_pickle_name(name)) pickles_.push_back(name);
    }
    std::sort(pickles_.begin(), pickles_.end());
    if (fs::exists(path / io::kSingleFileName) || fs::exists(path / io::kIndexFileName)) {
      checkpoint_ = std::make_unique<io::Checkpoint>(path);
      for (const auto& file : checkpoint_->files()) files_.push_back(file.get());
      return;
    }
    if (safetensors.empty()) fail("{}: no .safetensors file in this directory", path.string());
    std::sort(safetensors.begin(), safetensors.end());
    for (const auto& name : safetensors) {
      loose_.push_back(std::make_unique<io::SafetensorsFile>(path / name));
      files_.push_back(loose_.back().get());
    }
    return;
  }
  if (!fs::is_regular_file(status)) fail("{}: not a regular file or directory", path.string());
  root_ = path.has_parent_path() ? path.parent_path() : fs::path(".");
  loose_.push_back(std::make_unique<io::SafetensorsFile>(path));
  files_.push_back(loose_.back().get());
}

std::string CheckpointSource::relative_name(const io::SafetensorsFile& file) const {
  return file.path().filename().string();
}

}  // namespace qpu::tools
