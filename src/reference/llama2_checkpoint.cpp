#include "reference/llama2_checkpoint.h"

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "common/error.h"

namespace qpu::reference {

static_assert(std::endian::native == std::endian::little,
              "llama2.c checkpoints are little-endian and are read without byte swapping");

namespace {

// Sizes come from an untrusted header: every product is checked so that a hostile
// header cannot wrap around and pass the file-size check.
size_t checked_mul(size_t a, size_t b, const std::string& what) {
  size_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail("{}: header sizes overflow", what);
  return r;
}

size_t checked_add(size_t a, size_t b, const std::string& what) {
  size_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail("{}: header sizes overflow", what);
  return r;
}

int32_t read_i32(std::span<const std::byte> bytes, size_t index) {
  int32_t v = 0;
  std::memcpy(&v, bytes.data() + 4 * index, 4);
  return v;
}

// Tensor ranges in file order (run.c's memory_map_weights).
Llama2Layout compute_layout(const Llama2Config& c, const std::string& what) {
  const size_t dim = c.dim, hidden = c.hidden_dim, layers = c.n_layers;
  const size_t vocab = c.vocab_size, kv_dim = c.kv_dim();
  const size_t head_size = c.head_size();
  const auto mul = [&](size_t a, size_t b) { return checked_mul(a, b, what); };

  Llama2Layout l;
  size_t cursor = 0;
  const auto take = [&](Llama2Layout::Range& range, size_t count) {
    range = {cursor, count};
    cursor = checked_add(cursor, count, what);
  };
  take(l.token_embedding, mul(vocab, dim));
  take(l.rms_att, mul(layers, dim));
  take(l.wq, mul(layers, mul(dim, dim)));
  take(l.wk, mul(layers, mul(kv_dim, dim)));
  take(l.wv, mul(layers, mul(kv_dim, dim)));
  take(l.wo, mul(layers, mul(dim, dim)));
  take(l.rms_ffn, mul(layers, dim));
  take(l.w1, mul(layers, mul(hidden, dim)));
  take(l.w2, mul(layers, mul(dim, hidden)));
  take(l.w3, mul(layers, mul(hidden, dim)));
  take(l.rms_final, dim);
  // run.c: ptr += p->seq_len * head_size / 2, twice (integer division).
  take(l.freq_cis_real, mul(c.seq_len, head_size) / 2);
  take(l.freq_cis_imag, mul(c.seq_len, head_size) / 2);
  if (c.shared_classifier) {
    l.wcls = l.token_embedding;
  } else {
    take(l.wcls, mul(vocab, dim));
  }
  l.total_floats = cursor;
  // The file size in bytes must be representable too.
  (void)checked_add(mul(l.total_floats, sizeof(float)), 28, what);
  return l;
}

}  // namespace

Llama2Config parse_llama2_header(std::span<const std::byte, 28> header) {
  Llama2Config c;
  c.dim = read_i32(header, 0);
  c.hidden_dim = read_i32(header, 1);
  c.n_layers = read_i32(header, 2);
  c.n_heads = read_i32(header, 3);
  c.n_kv_heads = read_i32(header, 4);
  const int32_t vocab = read_i32(header, 5);
  c.seq_len = read_i32(header, 6);
  // run.c: shared_weights = vocab_size > 0; vocab_size = abs(vocab_size).
  c.shared_classifier = vocab > 0;
  // abs(INT32_MIN) is not representable; keep it negative so validation rejects it.
  c.vocab_size = vocab == std::numeric_limits<int32_t>::min() ? vocab : (vocab < 0 ? -vocab : vocab);
  return c;
}

void validate_llama2_config(const Llama2Config& c, const std::string& what) {
  const auto positive = [&](int value, const char* name) {
    if (value <= 0) fail("{}: header field {} = {} must be positive", what, name, value);
  };
  positive(c.dim, "dim");
  positive(c.hidden_dim, "hidden_dim");
  positive(c.n_layers, "n_layers");
  positive(c.n_heads, "n_heads");
  positive(c.n_kv_heads, "n_kv_heads");
  // parse_llama2_header leaves vocab_size at 0 or INT32_MIN when |vocab_size| is unusable.
  if (c.vocab_size <= 0) fail("{}: header field vocab_size = {} is out of range", what, c.vocab_size);
  positive(c.seq_len, "seq_len");
  if (c.dim % c.n_heads != 0)
    fail("{}: header n_heads = {} does not divide dim = {}", what, c.n_heads, c.dim);
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: header n_kv_heads = {} does not divide n_heads = {}", what, c.n_kv_heads, c.n_heads);
  // RoPE rotates the pairs (i, i+1) for even i < dim in q and i < kv_dim in k.
  if (c.dim % 2 != 0) fail("{}: header dim = {} must be even (RoPE rotates pairs)", what, c.dim);
  if (c.kv_dim() % 2 != 0)
    fail("{}: kv_dim = dim*n_kv_heads/n_heads = {} must be even (RoPE rotates pairs)", what, c.kv_dim());
  (void)compute_layout(c, what);  // the sizes must also fit in size_t
}

Llama2Layout llama2_layout(const Llama2Config& config) {
  validate_llama2_config(config, "llama2 config");
  return compute_layout(config, "llama2 config");
}

Llama2Checkpoint::Llama2Checkpoint(Llama2Config config, std::vector<float> floats)
    : config_(config), floats_(std::move(floats)) {
  validate_llama2_config(config_, "llama2 checkpoint");
  layout_ = compute_layout(config_, "llama2 checkpoint");
  if (floats_.size() != layout_.total_floats)
    fail("llama2 checkpoint: {} floats given, the header implies {}", floats_.size(), layout_.total_floats);
}

Llama2Weights Llama2Checkpoint::weights() const {
  const std::span<const float> all(floats_);
  const auto view = [&](const Llama2Layout::Range& r) { return all.subspan(r.offset, r.count); };
  const Llama2Layout& l = layout_;
  return {view(l.token_embedding), view(l.rms_att), view(l.wq), view(l.wk), view(l.wv),
          view(l.wo), view(l.rms_ffn), view(l.w1), view(l.w2), view(l.w3), view(l.rms_final),
          view(l.freq_cis_real), view(l.freq_cis_imag), view(l.wcls)};
}

Llama2Checkpoint load_llama2_checkpoint(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open llama2.c checkpoint: {}", name, std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size < 0) fail("{}: cannot determine the file size", name);
  if (size < 28)
    fail("{}: {} bytes is too short for the 28-byte llama2.c header (truncated file?)", name, size);

  std::array<std::byte, 28> header{};
  in.read(reinterpret_cast<char*>(header.data()), header.size());
  if (!in) fail("{}: cannot read the header", name);
  const Llama2Config config = parse_llama2_header(header);
  validate_llama2_config(config, name);
  const Llama2Layout layout = compute_layout(config, name);

  if (static_cast<size_t>(size) != layout.file_bytes()) {
    fail("{}: file is {} bytes but the header (dim {}, hidden_dim {}, n_layers {}, n_heads {}, "
         "n_kv_heads {}, vocab_size {}, seq_len {}) implies {} bytes ({}): truncated or not a "
         "version-0 llama2.c checkpoint",
         name, size, config.dim, config.hidden_dim, config.n_layers, config.n_heads,
         config.n_kv_heads, config.header_vocab_size(), config.seq_len, layout.file_bytes(),
         config.shared_classifier ? "shared classifier" : "unshared classifier");
  }
  std::vector<float> floats(layout.total_floats);
  in.read(reinterpret_cast<char*>(floats.data()),
          static_cast<std::streamsize>(floats.size() * sizeof(float)));
  if (!in) fail("{}: read error after the header", name);
  return Llama2Checkpoint(config, std::move(floats));
}

}  // namespace qpu::reference
