#pragma once
// The golden-trace file `qpu ref --trace FILE` writes. A custom stream, not safetensors:
// records are written as forward runs (tens of MB per story, never held in memory), and
// safetensors needs every tensor's size in its header before the first byte of data.
//
// Layout, all little-endian:
//   "QPUTRACE"                      8 bytes
//   u32 version                     1
//   i32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
//   u32 kind_count, then kind_count x (u32 id, u32 name_length, name bytes)
//   u32 info_length, info bytes     free UTF-8 text: how the trace was made
//   records until the end of the file, each:
//     u32 kind, i32 pos, i32 layer, i32 head, u32 count, count x float32
// The kind table makes a file self-describing; the reader requires it to equal this
// program's table (trace.h), and every record's count to be trace_count(kind, pos).
#include <cstdint>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "reference/llama2_checkpoint.h"
#include "reference/trace.h"

namespace qpu::reference {

inline constexpr uint32_t kTraceVersion = 1;

struct TraceHeader {
  Llama2Config config;  // shared_classifier is not stored (false after reading)
  std::string info;
};

struct TraceRecord {
  TraceKind kind{};
  int pos = 0;
  int layer = -1;
  int head = -1;
  std::vector<float> values;
};

// Streams records to a file. Throws qpu::Error (naming the file) on I/O errors and on a
// record whose count or indices do not fit the model, so a bad file is never written.
class TraceWriter final : public TraceObserver {
 public:
  TraceWriter(const std::string& path, const TraceHeader& header);
  void record(TraceKind kind, int pos, int layer, int head, std::span<const float> values) override;
  void close();  // flushes; call before reading the file back
  uint64_t records() const { return records_; }

 private:
  void write(const void* data, size_t bytes);
  std::string path_;
  Llama2Config config_;
  std::vector<char> buffer_;  // out_'s buffer: declared first so that it outlives out_
  std::ofstream out_;
  uint64_t records_ = 0;
};

class TraceReader {
 public:
  explicit TraceReader(const std::string& path);  // reads and checks the header
  const TraceHeader& header() const { return header_; }
  // The next record, or false at the end of the file. Throws on a corrupt or truncated one.
  bool next(TraceRecord& record);

 private:
  void read_exact(void* data, size_t bytes, const char* what);
  std::string path_;
  std::ifstream in_;
  TraceHeader header_;
  uint64_t index_ = 0;   // records read
  uint64_t offset_ = 0;  // bytes read
};

struct TraceFile {
  TraceHeader header;
  std::vector<TraceRecord> records;
};
TraceFile read_trace(const std::string& path);

// Where two traces first differ, for stage tests: "pos 3, layer 1, head 5, att_prob
// index 2: expected 0x1.8p-3 (0x3e400000), got ...". Values compare as bits.
struct TraceDifference {
  uint64_t record = 0;  // index of the first differing record
  TraceKind kind{};
  int pos = 0, layer = -1, head = -1;
  size_t index = 0;     // first differing value; SIZE_MAX when the records themselves differ
  std::string message;
};
// nullopt when both files hold the same records with the same bits (the info text and
// the files' names may differ). The model configs must be equal.
std::optional<TraceDifference> first_trace_difference(const std::string& expected, const std::string& actual);

// Throws unless the record's indices and count are what `config` allows for its kind.
void check_trace_record(const Llama2Config& config, TraceKind kind, int pos, int layer, int head,
                        size_t count, const std::string& where);

}  // namespace qpu::reference
