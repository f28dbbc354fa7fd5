#include "machine/testing/segment_machine.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "compiler/enable.h"
#include "machine/carry_crossing.h"
#include "machine/crossing_routine.h"
#include "npu/float_ram.h"
#include "npu/primitives.h"
#include "npu/unit_attention.h"

namespace qpu::machine {

using compiler::kOne;
using compiler::Lin;
using compiler::Neuron;
using compiler::ValueId;

namespace {

constexpr int kRowsPerHead = 16;  // rows of one term RAM head (4 address bits)
constexpr int kRowBits = 4;
constexpr int kTermLowBinade = -26;

std::string indexed(const char* name, int i) { return std::string(name) + "." + std::to_string(i); }
size_t at(int i) { return static_cast<size_t>(i); }
int bits_for(int n) {  // bits of the integers 0 .. n - 1
  int b = 1;
  while ((1 << b) < n) ++b;
  return b;
}

// The token inputs a micro-op sets to name row bits `bits` of row r.
void set_bits(MicroOp& op, const std::vector<ValueId>& bits, int r) {
  for (size_t b = 0; b < bits.size(); ++b)
    if ((r >> b) & 1) op.sets.push_back({bits[b], 1.0f});
}

}  // namespace

bool segment_machine_holds(float term) {
  return term == 0.0f || (std::fabs(term) >= 0x1p-26f && std::fabs(term) < 0x1p11f);
}

SegmentMachine build_segment_machine(const SegmentMachineOptions& o) {
  const int w = o.width;
  if (w < 1 || w > 31) fail("segment machine: width {} outside [1, 31]", w);
  if (o.capacity < w || o.capacity > 4096 || o.capacity % w != 0)
    fail("segment machine: capacity {} is not a multiple of the width {} in [{}, 4096]", o.capacity, w, w);
  const int S = o.capacity / w, heads = (S + kRowsPerHead - 1) / kRowsPerHead;

  std::vector<std::string> names = {"HDR", "NOP", "DONE", "WN"};
  for (int i = 0; i < w; ++i) names.push_back(indexed("WT", i));
  for (int r = 0; r < S; ++r) names.push_back(indexed("PUT", r));
  for (int s = 0; s < S; ++s)
    for (const char* n : {"SEG", "NX"}) names.push_back(indexed(n, s));
  for (const std::string& n : CrossingRoutine::names(1)) names.push_back(n);
  AssemblerOptions ao;
  static_cast<HostOptions&>(ao) = o;
  ao.elements = std::max(w, 2);
  Assembler as(ao, names, "DONE");
  compiler::Program& p = as.program();
  const Assembler::Scalar n_reg = as.scalar_register("N");
  constexpr int64_t kCarryRegister = 1;
  CrossingRoutine cross(as, 1, kCarryRegister);

  // PUT.r: register 0 (the segment's terms) into row r of the term RAM.
  const ValueId put_on = as.input("put.on");
  const std::vector<ValueId> put_head = as.inputs("put.head", heads), put_row = as.inputs("put.row", kRowBits);
  // SEG.s's controls: its enable, s in binary (token inputs are 0/1 flags: each clears
  // itself), the head and row it reads. NX.s's: its enable and s + 1 in binary.
  const int index_bits = bits_for(S + 1);
  const ValueId seg_on = as.input("seg.on");
  const std::vector<ValueId> seg_index = as.inputs("seg.index", index_bits);
  const std::vector<ValueId> seg_head = as.inputs("seg.head", heads), seg_row = as.inputs("seg.row", kRowBits);
  const ValueId nx_on = as.input("nx.on");
  const std::vector<ValueId> nx_next = as.inputs("nx.next", index_bits);
  const ValueId send = as.input("send.on");

  const size_t first_put = p.ops().size();
  const std::vector<ValueId> terms_in = as.gated(as.register_out(), {put_on}, "put.terms");
  npu::FloatRamHead data;
  data.data = terms_in;
  const std::vector<ValueId> negated = npu::float_ram_negations(p, {data}, put_on, "term RAM")[0];
  // Written on PUT cycles; the memories' out values are read (and cleared) on SEG cycles.
  as.gate_clears(first_put, p.ops().size(), put_on);
  const size_t first_memory = p.ops().size();
  std::vector<npu::FloatRamHead> ram(at(heads));
  std::vector<std::vector<ValueId>> ram_out(at(heads));
  for (int k = 0; k < heads; ++k) {
    npu::FloatRamHead& h = ram[at(k)];
    h.data = terms_in;
    h.negated = negated;
    h.key_bits = put_row;
    h.write_flag = put_head[at(k)];
    h.query_bits = seg_row;
    h.read_flag = seg_head[at(k)];
    h.out = ram_out[at(k)] = p.values(indexed("term.out", k), w);
  }
  npu::float_ram(p, npu::FloatRamWindow{kTermLowBinade}, ram, put_on, "term RAM");
  as.gate_clears(first_memory, p.ops().size(), seg_on);

  // SEG.s: the carry back from register 1 (+0 for segment 0, which reads no register), then
  // C's additions of the segment's terms, each +0 when t = s w + j >= N.
  const size_t first_seg = p.ops().size();
  const std::vector<ValueId> terms = as.gated(ram_out, {seg_on}, "seg.terms");
  const ValueId n_seg = as.gated(std::vector<ValueId>{n_reg.out}, {seg_on}, "seg.n")[0];
  ValueId acc = cross.join(1, seg_on, "seg.carry")[0];
  for (int j = 0; j < w; ++j) {
    // keep = [N - s w - j >= 1]
    Lin d{{{n_seg, 1.0f}, {kOne, -static_cast<float>(j)}}};
    for (int b = 0; b < index_bits; ++b) d.terms.push_back({seg_index[at(b)], -static_cast<float>(w << b)});
    const ValueId keep = npu::attn_int_positive(p, d, "seg.keep");
    const ValueId term = p.value("seg.term");
    p.mlp("seg.mask", {Neuron{Lin{{{keep, 128.0f}}}, Lin{{{terms[at(j)], 1.0f / 128.0f}}}, {{term, 1.0f}}}});
    acc = npu::add(p, acc, term, "seg.add");
  }
  compiler::enable_constants(p, first_seg, seg_on);
  as.gate_clears(first_seg, p.ops().size(), seg_on);
  cross.carry({acc}, seg_on, seg_on, "seg.out");
  const std::vector<ValueId> lanes = cross.build();

  // NX.s: [N > (s + 1) w], the branch condition (+0 on every other cycle).
  const size_t first_nx = p.ops().size();
  const ValueId n_nx = as.gated(std::vector<ValueId>{n_reg.out}, {nx_on}, "nx.n")[0];
  Lin more_d{{{n_nx, 1.0f}}};
  for (int b = 0; b < index_bits; ++b) more_d.terms.push_back({nx_next[at(b)], -static_cast<float>(w << b)});
  const ValueId more = npu::attn_int_positive(p, more_d, "nx.more");
  compiler::enable_constants(p, first_nx, nx_on);
  as.gate_clears(first_nx, p.ops().size(), nx_on);
  as.branch(more);

  as.send(lanes, send, p.ops().size());

  as.define_header("WN");
  as.define("WN", as.write(0, n_reg.element, "NOP"));
  for (int i = 0; i < w; ++i) as.define(indexed("WT", i), as.write(0, i, "NOP"));
  for (int r = 0; r < S; ++r) {
    MicroOp op = as.step("NOP");
    op.read_register = 0;
    op.sets = {{put_on, 1.0f}, {put_head[at(r / kRowsPerHead)], 1.0f}};
    set_bits(op, put_row, r % kRowsPerHead);
    as.define(indexed("PUT", r), std::move(op));
  }
  cross.define(0, send);
  for (int s = 0; s < S; ++s) {
    MicroOp seg = as.step(cross.first_cross(1));
    seg.call = as.control_index(indexed("NX", s));
    seg.sets = {{seg_on, 1.0f}, {seg_head[at(s / kRowsPerHead)], 1.0f}, {n_reg.read_flag, 1.0f}};
    if (s > 0) seg.read_register = kCarryRegister;
    set_bits(seg, seg_row, s % kRowsPerHead);
    set_bits(seg, seg_index, s);
    as.define(indexed("SEG", s), std::move(seg));
    MicroOp nx = s + 1 < S ? as.branch_step(indexed("SEG", s + 1), "DONE") : as.step("DONE");
    nx.sets = {{nx_on, 1.0f}, {n_reg.read_flag, 1.0f}};
    set_bits(nx, nx_next, s + 1);
    as.define(indexed("NX", s), std::move(nx));
  }
  SegmentMachine m;
  static_cast<AssembledMachine&>(m) = as.finish();
  m.width = w;
  m.capacity = o.capacity;
  return m;
}

std::vector<int64_t> SegmentMachine::prompt(int n, const std::vector<float>& terms) const {
  if (n < 1 || n > capacity) fail("segment machine: {} terms outside [1, {}]", n, capacity);
  const int rows = (n + width - 1) / width;
  if (terms.size() < static_cast<size_t>(rows * width))
    fail("segment machine: {} terms given, {} segments of {} need {}", terms.size(), rows, width, rows * width);
  std::vector<int64_t> t = {id("HDR"), id("WN")};
  for (int64_t v : value_tokens(static_cast<float>(n))) t.push_back(v);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < width; ++i) {
      const float x = terms[static_cast<size_t>(r * width + i)];
      if (!segment_machine_holds(x)) fail("segment machine: term {} = {} outside the window", r * width + i, x);
      t.push_back(id(indexed("WT", i)));
      for (int64_t v : value_tokens(x)) t.push_back(v);
    }
    t.push_back(id(indexed("PUT", r)));
  }
  t.push_back(id("SEG.0"));
  return t;
}

std::vector<int64_t> SegmentMachine::expected_stream(int n, const std::vector<float>& terms) const {
  std::vector<int64_t> s;
  float acc = 0.0f;
  const int segs = (n + width - 1) / width;
  for (int k = 0; k < segs; ++k) {
    for (int t = k * width; t < std::min(n, (k + 1) * width); ++t) acc += terms[static_cast<size_t>(t)];
    s.push_back(id("CROSS.0"));
    for (int64_t v : value_tokens(carry_high_reference(acc))) s.push_back(v);
    s.push_back(id("CROSS.1"));
    for (int64_t v : value_tokens(carry_low_reference(acc))) s.push_back(v);
    s.push_back(id(indexed("NX", k)));
    s.push_back(k + 1 < segs ? id(indexed("SEG", k + 1)) : done());
  }
  return s;
}

}  // namespace qpu::machine
