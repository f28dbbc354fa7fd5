#include "npu/gdn_memory_suite.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <random>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/gdn_layout.h"

namespace qpu::npu {

using compiler::GdnLayout;
using compiler::Program;
using compiler::ValueId;

namespace {

constexpr float kIntOffset = 4096.0f;  // integer cells: x + 4096 in [18, 8192)
constexpr int kFloatExponent = 8;      // float cells: x * 2^8 in [18, 2^44)
constexpr int kIntMin = -4078, kIntEnd = 4096;

struct Head {
  bool integer = false;
  int64_t data = 0;  // values per row
  size_t first_input = 0;
  std::vector<std::vector<float>> rows;  // the model: empty vector = row empty
};

float random_int_cell(std::mt19937_64& rng) {
  switch (rng() % 16) {
    case 0: return static_cast<float>(kIntMin);
    case 1: return static_cast<float>(kIntEnd - 1);
    case 2: return 0.0f;
    default: return static_cast<float>(kIntMin + static_cast<int>(rng() % (kIntEnd - kIntMin)));
  }
}

float random_float_cell(std::mt19937_64& rng) {
  const float lo = std::ldexp(GdnLayout::kMinCell, -kFloatExponent);  // 0x1.2p-4
  const float hi = std::nextafter(std::ldexp(1.0f, 44 - kFloatExponent), 0.0f);
  switch (rng() % 32) {
    case 0: return 0.0f;
    case 1: return lo;
    case 2: return hi;
    case 3: return std::nextafter(lo, 1.0f);
    default: {
      float x = 0;
      do {
        const int e = -4 + static_cast<int>(rng() % 40);
        x = std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f, e);
      } while (x < lo || x > hi);
      return x;
    }
  }
}

}  // namespace

GdnMemoryCase build_gdn_memory_case(const GdnMemoryOptions& o) {
  const GdnLayout g = GdnLayout::for_dims(o.key_head_dim, o.value_head_dim);
  const int n = std::countr_zero(static_cast<uint64_t>(o.key_head_dim));  // address bits
  const int64_t rows = g.rows();
  if (o.heads < 1 || o.tokens < 1) fail("gdn memory suite: needs >= 1 head and token");

  Program p;
  compiler::Interface io;
  std::vector<Head> heads(static_cast<size_t>(o.heads));
  std::vector<compiler::GdnMemory> ops;
  for (int64_t h = 0; h < o.heads; ++h) {
    Head& hd = heads[static_cast<size_t>(h)];
    hd.integer = h % 2 == 0;
    hd.data = g.capacity(hd.integer);
    hd.rows.assign(static_cast<size_t>(rows), {});
    const std::string pre = "h" + std::to_string(h) + ".";
    compiler::GdnMemory m;
    m.key_bits = p.values(pre + "key", n);
    m.write_flag = p.value(pre + "write");
    m.data = p.values(pre + "data", static_cast<int>(hd.data));
    m.query_bits = p.values(pre + "query", n);
    m.read_flag = p.value(pre + "read");
    m.wipe_flag = p.value(pre + "wipe");
    m.out = p.values(pre + "out", static_cast<int>(hd.data));
    m.offset = hd.integer ? kIntOffset : 0.0f;
    m.data_exponent = hd.integer ? 0 : kFloatExponent;
    hd.first_input = io.inputs.size();
    io.inputs.insert(io.inputs.end(), m.key_bits.begin(), m.key_bits.end());
    io.inputs.push_back(m.write_flag);
    io.inputs.insert(io.inputs.end(), m.data.begin(), m.data.end());
    io.inputs.insert(io.inputs.end(), m.query_bits.begin(), m.query_bits.end());
    io.inputs.push_back(m.read_flag);
    io.inputs.push_back(m.wipe_flag);
    ops.push_back(m);
    p.gdn_memory("gdn memory " + std::to_string(h), m);
  }
  const size_t width = io.inputs.size();
  GdnMemoryCase c;
  // Logits = the out values (the transformers cross-check compares them); token t is row t.
  for (const auto& m : ops) io.outputs.insert(io.outputs.end(), m.out.begin(), m.out.end());
  io.vocab_size = std::max<int64_t>(o.tokens, static_cast<int64_t>(io.outputs.size()));
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * width, 0.0f);
  const size_t n_out = io.outputs.size();
  c.expected.assign(static_cast<size_t>(o.tokens) * n_out, 0.0f);
  c.read.assign(static_cast<size_t>(o.tokens * o.heads), false);
  c.cells_per_head = rows * g.capacity(true);

  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  for (int64_t t = 0; t < o.tokens; ++t) {
    float* in = &io.input_rows[static_cast<size_t>(t) * width];
    size_t out_base = static_cast<size_t>(t) * n_out;
    for (int64_t h = 0; h < o.heads; ++h) {
      Head& hd = heads[static_cast<size_t>(h)];
      float* f = in + hd.first_input;
      auto set_bits = [&](float* bits, int64_t a) {
        for (int b = 0; b < n; ++b) bits[b] = static_cast<float>((a >> b) & 1);
      };
      const bool write = coin(rng) < o.write_probability;
      int64_t free_rows = 0;
      for (const auto& r : hd.rows) free_rows += r.empty() ? 1 : 0;
      const bool wipe = coin(rng) < o.wipe_probability || (write && !hd.integer && free_rows == 0);
      if (wipe) {
        f[2 * n + 2 + hd.data] = 1.0f;
        for (auto& r : hd.rows) r.clear();
        ++c.wipes;
      }
      if (write) {
        int64_t a = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
        if (!hd.integer) {  // float cells: write-once rows, pick a free one
          while (!hd.rows[static_cast<size_t>(a)].empty()) a = (a + 1) % rows;
        } else if (free_rows < rows && !wipe && coin(rng) < 0.3) {  // integer cells: overwrite often
          while (hd.rows[static_cast<size_t>(a)].empty()) a = (a + 1) % rows;
        }
        set_bits(f, a);
        f[n] = 1.0f;
        auto& row = hd.rows[static_cast<size_t>(a)];
        if (!row.empty()) ++c.overwrites;
        row.resize(static_cast<size_t>(hd.data));
        for (int64_t d = 0; d < hd.data; ++d) {
          row[static_cast<size_t>(d)] = hd.integer ? random_int_cell(rng) : random_float_cell(rng);
          f[n + 1 + d] = row[static_cast<size_t>(d)];
        }
        c.values_written += hd.data;
      } else {
        // Junk data and key with the write flag 0 must change nothing.
        set_bits(f, static_cast<int64_t>(rng() % static_cast<uint64_t>(rows)));
        for (int64_t d = 0; d < hd.data; ++d) f[n + 1 + d] = hd.integer ? random_int_cell(rng) : random_float_cell(rng);
      }
      // Two-hot reads are exact from the second token on (npu-gdn-memory.md).
      const bool read = coin(rng) < o.read_probability && (t > 0 || !g.two_hot);
      c.read[static_cast<size_t>(t * o.heads + h)] = read;
      if (read) {
        // Mostly rows that hold data (after this token's wipe and write), some at random.
        std::vector<int64_t> full;
        for (int64_t a = 0; a < rows; ++a)
          if (!hd.rows[static_cast<size_t>(a)].empty()) full.push_back(a);
        const int64_t a = !full.empty() && coin(rng) < 0.85 ? full[rng() % full.size()]
                                                            : static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
        set_bits(f + n + 1 + hd.data, a);
        f[2 * n + 1 + hd.data] = 1.0f;
        const auto& row = hd.rows[static_cast<size_t>(a)];
        for (int64_t d = 0; d < hd.data; ++d)
          c.expected[out_base + static_cast<size_t>(d)] = row.empty() ? 0.0f : 0.0f + row[static_cast<size_t>(d)];
        c.values_read += hd.data;
        if (!row.empty()) c.values_read_from_written_rows += hd.data;
      } else {
        set_bits(f + n + 1 + hd.data, static_cast<int64_t>(rng() % static_cast<uint64_t>(rows)));
      }
      out_base += static_cast<size_t>(hd.data);
    }
  }
  compiler::EmitOptions eo;
  eo.gdn_key_head_dim = o.key_head_dim;
  eo.gdn_value_head_dim = o.value_head_dim;
  c.compiled = compiler::compile(p, io, {}, eo);
  for (ValueId v : io.outputs) c.out_dims.push_back(c.compiled.allocation.dim(v));
  return c;
}

GdnMemoryResult run_gdn_memory_suite(const GdnMemoryOptions& o, const HostFactory& host) {
  const GdnMemoryCase c = build_gdn_memory_case(o);
  GdnMemoryResult r;
  r.values_written = c.values_written;
  r.values_read = c.values_read;
  r.values_read_from_written_rows = c.values_read_from_written_rows;
  r.overwrites = c.overwrites;
  r.wipes = c.wipes;
  r.hidden_size = c.compiled.weights.config.hidden_size;
  r.cells_per_head = c.cells_per_head;
  const Forward forward = host(c.compiled.weights);
  std::vector<float> hidden(static_cast<size_t>(r.hidden_size));
  const size_t n_out = c.out_dims.size();
  double seconds = 0;
  for (int64_t t = 0; t < o.tokens; ++t) {
    const auto t0 = std::chrono::steady_clock::now();
    forward(t, hidden);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (size_t i = 0; i < n_out; ++i) {
      const float want = c.expected[static_cast<size_t>(t) * n_out + i];
      const float got = hidden[static_cast<size_t>(c.out_dims[i])];
      if (float_bits(got) != float_bits(want) && r.mismatches++ == 0)
        r.first_mismatch = "token " + std::to_string(t) + " out " + std::to_string(i) + ": expected " +
                           describe_float(want) + " got " + describe_float(got);
    }
    ++r.tokens;
  }
  r.seconds_per_token = seconds / static_cast<double>(o.tokens);
  return r;
}

}  // namespace qpu::npu
