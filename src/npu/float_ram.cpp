#include "npu/float_ram.h"

#include <cmath>
#include <map>
#include <set>

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/neurons.h"

namespace qpu::npu {

using compiler::GdnMemory;
using compiler::kNever;
using compiler::kOne;
using compiler::Program;
using compiler::ValueId;

namespace {

void check_window(const FloatRamWindow& w, const std::string& label) {
  // data exponent 7 - low <= 60 (ir.h's bound); |x| < 2^(low + 37) <= 2^36, the top of
  // the residual window [2^-78, 2^36] of norm exponent 48 (emit.h).
  if (w.low_binade < -53 || w.low_binade > -1)
    fail("float ram '{}': window low binade {} outside [-53, -1]", label, w.low_binade);
}

void check_head(const Program& p, const FloatRamHead& h, size_t index, const std::string& label) {
  if (h.data.empty()) fail("float ram '{}' head {}: no data values", label, index);
  for (ValueId x : h.data)
    if (x < 0 || x >= p.num_values()) fail("float ram '{}' head {}: data {} is not a value of the program", label, index, x);
  if (h.out.size() != h.data.size())
    fail("float ram '{}' head {}: {} data values but {} out values", label, index, h.data.size(), h.out.size());
  if (!h.negated.empty() && h.negated.size() != h.data.size())
    fail("float ram '{}' head {}: {} negated values for {} data values", label, index, h.negated.size(), h.data.size());
  if (h.key_bits.size() != h.query_bits.size())
    fail("float ram '{}' head {}: {} key bits but {} query bits", label, index, h.key_bits.size(),
         h.query_bits.size());
}

// Every out value gets exactly one live term per read, so none may repeat (in one
// head or across heads) or be read by the RAM itself.
void check_outs(const std::vector<FloatRamHead>& heads, const std::string& label) {
  std::set<ValueId> operands, outs;
  for (const FloatRamHead& h : heads) {
    operands.insert(h.data.begin(), h.data.end());
    operands.insert(h.negated.begin(), h.negated.end());
    operands.insert(h.key_bits.begin(), h.key_bits.end());
    operands.insert(h.query_bits.begin(), h.query_bits.end());
    operands.insert({h.write_flag, h.read_flag, h.wipe_flag, h.write_enable, h.read_enable});
  }
  for (size_t i = 0; i < heads.size(); ++i)
    for (ValueId v : heads[i].out) {
      if (!outs.insert(v).second) fail("float ram '{}' head {}: out value {} is used twice", label, i, v);
      if (operands.count(v)) fail("float ram '{}' head {}: out value {} is also an operand", label, i, v);
    }
}

}  // namespace

bool FloatRamWindow::holds(float x) const {
  if (x == 0.0f) return true;
  const float a = std::fabs(x);
  return a >= std::ldexp(1.0f, low_binade) && a < std::ldexp(1.0f, low_binade + kBinades);
}

int64_t floats_per_row(const compiler::GdnLayout& layout) { return layout.capacity(false) / 2; }

std::vector<std::vector<ValueId>> float_ram_negations(Program& p, const std::vector<FloatRamHead>& heads,
                                                      ValueId enable, const std::string& label) {
  // nx = silu(128) * (x / 128) * -1 = -x: one product by a power of two, exact for x in
  // the window (x / 128 >= 2^-60 is normal). One neuron per distinct data value.
  std::map<ValueId, ValueId> negation;
  std::vector<compiler::Neuron> neurons;
  std::vector<std::vector<ValueId>> negated(heads.size());
  for (size_t h = 0; h < heads.size(); ++h) {
    if (!heads[h].negated.empty()) {
      negated[h] = heads[h].negated;
      continue;
    }
    for (ValueId x : heads[h].data) {
      auto [it, fresh] = negation.emplace(x, 0);
      if (fresh) {
        it->second = p.value(label + ".neg(" + p.name(x) + ")");
        neurons.push_back(detail::copy_neuron(it->second, x, 1.0f, -1.0f));
      }
      negated[h].push_back(it->second);
    }
  }
  if (neurons.empty()) return negated;
  const size_t first_op = p.ops().size();
  p.mlp(label + " negate", std::move(neurons));
  // The copy gate's constant 128 becomes 128 * enable: an idle cycle (enable 0, x = 0)
  // writes silu(0) * 0 = +-0, and enable 1 is bit for bit the constant (enable.h).
  if (enable != kOne) compiler::enable_constants(p, first_op, enable);
  return negated;
}

GdnMemory float_ram_memory(const FloatRamWindow& window, const FloatRamHead& head,
                           const std::vector<ValueId>& negated) {
  check_window(window, "float_ram_memory");
  if (head.data.empty() || head.out.size() != head.data.size())
    fail("float ram: a head with {} data and {} out values", head.data.size(), head.out.size());
  if (negated.size() != head.data.size())
    fail("float ram: {} negated values for {} data values", negated.size(), head.data.size());
  GdnMemory m;
  m.key_bits = head.key_bits;
  m.write_flag = head.write_flag;
  m.query_bits = head.query_bits;
  m.read_flag = head.read_flag;
  m.wipe_flag = head.wipe_flag;
  m.key_tap = head.key_tap;
  m.query_tap = head.query_tap;
  // The constants read enables instead of the rail where that is exact for any operands
  // (compiler::GdnMemory::key_enable): the read side's is the read flag itself (a read
  // whose flag is 0 but whose query bits are live may find a row, but z = 0 makes the
  // head's output +-0), the write side's the write flag when there are no key bits (the
  // key is then 128 * flag); a head with key bits needs its unit's enable (write_enable).
  m.query_enable = head.read_enable != kOne ? head.read_enable : head.query_tap == 0 ? head.read_flag : kOne;
  m.key_enable = head.write_enable != kOne                                         ? head.write_enable
                 : head.key_bits.empty() && head.key_tap == 0 && head.data_tap == 0 ? head.write_flag
                                                                                    : kOne;
  m.data_exponent = window.data_exponent();  // float cells: |x| 2^e in [128, 2^44)
  for (size_t i = 0; i < head.data.size(); ++i) {
    // silu keeps the positive one of x 2^e, -x 2^e and turns the other into -0.
    for (const auto& [value, weight] : {std::pair{head.data[i], 1.0f}, std::pair{negated[i], -1.0f}}) {
      m.data.push_back(value);
      m.data_taps.push_back(head.data_tap);
      m.out.push_back(head.out[i]);
      m.out_weights.push_back(weight);
    }
  }
  return m;
}

void float_ram(Program& p, const FloatRamWindow& window, const std::vector<FloatRamHead>& heads, ValueId enable,
               const std::string& label) {
  check_window(window, label);
  if (heads.empty()) fail("float ram '{}': no heads", label);
  for (size_t h = 0; h < heads.size(); ++h) check_head(p, heads[h], h, label);
  check_outs(heads, label);
  const auto negated = float_ram_negations(p, heads, enable, label);
  for (size_t h = 0; h < heads.size(); ++h)
    p.gdn_memory(label + " head " + std::to_string(h), float_ram_memory(window, heads[h], negated[h]));
}

}  // namespace qpu::npu
