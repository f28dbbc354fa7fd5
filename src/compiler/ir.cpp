#include "compiler/ir.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace qpu::compiler {

namespace {

void add_lin(const Lin& lin, std::vector<ValueId>& out) {
  for (const Term& t : lin.terms)
    if (t.value != kOne) out.push_back(t.value);
}

std::vector<ValueId> sorted_unique(std::vector<ValueId> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// A forward pair of non-empty ranges of existing ops.
void check_order(const OpOrder& o, const std::vector<Op>& ops) {
  for (const OpRange& r : {o.before, o.after})
    if (r.begin >= r.end || r.end > ops.size())
      fail("IR order: ops [{}, {}) is not a non-empty range of the program's {} ops", r.begin, r.end, ops.size());
  if (o.before.end > o.after.begin)
    fail("IR order: ops [{}, {}) (from '{}') must all come before ops [{}, {}) (from '{}') in program order",
         o.before.begin, o.before.end, ops[o.before.begin].label, o.after.begin, o.after.end, ops[o.after.begin].label);
}

}  // namespace

std::vector<ValueId> Op::reads() const {
  std::vector<ValueId> r;
  if (kind == OpKind::Mlp) {
    for (const Neuron& n : neurons) {
      add_lin(n.gate, r);
      add_lin(n.up, r);
    }
  } else if (kind == OpKind::AttnMemory) {
    r.insert(r.end(), memory.key_bits.begin(), memory.key_bits.end());
    r.insert(r.end(), memory.data.begin(), memory.data.end());
    r.insert(r.end(), memory.query_bits.begin(), memory.query_bits.end());
    r.push_back(memory.write_flag);
    r.push_back(memory.read_flag);
    std::erase(r, kOne);
  } else {
    r.insert(r.end(), gdn.key_bits.begin(), gdn.key_bits.end());
    r.insert(r.end(), gdn.data.begin(), gdn.data.end());
    r.insert(r.end(), gdn.query_bits.begin(), gdn.query_bits.end());
    r.push_back(gdn.write_flag);
    r.push_back(gdn.read_flag);
    r.push_back(gdn.wipe_flag);
    r.push_back(gdn.key_enable);
    r.push_back(gdn.query_enable);
    std::erase(r, kOne);
    std::erase(r, kNever);
  }
  return sorted_unique(std::move(r));
}

std::vector<ValueId> Op::writes() const {
  std::vector<ValueId> w;
  if (kind == OpKind::Mlp) {
    for (const Neuron& n : neurons)
      for (const Term& t : n.down) w.push_back(t.value);
  } else if (kind == OpKind::AttnMemory) {
    w = memory.out;
  } else {
    w = gdn.out;
  }
  return sorted_unique(std::move(w));
}

ValueId Program::value(std::string name) {
  names_.push_back(std::move(name));
  return static_cast<ValueId>(names_.size() - 1);
}

std::vector<ValueId> Program::values(const std::string& prefix, int count) {
  std::vector<ValueId> v;
  for (int i = 0; i < count; ++i) v.push_back(value(prefix + "[" + std::to_string(i) + "]"));
  return v;
}

void Program::mlp(std::string label, std::vector<Neuron> neurons) {
  Op op;
  op.kind = OpKind::Mlp;
  op.label = std::move(label);
  op.neurons = std::move(neurons);
  ops_.push_back(std::move(op));
}

void Program::mlp_select(std::string label, std::vector<Neuron> neurons) {
  mlp(std::move(label), std::move(neurons));
  ops_.back().one_live_neuron = true;
}

void Program::mark_exclusive_writes(OpRange range) {
  if (range.begin >= range.end || range.end > ops_.size())
    fail("mark_exclusive_writes: ops [{}, {}) of a program of {}", range.begin, range.end, ops_.size());
  for (size_t i = range.begin; i < range.end; ++i) ops_[i].exclusive_writes = true;
}

void Program::memory(std::string label, AttnMemory memory) {
  Op op;
  op.kind = OpKind::AttnMemory;
  op.label = std::move(label);
  op.memory = std::move(memory);
  ops_.push_back(std::move(op));
}

void Program::gdn_memory(std::string label, GdnMemory memory) {
  Op op;
  op.kind = OpKind::GdnMemory;
  op.label = std::move(label);
  op.gdn = std::move(memory);
  ops_.push_back(std::move(op));
}

void Program::order(size_t before_op, size_t after_op) {
  order(OpRange{before_op, before_op + 1}, OpRange{after_op, after_op + 1});
}

void Program::order(OpRange before, OpRange after) {
  check_order({before, after}, ops_);
  orders_.push_back({before, after});
}

void Program::check_orders() const {
  for (const OpOrder& o : orders_) check_order(o, ops_);
}

const std::string& Program::name(ValueId v) const {
  if (v < 0 || v >= num_values()) fail("IR: no value with id {}", v);
  return names_[static_cast<size_t>(v)];
}

void Program::validate() const {
  auto check_value = [&](const Op& op, ValueId v, bool allow_one) {
    if (v == kOne && allow_one) return;
    if (v < 0 || v >= num_values()) fail("IR op '{}': value id {} out of range", op.label, v);
  };
  auto check_lin = [&](const Op& op, const Lin& lin) {
    for (const Term& t : lin.terms) {
      check_value(op, t.value, true);
      if (!std::isfinite(t.weight)) fail("IR op '{}': weight {} is not finite", op.label, t.weight);
    }
  };
  for (const Op& op : ops_) {
    if (op.kind == OpKind::Mlp) {
      if (op.neurons.empty()) fail("IR op '{}': MLP op without neurons", op.label);
      for (const Neuron& n : op.neurons) {
        check_lin(op, n.gate);
        check_lin(op, n.up);
        if (n.down.empty()) fail("IR op '{}': neuron without destination", op.label);
        for (const Term& t : n.down) {
          check_value(op, t.value, false);
          if (!std::isfinite(t.weight)) fail("IR op '{}': weight {} is not finite", op.label, t.weight);
        }
      }
    } else if (op.kind == OpKind::GdnMemory) {
      const GdnMemory& m = op.gdn;
      if (m.data.size() != m.out.size())
        fail("IR op '{}': GDN memory data has {} values but out has {}", op.label, m.data.size(), m.out.size());
      if (m.data.empty()) fail("IR op '{}': GDN memory without data values", op.label);
      if (m.key_bits.size() != m.query_bits.size())
        fail("IR op '{}': key has {} bits but query has {}", op.label, m.key_bits.size(), m.query_bits.size());
      if (m.data_exponent < -60 || m.data_exponent > 60)
        fail("IR op '{}': GDN data exponent {} outside [-60, 60]", op.label, m.data_exponent);
      if (!std::isfinite(m.offset) || std::fabs(m.offset) >= 0x1p44f || (m.offset != 0.0f && std::fabs(m.offset) < 18.0f))
        fail("IR op '{}': GDN offset {} is not 0 or in [18, 2^44)", op.label, m.offset);
      auto check_tap = [&](int tap, const char* what) {
        if (tap < 0 || tap > 3) fail("IR op '{}': GDN {} tap {} outside [0, 3] (conv kernel 4)", op.label, what, tap);
      };
      check_tap(m.key_tap, "key");
      check_tap(m.query_tap, "query");
      if (!m.data_taps.empty() && m.data_taps.size() != m.data.size())
        fail("IR op '{}': GDN memory has {} data taps for {} data values", op.label, m.data_taps.size(), m.data.size());
      for (int tap : m.data_taps) check_tap(tap, "data");
      // The enables stand for constants of beta and z, which have no conv (token t).
      if (m.key_enable != kOne) {
        check_value(op, m.key_enable, false);
        if (m.key_tap != 0 || std::any_of(m.data_taps.begin(), m.data_taps.end(), [](int t) { return t != 0; }))
          fail("IR op '{}': a GDN key enable needs the key and data at tap 0", op.label);
      }
      if (m.query_enable != kOne) {
        check_value(op, m.query_enable, false);
        if (m.query_tap != 0) fail("IR op '{}': a GDN query enable needs the query at tap 0", op.label);
      }
      if (!m.out_weights.empty() && m.out_weights.size() != m.data.size())
        fail("IR op '{}': GDN memory has {} out weights for {} data values", op.label, m.out_weights.size(),
             m.data.size());
      for (float w : m.out_weights) {
        int e = 0;
        const bool power_of_two = std::isfinite(w) && std::fabs(std::frexp(w, &e)) == 0.5f;
        if (!power_of_two || e - 1 < -100 || e - 1 > 100)
          fail("IR op '{}': GDN out weight {} is not +-2^i with i in [-100, 100]", op.label, w);
      }
      if (m.offset != 0.0f && sorted_unique(m.out).size() != m.out.size())
        fail("IR op '{}': GDN memory with an offset repeats an out value", op.label);
      for (ValueId v : op.reads()) check_value(op, v, false);
      for (ValueId v : m.out) check_value(op, v, false);
    } else {
      const AttnMemory& m = op.memory;
      if (m.data.size() != m.out.size())
        fail("IR op '{}': memory data has {} values but out has {}", op.label, m.data.size(), m.out.size());
      if (m.key_bits.size() != m.query_bits.size())
        fail("IR op '{}': key has {} bits but query has {}", op.label, m.key_bits.size(), m.query_bits.size());
      for (ValueId v : op.reads()) check_value(op, v, false);
      for (ValueId v : m.out) check_value(op, v, false);
    }
  }
  check_orders();
}

}  // namespace qpu::compiler
