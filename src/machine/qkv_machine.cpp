#include "machine/qkv_machine.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "compiler/gdn_layout.h"
#include "npu/block_qkv.h"
#include "npu/float_ram.h"

namespace qpu::machine {

using compiler::ValueId;

namespace {

std::string name(const char* prefix, int i) { return std::string(prefix) + "." + std::to_string(i); }

// Float RAM heads holding `data` (split into rows of `per_row` floats), read into `out`;
// every head wiped and written by `store`, read by `read`.
void add_heads(std::vector<npu::FloatRamHead>& heads, const std::vector<ValueId>& data, const std::vector<ValueId>& out,
               size_t per_row, ValueId store, ValueId read) {
  for (size_t first = 0; first < data.size(); first += per_row) {
    const size_t n = std::min(per_row, data.size() - first);
    npu::FloatRamHead h;
    h.data.assign(data.begin() + static_cast<std::ptrdiff_t>(first), data.begin() + static_cast<std::ptrdiff_t>(first + n));
    h.out.assign(out.begin() + static_cast<std::ptrdiff_t>(first), out.begin() + static_cast<std::ptrdiff_t>(first + n));
    h.write_flag = h.wipe_flag = store;
    h.read_flag = read;
    heads.push_back(std::move(h));
  }
}

}  // namespace

int64_t QkvMachine::qkv(int l) const { return id(name("QKV", l)); }

QkvMachine build_qkv_machine(const reference::Llama2Checkpoint& ck, const QkvMachineOptions& o) {
  const auto& cfg = ck.config();
  const int dim = cfg.dim, layers = cfg.n_layers, kv_dim = cfg.dim * cfg.n_kv_heads / cfg.n_heads;
  if (dim > 64) fail("qkv machine: dim {} needs more than 64 register elements", dim);

  std::vector<std::string> names = {"HDR", "NOP", "DONE", "WPOS"};
  for (int i = 0; i < dim; ++i) names.push_back(name("WX", i));
  for (int l = 0; l < layers; ++l) names.push_back(name("QKV", l));
  for (int i = 0; i < dim; ++i) names.push_back(name("RQ", i));
  for (const char* r : {"RK", "RV"})
    for (int i = 0; i < kv_dim; ++i) names.push_back(name(r, i));
  AssemblerOptions ao;
  ao.elements = dim;
  ao.key_dim = o.key_dim;
  ao.value_dim = o.value_dim;
  ao.idle_attention_layer = o.idle_attention_layer;
  ao.value_jmin = o.value_jmin;
  ao.value_jmax = o.value_jmax;
  ao.emit_layers = false;
  ao.limits = o.limits;
  Assembler as(ao, names, "DONE");
  compiler::Program& p = as.program();
  const Assembler::Scalar pos = as.scalar_register("POS");

  // QKV(l): x and pos are read only on QKV cycles, so the block's operands are 0 (its
  // idle contract; pos may be anything) whenever its flags are 0.
  const std::vector<ValueId> layer_flags = as.inputs("qkv.layer", layers);
  const npu::QkvBlock b = npu::qkv_block(p, ck, as.register_out(), layer_flags, pos.out);
  as.gate_clears(b.first_op, p.ops().size(), b.enable);

  // q, k and v down into float RAMs, wiped and written by QKV, read by RQ/RK/RV.
  const ValueId store = as.input("ram.store");
  const std::vector<ValueId> read = as.inputs("ram.read", 3);
  const std::vector<ValueId> q = p.values("ram.q", dim), k = p.values("ram.k", kv_dim), v = p.values("ram.v", kv_dim);
  const auto per_row =
      static_cast<size_t>(npu::floats_per_row(compiler::GdnLayout::for_dims(o.key_dim, o.value_dim)));
  std::vector<npu::FloatRamHead> heads;
  add_heads(heads, b.q, q, per_row, store, read[0]);
  add_heads(heads, b.k, k, per_row, store, read[1]);
  add_heads(heads, b.v, v, per_row, store, read[2]);
  npu::float_ram(p, npu::FloatRamWindow{o.ram_low_binade}, heads, b.enable, "qkv RAM");

  // The read-back: lanes q ++ k ++ v, sent when a read-back token sets `send`.
  const ValueId send = as.input("send.on");
  std::vector<ValueId> lanes = q;
  lanes.insert(lanes.end(), k.begin(), k.end());
  lanes.insert(lanes.end(), v.begin(), v.end());
  as.send(lanes, send, p.ops().size());

  auto index = [&](const std::string& n) { return as.control_index(n); };
  auto now = [&](const std::string& next) {
    MicroOp op;
    op.successor = index(next);
    return op;
  };
  as.define("HDR", now(name("WX", 0)));
  as.define("NOP", now("NOP"));
  as.define("DONE", now("DONE"));
  for (int i = 0; i < dim; ++i) {
    MicroOp op;
    op.write_register = 0;
    op.write_element = i;
    op.successor = index(i + 1 < dim ? name("WX", i + 1) : std::string("WPOS"));
    op.timing = SuccessorTiming::Delayed;
    as.define(name("WX", i), std::move(op));
  }
  {
    MicroOp op;
    op.write_register = 0;
    op.write_element = pos.element;
    op.successor = index(name("QKV", 0));
    op.timing = SuccessorTiming::Delayed;
    as.define("WPOS", std::move(op));
  }
  for (int l = 0; l < layers; ++l) {
    MicroOp op = now(name("RQ", 0));
    op.sets = {{layer_flags[static_cast<size_t>(l)], 1.0f}, {pos.read_flag, 1.0f}, {store, 1.0f}};
    op.read_register = 0;
    as.define(name("QKV", l), std::move(op));
  }
  // Read-back order: RQ.0 .. RQ.dim-1, RK.0 .., RV.0 .. RV.kv_dim-1, DONE.
  std::vector<std::string> order;
  for (int i = 0; i < dim; ++i) order.push_back(name("RQ", i));
  for (const char* r : {"RK", "RV"})
    for (int i = 0; i < kv_dim; ++i) order.push_back(name(r, i));
  for (size_t n = 0; n < order.size(); ++n) {
    MicroOp op;
    const size_t ram = n < static_cast<size_t>(dim) ? 0 : n < static_cast<size_t>(dim + kv_dim) ? 1 : 2;
    op.sets = {{read[ram], 1.0f}, {send, 1.0f}, as.lane_flag(static_cast<int>(n))};
    op.successor = index(n + 1 < order.size() ? order[n + 1] : std::string("DONE"));
    op.timing = SuccessorTiming::Delayed;
    as.define(order[n], std::move(op));
  }
  QkvMachine m;
  static_cast<AssembledMachine&>(m) = as.finish();
  m.dim = dim;
  m.kv_dim = kv_dim;
  m.layers = layers;
  return m;
}

std::vector<int64_t> QkvMachine::prompt(const std::vector<float>& x, int pos, int layer) const {
  if (x.size() != static_cast<size_t>(dim)) fail("qkv machine: x has {} elements, dim is {}", x.size(), dim);
  if (layer < 0 || layer >= layers) fail("qkv machine: layer {} outside [0, {})", layer, layers);
  std::vector<int64_t> t = {id("HDR")};
  for (int i = 0; i < dim; ++i) {
    t.push_back(id(name("WX", i)));
    for (int64_t v : value_tokens(x[static_cast<size_t>(i)])) t.push_back(v);
  }
  t.push_back(id("WPOS"));
  for (int64_t v : value_tokens(static_cast<float>(pos))) t.push_back(v);
  t.push_back(qkv(layer));
  return t;
}

std::vector<int64_t> QkvMachine::expected_stream(const std::vector<float>& q, const std::vector<float>& k,
                                                 const std::vector<float>& v) const {
  std::vector<float> all = q;
  all.insert(all.end(), k.begin(), k.end());
  all.insert(all.end(), v.begin(), v.end());
  std::vector<std::string> order;
  for (int i = 0; i < dim; ++i) order.push_back(name("RQ", i));
  for (const char* r : {"RK", "RV"})
    for (int i = 0; i < kv_dim; ++i) order.push_back(name(r, i));
  std::vector<int64_t> s = {id(order[0])};
  for (size_t n = 0; n < all.size(); ++n) {
    for (int64_t t : value_tokens(all[n])) s.push_back(t);
    s.push_back(n + 1 < order.size() ? id(order[n + 1]) : done());
  }
  return s;
}

}  // namespace qpu::machine
