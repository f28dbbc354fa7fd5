#include "npu/memory_suite.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "common/float_bits.h"
#include "engine/model.h"

namespace qpu::npu {

using compiler::Program;
using compiler::ValueId;

MemoryResult run_memory_suite(const MemoryOptions& o) {
  MemoryResult r;
  std::mt19937_64 rng(o.seed);
  const int n = o.address_bits;
  const int64_t D = o.row_values;
  Program p;
  compiler::AttnMemory m;
  m.key_bits = p.values("key", n);
  m.write_flag = p.value("write");
  m.data = p.values("data", static_cast<int>(D));
  m.query_bits = p.values("query", n);
  m.read_flag = p.value("read");
  m.out = p.values("out", static_cast<int>(D));
  p.memory("memory", m);
  compiler::Interface io;
  io.inputs = m.key_bits;
  io.inputs.push_back(m.write_flag);
  io.inputs.insert(io.inputs.end(), m.data.begin(), m.data.end());
  io.inputs.insert(io.inputs.end(), m.query_bits.begin(), m.query_bits.end());
  io.inputs.push_back(m.read_flag);
  const size_t width = io.inputs.size();
  const int64_t tokens = o.writes_per_sequence + o.reads_per_sequence;
  io.vocab_size = tokens;

  for (int64_t seq = 0; seq < o.sequences; ++seq) {
    // Distinct addresses for the writes; reads pick written ones at random.
    std::vector<uint32_t> addr(size_t{1} << n);
    std::iota(addr.begin(), addr.end(), 0u);
    std::shuffle(addr.begin(), addr.end(), rng);
    io.input_rows.assign(static_cast<size_t>(tokens) * width, 0.0f);
    std::vector<std::vector<float>> rows;
    for (int64_t t = 0; t < tokens; ++t) {
      float* row = &io.input_rows[static_cast<size_t>(t) * width];
      const bool write = t < o.writes_per_sequence;
      const uint32_t a = write ? addr[static_cast<size_t>(t)]
                               : addr[static_cast<size_t>(rng() % static_cast<uint64_t>(o.writes_per_sequence))];
      for (int b = 0; b < n; ++b) row[(write ? 0 : static_cast<size_t>(n + 1 + D)) + static_cast<size_t>(b)] =
          static_cast<float>((a >> b) & 1u);
      if (write) {
        row[static_cast<size_t>(n)] = 1.0f;
        for (int64_t d = 0; d < D; ++d) {
          const int e = -78 + static_cast<int>(rng() % 114);
          const float v = std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f, e);
          row[static_cast<size_t>(n + 1 + d)] = (rng() & 1) ? -v : v;
        }
      } else {
        row[width - 1] = 1.0f;
      }
    }
    const compiler::Compiled c = compiler::compile(p, io);
    engine::Model model(c.weights);
    engine::State state = model.new_state();
    std::vector<float> logits(static_cast<size_t>(c.weights.config.vocab_size));
    std::vector<float> hidden(static_cast<size_t>(c.weights.config.hidden_size));
    std::vector<int64_t> written_at(size_t{1} << n, -1);
    for (int64_t t = 0; t < tokens; ++t) {
      model.forward(t, state, logits, hidden);
      const float* row = &io.input_rows[static_cast<size_t>(t) * width];
      if (t < o.writes_per_sequence) {
        written_at[addr[static_cast<size_t>(t)]] = t;
        continue;
      }
      uint32_t a = 0;
      for (int b = 0; b < n; ++b)
        if (row[static_cast<size_t>(n + 1 + D + b)] != 0.0f) a |= 1u << b;
      const float* stored = &io.input_rows[static_cast<size_t>(written_at[a]) * width + static_cast<size_t>(n + 1)];
      for (int64_t d = 0; d < D; ++d) {
        const float got = hidden[static_cast<size_t>(c.allocation.dim(m.out[static_cast<size_t>(d)]))];
        ++r.values_read;
        if (float_bits(got) != float_bits(stored[d])) {
          if (r.mismatches++ == 0)
            r.first_mismatch = "address " + std::to_string(a) + " value " + std::to_string(d) + ": wrote " +
                               describe_float(stored[d]) + " read " + describe_float(got);
        }
      }
    }
    ++r.sequences;
  }
  return r;
}

}  // namespace qpu::npu
