#include "machine/ffn_half.h"

#include <algorithm>

#include "common/error.h"
#include "compiler/gdn_layout.h"
#include "machine/wide_float_ram.h"
#include "npu/block_ffn.h"
#include "npu/float_ram.h"

namespace qpu::machine {

using compiler::ValueId;

namespace {
size_t at(int i) { return static_cast<size_t>(i); }
}  // namespace

std::string swiglu_name(int l, int c) { return "SW(" + std::to_string(l) + ")." + std::to_string(c); }
std::string ffn_name(int l, int i) { return "FFN(" + std::to_string(l) + ")." + std::to_string(i); }

std::vector<std::string> FfnHalf::names(const reference::Llama2Config& cfg, const FfnOptions& o) {
  if (o.lanes < 1 || o.lanes > cfg.hidden_dim) fail("ffn half: {} lanes per chunk outside [1, {}]", o.lanes, cfg.hidden_dim);
  const int chunks = (cfg.hidden_dim + o.lanes - 1) / o.lanes;
  std::vector<std::string> n;
  for (int l = 0; l < cfg.n_layers; ++l) {
    for (int c = 0; c < chunks; ++c) n.push_back(swiglu_name(l, c));
    for (int i = 0; i < cfg.dim; ++i) n.push_back(ffn_name(l, i));
  }
  return n;
}

FfnHalf::FfnHalf(Assembler& as, const reference::Llama2Checkpoint& ck, const FfnOptions& o,
                 const std::vector<ValueId>& x_in)
    : as_(as) {
  const auto& cfg = ck.config();
  const int hidden = cfg.hidden_dim;
  if (o.lanes < 1 || o.lanes > hidden) fail("ffn half: {} lanes per chunk outside [1, {}]", o.lanes, hidden);
  const std::vector<ValueId>& x = x_in.empty() ? as.register_out() : x_in;
  if (x.size() != static_cast<size_t>(cfg.dim)) fail("ffn half: x of {} values, dim is {}", x.size(), cfg.dim);
  dim_ = cfg.dim;
  layers_ = cfg.n_layers;
  chunks_ = (hidden + o.lanes - 1) / o.lanes;
  compiler::Program& p = as.program();

  // SW(l).c: the chunk unit, flags (layer l) for the rmsnorm and (l, c) for the rows.
  sw_layer_ = as.inputs("sw.layer", layers_);
  sw_chunk_ = as.inputs("sw.chunk", layers_ * chunks_);
  // The units' idle contract is "every flag 0 AND operands 0", but FFN(l).i reads x
  // too: the chunk unit reads x through a gate that passes it only on SW cycles.
  const std::vector<ValueId> xs = as.gated(x, sw_layer_, "sw.x");
  npu::MatvecOptions mo;
  mo.max_op_neurons = npu::kBudgetMaxOpNeurons;
  const npu::FfnChunkUnit unit = npu::ffn_chunk_unit(p, ck, xs, sw_layer_, sw_chunk_, o.lanes, mo);
  as.gate_clears(unit.first_op, p.ops().size(), unit.enable);

  // The product RAM: head c holds chunk c's products in row 0; SW(l).c wipes and writes
  // it, FFN(l).i reads every head.
  ram_write_ = as.inputs("ram.write", chunks_);
  ram_read_ = as.input("ram.read");
  std::vector<ValueId> prod = p.values("ram.prod", hidden);
  std::vector<npu::FloatRamHead> heads;
  for (int c = 0; c < chunks_; ++c) {
    npu::FloatRamHead h;
    const int n = std::min(o.lanes, hidden - c * o.lanes);
    h.data.assign(unit.prod.begin(), unit.prod.begin() + n);
    h.out.assign(prod.begin() + c * o.lanes, prod.begin() + c * o.lanes + n);
    h.write_flag = h.wipe_flag = ram_write_[at(c)];
    h.read_flag = ram_read_;
    heads.push_back(std::move(h));
  }
  npu::float_ram(p, npu::FloatRamWindow{o.product_low_binade}, heads, unit.enable, "ffn product RAM");
  as.gate_clears_of(prod, ram_read_);  // +0 unless FFN reads the RAM

  // FFN(l).0: w2 over the products + x, every lane at once, written down into the out
  // RAM; FFN(l).i (i = 0 too) reads lane i back from it and sends it up. The out block
  // (~150 sublayers) so runs once per layer, not dim times: the other FFN(l).i cycles are
  // a RAM read. The RAM is as wide as the uplink (machine/wide_float_ram.h): every float
  // the uplink can send, it holds bit for bit.
  out_layer_ = as.inputs("ffn.layer", layers_);
  const npu::FfnOut out = npu::ffn_out_block(p, ck, x, prod, out_layer_);
  out_store_ = as.input("ffn.out_store");
  out_read_ = as.input("ffn.out_read");
  const compiler::GdnLayout layout = compiler::GdnLayout::for_dims(as.options().key_dim, as.options().value_dim);
  const WideFloatRam ram = wide_float_ram(p, out.x_out, out.enable, out_store_, out_read_,
                                          static_cast<int>(npu::floats_per_row(layout)), "ffn out RAM");
  out_ops_ = compiler::OpRange{out.first_op, p.ops().size()};
  as.gate_clears(out.first_op, ram.tiers_end, out.enable);  // not the memories: their out is read on other cycles
  lanes_ = ram.out;
}

void FfnHalf::define(int first_lane, ValueId send, const FfnControl& c) {
  for (int l = 0; l < layers_; ++l) {
    for (int k = 0; k < chunks_; ++k) {
      MicroOp op = as_.step(k + 1 < chunks_ ? swiglu_name(l, k + 1) : ffn_name(l, 0));
      op.sets = {{sw_layer_[at(l)], 1.0f}, {sw_chunk_[at(l * chunks_ + k)], 1.0f}, {ram_write_[at(k)], 1.0f}};
      op.sets.insert(op.sets.end(), c.x_sets.begin(), c.x_sets.end());
      op.read_register = c.reads(l);
      as_.define(swiglu_name(l, k), std::move(op));
    }
    for (int i = 0; i < dim_; ++i) {
      MicroOp op = as_.write(c.writes(l), i, i + 1 < dim_ ? ffn_name(l, i + 1) : c.after_ffn(l));
      op.sets = {{out_read_, 1.0f}, {send, 1.0f}};
      op.lane = first_lane + i;
      if (i == 0) {  // the out block: x, the products, w2; every lane into the out RAM
        op.sets.insert(op.sets.end(), {{out_layer_[at(l)], 1.0f}, {ram_read_, 1.0f}, {out_store_, 1.0f}});
        op.sets.insert(op.sets.end(), c.x_sets.begin(), c.x_sets.end());
        op.read_register = c.reads(l);
      }
      as_.define(ffn_name(l, i), std::move(op));
    }
  }
}

}  // namespace qpu::machine
