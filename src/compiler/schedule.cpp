#include "compiler/schedule.h"

#include <algorithm>

#include "common/error.h"
#include "compiler/schedule_rules.h"

namespace qpu::compiler {

namespace {

// Greedy ASAP placement in program order, from a given prefix.
class Placer {
 public:
  Placer(const Program& program, const ScheduleLimits& limits)
      : limits_(limits),
        orders_(program),
        last_write_(static_cast<size_t>(program.num_values()), -1),
        last_read_(static_cast<size_t>(program.num_values()), -1),
        last_writer_exclusive_(static_cast<size_t>(program.num_values()), false),
        before_last_(program.orders().size(), -1) {}

  // The earliest sublayer the rules allow for op i (against every op placed so far: in
  // program order, so every `before` range it waits for is placed).
  int64_t earliest(size_t i, const Op& op) const {
    int64_t s = 0;
    for (size_t k : orders_.waits_for[i]) s = std::max(s, before_last_[k] + 1);  // explicit order
    for (ValueId v : op.reads()) s = std::max(s, last_write_[static_cast<size_t>(v)] + 1);  // RAW
    for (ValueId v : op.writes()) {
      const int64_t w = last_write_[static_cast<size_t>(v)];
      s = std::max(s, w + (w >= 0 && last_writer_exclusive_[static_cast<size_t>(v)] && op.exclusive_writes ? 0 : 1));  // WAW
      s = std::max(s, last_read_[static_cast<size_t>(v)]);       // WAR
    }
    return s;
  }
  void place(size_t i, const Op& op, int64_t s) {
    occupancy_.add(op, s, 1);
    for (size_t k : orders_.holds_back[i]) before_last_[k] = std::max(before_last_[k], s);
    for (ValueId v : op.reads()) last_read_[static_cast<size_t>(v)] = std::max(last_read_[static_cast<size_t>(v)], s);
    for (ValueId v : op.writes()) {
      last_write_[static_cast<size_t>(v)] = s;
      last_writer_exclusive_[static_cast<size_t>(v)] = op.exclusive_writes;
    }
    out_.sublayer.push_back(s);
    out_.num_sublayers = std::max(out_.num_sublayers, s + 1);
  }
  void place_asap(size_t i, const Op& op) {
    const int64_t size = op_size(op), limit = op_limit(op, limits_);
    if (size > limit) fail("schedule: op '{}' needs {} units but a sublayer has {}", op.label, size, limit);
    int64_t s = earliest(i, op);
    while (!occupancy_.fits(op, s, limits_)) ++s;
    place(i, op, s);
  }
  Schedule take() { return std::move(out_); }

 private:
  const ScheduleLimits& limits_;
  OrderIndex orders_;
  std::vector<int64_t> last_write_, last_read_;
  std::vector<bool> last_writer_exclusive_;  // per value: its last writer so far promised exclusive writes
  std::vector<int64_t> before_last_;  // per order: the latest sublayer of its `before` ops placed so far
  Occupancy occupancy_;
  Schedule out_;
};

}  // namespace

Schedule schedule(const Program& program, const ScheduleLimits& limits) {
  return schedule_after(program, Schedule{}, limits);
}

Schedule schedule_after(const Program& program, const Schedule& placed, const ScheduleLimits& limits) {
  const auto& ops = program.ops();
  if (placed.sublayer.size() > ops.size())
    fail("schedule: {} ops already placed in a program of {}", placed.sublayer.size(), ops.size());
  Placer p(program, limits);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (i < placed.sublayer.size()) {
      p.place(i, ops[i], placed.sublayer[i]);
    } else {
      p.place_asap(i, ops[i]);
    }
  }
  Schedule out = p.take();
  out.num_sublayers = std::max(out.num_sublayers, placed.num_sublayers);
  return out;
}

Schedule sink_schedule(const Program& program, const Schedule& schedule, const ScheduleLimits& limits,
                       const std::vector<bool>& fixed, const std::vector<bool>& kept) {
  const auto& ops = program.ops();
  const auto nv = static_cast<size_t>(program.num_values());
  if (schedule.sublayer.size() != ops.size() || fixed.size() != nv || kept.size() != nv)
    fail("sink_schedule: a schedule of {} ops and {}/{} value flags for {} ops and {} values", schedule.sublayer.size(),
         fixed.size(), kept.size(), ops.size(), nv);
  Schedule out = schedule;
  const OrderIndex orders(program);
  std::vector<std::vector<ValueId>> reads(ops.size()), writes(ops.size());
  std::vector<std::vector<size_t>> accessors(nv), writers(nv);  // op indices in program order
  Occupancy occupancy;
  for (size_t i = 0; i < ops.size(); ++i) {
    reads[i] = ops[i].reads();
    writes[i] = ops[i].writes();
    std::vector<ValueId> all = reads[i];
    all.insert(all.end(), writes[i].begin(), writes[i].end());
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    for (ValueId v : all) accessors[static_cast<size_t>(v)].push_back(i);
    for (ValueId v : writes[i]) writers[static_cast<size_t>(v)].push_back(i);
    occupancy.add(ops[i], out.sublayer[i], 1);
  }
  // Per order: the earliest sublayer of its `after` ops (-1: not yet computed this pass).
  // Ops are visited in reverse program order and an order's `after` ops all follow its
  // `before` ops, so they are visited, and stay put, before any op that they hold back.
  std::vector<int64_t> after_first(program.orders().size());
  for (int pass = 0; pass < 2; ++pass) {
    std::fill(after_first.begin(), after_first.end(), -1);
    for (size_t o = ops.size(); o-- > 0;) {
      // Lives this op starts and ends (a value it alone accesses keeps its length).
      int64_t starts = 0, ends = 0;
      auto count = [&](ValueId v) {
        const auto& a = accessors[static_cast<size_t>(v)];
        const bool first = a.front() == o, last = a.back() == o;
        if (first && last) return;
        if (first && !fixed[static_cast<size_t>(v)]) ++starts;
        if (last && !fixed[static_cast<size_t>(v)] && !kept[static_cast<size_t>(v)]) ++ends;
      };
      std::vector<ValueId> all = reads[o];
      all.insert(all.end(), writes[o].begin(), writes[o].end());
      std::sort(all.begin(), all.end());
      all.erase(std::unique(all.begin(), all.end()), all.end());
      for (ValueId v : all) count(v);
      if (starts <= ends) continue;
      // The latest sublayer the later ops allow: before every later access of a value
      // it writes (RAW, WAW), not after a later write of a value it reads (WAR).
      int64_t latest = out.num_sublayers - 1;
      for (ValueId v : writes[o])
        for (size_t j : accessors[static_cast<size_t>(v)]) {
          if (j <= o) continue;
          const bool reads_v = std::binary_search(reads[j].begin(), reads[j].end(), v);
          latest = std::min(latest, out.sublayer[j] - (reads_v ? 1 : waw_gap(ops[o], ops[j])));
        }
      for (ValueId v : reads[o])
        for (size_t j : writers[static_cast<size_t>(v)])
          if (j > o) latest = std::min(latest, out.sublayer[j]);
      // Strictly above every op it is explicitly ordered before.
      for (size_t k : orders.holds_back[o]) {
        if (after_first[k] < 0) {
          const OpRange& after = program.orders()[k].after;
          after_first[k] = out.sublayer[after.begin];
          for (size_t j = after.begin; j < after.end; ++j) after_first[k] = std::min(after_first[k], out.sublayer[j]);
        }
        latest = std::min(latest, after_first[k] - 1);
      }
      for (int64_t s = latest; s > out.sublayer[o]; --s)
        if (occupancy.fits(ops[o], s, limits)) {
          occupancy.add(ops[o], out.sublayer[o], -1);
          occupancy.add(ops[o], s, 1);
          out.sublayer[o] = s;
          break;
        }
    }
  }
  return out;
}

void check_schedule(const Program& program, const Schedule& schedule, const ScheduleLimits& limits) {
  const auto& ops = program.ops();
  if (schedule.sublayer.size() != ops.size())
    fail("check_schedule: {} sublayers for {} ops", schedule.sublayer.size(), ops.size());
  std::vector<int64_t> last_write(static_cast<size_t>(program.num_values()), -1);
  std::vector<int64_t> last_read(static_cast<size_t>(program.num_values()), -1);
  // Per value: every write in its latest written sublayer promised exclusive writes.
  std::vector<bool> exclusive_at_last(static_cast<size_t>(program.num_values()), false);
  Occupancy occupancy;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const int64_t s = schedule.sublayer[i];
    if (s < 0 || s >= schedule.num_sublayers) fail("check_schedule: op '{}' in sublayer {} of {}", op.label, s, schedule.num_sublayers);
    if (!occupancy.fits(op, s, limits)) fail("check_schedule: op '{}' does not fit sublayer {}", op.label, s);
    for (ValueId v : op.reads())
      if (s <= last_write[static_cast<size_t>(v)]) fail("check_schedule: op '{}' reads {} before it is written", op.label, program.name(v));
    for (ValueId v : op.writes()) {
      const auto u = static_cast<size_t>(v);
      if (s < last_write[u] || (s == last_write[u] && !(exclusive_at_last[u] && op.exclusive_writes)))
        fail("check_schedule: op '{}' writes {} out of order", op.label, program.name(v));
      if (s < last_read[static_cast<size_t>(v)]) fail("check_schedule: op '{}' writes {} before an earlier op reads it", op.label, program.name(v));
    }
    occupancy.add(op, s, 1);
    for (ValueId v : op.reads()) last_read[static_cast<size_t>(v)] = std::max(last_read[static_cast<size_t>(v)], s);
    for (ValueId v : op.writes()) {
      const auto u = static_cast<size_t>(v);
      exclusive_at_last[u] = (s == last_write[u] ? exclusive_at_last[u] : true) && op.exclusive_writes;
      last_write[u] = s;  // never below the previous one (checked above)
    }
  }
  program.check_orders();
  for (const OpOrder& o : program.orders()) {
    size_t last = o.before.begin, first = o.after.begin;
    for (size_t i = o.before.begin; i < o.before.end; ++i)
      if (schedule.sublayer[i] > schedule.sublayer[last]) last = i;
    for (size_t i = o.after.begin; i < o.after.end; ++i)
      if (schedule.sublayer[i] < schedule.sublayer[first]) first = i;
    if (schedule.sublayer[first] <= schedule.sublayer[last])
      fail("check_schedule: op {} '{}' (sublayer {}) must come after op {} '{}' (sublayer {}): explicit order", first,
           ops[first].label, schedule.sublayer[first], last, ops[last].label, schedule.sublayer[last]);
  }
}

int64_t critical_path(const Program& program) {
  const OrderIndex orders(program);
  std::vector<int64_t> depth_of_value(static_cast<size_t>(program.num_values()), 0);
  std::vector<bool> exclusive_writer(static_cast<size_t>(program.num_values()), false);  // of the value's last write
  std::vector<int64_t> before_depth(program.orders().size(), 0);  // per order: deepest `before` op
  int64_t longest = 0;
  for (size_t i = 0; i < program.ops().size(); ++i) {
    const Op& op = program.ops()[i];
    int64_t d = 0, beside = 0;  // beside: exclusive writes may share the sublayer (waw_gap 0)
    for (ValueId v : op.reads()) d = std::max(d, depth_of_value[static_cast<size_t>(v)]);
    for (ValueId v : op.writes()) {
      const auto u = static_cast<size_t>(v);
      if (exclusive_writer[u] && op.exclusive_writes)
        beside = std::max(beside, depth_of_value[u]);
      else
        d = std::max(d, depth_of_value[u]);
    }
    for (size_t k : orders.waits_for[i]) d = std::max(d, before_depth[k]);  // each order edge counts one
    d = std::max(d + 1, beside);
    for (ValueId v : op.writes()) {
      depth_of_value[static_cast<size_t>(v)] = d;
      exclusive_writer[static_cast<size_t>(v)] = op.exclusive_writes;
    }
    for (size_t k : orders.holds_back[i]) before_depth[k] = std::max(before_depth[k], d);
    longest = std::max(longest, d);
  }
  return longest;
}

}  // namespace qpu::compiler
