#include "compiler/schedule.h"

#include <algorithm>
#include <map>

#include "common/error.h"

namespace qpu::compiler {

namespace {

bool fits_kind(const Op& op, int64_t s) {
  return (op.kind == OpKind::Mlp) == Schedule::is_mlp(s);
}

int64_t op_size(const Op& op) {
  return op.kind == OpKind::Mlp ? static_cast<int64_t>(op.neurons.size()) : 1;
}

}  // namespace

Schedule schedule(const Program& program, const ScheduleLimits& limits) {
  Schedule out;
  // For every value: the last sublayer that wrote it and the last that read it.
  std::vector<int64_t> last_write(static_cast<size_t>(program.num_values()), -1);
  std::vector<int64_t> last_read(static_cast<size_t>(program.num_values()), -1);
  std::map<int64_t, int64_t> used;  // sublayer -> neurons or memories already placed
  std::map<int64_t, OpKind> mixer_kind;  // mixer sublayer -> the kind of memory placed there

  for (const Op& op : program.ops()) {
    const int64_t size = op_size(op);
    const int64_t limit = op.kind == OpKind::Mlp          ? limits.max_neurons_per_mlp
                          : op.kind == OpKind::AttnMemory ? limits.max_memories_per_mixer
                                                          : limits.max_gdn_memories_per_mixer;
    if (size > limit) fail("schedule: op '{}' needs {} units but a sublayer has {}", op.label, size, limit);

    const auto reads = op.reads();
    const auto writes = op.writes();
    int64_t s = 0;
    for (ValueId v : reads) s = std::max(s, last_write[static_cast<size_t>(v)] + 1);     // RAW
    for (ValueId v : writes) {
      s = std::max(s, last_write[static_cast<size_t>(v)] + 1);                           // WAW
      s = std::max(s, last_read[static_cast<size_t>(v)]);                                // WAR
    }
    auto kind_clash = [&](int64_t sub) {
      const auto it = mixer_kind.find(sub);
      return op.kind != OpKind::Mlp && it != mixer_kind.end() && it->second != op.kind;
    };
    while (!fits_kind(op, s) || used[s] + size > limit || kind_clash(s)) ++s;
    used[s] += size;
    if (op.kind != OpKind::Mlp) mixer_kind[s] = op.kind;
    for (ValueId v : reads) last_read[static_cast<size_t>(v)] = std::max(last_read[static_cast<size_t>(v)], s);
    for (ValueId v : writes) last_write[static_cast<size_t>(v)] = s;
    out.sublayer.push_back(s);
    out.num_sublayers = std::max(out.num_sublayers, s + 1);
  }
  return out;
}

int64_t critical_path(const Program& program) {
  std::vector<int64_t> depth_of_value(static_cast<size_t>(program.num_values()), 0);
  int64_t longest = 0;
  for (const Op& op : program.ops()) {
    int64_t d = 0;
    for (ValueId v : op.reads()) d = std::max(d, depth_of_value[static_cast<size_t>(v)]);
    for (ValueId v : op.writes()) d = std::max(d, depth_of_value[static_cast<size_t>(v)]);
    ++d;
    for (ValueId v : op.writes()) depth_of_value[static_cast<size_t>(v)] = d;
    longest = std::max(longest, d);
  }
  return longest;
}

}  // namespace qpu::compiler
