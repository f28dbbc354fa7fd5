#include "reference/trace_file.h"

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "common/float_bits.h"

namespace qpu::reference {
namespace {

static_assert(std::endian::native == std::endian::little, "trace files are written as host floats");

constexpr std::array<char, 8> kMagic = {'Q', 'P', 'U', 'T', 'R', 'A', 'C', 'E'};
constexpr size_t kRecordHeaderBytes = 20;
constexpr uint32_t kMaxNameLength = 64;
constexpr uint32_t kMaxInfoLength = 1u << 20;

std::array<int32_t, 7> config_fields(const Llama2Config& c) {
  return {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len};
}

}  // namespace

void check_trace_record(const Llama2Config& config, TraceKind kind, int pos, int layer, int head,
                        size_t count, const std::string& where) {
  const TraceKindInfo* info = find_trace_kind(static_cast<uint32_t>(kind));
  if (info == nullptr) fail("{}: unknown trace kind id {}", where, static_cast<uint32_t>(kind));
  if (pos < 0 || pos >= config.seq_len)
    fail("{}: {} at pos {} outside [0, seq_len = {})", where, info->name, pos, config.seq_len);
  const bool in_layer = info->scope != TraceScope::kPosition;
  if (in_layer ? (layer < 0 || layer >= config.n_layers) : layer != -1)
    fail("{}: {} at pos {} has layer {} ({})", where, info->name, pos, layer,
         in_layer ? fmt::format("expected 0..{}", config.n_layers - 1) : std::string("expected -1"));
  const bool in_head = info->scope == TraceScope::kHead;
  if (in_head ? (head < 0 || head >= config.n_heads) : head != -1)
    fail("{}: {} at pos {} layer {} has head {} ({})", where, info->name, pos, layer, head,
         in_head ? fmt::format("expected 0..{}", config.n_heads - 1) : std::string("expected -1"));
  const size_t want = trace_count(kind, config, pos);
  if (count != want)
    fail("{}: {} at pos {} layer {} head {} has {} values, the model gives {}", where, info->name, pos, layer,
         head, count, want);
}

TraceWriter::TraceWriter(const std::string& path, const TraceHeader& header)
    : path_(path), config_(header.config), buffer_(1 << 20) {
  validate_llama2_config(config_, path_);
  if (header.info.size() > kMaxInfoLength) fail("{}: trace info longer than {} bytes", path_, kMaxInfoLength);
  out_.rdbuf()->pubsetbuf(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) fail("{}: cannot open for writing", path_);
  write(kMagic.data(), kMagic.size());
  write(&kTraceVersion, 4);
  const auto fields = config_fields(config_);
  write(fields.data(), fields.size() * 4);
  const auto kinds = trace_kinds();
  const auto kind_count = static_cast<uint32_t>(kinds.size());
  write(&kind_count, 4);
  for (const TraceKindInfo& k : kinds) {
    const auto id = static_cast<uint32_t>(k.kind);
    const auto length = static_cast<uint32_t>(k.name.size());
    write(&id, 4);
    write(&length, 4);
    write(k.name.data(), k.name.size());
  }
  const auto info_length = static_cast<uint32_t>(header.info.size());
  write(&info_length, 4);
  write(header.info.data(), header.info.size());
}

void TraceWriter::write(const void* data, size_t bytes) {
  out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out_) fail("{}: write error", path_);
}

void TraceWriter::record(TraceKind kind, int pos, int layer, int head, std::span<const float> values) {
  check_trace_record(config_, kind, pos, layer, head, values.size(), path_ + ": writing");
  const uint32_t fields[5] = {static_cast<uint32_t>(kind), static_cast<uint32_t>(pos),
                              static_cast<uint32_t>(layer), static_cast<uint32_t>(head),
                              static_cast<uint32_t>(values.size())};
  write(fields, sizeof fields);
  write(values.data(), values.size_bytes());
  records_++;
}

void TraceWriter::close() {
  out_.close();
  if (!out_) fail("{}: write error", path_);
}

TraceReader::TraceReader(const std::string& path) : path_(path) {
  in_.open(path_, std::ios::binary);
  if (!in_) fail("{}: cannot open trace file", path_);
  std::array<char, 8> magic{};
  read_exact(magic.data(), magic.size(), "magic");
  if (magic != kMagic) fail("{}: not a qpu trace file (no QPUTRACE magic)", path_);
  uint32_t version = 0;
  read_exact(&version, 4, "version");
  if (version != kTraceVersion) fail("{}: trace version {}, this qpu reads version {}", path_, version, kTraceVersion);
  std::array<int32_t, 7> f{};
  read_exact(f.data(), f.size() * 4, "model config");
  Llama2Config& c = header_.config;
  c.dim = f[0], c.hidden_dim = f[1], c.n_layers = f[2], c.n_heads = f[3], c.n_kv_heads = f[4];
  c.vocab_size = f[5], c.seq_len = f[6], c.shared_classifier = false;
  validate_llama2_config(c, path_ + ": trace header");

  uint32_t kind_count = 0;
  read_exact(&kind_count, 4, "kind count");
  const auto kinds = trace_kinds();
  if (kind_count != kinds.size())
    fail("{}: the trace has {} record kinds, this qpu knows {}: written by another version", path_, kind_count,
         kinds.size());
  for (const TraceKindInfo& k : kinds) {
    uint32_t id = 0, length = 0;
    read_exact(&id, 4, "kind id");
    read_exact(&length, 4, "kind name length");
    if (length > kMaxNameLength) fail("{}: kind {} has a name of {} bytes", path_, id, length);
    std::string name(length, '\0');
    read_exact(name.data(), length, "kind name");
    if (id != static_cast<uint32_t>(k.kind) || name != k.name)
      fail("{}: kind table entry {} '{}' differs from this qpu's {} '{}': written by another version", path_, id,
           name, static_cast<uint32_t>(k.kind), k.name);
  }
  uint32_t info_length = 0;
  read_exact(&info_length, 4, "info length");
  if (info_length > kMaxInfoLength) fail("{}: info of {} bytes (corrupt header)", path_, info_length);
  header_.info.resize(info_length);
  read_exact(header_.info.data(), info_length, "info");
}

void TraceReader::read_exact(void* data, size_t bytes, const char* what) {
  in_.read(static_cast<char*>(data), static_cast<std::streamsize>(bytes));
  const auto got = static_cast<size_t>(in_.gcount());
  if (got != bytes)
    fail("{}: truncated at byte {}: {} needs {} bytes, {} left (record {})", path_, offset_ + got, what, bytes,
         got, index_);
  offset_ += bytes;
}

bool TraceReader::next(TraceRecord& record) {
  if (in_.peek() == std::char_traits<char>::eof()) {
    if (in_.bad()) fail("{}: read error at byte {}", path_, offset_);
    return false;
  }
  uint32_t fields[5] = {};
  static_assert(sizeof fields == kRecordHeaderBytes);
  read_exact(fields, sizeof fields, "record header");
  const std::string where = fmt::format("{}: record {} at byte {}", path_, index_, offset_ - kRecordHeaderBytes);
  record.kind = static_cast<TraceKind>(fields[0]);
  record.pos = static_cast<int>(fields[1]);
  record.layer = static_cast<int>(fields[2]);
  record.head = static_cast<int>(fields[3]);
  check_trace_record(header_.config, record.kind, record.pos, record.layer, record.head, fields[4], where);
  record.values.resize(fields[4]);
  read_exact(record.values.data(), record.values.size() * 4, "record values");
  index_++;
  return true;
}

TraceFile read_trace(const std::string& path) {
  TraceReader reader(path);
  TraceFile file{reader.header(), {}};
  TraceRecord r;
  while (reader.next(r)) file.records.push_back(std::move(r));
  return file;
}

std::optional<TraceDifference> first_trace_difference(const std::string& expected, const std::string& actual) {
  TraceReader a(expected), b(actual);
  const Llama2Config &ca = a.header().config, &cb = b.header().config;
  if (ca.dim != cb.dim || ca.hidden_dim != cb.hidden_dim || ca.n_layers != cb.n_layers || ca.n_heads != cb.n_heads ||
      ca.n_kv_heads != cb.n_kv_heads || ca.vocab_size != cb.vocab_size || ca.seq_len != cb.seq_len)
    fail("{} and {} are traces of different models", expected, actual);
  TraceRecord ra, rb;
  for (uint64_t i = 0;; i++) {
    const bool more_a = a.next(ra), more_b = b.next(rb);
    if (!more_a && !more_b) return std::nullopt;
    TraceDifference d;
    d.record = i;
    const TraceRecord& r = more_a ? ra : rb;
    d.kind = r.kind, d.pos = r.pos, d.layer = r.layer, d.head = r.head, d.index = SIZE_MAX;
    const auto where = [](const TraceRecord& x) {
      return fmt::format("pos {}, layer {}, head {}, {}", x.pos, x.layer, x.head, trace_kind_info(x.kind).name);
    };
    if (!more_a || !more_b) {
      d.message = fmt::format("record {}: {} ends here, the other has {}", i, more_a ? actual : expected, where(r));
      return d;
    }
    if (ra.kind != rb.kind || ra.pos != rb.pos || ra.layer != rb.layer || ra.head != rb.head ||
        ra.values.size() != rb.values.size()) {
      d.message = fmt::format("record {}: expected {}, got {}", i, where(ra), where(rb));
      return d;
    }
    for (size_t j = 0; j < ra.values.size(); j++) {
      if (float_bits(ra.values[j]) == float_bits(rb.values[j])) continue;
      d.index = j;
      d.message = fmt::format("record {}: {} index {}: expected {}, got {}", i, where(ra), j,
                              describe_float(ra.values[j]), describe_float(rb.values[j]));
      return d;
    }
  }
}

}  // namespace qpu::reference
