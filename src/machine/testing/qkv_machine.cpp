#include "machine/testing/qkv_machine.h"

#include <string>

#include "common/error.h"

namespace qpu::machine {

using compiler::ValueId;

namespace {

std::string name(const char* prefix, int i) { return std::string(prefix) + "." + std::to_string(i); }
std::string cache_name(const char* prefix, int l, int i) {
  return std::string(prefix) + "(" + std::to_string(l) + ")." + std::to_string(i);
}

}  // namespace

int64_t QkvMachine::qkv(int l) const { return id(name("QKV", l)); }

QkvMachine build_qkv_machine(const reference::Llama2Checkpoint& ck, const QkvMachineOptions& o) {
  const auto& cfg = ck.config();
  const int dim = cfg.dim;
  if (dim > 64) fail("qkv machine: dim {} needs more than 64 register elements", dim);
  std::vector<std::string> names = {"HDR", "NOP", "DONE", "WPOS", "INC"};
  for (int i = 0; i < dim; ++i) names.push_back(name("WX", i));
  for (const std::string& n : AttentionHalf::names(cfg, o)) names.push_back(n);
  Assembler as(streamed_options(o, dim), names, "DONE");
  compiler::Program& p = as.program();
  const Assembler::Scalar pos = as.scalar_register("POS");

  // x is register X; with the attention stages ATTO reads X too, so QKV reads it through a
  // gate (without them it is read only by QKV tokens: the block's operands are 0 whenever
  // its flags are).
  AttentionHalf half(as, ck, o, pos, [&](const std::vector<ValueId>& flags, const std::string& label) {
    return o.attention ? as.gated(as.register_out(), flags, label) : as.register_out();
  });

  // The read-back: the half's lanes, and INC's pos + 1, sent when a token sets `send`.
  const ValueId send = as.input("send.on");
  const size_t first_sum = p.ops().size();
  // INC: pos + 1 (one neuron: gate 128 inc, up (pos + 1) / 128, an exact small integer).
  const ValueId inc = as.input("inc");
  const ValueId next_pos = p.value("pos.next");
  p.mlp("pos + 1", {compiler::Neuron{compiler::Lin{{{inc, 128.0f}}},
                                     compiler::Lin{{{pos.out, 1.0f / 128.0f}, {compiler::kOne, 1.0f / 128.0f}}},
                                     {{next_pos, 1.0f}}}});
  std::vector<ValueId> lanes = {next_pos};
  lanes.insert(lanes.end(), half.lanes().begin(), half.lanes().end());
  as.send(lanes, send, first_sum);

  as.define_header(name("WX", 0));
  for (int i = 0; i < dim; ++i) as.define(name("WX", i), as.write(0, i, i + 1 < dim ? name("WX", i + 1) : std::string("WPOS")));
  as.define("WPOS", as.write(0, pos.element, name("QKV", 0)));
  {
    // INC: POS <- POS + 1, sent up and written back like any float (4 cycles).
    MicroOp op = as.write(0, pos.element, "DONE");
    op.sets = {{send, 1.0f}, {pos.read_flag, 1.0f}, {inc, 1.0f}};
    op.lane = 0;
    as.define("INC", std::move(op));
  }
  AttentionControl control;
  control.after_atto = [](int) { return std::string("DONE"); };
  control.reads_x = [](MicroOp& op, int) { op.read_register = 0; };
  half.define(1, send, control);
  QkvMachine m;
  static_cast<AssembledMachine&>(m) = as.finish();
  m.heads = half.heads();
  m.exp_groups = half.exp_groups();
  m.dim = dim;
  m.kv_dim = cfg.kv_dim();
  m.layers = cfg.n_layers;
  return m;
}

std::vector<int64_t> QkvMachine::set_pos(int pos) const {
  std::vector<int64_t> t = {id("WPOS")};
  for (int64_t v : value_tokens(static_cast<float>(pos))) t.push_back(v);
  return t;
}

std::vector<int64_t> QkvMachine::load_x(const std::vector<float>& x) const {
  if (x.size() != static_cast<size_t>(dim)) fail("qkv machine: x has {} elements, dim is {}", x.size(), dim);
  std::vector<int64_t> t;
  for (int i = 0; i < dim; ++i) {
    t.push_back(id(name("WX", i)));
    for (int64_t v : value_tokens(x[static_cast<size_t>(i)])) t.push_back(v);
  }
  return t;
}

std::vector<int64_t> QkvMachine::load_and_run(const std::vector<float>& x, int pos, int layer) const {
  if (layer < 0 || layer >= layers) fail("qkv machine: layer {} outside [0, {})", layer, layers);
  std::vector<int64_t> t = load_x(x);
  for (int64_t v : set_pos(pos)) t.push_back(v);
  t.push_back(qkv(layer));
  return t;
}

namespace {

// The parts of every float and the control token after it (the last one: DONE).
std::vector<int64_t> sent(const AssembledMachine& m, const std::vector<float>& floats,
                          const std::vector<std::string>& controls) {
  std::vector<int64_t> s;
  for (size_t n = 0; n < floats.size(); ++n) {
    for (int64_t t : m.value_tokens(floats[n])) s.push_back(t);
    s.push_back(n + 1 < controls.size() ? m.id(controls[n + 1]) : m.done());
  }
  return s;
}

}  // namespace

std::vector<int64_t> QkvMachine::expected_q(const std::vector<float>& q) const {
  std::vector<std::string> order;
  for (int i = 0; i < dim; ++i) order.push_back(name("RQ", i));
  return sent(*this, q, order);
}

std::vector<int64_t> QkvMachine::stage_tokens(int layer, int count, const std::vector<StageForm>& forms) const {
  if (heads == 0) fail("qkv machine: built without the attention stages");
  if (layer < 0 || layer >= layers) fail("qkv machine: layer {} outside [0, {})", layer, layers);
  std::vector<int64_t> t;
  for (int i = 0; i < count; ++i)
    for (const auto& [op, suffix] : forms) t.push_back(id(cache_name(op, layer, i) + suffix));
  return t;
}

std::vector<QkvMachine::StageForm> QkvMachine::grouped(const char* op) const {
  std::vector<StageForm> forms;
  for (int hg = 0; hg < exp_groups; ++hg) forms.push_back({op, "." + std::to_string(hg)});
  return forms;
}

std::vector<int64_t> QkvMachine::read_backs(const std::vector<const char*>& ops, const std::vector<float>& floats) const {
  std::vector<std::string> order;
  for (const char* op : ops)
    for (int h = 0; h < heads; ++h) order.push_back(name(op, h));
  return sent(*this, floats, order);
}

std::vector<int64_t> QkvMachine::score_and_max(int layer, int pos) const {
  std::vector<int64_t> t = stage_tokens(layer, pos / 8 + 1, {{"SCORE", ""}});
  t.push_back(id("MAX(" + std::to_string(layer) + ")"));
  return t;
}
std::vector<int64_t> QkvMachine::exps(int layer, int pos) const { return stage_tokens(layer, pos / 8 + 1, grouped("EXP")); }
std::vector<int64_t> QkvMachine::sums(int layer) const { return stage_tokens(layer, heads, {{"SUM", ".0"}}); }
std::vector<int64_t> QkvMachine::probs(int layer, int pos) const { return stage_tokens(layer, pos / 8 + 1, grouped("PROB")); }
std::vector<int64_t> QkvMachine::wsums(int layer) const { return stage_tokens(layer, heads, {{"WSUM", ".0"}, {"WSUMX", ""}}); }

std::vector<int64_t> QkvMachine::expected_max(const std::vector<float>& max) const {
  std::vector<int64_t> s = {id(name("RM", 0))};  // MAX's successor
  for (int64_t t : read_backs({"RM"}, max)) s.push_back(t);
  return s;
}

std::vector<int64_t> QkvMachine::expected_scores(const std::vector<float>& scores) const {
  return read_backs({"RS"}, scores);
}

std::vector<int64_t> QkvMachine::expected_sums(const std::vector<float>& sum) const { return read_backs({"RSUM"}, sum); }

std::vector<int64_t> QkvMachine::expected_exps(const std::vector<float>& mant, const std::vector<float>& exponent) const {
  std::vector<float> all = mant;
  all.insert(all.end(), exponent.begin(), exponent.end());
  return read_backs({"RE", "RX"}, all);
}

std::vector<int64_t> QkvMachine::expected_probs(const std::vector<float>& pm, const std::vector<float>& exponent) const {
  std::vector<float> all = pm;
  all.insert(all.end(), exponent.begin(), exponent.end());
  return read_backs({"RP", "RPX"}, all);
}

std::vector<int64_t> QkvMachine::expected_xb(int head, const std::vector<float>& xb, bool unsafe) const {
  std::vector<std::string> order;
  for (size_t i = 0; i <= xb.size(); ++i) order.push_back(cache_name("RXB", head, static_cast<int>(i)));
  std::vector<float> all = xb;
  all.push_back(unsafe ? 1.0f : 0.0f);
  return sent(*this, all, order);
}

std::vector<int64_t> QkvMachine::expected_atto(int layer, const std::vector<float>& x) const {
  std::vector<std::string> order;
  for (int i = 0; i < dim; ++i) order.push_back(cache_name("ATTO", layer, i));
  return sent(*this, x, order);
}

std::vector<int64_t> QkvMachine::expected_kv(int layer, const std::vector<float>& k, const std::vector<float>& v) const {
  std::vector<std::string> order;
  for (const char* r : {"RK", "RV"})
    for (int i = 0; i < kv_dim; ++i) order.push_back(cache_name(r, layer, i));
  std::vector<float> all = k;
  all.insert(all.end(), v.begin(), v.end());
  return sent(*this, all, order);
}

}  // namespace qpu::machine
