#include "tools/manifest.h"

#include <omp.h>

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "tools/mapped_pages.h"
#include "tools/sha256.h"

namespace qpu::tools {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// JSON strings must be UTF-8; a file name that is not cannot be put in a manifest
// faithfully, so it is refused rather than mangled.
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

std::vector<std::string> list_files(const fs::path& dir) try {
  std::vector<std::string> out;
  fs::recursive_directory_iterator it(dir), end;
  for (; it != end; ++it) {
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    if (it->is_directory() && !it->is_symlink()) {
      if (name == ".git" || name == ".cache") it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file()) continue;  // follows symlinks: a link to a file counts
    // Lexically: fs::relative would resolve symlinks and name their targets.
    const std::string relative = p.lexically_relative(dir).generic_string();
    if (relative == kManifestFileName || relative == kSignatureFileName) continue;
    if (!valid_utf8(relative)) fail("{}: a file name is not valid UTF-8 and cannot be listed in a manifest", p.string());
    out.push_back(relative);
  }
  std::sort(out.begin(), out.end());
  return out;
} catch (const fs::filesystem_error& e) {
  fail("{}: cannot list the directory: {}", dir.string(), e.what());
}

std::string digest_hex(const Sha256Digest& d) { return to_hex(d); }

// Hashes mapped bytes piece by piece, dropping each piece's pages once hashed.
void hash_mapped(Sha256& h, std::span<const std::byte> bytes) {
  constexpr size_t kPiece = size_t{64} << 20;
  for (size_t offset = 0; offset < bytes.size(); offset += kPiece) {
    const auto piece = bytes.subspan(offset, std::min(kPiece, bytes.size() - offset));
    h.update(piece);
    release_pages(piece);
  }
}

}  // namespace

std::string tensor_sha256(io::DType dtype, std::span<const int64_t> shape, std::span<const std::byte> raw) {
  Sha256 h;
  h.update(std::string_view("qpu-tensor-v1\0", 14));
  h.update(io::dtype_name(dtype));
  h.update(std::string_view("\0", 1));
  h.update(fmt::format("[{}]", fmt::join(shape, ",")));
  h.update(std::string_view("\0", 1));
  hash_mapped(h, raw);
  return digest_hex(h.finish());
}

std::string file_sha256(const fs::path& path) {
  ensure_sodium();
  const io::MappedFile mapped(path);
  Sha256 h;
  hash_mapped(h, mapped.bytes());
  return digest_hex(h.finish());
}

Manifest compute_manifest(const fs::path& checkpoint) {
  ensure_sodium();
  std::error_code ec;
  const auto status = fs::status(checkpoint, ec);
  if (ec || !fs::exists(status)) fail("{}: no such file or directory", checkpoint.string());
  fs::path root;
  std::vector<std::string> names;
  if (fs::is_directory(status)) {
    root = checkpoint;
    names = list_files(checkpoint);
  } else if (fs::is_regular_file(status)) {
    root = checkpoint.has_parent_path() ? checkpoint.parent_path() : fs::path(".");
    const std::string name = checkpoint.filename().string();
    if (!valid_utf8(name)) fail("{}: the file name is not valid UTF-8", checkpoint.string());
    names.push_back(name);
  } else {
    fail("{}: not a regular file or directory", checkpoint.string());
  }

  Manifest m;
  // Map every file once; parse the safetensors headers (io validates them fully).
  std::vector<io::MappedFile> mapped;
  std::vector<std::unique_ptr<io::SafetensorsFile>> parsed(names.size());
  mapped.reserve(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    mapped.emplace_back(root / names[i]);
    if (!names[i].ends_with(".safetensors")) continue;
    try {
      parsed[i] = std::make_unique<io::SafetensorsFile>(root / names[i]);
    } catch (const Error& e) {
      m.errors.push_back({names[i], e.what()});
    }
  }

  // One task per file and per tensor; the biggest first so the threads finish together.
  struct Task {
    size_t file;
    const io::TensorInfo* tensor;  // nullptr: the whole file
    uint64_t bytes;
  };
  std::vector<Task> tasks;
  m.files.resize(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    m.files[i] = {names[i], mapped[i].size(), ""};
    tasks.push_back({i, nullptr, mapped[i].size()});
    if (!parsed[i]) continue;
    for (const io::TensorInfo& t : parsed[i]->tensors()) tasks.push_back({i, &t, t.nbytes()});
  }
  std::stable_sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) { return a.bytes > b.bytes; });
  std::vector<std::string> digests(tasks.size());
  const auto n = static_cast<int64_t>(tasks.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t k = 0; k < n; ++k) {
    const Task& task = tasks[static_cast<size_t>(k)];
    if (task.tensor == nullptr) {
      Sha256 h;
      hash_mapped(h, mapped[task.file].bytes());
      digests[static_cast<size_t>(k)] = digest_hex(h.finish());
    } else {
      const io::TensorInfo& t = *task.tensor;
      digests[static_cast<size_t>(k)] = tensor_sha256(t.dtype, t.shape, parsed[task.file]->raw(t));
    }
  }
  for (size_t k = 0; k < tasks.size(); ++k) {
    const Task& task = tasks[k];
    if (task.tensor == nullptr) {
      m.files[task.file].sha256 = digests[k];
    } else {
      const io::TensorInfo& t = *task.tensor;
      m.tensors.push_back({names[task.file], t.name, io::dtype_name(t.dtype), t.shape, t.nbytes(), digests[k]});
    }
  }
  std::sort(m.tensors.begin(), m.tensors.end(), [](const ManifestTensor& a, const ManifestTensor& b) {
    return std::tie(a.file, a.name) < std::tie(b.file, b.name);
  });
  return m;
}

json manifest_to_json(const Manifest& manifest) {
  json files = json::array();
  for (const ManifestFile& f : manifest.files) files.push_back({{"path", f.path}, {"bytes", f.bytes}, {"sha256", f.sha256}});
  json tensors = json::array();
  for (const ManifestTensor& t : manifest.tensors)
    tensors.push_back({{"file", t.file}, {"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape},
                       {"bytes", t.bytes}, {"sha256", t.sha256}});
  json errors = json::array();
  for (const ManifestError& e : manifest.errors) errors.push_back({{"file", e.file}, {"error", e.error}});
  return {{"format", kManifestFormat}, {"hash", "sha256"}, {"files", files}, {"tensors", tensors}, {"errors", errors}};
}

namespace {

const json& field(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) fail("{}: missing \"{}\"", where, key);
  return *it;
}

std::string string_field(const json& object, const char* key, const std::string& where) {
  const json& v = field(object, key, where);
  if (!v.is_string()) fail("{}: \"{}\" is not a string", where, key);
  return v.get<std::string>();
}

uint64_t count_field(const json& object, const char* key, const std::string& where) {
  const json& v = field(object, key, where);
  if (!v.is_number_unsigned()) fail("{}: \"{}\" is not a non-negative integer", where, key);
  return v.get<uint64_t>();
}

std::string hash_field(const json& object, const std::string& where) {
  std::string h = string_field(object, "sha256", where);
  if (!from_hex(h, 32)) fail("{}: \"sha256\" is not 64 hex digits", where);
  return h;
}

const json& array_field(const json& object, const char* key, const std::string& where) {
  const json& v = field(object, key, where);
  if (!v.is_array()) fail("{}: \"{}\" is not an array", where, key);
  return v;
}

}  // namespace

Manifest manifest_from_json(const json& j, const std::string& source) {
  if (!j.is_object()) fail("{}: the manifest is not a JSON object", source);
  if (string_field(j, "format", source) != kManifestFormat)
    fail("{}: format is not \"{}\"", source, kManifestFormat);
  if (string_field(j, "hash", source) != "sha256") fail("{}: hash is not \"sha256\"", source);
  Manifest m;
  for (const json& f : array_field(j, "files", source)) {
    const std::string where = source + ": files entry";
    if (!f.is_object()) fail("{} is not an object", where);
    m.files.push_back({string_field(f, "path", where), count_field(f, "bytes", where), hash_field(f, where)});
  }
  for (const json& t : array_field(j, "tensors", source)) {
    const std::string where = source + ": tensors entry";
    if (!t.is_object()) fail("{} is not an object", where);
    ManifestTensor mt;
    mt.file = string_field(t, "file", where);
    mt.name = string_field(t, "name", where);
    const std::string w = fmt::format("{} '{}'", where, mt.name);
    mt.dtype = string_field(t, "dtype", w);
    for (const json& d : array_field(t, "shape", w)) {
      // Parsed JSON holds dimensions as unsigned, a manifest built in memory as int64.
      const bool ok = d.is_number_unsigned() ? d.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)
                                             : d.is_number_integer() && d.get<int64_t>() >= 0;
      if (!ok) fail("{}: shape holds something that is not a dimension", w);
      mt.shape.push_back(d.get<int64_t>());
    }
    mt.bytes = count_field(t, "bytes", w);
    mt.sha256 = hash_field(t, w);
    m.tensors.push_back(std::move(mt));
  }
  for (const json& e : array_field(j, "errors", source)) {
    const std::string where = source + ": errors entry";
    if (!e.is_object()) fail("{} is not an object", where);
    m.errors.push_back({string_field(e, "file", where), string_field(e, "error", where)});
  }
  return m;
}

std::vector<ManifestChange> diff_manifests(const Manifest& expected, const Manifest& actual) {
  std::vector<ManifestChange> changes;
  auto short_hash = [](const std::string& h) { return h.substr(0, 16); };

  std::map<std::string, const ManifestFile*> before, after;
  for (const auto& f : expected.files) before[f.path] = &f;
  for (const auto& f : actual.files) after[f.path] = &f;
  for (const auto& [path, f] : before) {
    const auto it = after.find(path);
    if (it == after.end()) {
      changes.push_back({"file", path, "", "removed", fmt::format("file {}: removed", path)});
    } else if (it->second->sha256 != f->sha256 || it->second->bytes != f->bytes) {
      changes.push_back({"file", path, "", "modified",
                         fmt::format("file {}: content changed ({} bytes, sha256 {}... -> {} bytes, sha256 {}...)", path,
                                     f->bytes, short_hash(f->sha256), it->second->bytes,
                                     short_hash(it->second->sha256))});
    }
  }
  for (const auto& [path, f] : after) {
    if (!before.contains(path)) changes.push_back({"file", path, "", "added", fmt::format("file {}: added", path)});
  }

  std::map<std::string, std::string> unreadable;
  for (const auto& e : actual.errors) unreadable[e.file] = e.error;
  std::map<std::string, std::string> was_unreadable;
  for (const auto& e : expected.errors) was_unreadable[e.file] = e.error;
  for (const auto& [file, error] : unreadable) {
    if (was_unreadable.contains(file)) continue;
    size_t signed_tensors = 0;
    for (const auto& t : expected.tensors) signed_tensors += t.file == file;
    changes.push_back({"file", file, "", "unreadable",
                       fmt::format("file {}: no longer a valid safetensors file ({}); its {} signed tensors cannot be "
                                   "checked",
                                   file, error, signed_tensors)});
  }

  using Key = std::pair<std::string, std::string>;
  std::map<Key, const ManifestTensor*> tb, ta;
  for (const auto& t : expected.tensors) tb[{t.file, t.name}] = &t;
  for (const auto& t : actual.tensors) ta[{t.file, t.name}] = &t;
  for (const auto& [key, t] : tb) {
    const auto it = ta.find(key);
    if (it == ta.end()) {
      if (unreadable.contains(key.first)) continue;
      changes.push_back({"tensor", key.first, key.second, "removed",
                         fmt::format("tensor '{}' ({}): removed", key.second, key.first)});
      continue;
    }
    const ManifestTensor& now = *it->second;
    if (now.dtype != t->dtype) {
      changes.push_back({"tensor", key.first, key.second, "dtype",
                         fmt::format("tensor '{}' ({}): dtype changed {} -> {}", key.second, key.first, t->dtype,
                                     now.dtype)});
    } else if (now.shape != t->shape) {
      changes.push_back({"tensor", key.first, key.second, "shape",
                         fmt::format("tensor '{}' ({}): shape changed [{}] -> [{}]", key.second, key.first,
                                     fmt::join(t->shape, ", "), fmt::join(now.shape, ", "))});
    } else if (now.sha256 != t->sha256) {
      changes.push_back({"tensor", key.first, key.second, "modified",
                         fmt::format("tensor '{}' ({}): data changed (sha256 {}... -> {}...)", key.second, key.first,
                                     short_hash(t->sha256), short_hash(now.sha256))});
    }
  }
  for (const auto& [key, t] : ta) {
    if (!tb.contains(key))
      changes.push_back({"tensor", key.first, key.second, "added",
                         fmt::format("tensor '{}' ({}): added", key.second, key.first)});
  }
  return changes;
}

}  // namespace qpu::tools
