#pragma once
// The INBOX: the looped machine's way to store a float that came up through the
// uplink (npu/uplink.h) into a GDN register, using Qwen3.5's causal conv1d taps
// (docs/npu-gdn-memory.md, "The INBOX").
//
// A float goes up as four host tokens: a control token C whose embedding names the
// destination (write flag + row address bits), then the value tokens of its three
// parts p0, p1, p2 (split_parts). At the cycle whose input token is p2, a GDN layer's
// conv taps see C at tap 3, p0 at tap 2, p1 at tap 1 and p2 at tap 0, so ONE GdnMemory
// with key_tap 3 and data taps 2/1/0 writes the float's parts into the destination row.
// The tokens three back from every other cycle carry no key bits (value tokens, NOP
// and read tokens set no write flag), so those writes are exact no-ops.
//
// A part reaches its cell through silu, which is exact only for 0 or values >= 18: the
// value token's embedding puts |part| * 2^(5 - jlo(band)) (in [32, 2^(5 + band_width)))
// into the channel of its (sign, band of binades); every channel is a data column per
// tap, and the read decodes column (band, sign) with weight sign * 2^(jlo(band) - 5).
// The p0 columns decode into `hi`, the p1 and p2 columns into `lo` (= p1 + p2: two
// nonzero terms, exact in any order), and the same layer's MLP adds out = hi + lo
// (= x, exact). The three parts do NOT add exactly in every order: when p0 rounds up
// into the next binade, p0 + p2 can round (docs/npu-gdn-memory.md, "The INBOX").
// Bands of <= 17 binades keep every cell on a grid of 2^-2 below 2^22, so overwriting
// a register (a whole-row write over old cells) is exact as well.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compiler/emit.h"
#include "compiler/ir.h"
#include "npu/uplink.h"

namespace qpu::npu {

// How value tokens map to channels.
struct InboxEncoding {
  ValueVocab vocab;
  int band_width = 16;  // binades per band; <= 17 for exact overwrites, <= 39 for cells < 2^44

  int bands() const { return (vocab.jmax - vocab.jmin + band_width) / band_width; }
  // Cells are channel values times 2^cell_exponent: channel values stay below 2^36
  // (the residual window of norm exponent 48) when bands are wider than 31 binades.
  int cell_exponent() const { return std::max(0, band_width + 5 - 36); }
  int channels() const { return 2 * bands(); }  // (band, sign)
  // Lowest binade of a band.
  int band_low(int band) const { return vocab.jmin + band * band_width; }
  // Channel of a nonzero part (throws for 0 or a part outside the vocabulary).
  int channel(float part) const;
  // The embedding value of a part in its channel: |part| * 2^(5 - band_low - cell_exponent).
  float channel_value(float part) const;
  // The decode weight of channel ch: sign * 2^(band_low - 5 + cell_exponent).
  float decode_weight(int channel) const;
};

// The residual values an inbox reads (set by token embeddings) and writes.
struct InboxValues {
  std::vector<compiler::ValueId> channels;    // encoding.channels(), set by value tokens
  std::vector<compiler::ValueId> write_bits;  // destination row of a write token (LSB first)
  compiler::ValueId write_flag = compiler::kOne;
  std::vector<compiler::ValueId> read_bits;   // row read by a read token
  compiler::ValueId read_flag = compiler::kOne;
  compiler::ValueId hi = compiler::kOne;      // += p0 of the row read
  compiler::ValueId lo = compiler::kOne;      // += p1 + p2 of the row read
  compiler::ValueId out = compiler::kOne;     // += hi + lo: the float of the row read

  // Every value a token embedding sets (for Interface::inputs).
  std::vector<compiler::ValueId> inputs() const;
};

// Fresh values for an inbox with `address_bits` address bits.
InboxValues inbox_values(compiler::Program& p, const InboxEncoding& encoding, int address_bits,
                         const std::string& name);

// The GDN memory of an inbox: key (write bits, write flag) at tap 3, data = the
// channels at taps 2, 1, 0 (parts p0, p1, p2), query (read bits, read flag) at tap 0,
// the p0 columns decoded into `hi`, the p1 and p2 columns into `lo`. One head holds
// 2^bits rows (dk - 1 for a two-hot key dim, e.g. 127 registers for dk = 128) and
// needs 3 * channels data columns (36 for the default encoding).
compiler::GdnMemory inbox_memory(const InboxEncoding& encoding, const InboxValues& values);
// Appends that op and the MLP op out += hi + lo (2 neurons; it lands in the same
// host layer's MLP sublayer, so the inbox costs 1 mixer + 1 MLP sublayer, 0 layers).
void inbox(compiler::Program& p, const InboxEncoding& encoding, const InboxValues& values, const std::string& label);

// What a token's embedding row sets, as (value, number) pairs over values.inputs().
using InboxInputs = std::vector<std::pair<compiler::ValueId, float>>;
InboxInputs value_token_inputs(const InboxEncoding& encoding, const InboxValues& values, float part);
InboxInputs write_token_inputs(const InboxValues& values, int64_t row);
InboxInputs read_token_inputs(const InboxValues& values, int64_t row);
// Writes pairs into row `token` of interface.input_rows (every value must be an input).
void set_embedding_row(compiler::Interface& interface, int64_t token, const InboxInputs& inputs);

// A test checkpoint: vocabulary = the value tokens [0, vocab.size()), then "write
// register r" and "read register r" for r < registers, then NOP. Logit 0 = out.
struct InboxCheckpointOptions {
  InboxEncoding encoding;
  int64_t key_dim = 128;          // GDN head dims
  int64_t value_dim = 128;
  bool idle_attention_layer = true;  // transformers 5.24.0 needs one; HostSim rejects it
};
struct InboxCheckpoint {
  compiler::Compiled compiled;
  InboxEncoding encoding;
  InboxValues values;
  int64_t registers = 0;
  int64_t first_write = 0, first_read = 0, nop = 0;  // token ids
  int64_t out_dim = 0;                               // residual dim of out

  std::vector<int64_t> send(float x, int64_t reg) const;  // C_write(reg), p0, p1, p2
  int64_t read(int64_t reg) const { return first_read + reg; }
};
InboxCheckpoint build_inbox_checkpoint(const InboxCheckpointOptions& options);

// A random token stream over a checkpoint and the out value each token must produce.
struct InboxStream {
  std::vector<int64_t> tokens;
  std::vector<float> expected;  // per token: the float of the register read, else +0
  int64_t floats_sent = 0, overwrites = 0, reads = 0, reads_of_written = 0;
  int64_t negative_p1 = 0, negative_p2 = 0;  // parts of the floats sent
};
// Starts with a NOP header (no read at host position 0), then `floats` sends of random
// floats in the uplink window (and edge cases) into random registers, interleaved
// with reads (mostly of written registers) and NOPs.
InboxStream random_inbox_stream(const InboxCheckpoint& c, int64_t floats, uint64_t seed);

}  // namespace qpu::npu
