#include "machine/delay_line.h"

#include <algorithm>
#include <map>

#include "common/error.h"

namespace qpu::machine {

using compiler::GdnMemory;
using compiler::ValueId;

int delay_line(compiler::Program& p, const std::vector<DelayColumn>& columns, int64_t capacity,
               const std::string& label) {
  // Group by (unit, destination), in order of first appearance.
  std::vector<std::pair<int, ValueId>> order;
  std::map<std::pair<int, ValueId>, std::vector<DelayColumn>> groups;
  std::map<ValueId, int> unit_of_dest;
  for (const DelayColumn& c : columns) {
    if (c.tap < 0 || c.tap > 3) fail("machine: delay line '{}': tap {} outside [0, 3]", label, c.tap);
    if (c.unit_exponent < -50 || c.unit_exponent > 50)
      fail("machine: delay line '{}': feature unit 2^{} outside [2^-50, 2^50]", label, c.unit_exponent);
    const auto [it, fresh] = unit_of_dest.emplace(c.dest, c.unit_exponent);
    if (!fresh && it->second != c.unit_exponent)
      fail("machine: delay line '{}': value {} receives features of two units", label, c.dest);
    auto& group = groups[{c.unit_exponent, c.dest}];
    if (group.empty()) order.push_back({c.unit_exponent, c.dest});
    group.push_back(c);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  int heads = 0;
  GdnMemory m;
  int unit = 0;
  auto flush = [&] {
    if (m.data.empty()) return;
    // No address bits: row 0, written and read on every cycle (flags = the constant 1).
    m.write_flag = compiler::kOne;
    m.read_flag = compiler::kOne;
    m.data_exponent = 7 - unit;  // cell = 128 for a live feature
    p.gdn_memory(label + " head " + std::to_string(heads), m);
    ++heads;
    m = GdnMemory{};
  };
  for (const auto& key : order) {
    const auto& group = groups[key];
    if (static_cast<int64_t>(group.size()) > capacity)
      fail("machine: delay line '{}': {} columns add into one value, a head holds {}", label, group.size(), capacity);
    if (key.first != unit || static_cast<int64_t>(m.data.size() + group.size()) > capacity) flush();
    unit = key.first;
    for (const DelayColumn& c : group) {
      m.data.push_back(c.source);
      m.data_taps.push_back(c.tap);
      m.out.push_back(c.dest);
    }
  }
  flush();
  return heads;
}

}  // namespace qpu::machine
