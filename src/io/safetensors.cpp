#include "io/safetensors.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>
#include <tuple>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace qpu::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; the readers copy it as-is");

namespace {

using nlohmann::json;

// Only three levels are meaningful (file object, tensor object, shape array);
// refusing deeper nesting early keeps hostile headers from costing recursion.
constexpr int kMaxJsonDepth = 8;

struct DuplicateKey {
  std::string entry;  // top-level key the duplicate sits in ("" for a top-level duplicate)
  std::string key;
};
struct TooDeep {};

// nlohmann keeps the last of duplicate keys silently; the official loader rejects
// them, and so do we (a duplicated tensor name would make the file ambiguous).
json parse_json_strict(std::string_view text, const std::string& source) {
  std::vector<std::set<std::string>> keys;
  std::string current_entry;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) throw TooDeep{};
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key: {
        std::string key = parsed.get<std::string>();
        if (keys.empty()) break;
        if (!keys.back().insert(key).second) throw DuplicateKey{keys.size() == 1 ? "" : current_entry, key};
        if (keys.size() == 1) current_entry = std::move(key);
        break;
      }
      default:
        break;
    }
    return true;
  };
  json result;
  try {
    result = json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/false);
  } catch (const DuplicateKey& dup) {
    if (dup.entry.empty()) fail("{}: duplicate tensor name '{}' in the header", source, dup.key);
    fail("{}: tensor '{}': duplicate field '{}' in the header", source, dup.entry, dup.key);
  } catch (const TooDeep&) {
    fail("{}: header JSON is nested deeper than {} levels", source, kMaxJsonDepth);
  }
  if (result.is_discarded()) fail("{}: header is not valid JSON", source);
  return result;
}

uint64_t read_u64_le(std::span<const std::byte> bytes) {
  uint64_t value = 0;
  std::memcpy(&value, bytes.data(), sizeof value);
  return value;
}

// A JSON value that is a non-negative integer fitting int64 (nlohmann parses
// those as number_unsigned; negatives are number_integer, the rest number_float).
bool is_count(const json& value) {
  return value.is_number_unsigned() && value.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX);
}

TensorInfo parse_entry(const std::string& name, const json& entry, uint64_t data_size, const std::string& source) {
  if (!entry.is_object()) fail("{}: tensor '{}': header entry is not an object", source, name);
  for (const auto& [field, value] : entry.items()) {
    if (field != "dtype" && field != "shape" && field != "data_offsets")
      fail("{}: tensor '{}': unknown field '{}'", source, name, field);
  }
  TensorInfo tensor;
  tensor.name = name;

  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) fail("{}: tensor '{}': missing dtype", source, name);
  if (!dtype_it->is_string()) fail("{}: tensor '{}': dtype is not a string", source, name);
  const auto dtype = parse_dtype(dtype_it->get_ref<const std::string&>());
  if (!dtype) fail("{}: tensor '{}': unknown dtype '{}'", source, name, dtype_it->get_ref<const std::string&>());
  tensor.dtype = *dtype;

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) fail("{}: tensor '{}': missing shape", source, name);
  if (!shape_it->is_array()) fail("{}: tensor '{}': shape is not an array", source, name);
  uint64_t numel = 1;
  for (const auto& dim : *shape_it) {
    if (!is_count(dim)) fail("{}: tensor '{}': shape {} has an entry that is not a non-negative integer", source, name, shape_it->dump());
    const uint64_t d = dim.get<uint64_t>();
    if (__builtin_mul_overflow(numel, d, &numel))
      fail("{}: tensor '{}': shape {} has too many elements", source, name, shape_it->dump());
    tensor.shape.push_back(static_cast<int64_t>(d));
  }
  uint64_t expected_bytes = 0;
  if (__builtin_mul_overflow(numel, dtype_size(tensor.dtype), &expected_bytes))
    fail("{}: tensor '{}': shape {} has too many bytes", source, name, shape_it->dump());

  const auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end()) fail("{}: tensor '{}': missing data_offsets", source, name);
  const json& offsets = *offsets_it;
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
    fail("{}: tensor '{}': data_offsets must be [begin, end] with non-negative integers, got {}", source, name, offsets.dump());
  tensor.begin = offsets[0].get<uint64_t>();
  tensor.end = offsets[1].get<uint64_t>();
  if (tensor.begin > tensor.end)
    fail("{}: tensor '{}': data_offsets [{}, {}] end before begin", source, name, tensor.begin, tensor.end);
  if (tensor.end - tensor.begin != expected_bytes)
    fail("{}: tensor '{}': data_offsets [{}, {}] hold {} bytes but {} {} needs {}", source, name, tensor.begin,
         tensor.end, tensor.end - tensor.begin, dtype_name(tensor.dtype), format_shape(tensor.shape), expected_bytes);
  if (tensor.end > data_size)
    fail("{}: tensor '{}': data_offsets [{}, {}] extend past the data section ({} bytes)", source, name, tensor.begin,
         tensor.end, data_size);
  return tensor;
}

}  // namespace

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);  // validated not to overflow
  return n;
}

std::string format_shape(std::span<const int64_t> shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

const TensorInfo* SafetensorsHeader::find(std::string_view name) const {
  const auto it = index.find(name);
  return it == index.end() ? nullptr : &tensors[it->second];
}

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, const std::string& source) {
  if (file.size() < 8) fail("{}: file is {} bytes, too short for a safetensors header length", source, file.size());
  SafetensorsHeader header;
  header.header_size = read_u64_le(file.first(8));
  if (header.header_size > kMaxSafetensorsHeaderBytes)
    fail("{}: header length {} exceeds the {} byte limit", source, header.header_size, kMaxSafetensorsHeaderBytes);
  if (header.header_size > file.size() - 8)
    fail("{}: header length {} is larger than the {} bytes that follow it", source, header.header_size, file.size() - 8);
  header.data_offset = 8 + header.header_size;
  header.data_size = file.size() - header.data_offset;

  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), header.header_size);
  if (text.empty() || text.front() != '{') fail("{}: header does not start with '{{'", source);
  // nlohmann's lexer takes a NUL byte for the end of input and would accept
  // "{...}\0garbage"; valid JSON never holds a raw NUL, so refuse it outright.
  if (const auto nul = text.find('\0'); nul != std::string_view::npos)
    fail("{}: header contains a NUL byte at offset {}", source, 8 + nul);
  const json root = parse_json_strict(text, source);
  if (!root.is_object()) fail("{}: header JSON is not an object", source);

  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("{}: __metadata__ is not an object", source);
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail("{}: __metadata__ value for '{}' is not a string", source, key);
        header.metadata.emplace(key, value.get<std::string>());
      }
      continue;
    }
    header.tensors.push_back(parse_entry(name, entry, header.data_size, source));
  }

  // The data section must be tiled exactly: no overlaps (a write to one tensor
  // would alias another), no gaps and nothing after the last tensor (what the
  // official loader enforces too).
  std::sort(header.tensors.begin(), header.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const auto& tensor : header.tensors) {
    if (tensor.begin < covered)
      fail("{}: tensor '{}' (bytes [{}, {})) overlaps tensor '{}' (bytes [{}, {}))", source, tensor.name, tensor.begin,
           tensor.end, previous->name, previous->begin, previous->end);
    if (tensor.begin > covered)
      fail("{}: tensor '{}' starts at byte {} leaving a gap of {} unused bytes before it", source, tensor.name,
           tensor.begin, tensor.begin - covered);
    covered = tensor.end;
    previous = &tensor;
  }
  if (covered != header.data_size)
    fail("{}: {} bytes after the last tensor are not described by the header", source, header.data_size - covered);

  for (size_t i = 0; i < header.tensors.size(); ++i) header.index.emplace(header.tensors[i].name, i);
  return header;
}

namespace {

// All 65536 half values, widened once by the reference conversion: a table lookup
// per element is exact by construction and far faster than the branchy formula.
const std::vector<float>& half_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t b = 0; b < 65536; ++b) t[b] = f16_to_f32(static_cast<uint16_t>(b));
    return t;
  }();
  return table;
}

}  // namespace

void upcast_to_f32(DType dtype, std::span<const std::byte> raw, std::span<float> out) {
  const auto n = static_cast<int64_t>(out.size());
  const std::byte* src = raw.data();
  float* dst = out.data();
  // Elementwise, so splitting the range across threads cannot change any bit.
  // Small tensors stay on one thread: starting the team would cost more.
  constexpr int64_t kParallelThreshold = 1 << 18;
  switch (dtype) {
    case DType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::BF16:
      // "simd" makes GCC vectorise this at -O2 (the project's optimisation level).
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        dst[i] = std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
      }
      return;
    case DType::F16: {
      const float* table = half_table().data();
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        dst[i] = table[bits];
      }
      return;
    }
    default:
      fail("upcast_to_f32: {} is not a float weight dtype", dtype_name(dtype));
  }
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : path_(path), file_(path), header_(parse_safetensors_header(file_.bytes(), path.string())) {}

const TensorInfo& SafetensorsFile::get(std::string_view name) const {
  const TensorInfo* tensor = find(name);
  if (tensor == nullptr) fail("{}: no tensor '{}'", path_.string(), name);
  return *tensor;
}

std::span<const std::byte> SafetensorsFile::raw(const TensorInfo& tensor) const {
  return file_.bytes().subspan(header_.data_offset + tensor.begin, tensor.nbytes());
}

void SafetensorsFile::read_f32(const TensorInfo& tensor, std::span<float> out) const {
  if (!is_float_weight_dtype(tensor.dtype))
    fail("{}: tensor '{}' has dtype {}; only F32, BF16 and F16 can be loaded as float weights", path_.string(),
         tensor.name, dtype_name(tensor.dtype));
  if (out.size() != tensor.numel())
    fail("{}: tensor '{}' has {} elements, destination holds {}", path_.string(), tensor.name, tensor.numel(), out.size());
  upcast_to_f32(tensor.dtype, raw(tensor), out);
}

std::vector<float> SafetensorsFile::read_f32(const TensorInfo& tensor) const {
  std::vector<float> out;
  if (!is_float_weight_dtype(tensor.dtype)) read_f32(tensor, out);  // throws the dtype error
  out.resize(tensor.numel());
  read_f32(tensor, out);
  return out;
}

}  // namespace qpu::io
