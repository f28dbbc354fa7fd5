#pragma once
// The float RAM: store floats of either sign that a unit computed in this host cycle
// into rows of a GDN memory (compiler::GdnMemory, docs/npu-gdn-memory.md), to be read
// back, bit for bit, by a deeper layer in a later cycle (docs/npu-units.md, "Float RAM").
//
// Window: a float x is +-0 or has |x| in [2^low, 2^(low+37)). Cells are float cells
// (offset 0) with data exponent e = 7 - low, so a nonzero |x| becomes a cell in
// [128, 2^44): silu's identity range ([18, oo)) on the way in, and below 2^44, the
// bound of the gated norm's rails.
//
// Sign split by silu itself: every float has two data columns, x and nx = -x (one MLP
// op of copy neurons writes nx, one sublayer before the memory), decoded with out
// weights +1 and -1 into the SAME out value. The memory's v path is silu(conv(v)):
// silu(c) = c for c >= 18 and silu(c) = -0 for c <= -128 (1 + e^128 overflows to inf in
// fp32), so exactly one column holds |x| * 2^e and the other +-0. A read therefore adds
// one live term (x) and one +-0 term into out: exact in any order. A row written with
// x = +-0 holds +-0 in both columns and reads +0 (so -0 reads back as +0).
//
// Rows are write-once between wipes: a float cell overwritten by another float needs
// delta = new - old exact, which it is not in general. A head's optional wipe flag
// empties every row before the write of the same token, so a writer that refills a
// head sets wipe and write together.
//
// Idle: the negation neurons' constant (the copy gate) is the unit's `enable` value
// (compiler::enable_constants): with enable = 0 and zero operands the gates are 0 too
// (an all-zero unit the input-sparse engine skips) and nx is +-0; with write and read
// flags 0 the memory changes nothing and its out values read +0.
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/gdn_layout.h"
#include "compiler/ir.h"

namespace qpu::npu {

struct FloatRamWindow {
  static constexpr int kBinades = 37;  // cells in [2^7, 2^44)
  int low_binade = -33;                // nonzero |x| in [2^low, 2^(low + 37))

  int data_exponent() const { return 7 - low_binade; }
  // True for +-0 and for |x| inside the window (what the RAM stores exactly).
  bool holds(float x) const;
};

// Which values one head stores and reads. data[i] is stored at row key_bits when
// write_flag is 1 and added into out[i] from row query_bits when read_flag is 1 (out[i]
// must hold +0 then, as a fresh value of the cycle does: the read is its one live term).
struct FloatRamHead {
  std::vector<compiler::ValueId> data;        // <= floats_per_row floats
  std::vector<compiler::ValueId> key_bits;    // row written (LSB first)
  compiler::ValueId write_flag = compiler::kOne;
  compiler::ValueId wipe_flag = compiler::kNever;  // kNever: never wiped
  std::vector<compiler::ValueId> query_bits;  // row read
  compiler::ValueId read_flag = compiler::kOne;
  std::vector<compiler::ValueId> out;         // same size as data
  int key_tap = 0;                            // conv taps (ir.h): operands of token t - tap
  int query_tap = 0;
  int data_tap = 0;                           // for every data value (and its negation)
  // What the memory's constants read instead of the rail (compiler::GdnMemory::key_enable,
  // query_enable), so that an idle RAM reads only +-0 dims: exactly 1 or +-0, and +-0
  // only where the write (read) flag and key (query) bits are +-0; taps 0. kOne: the
  // read flag for the read side (exact whatever the query bits), the write flag for a
  // head without key bits, else the rail (float_ram_memory).
  compiler::ValueId write_enable = compiler::kOne;
  compiler::ValueId read_enable = compiler::kOne;
  // Optional: values that already hold -data[i] (same size as data), e.g. written by
  // the producer itself with a second, mirrored down term (round-to-nearest is
  // symmetric, so the mirrored terms of an exact sum give exactly its negation). Empty:
  // the negation op makes them, one MLP sublayer before the memory.
  std::vector<compiler::ValueId> negated;
};

// Floats one row of a head of this shape holds: two data columns per float.
int64_t floats_per_row(const compiler::GdnLayout& layout);

// The negation op (one copy neuron per distinct data value of the heads without their
// own `negated`) with its constants replaced by `enable` (kOne: always on). Returns,
// per head and data slot, the value that holds -x. Appends one MLP op, or none when
// every head brings its negations.
std::vector<std::vector<compiler::ValueId>> float_ram_negations(compiler::Program& p,
                                                               const std::vector<FloatRamHead>& heads,
                                                               compiler::ValueId enable, const std::string& label);

// The GdnMemory of one head: columns x_0, nx_0, x_1, nx_1, ... decoded with +1 and -1
// into out_0, out_0, out_1, out_1, ...
compiler::GdnMemory float_ram_memory(const FloatRamWindow& window, const FloatRamHead& head,
                                     const std::vector<compiler::ValueId>& negated);

// Appends the negation op and one GdnMemory per head ("<label> head <h>"). Throws
// qpu::Error naming the label and head for a window outside [-53, -1] (the data
// exponent 7 - low must be <= 60, and |x| < 2^36 keeps x inside the residual window
// of norm exponent 48), an empty head, data and out of different sizes, key and
// query bits of different lengths, or an out value that repeats (in any head) or is
// also an operand of the RAM, or `negated` of the wrong size. Rows too short for a head's data fail at compile time
// (the emitter names the op).
void float_ram(compiler::Program& p, const FloatRamWindow& window, const std::vector<FloatRamHead>& heads,
               compiler::ValueId enable, const std::string& label);

}  // namespace qpu::npu
