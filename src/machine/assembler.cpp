#include "machine/assembler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <memory>

#include "common/error.h"
#include "compiler/clear_dead.h"
#include "compiler/enable.h"
#include "compiler/gdn_layout.h"
#include "machine/delay_line.h"
#include "npu/float_ram.h"
#include "npu/idle_attention.h"

namespace qpu::machine {

using compiler::Lin;
using compiler::Neuron;
using compiler::ValueId;

namespace {

constexpr float kOn = 128.0f;  // silu(128) == 128: a gate of 128 * flag passes up exactly or gives +-0

// What finish() needs to know of every value's writers, in one pass over the program
// (per value and per gated range a scan of every op was quadratic: minutes for a machine
// of ~100K ops).
struct Writers {
  std::vector<int64_t> first, last;  // the first and last op that writes the value (-1: none)
  // The gate value e of the value's last write when that write is an exact clear of it
  // gated by 128 e (e a value: a unit's enable; the shape compiler/clear_dead.h
  // recognises as a self-clear), else compiler::kOne. Units clear their own working
  // values this way, gated by their own enable, which may differ from the enable of the
  // range they sit in.
  std::vector<ValueId> self_clear;

  explicit Writers(const compiler::Program& program) {
    const auto n = static_cast<size_t>(program.num_values());
    first.assign(n, -1);
    last.assign(n, -1);
    const auto& ops = program.ops();
    for (size_t i = 0; i < ops.size(); ++i)
      for (ValueId v : ops[i].writes()) {
        const auto u = static_cast<size_t>(v);
        if (first[u] < 0) first[u] = static_cast<int64_t>(i);
        last[u] = static_cast<int64_t>(i);
      }
    self_clear.assign(n, compiler::kOne);
    std::vector<int> terms(n, 0);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind != compiler::OpKind::Mlp) continue;
      for (const Neuron& nr : ops[i].neurons)
        for (const compiler::Term& t : nr.down) {
          const auto u = static_cast<size_t>(t.value);
          if (last[u] != static_cast<int64_t>(i)) continue;
          const bool clear = nr.gate.terms.size() == 1 && nr.gate.terms[0].weight == kOn && nr.up.terms.size() == 1 &&
                             nr.up.terms[0].value == t.value && std::fabs(nr.up.terms[0].weight) == 1.0f / kOn &&
                             t.weight == -kOn * nr.up.terms[0].weight;
          self_clear[u] = ++terms[u] == 1 && clear ? nr.gate.terms[0].value : compiler::kOne;
        }
    }
  }
  // Every op that writes v is in [begin, end) (and one does).
  bool only_in(size_t v, size_t begin, size_t end) const {
    return first[v] >= 0 && static_cast<size_t>(first[v]) >= begin && static_cast<size_t>(last[v]) < end;
  }
};

// Clear gates that follow from how a value is written (compiler::DeadClearOptions::
// enable_of): a value v whose every write is gated by one value e that is exactly 0 or 1
// (an enable or a flag that `enable_of` already names, written by at most one op) is
// +-0 on every token where e is, so its clear may read e instead of the constant:
//  * an MLP neuron whose gate is w * e alone: silu(w * (+-0)) = +-0, times a finite up
//    and down weight, adds +-0 into v;
//  * a GDN memory whose read flag is e and whose query side reads e instead of the rail
//    (GdnMemory::query_enable, query tap 0): with e = 0 its output gate z is +0, so the
//    head adds +-0 into its out values whatever it finds.
// Every writer of v reads e after e's one write, so the value it is gated by is e's
// final value, the one the clear reads. Adds an entry for every such v without one
// (not for the token inputs: the embedding sets them whatever e is).
void infer_clear_gates(const compiler::Program& program, const std::vector<ValueId>& inputs,
                       std::map<ValueId, ValueId>& enable_of) {
  const auto n = static_cast<size_t>(program.num_values());
  const auto& ops = program.ops();
  std::vector<int> writes(n, 0);
  for (const compiler::Op& op : ops)
    for (ValueId v : op.writes()) ++writes[static_cast<size_t>(v)];
  std::vector<char> input(n, 0);
  for (ValueId v : inputs) input[static_cast<size_t>(v)] = 1;
  std::vector<char> known(n, 0);
  for (const auto& [v, e] : enable_of)
    if (writes[static_cast<size_t>(e)] <= (input[static_cast<size_t>(e)] ? 0 : 1)) known[static_cast<size_t>(e)] = 1;
  constexpr ValueId kNone = -10, kMixed = -11;
  std::vector<ValueId> gate(n, kNone);
  const auto note = [&](ValueId v, ValueId e) {
    ValueId& g = gate[static_cast<size_t>(v)];
    const bool ok = e >= 0 && known[static_cast<size_t>(e)] && e != v;
    g = !ok ? kMixed : g == kNone || g == e ? e : kMixed;
  };
  for (const compiler::Op& op : ops) {
    if (op.kind == compiler::OpKind::Mlp) {
      for (const Neuron& nr : op.neurons) {
        const ValueId e = nr.gate.terms.size() == 1 ? nr.gate.terms[0].value : kMixed;
        for (const compiler::Term& t : nr.down) note(t.value, e);
      }
    } else if (op.kind == compiler::OpKind::GdnMemory) {
      const compiler::GdnMemory& m = op.gdn;
      const ValueId e = m.query_enable == m.read_flag && m.query_tap == 0 ? m.read_flag : kMixed;
      for (ValueId v : m.out) note(v, e);
    } else {
      for (ValueId v : op.writes()) note(v, kMixed);
    }
  }
  for (size_t v = 0; v < n; ++v)
    if (gate[v] >= 0 && !input[v] && !enable_of.count(static_cast<ValueId>(v)))
      enable_of[static_cast<ValueId>(v)] = gate[v];
}

}  // namespace

int64_t AssembledMachine::id(const std::string& name) const {
  for (size_t c = 0; c < control_names.size(); ++c)
    if (control_names[c] == name) return control.id(static_cast<int64_t>(c));
  fail("machine: no control token named '{}'", name);
}

std::vector<int64_t> AssembledMachine::value_tokens(float v) const {
  const auto parts = npu::split_parts_reference(v);
  return {encoding.vocab.token(parts[0]), encoding.vocab.token(parts[1]), encoding.vocab.token(parts[2])};
}

engine::Model AssembledMachine::model(const engine::ModelOptions& options) const {
  if (!compiled.weights.layers.empty()) return engine::Model(compiled.weights, options);
  const compiler::LayerEmitter emitter(program, compiled.schedule, compiled.allocation, interface, emit_options);
  io::Qwen35Weights globals = compiled.weights;
  // The layers as entries: a machine layer holds a few thousand nonzeros among tens of
  // millions of +0, which the dense arrays would allocate, fill and scan (most of the build).
  return engine::Model(std::move(globals), engine::SparseLayerSource([&](int64_t l) { return emitter.sparse_layer(l); }),
                       options);
}

io::LayerWeights AssembledMachine::layer(int64_t l) const {
  if (!compiled.weights.layers.empty()) {
    if (l < 0 || l >= static_cast<int64_t>(compiled.weights.layers.size())) fail("machine: no layer {}", l);
    return compiled.weights.layers[static_cast<size_t>(l)];
  }
  return compiler::LayerEmitter(program, compiled.schedule, compiled.allocation, interface, emit_options).layer(l);
}

std::function<io::LayerWeights(int64_t)> AssembledMachine::layers() const {
  if (!compiled.weights.layers.empty()) return [this](int64_t l) { return layer(l); };
  auto emitter =
      std::make_shared<const compiler::LayerEmitter>(program, compiled.schedule, compiled.allocation, interface, emit_options);
  return [emitter](int64_t l) { return emitter->layer(l); };
}

io::Qwen35Weights AssembledMachine::dense_weights() const {
  io::Qwen35Weights w = compiled.weights;
  if (!w.layers.empty()) return w;
  const auto layer_of = layers();
  for (int64_t l = 0; l < w.config.num_hidden_layers; ++l) w.layers.push_back(layer_of(l));
  return w;
}

float AssembledMachine::decode(int64_t t0, int64_t t1, int64_t t2) const {
  // The INBOX's order (npu/inbox.h): p1 + p2 is exact, p0 + p2 may round when p0 carried.
  return encoding.vocab.value(t0) + (encoding.vocab.value(t1) + encoding.vocab.value(t2));
}

std::vector<ValueProbe> AssembledMachine::probes(const std::vector<ValueId>& values) const {
  // The first sublayer of an op that reads each value of interest without writing it, in
  // one pass over the ops. Ops that read and write v either accumulate into it (a
  // matvec's partial sums, before the value is finished) or clear it (after its last
  // reader): neither reads the finished value.
  std::vector<int64_t> first_read(static_cast<size_t>(program.num_values()), -1);
  std::vector<char> wanted(first_read.size(), 0);
  for (ValueId v : values) {
    if (v < 0 || v >= program.num_values()) fail("machine: probe of value {}, the program has {}", v, program.num_values());
    wanted[static_cast<size_t>(v)] = 1;
  }
  const auto& ops = program.ops();
  for (size_t i = 0; i < ops.size(); ++i) {
    const int64_t s = compiled.schedule.sublayer[i];
    const std::vector<ValueId> writes = ops[i].writes();  // sorted
    for (ValueId v : ops[i].reads()) {
      if (!wanted[static_cast<size_t>(v)] || std::binary_search(writes.begin(), writes.end(), v)) continue;
      int64_t& f = first_read[static_cast<size_t>(v)];
      if (f < 0 || s < f) f = s;
    }
  }
  std::vector<ValueProbe> out;
  for (ValueId v : values) {
    const int64_t f = first_read[static_cast<size_t>(v)];
    if (f < 0)
      fail("machine: value '{}' is read by no op that does not also write it: nothing fixes when it is complete",
           program.name(v));
    if (f == 0) fail("machine: value '{}' is read by the first sublayer: no residual before it", program.name(v));
    out.push_back({f - 1, compiled.allocation.dim(v)});
  }
  return out;
}

Assembler::Assembler(const AssemblerOptions& o, std::vector<std::string> controls, const std::string& done) : o_(o) {
  if (o.elements < 1 || o.elements > 64) fail("machine: {} register elements outside [1, 64]", o.elements);
  const compiler::GdnLayout layout = compiler::GdnLayout::for_dims(o.key_dim, o.value_dim);
  if (o.value_jmin > o.value_jmax) fail("machine: value binades [{}, {}] are empty", o.value_jmin, o.value_jmax);
  if (!o.emit_layers && !o.reuse_dims) fail("machine: layers emitted on demand need reuse_dims");
  if (o.shape_only && !o.reuse_dims) fail("machine: a shape-only machine needs reuse_dims");
  if (controls.empty()) fail("machine: no control tokens");
  for (size_t c = 0; c < controls.size(); ++c) {
    if (controls[c].empty()) fail("machine: control token {} has no name", c);
    if (!index_.emplace(controls[c], static_cast<int64_t>(c)).second)
      fail("machine: control token '{}' named twice", controls[c]);
  }
  m_.encoding.vocab = npu::ValueVocab{0, o.value_jmin, o.value_jmax};
  m_.control = ControlVocab{m_.encoding.vocab.size(), static_cast<int64_t>(controls.size()), signature_group_size(static_cast<int64_t>(controls.size()))};
  m_.control_names = std::move(controls);
  m_.done_id = m_.control.id(control_index(done));
  ops_.resize(m_.control_names.size());
  defined_.assign(m_.control_names.size(), 0);

  const int bits = std::countr_zero(static_cast<uint64_t>(o.key_dim));
  reg_.channels = p_.values("reg.channel", m_.encoding.channels());
  reg_.write_bits = p_.values("reg.write_bit", bits);
  reg_.read_bits = p_.values("reg.read_bit", bits);
  reg_.read_flag = p_.value("reg.read");
  const std::vector<ValueId> write_flags = p_.values("reg.write", o.elements);
  now_ = signature_features(p_, m_.control, "control");
  now_code_ = successor_code(p_, m_.control, "control.code");
  delayed_ = successor_code(p_, m_.control, "successor");
  if (layout.rows() < 2) fail("machine: {} rows per GDN head hold too few registers", layout.rows());

  // Register file: element i of every register in head i.
  register_out_.resize(static_cast<size_t>(o.elements));
  for (int i = 0; i < o.elements; ++i) {
    npu::InboxValues v = reg_;
    v.write_flag = write_flags[static_cast<size_t>(i)];
    v.hi = p_.value("reg.hi");
    v.lo = p_.value("reg.lo");
    v.out = register_out_[static_cast<size_t>(i)] = p_.value("reg.out");
    npu::inbox(p_, m_.encoding, v, "register file head " + std::to_string(i));
    heads_.push_back(std::move(v));
  }
  m_.register_file_heads = o.elements;
}

AssemblerOptions streamed_options(const HostOptions& host, int elements) {
  AssemblerOptions ao;
  static_cast<HostOptions&>(ao) = host;
  ao.elements = elements;
  ao.emit_layers = false;
  return ao;
}

int64_t Assembler::control_index(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) fail("machine: no control token named '{}'", name);
  return it->second;
}

Assembler::Vector Assembler::vector_register(const std::string& name, int elements) {
  if (!features_.empty()) fail("machine: register '{}' declared after send()", name);
  if (elements < 1) fail("machine: register '{}' with {} elements", name, elements);
  Vector r;
  r.read_flag = input(name + ".read");
  r.first_element = static_cast<int>(heads_.size());
  for (int i = 0; i < elements; ++i) {
    const std::string element = elements == 1 ? name : name + "." + std::to_string(i);
    npu::InboxValues v;
    v.channels = reg_.channels;  // the value tokens' channels, shared by every head
    v.write_flag = input(element + ".write");
    v.read_flag = r.read_flag;
    v.hi = p_.value(element + ".hi");
    v.lo = p_.value(element + ".lo");
    v.out = p_.value(element);
    npu::inbox(p_, m_.encoding, v, "register " + element);
    heads_.push_back(v);
    r.out.push_back(v.out);
    ++m_.register_file_heads;
  }
  return r;
}

Assembler::Scalar Assembler::scalar_register(const std::string& name) {
  const Vector r = vector_register(name, 1);
  return Scalar{r.out[0], r.read_flag, r.first_element};
}

Assembler::Immediate Assembler::immediate_register(const std::string& name) {
  if (!features_.empty()) fail("machine: register '{}' declared after send()", name);
  Immediate r;
  r.read_flag = input(name + ".read");
  r.write_flag = input(name + ".write");
  // Not among inputs_: those are 0/1 flags that gate their own clears; data and bias
  // are 0 exactly when the write flag is, so the flag gates theirs (finish()).
  r.data = p_.value(name + ".data");
  r.bias = p_.value(name + ".bias");
  immediate_data_.push_back({r.data, r.write_flag});
  immediate_data_.push_back({r.bias, r.write_flag});
  r.out = p_.value(name);
  compiler::GdnMemory m;
  m.write_flag = r.write_flag;  // one row: no address bits
  m.read_flag = r.read_flag;
  m.data = {r.data, r.bias};
  m.out = {r.out, r.out};
  m.out_weights = {1.0f, -1.0f};  // (k + 32) - 32 = k: small integers, exact in any order
  // No address bits, taps 0: the constants read the flags instead of the rail (ir.h).
  m.key_enable = r.write_flag;
  m.query_enable = r.read_flag;
  p_.gdn_memory("immediate register " + name, std::move(m));
  ++m_.register_file_heads;
  return r;
}

std::vector<std::pair<ValueId, float>> Assembler::immediate(const Immediate& r, int64_t k) const {
  if (k < 0 || k >= (int64_t{1} << 20)) fail("machine: immediate {} outside [0, 2^20)", k);
  return {{r.write_flag, 1.0f}, {r.data, static_cast<float>(k + 32)}, {r.bias, 32.0f}};
}

void Assembler::computed_successor(const std::string& first, const std::vector<ValueId>& onehot) {
  if (computed_) fail("machine: computed_successor() called twice");
  if (onehot.empty()) fail("machine: a computed successor over no tokens");
  const int64_t c0 = control_index(first);
  if (c0 + static_cast<int64_t>(onehot.size()) > m_.control.count)
    fail("machine: computed successors from '{}' ({} tokens) run past the {} control tokens", first, onehot.size(),
         m_.control.count);
  // Token c: gate 128 h (silu passes 128 exactly, -0 or +0 when idle), up 1/128: h
  // exactly, into its group and member feature; one live term per feature.
  std::vector<Neuron> select;
  for (size_t k = 0; k < onehot.size(); ++k) {
    const int64_t c = c0 + static_cast<int64_t>(k);
    select.push_back(Neuron{Lin{{{onehot[k], kOn}}}, Lin{{{compiler::kOne, 1.0f / kOn}}},
                            {{now_.group[static_cast<size_t>(c / m_.control.group_size)], 1.0f},
                             {now_.member[static_cast<size_t>(c % m_.control.group_size)], 1.0f}}});
  }
  p_.mlp_select("computed successor", std::move(select));
  computed_ = true;
}

std::vector<ValueId> Assembler::gated(const std::vector<ValueId>& x, const std::vector<ValueId>& flags,
                                      const std::string& label) {
  return gated(std::vector<std::vector<ValueId>>{x}, flags, label);
}

std::vector<ValueId> Assembler::gated(const std::vector<std::vector<ValueId>>& sources, const std::vector<ValueId>& flags,
                                      const std::string& label) {
  // Nothing to gate (e.g. the address bits of a RAM with one row): no op.
  if (!sources.empty() && sources[0].empty() && !flags.empty()) {
    for (const auto& s : sources)
      if (!s.empty()) fail("machine: '{}' gates sources of 0 and {} values", label, s.size());
    return {};
  }
  std::vector<Neuron> ns;
  std::vector<ValueId> out = gated_neurons(sources, flags, label, label + ".on", ns);
  p_.mlp(label, std::move(ns));
  return out;
}

std::vector<ValueId> Assembler::gated_neurons(const std::vector<std::vector<ValueId>>& sources,
                                              const std::vector<ValueId>& flags, const std::string& label,
                                              const std::string& enable_label, std::vector<Neuron>& ns) {
  if (flags.empty()) fail("machine: '{}' gated by no flag", label);
  if (sources.empty()) fail("machine: '{}' gates no source", label);
  const size_t n = sources[0].size();
  for (const auto& s : sources)
    if (s.size() != n) fail("machine: '{}' gates sources of {} and {} values", label, n, s.size());
  Lin on;
  for (ValueId f : flags) on.terms.push_back({f, kOn});
  std::vector<ValueId> out = p_.values(label, static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    Lin up;
    for (const auto& s : sources) up.terms.push_back({s[i], 1.0f / kOn});
    ns.push_back(Neuron{on, std::move(up), {{out[i], 1.0f}}});
  }
  // The clears' enable: the flag, or the flags' sum (silu(128 s) * s / 128 = s for s = 0
  // or 1, exact), written by the same op.
  ValueId enable = flags[0];
  if (flags.size() > 1) {
    enable = p_.value(enable_label);
    Lin sum;
    for (ValueId f : flags) sum.terms.push_back({f, 1.0f / kOn});
    ns.push_back(Neuron{on, std::move(sum), {{enable, 1.0f}}});
    gate_own_clears({enable});
  }
  gate_clears_of(out, enable);
  return out;
}

void Assembler::gate_clears_of(const std::vector<ValueId>& values, ValueId enable) {
  for (ValueId v : values) clear_enables_.push_back({v, enable});
}

void Assembler::gate_own_clears(const std::vector<ValueId>& flags) {
  for (ValueId f : flags) clear_enables_.push_back({f, f});
}

void Assembler::discard(const std::vector<ValueId>& values, ValueId enable, const std::string& label) {
  std::vector<Neuron> ns;
  for (ValueId v : values) ns.push_back(Neuron{Lin{{{enable, kOn}}}, Lin{{{v, -1.0f / kOn}}}, {{v, 1.0f}}});
  p_.mlp(label, std::move(ns));
  gate_clears_of(values, enable);
}

ValueId Assembler::input(const std::string& name) {
  const ValueId v = p_.value(name);
  inputs_.push_back(v);
  return v;
}

std::vector<ValueId> Assembler::inputs(const std::string& name, int count) {
  std::vector<ValueId> v = p_.values(name, count);
  inputs_.insert(inputs_.end(), v.begin(), v.end());
  return v;
}

void Assembler::send(const std::vector<ValueId>& lanes, ValueId enable, size_t first_gated_op) {
  if (!features_.empty()) fail("machine: send() called twice");
  if (lanes.empty()) fail("machine: send() without lanes");
  lanes_sent_ = static_cast<int64_t>(lanes.size());
  const int64_t G = signature_group_size(lanes_sent_);
  lane_group_ = p_.values("send.lane_group", static_cast<int>((lanes_sent_ + G - 1) / G));
  lane_member_ = p_.values("send.lane_member", static_cast<int>(G));
  // Lane select in two steps, each a gate of 128 flag (x or +-0): per member m, the lane of
  // the hot group (every other term +-0); then the hot member's. Every value is +-0 or a
  // lane's float: exact.
  const std::vector<ValueId> by_member = p_.values("send.by_member", static_cast<int>(G));
  std::vector<Neuron> select;
  for (size_t i = 0; i < lanes.size(); ++i)
    select.push_back(Neuron{Lin{{{lane_group_[i / static_cast<size_t>(G)], kOn}}}, Lin{{{lanes[i], 1.0f / kOn}}},
                            {{by_member[i % static_cast<size_t>(G)], 1.0f}}});
  p_.mlp("send.select_group", std::move(select));
  const ValueId result = p_.value("send.result");
  select.clear();
  for (size_t m = 0; m < by_member.size(); ++m)
    select.push_back(Neuron{Lin{{{lane_member_[m], kOn}}}, Lin{{{by_member[m], 1.0f / kOn}}}, {{result, 1.0f}}});
  p_.mlp("send.select", std::move(select));
  const auto parts = npu::split_parts(p_, result);
  const compiler::GdnLayout layout = compiler::GdnLayout::for_dims(o_.key_dim, o_.value_dim);

  // The LM head features of the three parts, one part after another: p1's (p2's) go into
  // their delay line (tap 1, 2: into p0's feature values on the next cycles) right after
  // they are computed, and each part's block is ordered after the previous one
  // (Program::order), so only one part's working values are live at a time (the three
  // side by side: ~1,220 live values; one after another: ~950).
  m_.delay_heads = 0;
  compiler::OpRange previous;
  std::vector<std::pair<size_t, size_t>> datapath;  // the non-GDN ops, for gate_clears
  datapath.push_back({first_gated_op, p_.ops().size()});
  for (int k = 0; k < 3; ++k) {
    const size_t begin = p_.ops().size();
    features_.push_back(npu::emit_features(p_, parts[static_cast<size_t>(k)], m_.encoding.vocab));
    datapath.push_back({begin, p_.ops().size()});
    if (k > 0) {
      const npu::EmitFeatures& src = features_[static_cast<size_t>(k)];
      const npu::EmitFeatures& dst = features_[0];
      std::vector<DelayColumn> delayed;
      for (size_t j = 0; j < src.positive.size(); ++j) {
        delayed.push_back({src.positive[j], k, dst.positive[j]});
        delayed.push_back({src.negative[j], k, dst.negative[j]});
      }
      // emit_features' mantissa one-hot is 2^-7 on the hot entry (what the value head's
      // 2^10 weight reads as 2^3), the other features 1.
      for (size_t j = 0; j < src.mantissa_hot.size(); ++j)
        delayed.push_back({src.mantissa_hot[j], k, dst.mantissa_hot[j], -7});
      delayed.push_back({src.zero, k, dst.zero});
      m_.delay_heads += delay_line(p_, delayed, layout.capacity(false), "delay line p" + std::to_string(k));
    }
    const compiler::OpRange block{begin, p_.ops().size()};
    if (k > 0) p_.order(previous, block);
    previous = block;
  }
  compiler::enable_constants(p_, first_gated_op, enable);  // GDN ops (the delay lines) are left as they are
  for (const auto& [first, end] : datapath) gate_clears(first, end, enable);

  // The successor: three cycles later, into the control features.
  std::vector<DelayColumn> successor;
  const auto later = delayed_.all(), now = now_code_.all();
  for (size_t j = 0; j < later.size(); ++j) successor.push_back({later[j], 3, now[j]});
  m_.delay_heads += delay_line(p_, successor, layout.capacity(false), "delay line successor");
}

void Assembler::return_register() {
  if (!features_.empty()) fail("machine: return_register() after send()");
  if (!return_.group_bits.empty()) fail("machine: return_register() called twice");
  return_ = successor_code(p_, m_.control, "return");
  return_write_ = input("return.write");
  return_read_ = input("return.read");
  const std::vector<ValueId> code = return_.all();
  npu::FloatRamHead h;
  h.data = code;
  h.write_flag = h.wipe_flag = return_write_;
  h.read_flag = return_read_;
  h.out = p_.values("return.out", static_cast<int>(code.size()));
  const std::vector<ValueId> out = h.out;
  // The bits are 0 or 1 (binade 0): a window from 2^-33 holds them exactly.
  npu::float_ram(p_, npu::FloatRamWindow{}, {h}, return_write_, "return register");
  gate_clears_of(out, return_read_);
  // Into the delayed code: gate 128 b, up b / 128 gives b exactly (b = 0 or 1); on the
  // Return token's cycle the embedding names no delayed successor, so each code value
  // gets one live term.
  const std::vector<ValueId> delayed = delayed_.all();
  std::vector<Neuron> ns;
  for (size_t i = 0; i < out.size(); ++i)
    ns.push_back(Neuron{Lin{{{out[i], kOn}}}, Lin{{{out[i], 1.0f / kOn}}}, {{delayed[i], 1.0f}}});
  p_.mlp("return", std::move(ns));
}

void Assembler::branch(ValueId cond) {
  if (conditions_.empty()) {
    then_ = successor_code(p_, m_.control, "branch.then");
    otherwise_ = successor_code(p_, m_.control, "branch.else");
  }
  conditions_.push_back(cond);
}

MicroOp Assembler::branch_step(const std::string& then, const std::string& otherwise) const {
  MicroOp op;
  op.successor = control_index(then);
  op.otherwise = control_index(otherwise);
  op.timing = SuccessorTiming::Branch;
  return op;
}

void Assembler::gate_clears(size_t first_op, size_t end_op, ValueId enable) {
  gated_.push_back({{first_op, end_op}, enable});
}

void Assembler::define(const std::string& control, MicroOp op) {
  const int64_t c = control_index(control);
  if (defined_[static_cast<size_t>(c)]) fail("machine: micro-op '{}' defined twice", control);
  if ((op.timing == SuccessorTiming::Return || op.call >= 0) && return_.group_bits.empty())
    fail("machine: micro-op '{}' calls or returns, but the machine has no return register", control);
  if (op.call >= m_.control.count)
    fail("machine: micro-op '{}' calls {}, outside the {} control tokens", control, op.call, m_.control.count);
  if (op.timing == SuccessorTiming::Computed) {
    if (!computed_) fail("machine: micro-op '{}' has a computed successor, but none was computed", control);
    if (op.successor != -1) fail("machine: micro-op '{}' names a successor and computes one", control);
  } else if (op.timing == SuccessorTiming::Return) {
    if (op.successor != -1) fail("machine: micro-op '{}' names a successor and returns", control);
  } else if (op.successor < 0 || op.successor >= m_.control.count)
    fail("machine: micro-op '{}' has no successor among the {} control tokens", control, m_.control.count);
  if (op.timing == SuccessorTiming::Branch) {
    if (conditions_.empty()) fail("machine: micro-op '{}' branches, but no branch condition was given", control);
    if (op.otherwise < 0 || op.otherwise >= m_.control.count)
      fail("machine: micro-op '{}' has no second successor among the {} control tokens", control, m_.control.count);
  }
  const int64_t rows = compiler::GdnLayout::for_dims(o_.key_dim, o_.value_dim).rows();
  for (int64_t r : {op.read_register, op.write_register})
    if (r >= rows) fail("machine: micro-op '{}' names register {}, the file has {}", control, r, rows);
  if (op.write_register >= 0 && (op.write_element < 0 || static_cast<size_t>(op.write_element) >= heads_.size()))
    fail("machine: micro-op '{}' writes element {} of {}", control, op.write_element, heads_.size());
  if (op.write_register > 0 && op.write_element >= o_.elements)
    fail("machine: micro-op '{}' writes row {} of a scalar register", control, op.write_register);
  if (op.lane >= 0 && op.lane >= lanes_sent_)
    fail("machine: micro-op '{}' sends lane {} outside the {} lanes sent", control, op.lane, lanes_sent_);
  ops_[static_cast<size_t>(c)] = std::move(op);
  defined_[static_cast<size_t>(c)] = 1;
}

MicroOp Assembler::step(const std::string& successor) const {
  MicroOp op;
  op.successor = control_index(successor);
  return op;
}

MicroOp Assembler::write(int64_t reg, int element, const std::string& successor) const {
  MicroOp op = step(successor);
  op.write_register = reg;
  op.write_element = element;
  op.timing = SuccessorTiming::Delayed;
  return op;
}

void Assembler::define_header(const std::string& first) {
  define("HDR", step(first));
  define("NOP", step("NOP"));
  define("DONE", step("DONE"));
}

AssembledMachine Assembler::finish() {
  if (features_.empty()) fail("machine: send() was never called");
  for (size_t c = 0; c < defined_.size(); ++c)
    if (!defined_[c]) fail("machine: control token '{}' has no micro-op", m_.control_names[c]);
  // Branches: the control features += the staging set the condition picks (gate 128
  // cond passes `then`, 128 - 128 cond passes `otherwise`; on other cycles both staging
  // sets are 0, so the op adds +-0).
  if (!conditions_.empty()) {
    Lin on, off{{{compiler::kOne, kOn}}};
    for (ValueId c : conditions_) {
      on.terms.push_back({c, kOn});
      off.terms.push_back({c, -kOn});
    }
    const auto now = now_code_.all(), then = then_.all(), otherwise = otherwise_.all();
    std::vector<Neuron> pick;
    for (size_t f = 0; f < now.size(); ++f) {
      pick.push_back(Neuron{on, Lin{{{then[f], 1.0f / kOn}}}, {{now[f], 1.0f}}});
      pick.push_back(Neuron{off, Lin{{{otherwise[f], 1.0f / kOn}}}, {{now[f], 1.0f}}});
    }
    p_.mlp("branch", std::move(pick));
  }
  // The successor named this cycle (by the token, a branch or the delay line: at most one
  // of them) into the LM head's features.
  decode_successor(p_, now_code_, now_, m_.control, "successor decode");
  if (o_.idle_attention_layer) npu::add_idle_attention_layer(p_);

  // Embedding rows: value tokens into the register file's channels, control tokens as
  // their micro-ops say.
  compiler::Interface io;
  io.inputs = reg_.channels;
  io.inputs.insert(io.inputs.end(), reg_.write_bits.begin(), reg_.write_bits.end());
  io.inputs.insert(io.inputs.end(), reg_.read_bits.begin(), reg_.read_bits.end());
  io.inputs.push_back(reg_.read_flag);
  for (int i = 0; i < o_.elements; ++i) io.inputs.push_back(heads_[static_cast<size_t>(i)].write_flag);
  io.inputs.insert(io.inputs.end(), inputs_.begin(), inputs_.end());
  io.inputs.insert(io.inputs.end(), lane_group_.begin(), lane_group_.end());
  io.inputs.insert(io.inputs.end(), lane_member_.begin(), lane_member_.end());
  for (const auto& [v, flag] : immediate_data_) io.inputs.push_back(v);
  for (const auto* f : {&now_code_, &delayed_, &then_, &otherwise_, &return_}) {
    if (f->group_bits.empty()) continue;  // codes a machine does not use (branches, returns) are not made
    const auto a = f->all();
    io.inputs.insert(io.inputs.end(), a.begin(), a.end());
  }
  io.vocab_size = m_.control.first + m_.control.count;
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * io.inputs.size(), 0.0f);
  for (int64_t t = 0; t < m_.encoding.vocab.size(); ++t)
    npu::set_embedding_row(io, t, npu::value_token_inputs(m_.encoding, reg_, m_.encoding.vocab.value(t)));
  for (size_t c = 0; c < ops_.size(); ++c) {
    const MicroOp& op = ops_[c];
    const int64_t token = m_.control.id(static_cast<int64_t>(c));
    if (op.write_register >= 0)
      npu::set_embedding_row(io, token, npu::write_token_inputs(heads_[static_cast<size_t>(op.write_element)], op.write_register));
    if (op.read_register >= 0) npu::set_embedding_row(io, token, npu::read_token_inputs(reg_, op.read_register));
    if (op.timing == SuccessorTiming::Branch) {
      npu::set_embedding_row(io, token, then_.naming(m_.control, op.successor));
      npu::set_embedding_row(io, token, otherwise_.naming(m_.control, op.otherwise));
    } else if (op.timing == SuccessorTiming::Return) {
      npu::set_embedding_row(io, token, {{return_read_, 1.0f}});
    } else if (op.timing != SuccessorTiming::Computed) {
      const SuccessorCode& next = op.timing == SuccessorTiming::Now ? now_code_ : delayed_;
      npu::set_embedding_row(io, token, next.naming(m_.control, op.successor));
    }
    if (op.call >= 0) {
      npu::set_embedding_row(io, token, return_.naming(m_.control, op.call));
      npu::set_embedding_row(io, token, {{return_write_, 1.0f}});
    }
    npu::set_embedding_row(io, token, op.sets);
    if (op.lane >= 0) {
      const size_t G = lane_member_.size(), lane = static_cast<size_t>(op.lane);
      npu::set_embedding_row(io, token, {{lane_group_[lane / G], 1.0f}, {lane_member_[lane % G], 1.0f}});
    }
  }

  compiler::EmitOptions eo;
  eo.gdn_key_head_dim = o_.key_dim;
  eo.gdn_value_head_dim = o_.value_dim;
  if (o_.reuse_dims) {
    // Dead values share dims (compiler/clear_dead.h), token inputs too (clear_inputs:
    // the flags a micro-op sets are read near the top of the stack and give their dims
    // back after their last read). The LM head reads p0's features and the control
    // features from the final residual stream: they are kept to the end.
    // Values written only by a gated range are +0 on every cycle whose enable is 0, so
    // their clears read the enable instead of the constant (compiler::DeadClearOptions:
    // no work on idle cycles); an enable gates its own clear (exactly 0 or 1; +0 when 0),
    // and so does every 0/1 token input (a flag is +-0 exactly when it is idle).
    compiler::DeadClearOptions clears;
    clears.clear_inputs = true;
    const npu::EmitFeatures& f0 = features_[0];
    std::vector<ValueId> head = now_.all();
    for (const auto* s : {&f0.positive, &f0.negative, &f0.mantissa_hot}) head.insert(head.end(), s->begin(), s->end());
    head.push_back(f0.zero);
    clears.keep = head;
    const Writers writers(p_);
    for (const auto& [range, enable] : gated_) {
      for (size_t v = 0; v < writers.first.size(); ++v) {
        if (!writers.only_in(v, range.first, range.second)) continue;
        // A unit's self-cleared value keeps its own enable (its clear reads that one).
        const ValueId own = writers.self_clear[v];
        clears.enable_of[static_cast<ValueId>(v)] = own != compiler::kOne ? own : enable;
      }
      clears.enable_of[enable] = enable;
    }
    std::vector<ValueId> flags = reg_.write_bits;
    flags.insert(flags.end(), reg_.read_bits.begin(), reg_.read_bits.end());
    flags.push_back(reg_.read_flag);
    for (const auto& h : heads_) flags.push_back(h.write_flag);
    for (const auto* s : {&inputs_, &lane_group_, &lane_member_}) flags.insert(flags.end(), s->begin(), s->end());
    for (const auto* f : {&now_code_, &delayed_, &then_, &otherwise_, &return_}) {
      if (f->group_bits.empty()) continue;  // codes a machine does not use (branches, returns) are not made
      const auto a = f->all();
      flags.insert(flags.end(), a.begin(), a.end());
    }
    for (ValueId f : flags) clears.enable_of[f] = f;
    for (const auto& [v, flag] : immediate_data_) clears.enable_of[v] = flag;
    for (const auto& [v, enable] : clear_enables_) clears.enable_of[v] = enable;
    infer_clear_gates(p_, io.inputs, clears.enable_of);
    compiler::ReusePlan plan = compiler::plan_dim_reuse(p_, io, o_.limits, clears);
    for (ValueId v : head)
      if (plan.lifetimes[static_cast<size_t>(v)] == compiler::Lifetime::ToLastAccess ||
          plan.lifetimes[static_cast<size_t>(v)] == compiler::Lifetime::EmbeddingToLastAccess)
        fail("machine: LM head feature '{}' would give its dim away before the head", plan.program.name(v));
    if (o_.shape_only) {
      m_.compiled.weights.config = compiler::LayerEmitter(plan.program, plan.schedule, plan.allocation, io, eo).config();
    } else {
      m_.compiled.weights =
          o_.emit_layers ? compiler::emit(plan.program, plan.schedule, plan.allocation, io, eo)
                         : compiler::LayerEmitter(plan.program, plan.schedule, plan.allocation, io, eo).globals();
    }
    m_.compiled.schedule = std::move(plan.schedule);
    m_.compiled.allocation = std::move(plan.allocation);
    m_.program = std::move(plan.program);
  } else {
    m_.compiled = compiler::compile(p_, io, o_.limits, eo);
    m_.program = p_;
  }
  if (!o_.shape_only) {
    npu::install_value_head(m_.compiled.weights, m_.compiled.allocation, features_[0], m_.encoding.vocab);
    install_control_head(m_.compiled.weights, m_.compiled.allocation, now_, m_.control);
  }
  m_.interface = std::move(io);
  m_.emit_options = eo;
  return std::move(m_);
}

}  // namespace qpu::machine
