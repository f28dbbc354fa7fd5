#include "npu/inbox.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <optional>
#include <random>

#include "common/error.h"
#include "compiler/enable.h"
#include "compiler/gdn_layout.h"
#include "npu/idle_attention.h"
#include "npu/neurons.h"

namespace qpu::npu {

using compiler::GdnMemory;
using compiler::Program;
using compiler::ValueId;

namespace {

// Binade j of a nonzero part: |part| in [2^j, 2^(j+1)).
int binade(float part) {
  int e = 0;
  std::frexp(part, &e);
  return e - 1;
}

}  // namespace

int InboxEncoding::channel(float part) const {
  if (part == 0.0f) fail("inbox: the zero part has no channel");
  static_cast<void>(vocab.token(part));  // throws unless an 8-bit part in the window
  const int band = (binade(part) - vocab.jmin) / band_width;
  return 2 * band + (part < 0.0f ? 1 : 0);
}

float InboxEncoding::channel_value(float part) const {
  return std::ldexp(std::fabs(part), 5 - band_low(channel(part) / 2) - cell_exponent());
}

float InboxEncoding::decode_weight(int ch) const {
  if (ch < 0 || ch >= channels()) fail("inbox: no channel {}", ch);
  return std::ldexp(ch % 2 ? -1.0f : 1.0f, band_low(ch / 2) - 5 + cell_exponent());
}

std::vector<ValueId> InboxValues::inputs() const {
  std::vector<ValueId> v = channels;
  v.insert(v.end(), write_bits.begin(), write_bits.end());
  v.push_back(write_flag);
  v.insert(v.end(), read_bits.begin(), read_bits.end());
  v.push_back(read_flag);
  return v;
}

InboxValues inbox_values(Program& p, const InboxEncoding& encoding, int address_bits, const std::string& name) {
  InboxValues v;
  v.channels = p.values(name + ".channel", encoding.channels());
  v.write_bits = p.values(name + ".write_bit", address_bits);
  v.write_flag = p.value(name + ".write");
  v.read_bits = p.values(name + ".read_bit", address_bits);
  v.read_flag = p.value(name + ".read");
  v.hi = p.value(name + ".hi");
  v.lo = p.value(name + ".lo");
  v.out = p.value(name + ".out");
  return v;
}

GdnMemory inbox_memory(const InboxEncoding& encoding, const InboxValues& values) {
  if (static_cast<int>(values.channels.size()) != encoding.channels())
    fail("inbox: {} channel values for an encoding with {} channels", values.channels.size(), encoding.channels());
  // Cells are |part| 2^(5 - band_low) in [32, 2^(5 + width)): 0 or >= 18 through silu,
  // below 2^44; width <= 17 keeps them on a 2^-2 grid below 2^22 (exact overwrites).
  if (encoding.band_width < 1 || encoding.band_width > 39)
    fail("inbox: band width {} outside [1, 39] (cells must stay below 2^44)", encoding.band_width);
  GdnMemory m;
  m.key_bits = values.write_bits;
  m.write_flag = values.write_flag;
  m.key_tap = 3;  // the control token C
  m.query_bits = values.read_bits;
  m.read_flag = values.read_flag;
  m.query_tap = 0;
  // The read side's constants (the query's address complement, the output gate) read the
  // read flag instead of the rail (compiler::GdnMemory::query_enable): exact whatever the
  // read bits hold, and a token that reads nothing reads no rail on that side.
  m.query_enable = values.read_flag;
  m.data_exponent = encoding.cell_exponent();
  for (int part = 0; part < 3; ++part)
    for (int ch = 0; ch < encoding.channels(); ++ch) {
      m.data.push_back(values.channels[static_cast<size_t>(ch)]);
      m.data_taps.push_back(2 - part);  // p0 two tokens back, p2 the current token
      // One nonzero term per part: hi = p0, lo = p1 + p2 (= x - p0, exact in any order).
      m.out.push_back(part == 0 ? values.hi : values.lo);
      m.out_weights.push_back(encoding.decode_weight(ch));
    }
  return m;
}

void inbox(Program& p, const InboxEncoding& encoding, const InboxValues& values, const std::string& label) {
  p.gdn_memory(label, inbox_memory(encoding, values));
  // out = hi + lo: two copy neurons, a two-term down-sum whose exact value x is a float.
  p.mlp(label + " hi + lo", {detail::copy_neuron(values.out, values.hi), detail::copy_neuron(values.out, values.lo)});
  // hi and lo are +0 unless the token reads (z = 0 otherwise): the copy gates read the
  // read flag instead of the constant (compiler/enable.h), so the op is idle then too.
  if (values.read_flag != compiler::kOne) compiler::enable_constants(p, p.ops().size() - 1, values.read_flag);
}

InboxInputs value_token_inputs(const InboxEncoding& encoding, const InboxValues& values, float part) {
  InboxInputs in;
  for (ValueId c : values.channels) in.emplace_back(c, 0.0f);
  if (part != 0.0f) in[static_cast<size_t>(encoding.channel(part))].second = encoding.channel_value(part);
  return in;
}

namespace {

InboxInputs address_inputs(const std::vector<ValueId>& bits, ValueId flag, int64_t row) {
  if (row < 0 || (bits.size() < 63 && row >= (int64_t{1} << bits.size())))
    fail("inbox: row {} does not fit {} address bits", row, bits.size());
  InboxInputs in;
  for (size_t j = 0; j < bits.size(); ++j) in.emplace_back(bits[j], static_cast<float>((row >> j) & 1));
  in.emplace_back(flag, 1.0f);
  return in;
}

}  // namespace

InboxInputs write_token_inputs(const InboxValues& values, int64_t row) {
  return address_inputs(values.write_bits, values.write_flag, row);
}

InboxInputs read_token_inputs(const InboxValues& values, int64_t row) {
  return address_inputs(values.read_bits, values.read_flag, row);
}

void set_embedding_row(compiler::Interface& io, int64_t token, const InboxInputs& inputs) {
  if (token < 0 || token >= io.vocab_size) fail("inbox: token {} outside the vocabulary of {}", token, io.vocab_size);
  for (const auto& [v, x] : inputs) {
    const auto it = std::find(io.inputs.begin(), io.inputs.end(), v);
    if (it == io.inputs.end()) fail("inbox: value {} is not an interface input", v);
    io.input_rows[static_cast<size_t>(token) * io.inputs.size() + static_cast<size_t>(it - io.inputs.begin())] = x;
  }
}

InboxCheckpoint build_inbox_checkpoint(const InboxCheckpointOptions& o) {
  const compiler::GdnLayout g = compiler::GdnLayout::for_dims(o.key_dim, o.value_dim);
  const int bits = std::countr_zero(static_cast<uint64_t>(o.key_dim));
  InboxCheckpoint c;
  c.encoding = o.encoding;
  c.registers = g.rows();
  Program p;
  c.values = inbox_values(p, c.encoding, bits, "inbox");
  inbox(p, c.encoding, c.values, "inbox");
  if (o.idle_attention_layer) add_idle_attention_layer(p);
  compiler::Interface io;
  io.inputs = c.values.inputs();
  io.outputs = {c.values.out};
  const ValueVocab& vocab = c.encoding.vocab;
  c.first_write = vocab.first + vocab.size();
  c.first_read = c.first_write + c.registers;
  c.nop = c.first_read + c.registers;
  io.vocab_size = c.nop + 1;
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * io.inputs.size(), 0.0f);
  for (int64_t t = vocab.first; t < vocab.first + vocab.size(); ++t)
    set_embedding_row(io, t, value_token_inputs(c.encoding, c.values, vocab.value(t)));
  for (int64_t r = 0; r < c.registers; ++r) {
    set_embedding_row(io, c.first_write + r, write_token_inputs(c.values, r));
    set_embedding_row(io, c.first_read + r, read_token_inputs(c.values, r));
  }
  compiler::EmitOptions eo;
  eo.gdn_key_head_dim = o.key_dim;
  eo.gdn_value_head_dim = o.value_dim;
  c.compiled = compiler::compile(p, io, {}, eo);
  c.out_dim = c.compiled.allocation.dim(c.values.out);
  return c;
}

std::vector<int64_t> InboxCheckpoint::send(float x, int64_t reg) const {
  if (reg < 0 || reg >= registers) fail("inbox: no register {}", reg);
  const auto parts = split_parts_reference(x);
  return {first_write + reg, encoding.vocab.token(parts[0]), encoding.vocab.token(parts[1]),
          encoding.vocab.token(parts[2])};
}

namespace {

// Floats of the uplink window: 0 or |x| in [2^-47, 2^20), both signs.
std::vector<float> edge_floats() {
  std::vector<float> e = {0.0f, -0.0f, 0x1p-47f, -0x1p-47f, std::nextafter(0x1p20f, 0.0f),
                          -std::nextafter(0x1p20f, 0.0f), std::nextafter(0x1p-47f, 1.0f), 1.0f, -1.0f,
                          // parts that carry (p0 rounds up to the next binade) and negative lower parts
                          0x1.fffffep0f, -0x1.fffffep0f, 0x1.01ff02p0f, 0x1.fffe02p19f, 0x1.80808p-47f,
                          0x1.008082p0f, -0x1.7f7f7ep3f};
  for (int j = -47; j < 20; j += 3) {
    e.push_back(std::ldexp(1.0f, j));
    e.push_back(-std::ldexp(1.0f, j));
  }
  return e;
}

float random_float(std::mt19937_64& rng) {
  const uint64_t kind = rng() % 64;
  if (kind == 0) return 0.0f;
  if (kind == 1) return -0.0f;
  const int j = -47 + static_cast<int>(rng() % 67);
  uint32_t mantissa = static_cast<uint32_t>(rng() & 0x7fffff);
  if (kind < 6) mantissa &= 0x7f0000;       // p1 = p2 = 0
  else if (kind < 10) mantissa &= 0x7fff00;  // p2 = 0
  const float x = std::ldexp(1.0f + static_cast<float>(mantissa) * 0x1p-23f, j);
  return rng() % 2 ? -x : x;
}

}  // namespace

InboxStream random_inbox_stream(const InboxCheckpoint& c, int64_t floats, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> coin(0, 1);
  std::vector<std::optional<float>> regs(static_cast<size_t>(c.registers));
  std::vector<int64_t> written;
  const std::vector<float> edges = edge_floats();
  InboxStream s;
  auto emit = [&](int64_t token, float expected) {
    s.tokens.push_back(token);
    s.expected.push_back(expected);
  };
  emit(c.nop, 0.0f);  // header: nothing is read at host position 0
  while (s.floats_sent < floats) {
    const double action = coin(rng);
    if (action < 0.6) {
      const float x = s.floats_sent < static_cast<int64_t>(edges.size()) ? edges[static_cast<size_t>(s.floats_sent)]
                                                                         : random_float(rng);
      const auto reg = static_cast<int64_t>(rng() % static_cast<uint64_t>(c.registers));
      const auto parts = split_parts_reference(x);
      s.negative_p1 += parts[1] < 0.0f ? 1 : 0;
      s.negative_p2 += parts[2] < 0.0f ? 1 : 0;
      for (int64_t t : c.send(x, reg)) emit(t, 0.0f);
      auto& r = regs[static_cast<size_t>(reg)];
      if (r) ++s.overwrites;
      else written.push_back(reg);
      r = 0.0f + x;  // -0 goes up as +0 (the zero value token has no sign)
      ++s.floats_sent;
    } else if (action < 0.9) {
      const int64_t reg = !written.empty() && coin(rng) < 0.85
                              ? written[rng() % written.size()]
                              : static_cast<int64_t>(rng() % static_cast<uint64_t>(c.registers));
      const auto& r = regs[static_cast<size_t>(reg)];
      emit(c.read(reg), r ? *r : 0.0f);
      ++s.reads;
      s.reads_of_written += r ? 1 : 0;
    } else {
      emit(c.nop, 0.0f);
    }
  }
  return s;
}

}  // namespace qpu::npu
