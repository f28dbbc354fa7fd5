#pragma once
// Helpers shared by the sample part's files (machine/sample_part.cpp, sample_topp_part.cpp):
// small float RAMs and constants. Internal to the sample part.
#include <string>
#include <vector>

#include "compiler/ir.h"
#include "npu/float_ram.h"

namespace qpu::machine::sample_ram {

using compiler::ValueId;

constexpr float kGateOn = 128.0f;  // silu(128) == 128: a gate of 128 flag passes a value exactly
// pm is 0 or in [2^-54, 4): wider than a RAM window, so the prob RAM stores pm itself when
// pm >= 2^-22 and pm 2^30 below (one of the two +-0), as the attention's prob RAM.
constexpr float kProbSplit = 0x1p-22f, kProbSmallScale = 0x1p30f;

inline size_t at(int i) { return static_cast<size_t>(i); }

// The kept RAM: slot c at head c mod kToppHeads, row c / kToppHeads, so a KEEP block's
// (at most 8) kept entries, whose slots are consecutive, go to distinct heads: each head
// takes at most one data-addressed write per cycle.
constexpr int kToppHeads = 8;
constexpr int kToppLowBinade = -25;  // kept p in [2^-24, 1], keep bits, slots and q in [0, 512]: [2^-25, 2^12)

inline int bits_for(int n) {
  int b = 0;
  while ((1 << b) < n) ++b;
  return b;
}

inline std::vector<ValueId> slice(const std::vector<ValueId>& v, int first, int count) {
  return {v.begin() + first, v.begin() + first + count};
}

// One head: its data (with negations made once for all heads of that data), written and
// wiped by `write`, read when `read`, into fresh out values.
inline npu::FloatRamHead one_row_head(compiler::Program& p, const std::vector<ValueId>& data,
                               const std::vector<ValueId>& negated, ValueId write, ValueId read,
                               const std::string& label) {
  npu::FloatRamHead h;
  h.data = data;
  h.negated = negated;
  h.write_flag = h.wipe_flag = write;
  h.read_flag = read;
  h.out = p.values(label, static_cast<int>(data.size()));
  return h;
}

// A one-row float RAM of one value (one_row_head, its own negation), `on` its enable too;
// returns the value it reads.
inline ValueId one_row_ram(compiler::Program& p, ValueId value, ValueId on, ValueId read, int low_binade,
                    const std::string& out_name, const std::string& label) {
  const npu::FloatRamHead h = one_row_head(p, {value}, {}, on, read, out_name);
  npu::float_ram(p, npu::FloatRamWindow{low_binade}, {h}, on, label);
  return h.out[0];
}

// A RAM of one value with a one-row head per block: head b written (and wiped) when
// writes[b], read when reads[b]; the negation made once. Returns the heads' reads.
inline std::vector<ValueId> per_block_ram(compiler::Program& p, ValueId value, const std::vector<ValueId>& writes,
                                   const std::vector<ValueId>& reads, ValueId enable, int low_binade,
                                   const std::string& out_name, const std::string& label) {
  std::vector<npu::FloatRamHead> one(1);
  one[0].data = {value};
  const auto neg = npu::float_ram_negations(p, one, enable, label);
  std::vector<npu::FloatRamHead> heads;
  std::vector<ValueId> outs;
  for (size_t b = 0; b < writes.size(); ++b) {
    heads.push_back(one_row_head(p, {value}, neg[0], writes[b], reads[b], out_name));
    outs.push_back(heads.back().out[0]);
  }
  npu::float_ram(p, npu::FloatRamWindow{low_binade}, heads, enable, label);
  return outs;
}

}  // namespace qpu::machine::sample_ram
