#include "machine/crossing_routine.h"

#include "common/error.h"
#include "compiler/gdn_layout.h"
#include "machine/carry_crossing.h"
#include "machine/wide_float_ram.h"
#include "npu/float_ram.h"

namespace qpu::machine {

using compiler::Lin;
using compiler::Neuron;
using compiler::ValueId;

namespace {

constexpr float kOn = 128.0f;  // silu(128) = 128 exactly
std::string cross_name(size_t k) { return "CROSS." + std::to_string(k); }

}  // namespace

std::vector<std::string> CrossingRoutine::names(int values) {
  std::vector<std::string> n;
  for (size_t k = 0; k < static_cast<size_t>(2 * values); ++k) n.push_back(cross_name(k));
  return n;
}

CrossingRoutine::CrossingRoutine(Assembler& as, int values, int64_t reg) : as_(as), reg_(reg) {
  if (values < 1) fail("crossing routine: a carry of {} values", values);
  if (2 * values > as.options().elements)
    fail("crossing routine: {} floats do not fit the {} register elements", 2 * values, as.options().elements);
  as.return_register();
  on_ = as.input("cross.on");
  park_ = as.program().values("cross.park", 2 * values);
}

void CrossingRoutine::carry(const std::vector<ValueId>& x, ValueId enable, ValueId park, const std::string& label) {
  if (!lanes_.empty()) fail("crossing routine: carry '{}' after build()", label);
  if (x.empty() || 2 * x.size() > park_.size())
    fail("crossing routine: carry '{}' of {} values, the routine takes 1 .. {}", label, x.size(), park_.size() / 2);
  compiler::Program& p = as_.program();
  const size_t first_split = p.ops().size();
  std::vector<ValueId> floats;
  for (ValueId v : x) {
    const CarryParts c = carry_split(p, v, enable, label + ".split");
    floats.insert(floats.end(), {c.high, c.low});
  }
  as_.gate_clears(first_split, p.ops().size(), enable);
  carry_floats(floats, park, label);
}

void CrossingRoutine::carry_floats(const std::vector<ValueId>& floats, ValueId park, const std::string& label) {
  if (!lanes_.empty()) fail("crossing routine: carry '{}' after build()", label);
  if (floats.empty() || floats.size() > park_.size())
    fail("crossing routine: carry '{}' of {} floats, the routine takes 1 .. {}", label, floats.size(), park_.size());
  const size_t first = park_.size() - floats.size();
  // Into the parked floats when `park`: gate 128 park passes each float exactly (an uplink
  // float divided by 128 stays a float of the value window), +-0 otherwise.
  std::vector<Neuron> ns;
  for (size_t i = 0; i < floats.size(); ++i)
    ns.push_back(Neuron{Lin{{{park, kOn}}}, Lin{{{floats[i], 1.0f / kOn}}}, {{park_[first + i], 1.0f}}});
  as_.program().mlp(label + ".park", std::move(ns));
  parking_.push_back(park);
}

std::vector<ValueId> CrossingRoutine::build() {
  if (parking_.empty()) fail("crossing routine: no chain carries through it");
  if (!lanes_.empty()) fail("crossing routine: built twice");
  compiler::Program& p = as_.program();
  // Parking: the chains' park flags summed (at most one is 1 on a cycle).
  ValueId parking = parking_[0];
  if (parking_.size() > 1) {
    parking = p.value("cross.parking");
    std::vector<Neuron> ns;
    for (ValueId f : parking_) ns.push_back(Neuron{Lin{{{f, kOn}}}, Lin{{{f, 1.0f / kOn}}}, {{parking, 1.0f}}});
    p.mlp("cross.parking", std::move(ns));
    as_.gate_own_clears({parking});
  }
  as_.gate_clears_of(park_, parking);
  const auto layout = compiler::GdnLayout::for_dims(as_.options().key_dim, as_.options().value_dim);
  const WideFloatRam ram = wide_float_ram(p, park_, parking, parking, on_,
                                          static_cast<int>(npu::floats_per_row(layout)), "cross.park RAM");
  as_.gate_clears(ram.first_op, ram.tiers_end, parking);
  as_.gate_clears(ram.tiers_end, p.ops().size(), on_);  // the RAM's out values: read on CROSS cycles
  lanes_ = ram.out;
  return lanes_;
}

void CrossingRoutine::define(int first_lane, ValueId send) {
  if (lanes_.empty()) fail("crossing routine: define() before build()");
  for (size_t k = 0; k < park_.size(); ++k) {
    MicroOp op;
    if (k + 1 < park_.size()) {
      op = as_.write(reg_, static_cast<int>(k), cross_name(k + 1));
    } else {
      op.write_register = reg_;
      op.write_element = static_cast<int>(k);
      op.timing = SuccessorTiming::Return;
    }
    op.lane = first_lane + static_cast<int>(k);
    op.sets = {{on_, 1.0f}, {send, 1.0f}};
    as_.define(cross_name(k), std::move(op));
  }
}

std::string CrossingRoutine::first_cross_of_floats(size_t count) const {
  if (count < 1 || count > park_.size()) fail("crossing routine: a carry of {} floats", count);
  return cross_name(park_.size() - count);
}

std::vector<ValueId> CrossingRoutine::arrived_floats(size_t count) const {
  if (count < 1 || count > park_.size()) fail("crossing routine: a carry of {} floats", count);
  const std::vector<ValueId>& r = as_.register_out();
  return std::vector<ValueId>(r.begin() + static_cast<std::ptrdiff_t>(park_.size() - count), r.begin() + static_cast<std::ptrdiff_t>(park_.size()));
}

std::vector<ValueId> CrossingRoutine::join(size_t count, ValueId enable, const std::string& label) const {
  if (count < 1 || 2 * count > park_.size()) fail("crossing routine: a carry of {} values", count);
  const std::vector<ValueId> r = arrived_floats(2 * count);
  std::vector<ValueId> x;
  for (size_t i = 0; i < count; ++i) x.push_back(carry_join(as_.program(), r[2 * i], r[2 * i + 1], enable, label));
  return x;
}

}  // namespace qpu::machine
