#include "machine/qkv_machine.h"

#include <algorithm>
#include <optional>
#include <string>

#include "common/error.h"
#include "compiler/enable.h"
#include "compiler/gdn_layout.h"
#include "machine/attention_stages.h"
#include "npu/block_ffn.h"
#include "npu/block_qkv.h"
#include "npu/float_ram.h"
#include "npu/kv_address.h"
#include "npu/primitives.h"
#include "npu/unit_attention.h"

namespace qpu::machine {

using compiler::kOne;
using compiler::Lin;
using compiler::Neuron;
using compiler::ValueId;

namespace {

std::string name(const char* prefix, int i) { return std::string(prefix) + "." + std::to_string(i); }
std::string cache_name(const char* prefix, int l, int i) {
  return std::string(prefix) + "(" + std::to_string(l) + ")." + std::to_string(i);
}

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
  const int dim = cfg.dim, layers = cfg.n_layers, kv_dim = cfg.kv_dim(), head_size = cfg.dim / cfg.n_heads;
  const int kv_heads = cfg.n_kv_heads;
  if (dim > 64) fail("qkv machine: dim {} needs more than 64 register elements", dim);
  const compiler::GdnLayout layout = compiler::GdnLayout::for_dims(o.key_dim, o.value_dim);
  const int positions = o.max_positions > 0 ? o.max_positions : cfg.seq_len;
  const int banks = o.kv_banks, slots = std::min(banks, 8);
  if (banks < 1 || (banks > 8 && banks % 8 != 0)) fail("qkv machine: {} KV banks (a multiple of 8, or 1..8)", banks);
  int row_bits = 0;
  while ((int64_t{banks} << row_bits) < positions) ++row_bits;
  if ((int64_t{1} << row_bits) > layout.rows())
    fail("qkv machine: {} positions in {} banks need {} rows, a head has {}", positions, banks, 1 << row_bits,
         layout.rows());
  if (2 * head_size > npu::floats_per_row(layout))
    fail("qkv machine: k and v of a kv head ({} floats) do not fit one row", 2 * head_size);
  AttentionGeometry ag;
  ag.layers = layers;
  ag.heads = cfg.n_heads;
  ag.kv_heads = kv_heads;
  ag.head_size = head_size;
  ag.banks = banks;
  ag.row_bits = row_bits;
  ag.positions = positions;
  ag.wave_heads = o.wave_heads;
  ag.exp_heads = o.exp_heads;
  ag.row_floats = static_cast<int>(npu::floats_per_row(layout));
  ag.v_low_binade = o.ram_low_binade;
  if (o.attention && 2 * ag.heads > npu::floats_per_row(layout))
    fail("qkv machine: the exps of {} heads do not fit one row", ag.heads);

  std::vector<std::string> names = {"HDR", "NOP", "DONE", "WPOS", "INC"};
  for (int i = 0; i < dim; ++i) names.push_back(name("WX", i));
  for (int l = 0; l < layers; ++l) names.push_back(name("QKV", l));
  for (int i = 0; i < dim; ++i) names.push_back(name("RQ", i));
  for (int l = 0; l < layers; ++l)
    for (const char* r : {"RK", "RV"})
      for (int i = 0; i < kv_dim; ++i) names.push_back(cache_name(r, l, i));
  if (o.attention) {
    for (const std::string& n : AttentionStages::names(ag)) names.push_back(n);
    for (int l = 0; l < layers; ++l)
      for (int i = 0; i < dim; ++i) names.push_back(cache_name("ATTO", l, i));
  }
  Assembler as(streamed_options(o, dim), names, "DONE");
  compiler::Program& p = as.program();
  const Assembler::Scalar pos = as.scalar_register("POS");

  // QKV(l): x is read only by QKV tokens, so the block's operands are 0 whenever its
  // flags are (pos is also read by the cache read-backs: the block's idle contract allows
  // any pos).
  const std::vector<ValueId> layer_flags = as.inputs("qkv.layer", layers);
  // With the attention stages ATTO reads X too: the block reads it through a gate.
  const std::vector<ValueId> x = o.attention ? as.gated(as.register_out(), layer_flags, "qkv.x") : as.register_out();
  const npu::QkvBlock b = npu::qkv_block(p, ck, x, layer_flags, pos.out);
  as.gate_clears(b.first_op, p.ops().size(), b.enable);

  // q into the q RAM, wiped and written by QKV, read by RQ.
  const ValueId store = as.input("qram.store");
  const ValueId q_read = as.input("qram.read");
  const std::vector<ValueId> q = p.values("qram.q", dim);
  const auto per_row = static_cast<size_t>(npu::floats_per_row(layout));
  std::vector<npu::FloatRamHead> q_heads;
  add_heads(q_heads, b.q, q, per_row, store, q_read);
  npu::float_ram(p, npu::FloatRamWindow{o.ram_low_binade}, q_heads, b.enable, "q RAM");

  // The KV cache. Addresses from POS: per layer one for the write (enabled by QKV(l)) and
  // one for the read (enabled by RK(l)/RV(l)); idle, both are +-0 (no head is touched).
  const std::vector<ValueId> kv_write = as.inputs("kv.write", layers), kv_read = as.inputs("kv.read", layers);
  std::vector<npu::KvAddress> waddr, raddr;
  for (int l = 0; l < layers; ++l) {
    waddr.push_back(npu::kv_address(p, pos.out, kv_write[static_cast<size_t>(l)], banks, row_bits));
    raddr.push_back(npu::kv_address(p, pos.out, kv_read[static_cast<size_t>(l)], banks, row_bits));
  }
  // The cache's read address: POS's (RK, RV) or, with the attention stages, a SCORE
  // token's.
  std::optional<AttentionStages> stages;
  if (o.attention) stages.emplace(as, ag);
  std::vector<std::vector<ValueId>> read_bits, read_flags;
  for (int l = 0; l < layers; ++l) {
    read_bits.push_back(raddr[static_cast<size_t>(l)].row_bits);
    read_flags.push_back(raddr[static_cast<size_t>(l)].bank);
    if (stages) stages->cache_read(l, read_bits.back(), read_flags.back());
  }
  // Row data per kv head j: k_j || v_j, and their negations once for every head.
  std::vector<std::vector<ValueId>> rows(static_cast<size_t>(kv_heads));
  for (int j = 0; j < kv_heads; ++j) {
    auto& r = rows[static_cast<size_t>(j)];
    r.assign(b.k.begin() + j * head_size, b.k.begin() + (j + 1) * head_size);
    r.insert(r.end(), b.v.begin() + j * head_size, b.v.begin() + (j + 1) * head_size);
  }
  std::vector<npu::FloatRamHead> pseudo(rows.size());
  for (size_t j = 0; j < rows.size(); ++j) pseudo[j].data = rows[j];
  const auto negations = npu::float_ram_negations(p, pseudo, b.enable, "kv cache");
  // Slot s holds what bank b = s (mod 8) reads: slot_out[s][j * 2 hs + e].
  std::vector<std::vector<ValueId>> slot_out;
  for (int s = 0; s < slots; ++s) slot_out.push_back(p.values("kv.slot" + std::to_string(s), 2 * kv_dim));
  for (int l = 0; l < layers; ++l)
    for (int g = 0; g < banks / slots; ++g) {
      std::vector<npu::FloatRamHead> heads;
      for (int j = 0; j < kv_heads; ++j)
        for (int s = 0; s < slots; ++s) {
          const int bank = g * slots + s;
          npu::FloatRamHead h;
          h.data = rows[static_cast<size_t>(j)];
          h.negated = negations[static_cast<size_t>(j)];
          h.key_bits = waddr[static_cast<size_t>(l)].row_bits;
          h.write_flag = waddr[static_cast<size_t>(l)].bank[static_cast<size_t>(bank)];
          h.query_bits = read_bits[static_cast<size_t>(l)];
          h.read_flag = read_flags[static_cast<size_t>(l)][static_cast<size_t>(bank)];
          const auto& so = slot_out[static_cast<size_t>(s)];
          h.out.assign(so.begin() + j * 2 * head_size, so.begin() + (j + 1) * 2 * head_size);
          heads.push_back(std::move(h));
        }
      npu::float_ram(p, npu::FloatRamWindow{o.ram_low_binade}, heads, b.enable,
                     "kv cache l" + std::to_string(l) + " banks " + std::to_string(g * slots) + "+");
    }

  // The cache read back (RK, RV): the slots added (one bank reads, the others are +0), at
  // once below the cache, so that the 8 slots (k and v of every kv head) die there and
  // only the sums travel down to the uplink. Gated by the read flags (exactly 128 on a
  // read-back cycle, 0 otherwise: no constant, nothing to do on other cycles).
  const size_t kv_sum_op = p.ops().size();
  const std::vector<ValueId> kv = p.values("kv.read", 2 * kv_dim);
  {
    Lin gate, sum_up;
    for (ValueId f : kv_read) gate.terms.push_back({f, 128.0f});
    std::vector<Neuron> sum;
    for (int n = 0; n < 2 * kv_dim; ++n)
      for (int s = 0; s < slots; ++s)
        sum.push_back(Neuron{gate, Lin{{{slot_out[static_cast<size_t>(s)][static_cast<size_t>(n)], 1.0f / 128.0f}}},
                             {{kv[static_cast<size_t>(n)], 1.0f}}});
    p.mlp("kv read sum", std::move(sum));
  }

  // M2c: the attention's stages below the cache, and ATTO(l).i: run.c's x += wo xb for
  // layer l (x from X, xb from the xb RAM, both through a gate on ATTO's flags), lane i.
  std::vector<ValueId> atto_layer, atto_out;
  if (stages) {
    stages->build(q, slot_out, b.v, b.enable, pos.out, compiler::OpRange{kv_sum_op, kv_sum_op + 1});
    atto_layer = as.inputs("atto.layer", layers);
    const std::vector<ValueId> ax = as.gated(as.register_out(), atto_layer, "atto.x");
    const std::vector<ValueId> axb = as.gated(stages->xb(), atto_layer, "atto.xb");
    const npu::FfnOut atto = npu::attention_out_block(p, ck, ax, axb, atto_layer);
    as.gate_clears(atto.first_op, p.ops().size(), atto.enable);
    atto_out = atto.x_out;
  }

  // The read-back: lanes q ++ (the slots added: one bank reads, the others are +0), sent
  // when a read-back token sets `send`.
  const ValueId send = as.input("send.on");
  const size_t first_sum = p.ops().size();
  // INC: pos + 1 (one neuron: gate 128 inc, up (pos + 1) / 128, an exact small integer).
  const ValueId inc = as.input("inc");
  const ValueId next_pos = p.value("pos.next");
  p.mlp("pos + 1", {compiler::Neuron{compiler::Lin{{{inc, 128.0f}}},
                                     compiler::Lin{{{pos.out, 1.0f / 128.0f}, {compiler::kOne, 1.0f / 128.0f}}},
                                     {{next_pos, 1.0f}}}});
  std::vector<ValueId> lanes = q;
  lanes.insert(lanes.end(), kv.begin(), kv.end());
  lanes.push_back(next_pos);
  const int atto_lane = static_cast<int>(lanes.size());
  lanes.insert(lanes.end(), atto_out.begin(), atto_out.end());
  const int stage_lane = static_cast<int>(lanes.size());
  if (stages) lanes.insert(lanes.end(), stages->lanes().begin(), stages->lanes().end());
  as.send(lanes, send, first_sum);

  as.define_header(name("WX", 0));
  for (int i = 0; i < dim; ++i) as.define(name("WX", i), as.write(0, i, i + 1 < dim ? name("WX", i + 1) : std::string("WPOS")));
  as.define("WPOS", as.write(0, pos.element, name("QKV", 0)));
  // A read-back token sends lane `lane` up (nothing is written: the host only reads it).
  auto sends = [&](int lane, const std::string& next) {
    MicroOp op = as.step(next);
    op.sets = {{send, 1.0f}, as.lane_flag(lane)};
    op.timing = SuccessorTiming::Delayed;
    return op;
  };
  {
    // INC: POS <- POS + 1, sent up and written back like any float (4 cycles).
    MicroOp op = as.write(0, pos.element, "DONE");
    op.sets = {{send, 1.0f}, as.lane_flag(dim + 2 * kv_dim), {pos.read_flag, 1.0f}, {inc, 1.0f}};
    as.define("INC", std::move(op));
  }
  for (int l = 0; l < layers; ++l) {
    MicroOp op = as.step(name("RQ", 0));
    op.sets = {{layer_flags[static_cast<size_t>(l)], 1.0f},
               {pos.read_flag, 1.0f},
               {store, 1.0f},
               {kv_write[static_cast<size_t>(l)], 1.0f}};
    if (stages)
      for (const auto& set : stages->qkv_sets(l)) op.sets.push_back(set);
    op.read_register = 0;
    as.define(name("QKV", l), std::move(op));
  }
  for (int i = 0; i < dim; ++i) {
    MicroOp op = sends(i, i + 1 < dim ? name("RQ", i + 1) : std::string("DONE"));
    op.sets.push_back({q_read, 1.0f});
    as.define(name("RQ", i), std::move(op));
  }
  for (int l = 0; l < layers; ++l)
    for (int kind = 0; kind < 2; ++kind)
      for (int i = 0; i < kv_dim; ++i) {
        const int j = i / head_size, e = i % head_size;
        const std::string next = i + 1 < kv_dim ? cache_name(kind == 0 ? "RK" : "RV", l, i + 1)
                                                : (kind == 0 ? cache_name("RV", l, 0) : std::string("DONE"));
        MicroOp op = sends(dim + j * 2 * head_size + kind * head_size + e, next);
        op.sets.push_back({pos.read_flag, 1.0f});
        op.sets.push_back({kv_read[static_cast<size_t>(l)], 1.0f});
        as.define(cache_name(kind == 0 ? "RK" : "RV", l, i), std::move(op));
      }
  if (stages) {
    stages->define(stage_lane, send, q_read, pos.read_flag);
    for (int l = 0; l < layers; ++l)
      for (int i = 0; i < dim; ++i) {
        MicroOp op = sends(atto_lane + i, i + 1 < dim ? cache_name("ATTO", l, i + 1) : std::string("DONE"));
        op.sets.push_back({atto_layer[static_cast<size_t>(l)], 1.0f});
        op.sets.push_back({stages->xb_read(), 1.0f});
        op.read_register = 0;
        as.define(cache_name("ATTO", l, i), std::move(op));
      }
  }
  QkvMachine m;
  static_cast<AssembledMachine&>(m) = as.finish();
  m.heads = o.attention ? ag.heads : 0;
  m.exp_groups = ag.exp_groups();
  m.dim = dim;
  m.kv_dim = kv_dim;
  m.layers = layers;
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

std::vector<int64_t> QkvMachine::stage_tokens(const char* op, int layer, int count, bool grouped) const {
  if (heads == 0) fail("qkv machine: built without the attention stages");
  if (layer < 0 || layer >= layers) fail("qkv machine: layer {} outside [0, {})", layer, layers);
  std::vector<int64_t> t;
  for (int i = 0; i < count; ++i) {
    if (!grouped) t.push_back(id(cache_name(op, layer, i)));
    for (int hg = 0; grouped && hg < exp_groups; ++hg) t.push_back(id(cache_name(op, layer, i) + "." + std::to_string(hg)));
  }
  return t;
}

std::vector<int64_t> QkvMachine::read_backs(const std::vector<const char*>& ops, const std::vector<float>& floats) const {
  std::vector<std::string> order;
  for (const char* op : ops)
    for (int h = 0; h < heads; ++h) order.push_back(name(op, h));
  return sent(*this, floats, order);
}

std::vector<int64_t> QkvMachine::score_and_max(int layer, int pos) const {
  std::vector<int64_t> t = stage_tokens("SCORE", layer, pos / 8 + 1, false);
  t.push_back(id("MAX(" + std::to_string(layer) + ")"));
  return t;
}
std::vector<int64_t> QkvMachine::exps(int layer, int pos) const { return stage_tokens("EXP", layer, pos / 8 + 1, true); }
std::vector<int64_t> QkvMachine::sums(int layer) const { return stage_tokens("SUM", layer, heads, false); }
std::vector<int64_t> QkvMachine::probs(int layer, int pos) const { return stage_tokens("PROB", layer, pos / 8 + 1, true); }
std::vector<int64_t> QkvMachine::wsums(int layer) const { return stage_tokens("WSUM", layer, heads, false); }

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
