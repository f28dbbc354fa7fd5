#pragma once
// A checkpoint's manifest: the SHA-256 of every file, and of every tensor of every
// safetensors file (its dtype, shape and raw bytes as stored), so that any changed
// byte can be named: a byte in a tensor's data changes that tensor's hash, a byte
// in a header changes only its file's. docs/audit.md gives the exact format.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/dtype.h"

namespace qpu::tools {

inline constexpr const char* kManifestFormat = "qpu-manifest-v1";
// Files the manifest leaves out, so that a manifest or signature can be kept next
// to the weights (top level of the directory only).
inline constexpr const char* kManifestFileName = "qpu-manifest.json";
inline constexpr const char* kSignatureFileName = "qpu-signature.json";

struct ManifestFile {
  std::string path;  // relative to the checkpoint directory, '/' separated
  uint64_t bytes = 0;
  std::string sha256;
};

struct ManifestTensor {
  std::string file;  // the safetensors file (relative path)
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  std::string sha256;  // tensor_sha256
};

// A safetensors file whose header does not validate: its tensors are not listed.
struct ManifestError {
  std::string file;
  std::string error;
};

struct Manifest {
  std::vector<ManifestFile> files;      // sorted by path
  std::vector<ManifestTensor> tensors;  // sorted by (file, name)
  std::vector<ManifestError> errors;    // sorted by file
};

// sha256("qpu-tensor-v1\0" + dtype + "\0" + shape as "[d0,d1,...]" + "\0" + raw bytes).
std::string tensor_sha256(io::DType dtype, std::span<const int64_t> shape, std::span<const std::byte> raw);

// The SHA-256 of a whole file (lowercase hex, as sha256sum prints it), read through a
// mapping; qpu::Error naming the file when it cannot be read.
std::string file_sha256(const std::filesystem::path& path);

// A directory: every regular file below it (symlinks to files are followed, as in
// a Hugging Face cache snapshot), except .git/ and .cache/ directories and the
// manifest/signature files above. A file: that file alone. Hashing runs in parallel.
Manifest compute_manifest(const std::filesystem::path& checkpoint);

nlohmann::json manifest_to_json(const Manifest& manifest);
// Validates every field (source names the file in errors).
Manifest manifest_from_json(const nlohmann::json& json, const std::string& source);

struct ManifestChange {
  std::string subject;  // "tensor" or "file"
  std::string file;     // the file (for tensors: the safetensors file)
  std::string name;     // the tensor ("" for files)
  std::string change;   // "modified", "added", "removed", "dtype", "shape", "unreadable"
  std::string message;  // one line naming the tensor or file
};

// What differs between a signed manifest and the checkpoint as it is now. A
// safetensors file that no longer parses is one "unreadable" change (its tensors
// are not listed one by one as removed).
std::vector<ManifestChange> diff_manifests(const Manifest& expected, const Manifest& actual);

}  // namespace qpu::tools
