#pragma once
// The safetensors files of whatever the user points at: a checkpoint directory
// (model.safetensors or an index with shards, through io::Checkpoint, which
// validates the index against every shard), a directory with other *.safetensors
// files, or one .safetensors file. Every file is mapped and its header fully
// validated by io before anything reads a tensor; afterwards only the validated
// spans (SafetensorsFile::raw) are read. Nothing else in the directory is opened:
// pickled files (.bin, .pt, .pth, .ckpt, .pkl) are listed, never loaded.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/safetensors.h"

namespace qpu::tools {

class CheckpointSource {
 public:
  explicit CheckpointSource(const std::filesystem::path& path);  // throws qpu::Error naming the file

  // The directory names are relative to (the checkpoint directory, or the file's).
  const std::filesystem::path& root() const { return root_; }
  bool is_directory() const { return directory_; }
  const std::vector<const io::SafetensorsFile*>& files() const { return files_; }
  std::string relative_name(const io::SafetensorsFile& file) const;
  // Files in the directory that may hold code when loaded (pickles): not read.
  const std::vector<std::string>& unread_pickles() const { return pickles_; }

 private:
  std::filesystem::path root_;
  bool directory_ = false;
  std::unique_ptr<io::Checkpoint> checkpoint_;
  std::vector<std::unique_ptr<io::SafetensorsFile>> loose_;
  std::vector<const io::SafetensorsFile*> files_;
  std::vector<std::string> pickles_;
};

}  // namespace qpu::tools
