#include "io/safetensors_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/float_bits.h"
#include "io/safetensors.h"

namespace qpu::io {

namespace {

// An output file under a temporary name; becomes `path` only on commit(), is
// removed if anything throws before that.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path path) : path_(std::move(path)) {
    std::string pattern = path_.string() + ".tmp-XXXXXX";
    fd_ = ::mkstemp(pattern.data());
    if (fd_ < 0) fail("{}: cannot create a temporary file: {}", path_.string(), std::strerror(errno));
    temp_ = pattern;
    ::fchmod(fd_, 0644);  // mkstemp makes 0600; checkpoints are ordinary readable files
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!temp_.empty()) ::unlink(temp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd_, p, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("{}: write failed: {}", path_.string(), std::strerror(errno));
      }
      p += n;
      size -= static_cast<size_t>(n);
    }
  }

  void commit() {
    if (::fsync(fd_) != 0) fail("{}: fsync failed: {}", path_.string(), std::strerror(errno));
    if (::close(fd_) != 0) {
      fd_ = -1;
      fail("{}: close failed: {}", path_.string(), std::strerror(errno));
    }
    fd_ = -1;
    if (::rename(temp_.c_str(), path_.c_str()) != 0)
      fail("{}: cannot rename {} into place: {}", path_.string(), temp_, std::strerror(errno));
    temp_.clear();
  }

 private:
  std::filesystem::path path_;
  std::string temp_;
  int fd_ = -1;
};

uint64_t checked_numel(const TensorToWrite& tensor, const std::string& where) {
  uint64_t n = 1;
  for (int64_t d : tensor.shape) {
    if (d < 0) fail("{}: tensor '{}': negative dimension in shape {}", where, tensor.name, format_shape(tensor.shape));
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
      fail("{}: tensor '{}': shape {} overflows", where, tensor.name, format_shape(tensor.shape));
  }
  return n;
}

void validate_tensors(std::span<const TensorToWrite> tensors, const std::string& where) {
  std::set<std::string_view> names;
  for (const auto& tensor : tensors) {
    if (tensor.name.empty() || tensor.name == "__metadata__")
      fail("{}: invalid tensor name '{}'", where, tensor.name);
    if (!names.insert(tensor.name).second) fail("{}: tensor '{}' given twice", where, tensor.name);
    if (!is_float_weight_dtype(tensor.dtype))
      fail("{}: tensor '{}': cannot write dtype {} from floats", where, tensor.name, dtype_name(tensor.dtype));
    const uint64_t numel = checked_numel(tensor, where);
    if (numel != tensor.values.size())
      fail("{}: tensor '{}': shape {} needs {} values, got {}", where, tensor.name, format_shape(tensor.shape), numel,
           tensor.values.size());
  }
}

uint64_t data_bytes(const TensorToWrite& tensor) { return tensor.values.size() * dtype_size(tensor.dtype); }

// Converts one chunk of values to the file's representation; throws on the first
// value that would not survive exactly.
void encode(const TensorToWrite& tensor, size_t first, size_t count, std::vector<char>& out, const std::string& where) {
  const size_t size = dtype_size(tensor.dtype);
  out.resize(count * size);
  if (tensor.dtype == DType::F32) {
    std::memcpy(out.data(), tensor.values.data() + first, count * 4);
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    const float value = tensor.values[first + i];
    const auto bits = tensor.dtype == DType::BF16 ? f32_to_bf16_exact(value) : f32_to_f16_exact(value);
    if (!bits)
      fail("{}: tensor '{}': element {} = {} is not exactly representable in {}", where, tensor.name, first + i,
           describe_float(value), dtype_name(tensor.dtype));
    std::memcpy(out.data() + 2 * i, &*bits, 2);
  }
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, std::span<const char> bytes) {
  AtomicFile file(path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string where = path.string();
  validate_tensors(tensors, where);

  std::vector<const TensorToWrite*> order;
  for (const auto& tensor : tensors) order.push_back(&tensor);
  std::sort(order.begin(), order.end(), [](const TensorToWrite* a, const TensorToWrite* b) {
    const uint64_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });

  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite* tensor : order) {
    const uint64_t end = offset + data_bytes(*tensor);
    header[tensor->name] = {{"dtype", dtype_name(tensor->dtype)}, {"shape", tensor->shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  AtomicFile file(path);
  const uint64_t length = text.size();
  file.write(&length, 8);  // little-endian host (asserted in safetensors.cpp)
  file.write(text.data(), text.size());
  constexpr size_t kChunk = size_t{1} << 18;
  std::vector<char> buffer;
  for (const TensorToWrite* tensor : order) {
    for (size_t first = 0; first < tensor->values.size(); first += kChunk) {
      const size_t count = std::min(kChunk, tensor->values.size() - first);
      encode(*tensor, first, count, buffer, where);
      file.write(buffer.data(), buffer.size());
    }
  }
  file.commit();
}

std::vector<std::string> write_sharded_safetensors(const std::filesystem::path& dir,
                                                   std::span<const TensorToWrite> tensors, uint64_t max_shard_bytes,
                                                   const std::map<std::string, std::string>& metadata,
                                                   const std::string& stem) {
  if (max_shard_bytes == 0) fail("{}: max shard size must be positive", dir.string());
  validate_tensors(tensors, dir.string());
  std::vector<std::vector<TensorToWrite>> shards;
  uint64_t current = 0;
  for (const auto& tensor : tensors) {
    const uint64_t bytes = data_bytes(tensor);
    if (shards.empty() || (current + bytes > max_shard_bytes && !shards.back().empty())) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(tensor);
    current += bytes;
  }
  if (shards.size() <= 1) {
    write_safetensors(dir / (stem + ".safetensors"), tensors, metadata);
    return {stem + ".safetensors"};
  }

  std::vector<std::string> written;
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total_size = 0, total_parameters = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = fmt::format("{}-{:05d}-of-{:05d}.safetensors", stem, i + 1, shards.size());
    write_safetensors(dir / name, shards[i], metadata);
    for (const auto& tensor : shards[i]) {
      weight_map[tensor.name] = name;
      total_size += data_bytes(tensor);
      total_parameters += tensor.values.size();
    }
    written.push_back(name);
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total_size}, {"total_parameters", total_parameters}}},
                                {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";
  const std::string index_name = stem + ".safetensors.index.json";
  write_file_atomically(dir / index_name, text);
  written.push_back(index_name);
  return written;
}

}  // namespace qpu::io
