#include "machine/attention_half.h"

#include <algorithm>

#include "common/error.h"
#include "compiler/gdn_layout.h"
#include "machine/wide_float_ram.h"
#include "npu/block_ffn.h"
#include "npu/block_qkv.h"
#include "npu/float_ram.h"
#include "npu/kv_address.h"

namespace qpu::machine {

using compiler::Lin;
using compiler::Neuron;
using compiler::ValueId;

namespace {

std::string name(const char* prefix, int i) { return std::string(prefix) + "." + std::to_string(i); }
std::string layer_name(const char* prefix, int l, int i) {
  return std::string(prefix) + "(" + std::to_string(l) + ")." + std::to_string(i);
}
size_t at(int i) { return static_cast<size_t>(i); }

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

AttentionGeometry geometry_of(const reference::Llama2Config& cfg, const AttentionOptions& o, int row_bits, int row_floats) {
  AttentionGeometry ag;
  ag.layers = cfg.n_layers;
  ag.heads = cfg.n_heads;
  ag.kv_heads = cfg.n_kv_heads;
  ag.head_size = cfg.dim / cfg.n_heads;
  ag.banks = o.kv_banks;
  ag.row_bits = row_bits;
  ag.positions = o.positions(cfg);
  ag.wave_heads = o.wave_heads;
  ag.max_side_by_side_blocks = o.max_side_by_side_blocks;
  ag.exp_heads = o.exp_heads;
  ag.slow_segment_blocks = o.slow_segment_blocks;
  ag.wsum_segment_blocks = o.wsum_segment_blocks;
  ag.sum_segment_blocks = o.sum_segment_blocks;
  ag.slow_beside_wsum = o.slow_beside_wsum;
  ag.row_floats = row_floats;
  ag.v_low_binade = o.ram_low_binade;
  return ag;
}

}  // namespace

std::vector<std::string> AttentionHalf::names(const reference::Llama2Config& cfg, const AttentionOptions& o) {
  std::vector<std::string> n;
  for (int l = 0; l < cfg.n_layers; ++l) n.push_back(std::string("QKV.") + std::to_string(l));
  for (int i = 0; i < cfg.dim; ++i) n.push_back(name("RQ", i));
  for (int l = 0; l < cfg.n_layers; ++l)
    for (const char* r : {"RK", "RV"})
      for (int i = 0; i < cfg.kv_dim(); ++i) n.push_back(layer_name(r, l, i));
  if (o.attention) {
    for (const std::string& s : AttentionStages::names(geometry_of(cfg, o, 0, 0))) n.push_back(s);
    for (int l = 0; l < cfg.n_layers; ++l) {
      if (o.atto_writes_down) {  // one micro-op; named .0 as the stages' last WSUM names it
        n.push_back(layer_name("ATTO", l, 0));
        continue;
      }
      for (int i = 0; i < cfg.dim; ++i) n.push_back(layer_name("ATTO", l, i));
    }
  }
  return n;
}

AttentionHalf::AttentionHalf(Assembler& as, const reference::Llama2Checkpoint& ck, const AttentionOptions& o,
                             const Assembler::Scalar& pos, const XOperand& x_operand)
    : as_(as), config_(ck.config()), pos_(pos) {
  const auto& cfg = config_;
  const int layers = cfg.n_layers, kv_dim = cfg.kv_dim(), head_size = cfg.dim / cfg.n_heads, kv_heads = cfg.n_kv_heads;
  const compiler::GdnLayout layout = compiler::GdnLayout::for_dims(as.options().key_dim, as.options().value_dim);
  const int positions = o.positions(cfg);
  const int banks = o.kv_banks, slots = std::min(banks, 8);
  if (banks < 1 || (banks > 8 && banks % 8 != 0)) fail("attention half: {} KV banks (a multiple of 8, or 1..8)", banks);
  int row_bits = npu::kv_row_bits(banks, positions);
  // The stages address a block's row with row bits: a cache of one row gets two.
  if (o.attention) row_bits = std::max(row_bits, 1);
  if ((int64_t{1} << row_bits) > layout.rows())
    fail("attention half: {} positions in {} banks need {} rows, a head has {}", positions, banks, 1 << row_bits,
         layout.rows());
  // The exact slow path (SLOW) lays out every product of a head's row side by side: its
  // width grows faster than the head size (2-head models at 32 positions, machine_shape:
  // hidden 2,688 / 7,744 / 11,520 / 24,256 / 48,512 at head sizes 8 / 12 / 16 / 20 / 24),
  // and above 16 scheduling it takes more memory than a 24 GB machine has.
  if (o.attention && head_size > kMaxHeadSize)
    fail("attention half: a head size of {} is more than the {} the exact slow path takes (its width grows with "
         "the head size: 24 needs a hidden size of 48,512 and more memory than scheduling has)",
         head_size, kMaxHeadSize);
  if (head_size > npu::floats_per_row(layout))
    fail("attention half: k of a kv head ({} floats) does not fit one row of {}", head_size,
         npu::floats_per_row(layout));
  geometry_ = geometry_of(cfg, o, row_bits, static_cast<int>(npu::floats_per_row(layout)));
  if (o.atto_writes_down && !o.attention) fail("attention half: ATTO writes down only with the attention stages");
  atto_writes_down_ = o.atto_writes_down;
  if (o.attention && 2 * geometry_.heads > npu::floats_per_row(layout))
    fail("attention half: the exps of {} heads do not fit one row", geometry_.heads);
  compiler::Program& p = as.program();

  // QKV(l): the block's x from the machine (the block's idle contract allows any pos: POS
  // is also read by other micro-ops).
  layer_flags_ = as.inputs("qkv.layer", layers);
  const npu::QkvBlock b = npu::qkv_block(p, ck, x_operand(layer_flags_, "qkv.x"), layer_flags_, pos.out);
  as.gate_clears(b.first_op, p.ops().size(), b.enable);

  // q into the q RAM, wiped and written by QKV, read by RQ.
  store_ = as.input("qram.store");
  q_read_ = as.input("qram.read");
  const std::vector<ValueId> q = p.values("qram.q", cfg.dim);
  const auto per_row = static_cast<size_t>(npu::floats_per_row(layout));
  std::vector<npu::FloatRamHead> q_heads;
  add_heads(q_heads, b.q, q, per_row, store_, q_read_);
  npu::float_ram(p, npu::FloatRamWindow{o.ram_low_binade}, q_heads, b.enable, "q RAM");

  // The KV cache. Addresses from POS: per layer one for the write (enabled by QKV(l)) and
  // one for the read (enabled by RK(l)/RV(l)); idle, both are +-0 (no head is touched).
  kv_write_ = as.inputs("kv.write", layers);
  kv_read_ = as.inputs("kv.read", layers);
  std::vector<npu::KvAddress> waddr, raddr;
  for (int l = 0; l < layers; ++l) {
    // Idle, an address unit's values are +-0: their clears read its enable.
    waddr.push_back(npu::kv_address(p, pos.out, kv_write_[at(l)], banks, row_bits));
    as.gate_clears(waddr.back().first_op, p.ops().size(), kv_write_[at(l)]);
    raddr.push_back(npu::kv_address(p, pos.out, kv_read_[at(l)], banks, row_bits));
    as.gate_clears(raddr.back().first_op, p.ops().size(), kv_read_[at(l)]);
  }
  // The cache's read address: POS's (RK, RV) or, with the attention stages, a SCORE
  // token's.
  if (o.attention) stages_.emplace(as, geometry_);
  std::vector<std::vector<ValueId>> read_bits, read_flags;
  for (int l = 0; l < layers; ++l) {
    read_bits.push_back(raddr[at(l)].row_bits);
    read_flags.push_back(raddr[at(l)].bank);
    if (stages_) stages_->cache_read(l, read_bits.back(), read_flags.back());
  }
  // Row data per kv head j: k_j || v_j in one row when both fit, else k_j and v_j in rows
  // of two heads (each bank then has two heads per kv head); their negations once for
  // every head. `first[r]`: where row r's floats start in a slot's 2 kv_dim values.
  const bool one_row = 2 * head_size <= npu::floats_per_row(layout);
  std::vector<std::vector<ValueId>> rows;
  std::vector<int> first;
  for (int j = 0; j < kv_heads; ++j) {
    const auto k = b.k.begin() + j * head_size, v = b.v.begin() + j * head_size;
    if (one_row) {
      rows.emplace_back(k, k + head_size);
      rows.back().insert(rows.back().end(), v, v + head_size);
      first.push_back(j * 2 * head_size);
    } else {
      rows.emplace_back(k, k + head_size);
      first.push_back(j * 2 * head_size);
      rows.emplace_back(v, v + head_size);
      first.push_back(j * 2 * head_size + head_size);
    }
  }
  std::vector<npu::FloatRamHead> pseudo(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) pseudo[r].data = rows[r];
  const auto negations = npu::float_ram_negations(p, pseudo, b.enable, "kv cache");
  // Slot s holds what bank b = s (mod 8) reads: slot_out[s][j * 2 hs + e] (k, then v). The
  // cache's out values are shared in slots: a SCORE micro-op reads 8 consecutive
  // positions, one per slot; the groups of 8 banks write the same slot values in later
  // sublayers (exact: one bank reads at a time).
  std::vector<std::vector<ValueId>> slot_out;
  for (int s = 0; s < slots; ++s) slot_out.push_back(p.values("kv.slot" + std::to_string(s), 2 * kv_dim));
  for (int l = 0; l < layers; ++l)
    for (int g = 0; g < banks / slots; ++g) {
      std::vector<npu::FloatRamHead> heads;
      for (size_t r = 0; r < rows.size(); ++r)
        for (int s = 0; s < slots; ++s) {
          const int bank = g * slots + s;
          npu::FloatRamHead h;
          h.data = rows[r];
          h.negated = negations[r];
          h.key_bits = waddr[at(l)].row_bits;
          h.write_flag = waddr[at(l)].bank[at(bank)];
          h.write_enable = kv_write_[at(l)];  // the address unit's: idle, its bits and banks are +-0
          h.query_bits = read_bits[at(l)];
          h.read_flag = read_flags[at(l)][at(bank)];
          const auto so = slot_out[at(s)].begin() + first[r];
          h.out.assign(so, so + static_cast<std::ptrdiff_t>(rows[r].size()));
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
    Lin gate;
    for (ValueId f : kv_read_) gate.terms.push_back({f, 128.0f});
    std::vector<Neuron> sum;
    for (int n = 0; n < 2 * kv_dim; ++n)
      for (int s = 0; s < slots; ++s)
        sum.push_back(Neuron{gate, Lin{{{slot_out[at(s)][at(n)], 1.0f / 128.0f}}}, {{kv[at(n)], 1.0f}}});
    p.mlp("kv read sum", std::move(sum));
  }
  lanes_ = q;
  lanes_.insert(lanes_.end(), kv.begin(), kv.end());

  // M2c: the attention's stages below the cache, and ATTO(l).i: run.c's x += wo xb for
  // layer l (x from the machine, xb from the xb RAM through a gate on ATTO's flags), lane i.
  if (stages_) {
    stages_->build(q, slot_out, b.v, b.enable, pos.out, compiler::OpRange{kv_sum_op, kv_sum_op + 1});
    atto_layer_ = as.inputs("atto.layer", layers);
    const std::vector<ValueId> ax = x_operand(atto_layer_, "atto.x");
    const std::vector<ValueId> axb = as.gated(stages_->xb(), atto_layer_, "atto.xb");
    const npu::FfnOut atto = npu::attention_out_block(p, ck, ax, axb, atto_layer_);
    if (atto_writes_down_) {
      // The X1 RAM below the out block, wiped and written by ATTO(l) at once: the FFN half
      // below reads x from it on later cycles (no crossing: the reader is below).
      x1_store_ = as.input("x1.store");
      x1_read_ = as.input("x1.read");
      const WideFloatRam ram = wide_float_ram(p, atto.x_out, atto.enable, x1_store_, x1_read_,
                                              static_cast<int>(per_row), "x1 RAM");
      as.gate_clears(atto.first_op, ram.tiers_end, atto.enable);  // not the memories: their out is read on other cycles
      x1_ = ram.out;
    } else {
      as.gate_clears(atto.first_op, p.ops().size(), atto.enable);
      lanes_.insert(lanes_.end(), atto.x_out.begin(), atto.x_out.end());
    }
    lanes_.insert(lanes_.end(), stages_->lanes().begin(), stages_->lanes().end());
  }
}

void AttentionHalf::define(int first_lane, ValueId send, const AttentionControl& c) {
  const auto& cfg = config_;
  const int dim = cfg.dim, layers = cfg.n_layers, kv_dim = cfg.kv_dim(), head_size = cfg.dim / cfg.n_heads;
  // A read-back token sends lane `lane` up (nothing is written: the host only reads it).
  auto sends = [&](int lane, const std::string& next) {
    MicroOp op = as_.step(next);
    op.sets = {{send, 1.0f}};
    op.lane = first_lane + lane;
    op.timing = SuccessorTiming::Delayed;
    return op;
  };
  for (int l = 0; l < layers; ++l) {
    MicroOp op = as_.step(c.chained && stages_ ? layer_name("SCORE", l, 0) : name("RQ", 0));
    op.sets = {{layer_flags_[at(l)], 1.0f}, {pos_.read_flag, 1.0f}, {store_, 1.0f}, {kv_write_[at(l)], 1.0f}};
    if (stages_)
      for (const auto& set : stages_->qkv_sets(l)) op.sets.push_back(set);
    c.reads_x(op, l);
    as_.define(std::string("QKV.") + std::to_string(l), std::move(op));
  }
  for (int i = 0; i < dim; ++i) {
    MicroOp op = sends(i, i + 1 < dim ? name("RQ", i + 1) : std::string("DONE"));
    op.sets.push_back({q_read_, 1.0f});
    as_.define(name("RQ", i), std::move(op));
  }
  for (int l = 0; l < layers; ++l)
    for (int kind = 0; kind < 2; ++kind)
      for (int i = 0; i < kv_dim; ++i) {
        const int j = i / head_size, e = i % head_size;
        const std::string next = i + 1 < kv_dim ? layer_name(kind == 0 ? "RK" : "RV", l, i + 1)
                                                : (kind == 0 ? layer_name("RV", l, 0) : std::string("DONE"));
        MicroOp op = sends(dim + j * 2 * head_size + kind * head_size + e, next);
        op.sets.push_back({pos_.read_flag, 1.0f});
        op.sets.push_back({kv_read_[at(l)], 1.0f});
        as_.define(layer_name(kind == 0 ? "RK" : "RV", l, i), std::move(op));
      }
  if (!stages_) return;
  const int atto_lane = dim + 2 * kv_dim;
  stages_->define(first_lane + atto_lane + (atto_writes_down_ ? 0 : dim), send, q_read_, pos_.read_flag, c.chained);
  if (atto_writes_down_) {
    for (int l = 0; l < layers; ++l) {
      MicroOp op = as_.step(c.after_atto(l));
      op.sets = {{atto_layer_[at(l)], 1.0f}, {stages_->xb_read(), 1.0f}, {x1_store_, 1.0f}};
      c.reads_x(op, l);
      as_.define(layer_name("ATTO", l, 0), std::move(op));
    }
    return;
  }
  for (int l = 0; l < layers; ++l)
    for (int i = 0; i < dim; ++i) {
      const std::string next = i + 1 < dim ? layer_name("ATTO", l, i + 1) : c.after_atto(l);
      MicroOp op = c.atto_register >= 0 ? as_.write(c.atto_register, i, next) : sends(atto_lane + i, next);
      if (c.atto_register >= 0) {
        op.sets = {{send, 1.0f}};
        op.lane = first_lane + atto_lane + i;
      }
      op.sets.push_back({atto_layer_[at(l)], 1.0f});
      op.sets.push_back({stages_->xb_read(), 1.0f});
      c.reads_x(op, l);
      as_.define(layer_name("ATTO", l, i), std::move(op));
    }
}

}  // namespace qpu::machine
