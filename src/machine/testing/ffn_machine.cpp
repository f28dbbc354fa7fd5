#include "machine/testing/ffn_machine.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "npu/block_ffn.h"
#include "npu/float_ram.h"
#include "reference/run_c_ops.h"

namespace qpu::machine {

using compiler::ValueId;

namespace {

std::string wx_name(int reg, int i) { return "WX(" + std::to_string(reg) + ")." + std::to_string(i); }
std::string atto_name(int l, int i) { return "ATTO(" + std::to_string(l) + ")." + std::to_string(i); }
std::string wxb_name(int i) { return "WXB." + std::to_string(i); }

}  // namespace

void ffn_c(const reference::Llama2Checkpoint& ck, int l, std::vector<float>& x) {
  const auto& cfg = ck.config();
  const auto w = ck.weights();
  const auto dim = static_cast<size_t>(cfg.dim), hidden = static_cast<size_t>(cfg.hidden_dim);
  if (x.size() != dim) fail("ffn_c: x has {} values, dim is {}", x.size(), dim);
  if (l < 0 || l >= cfg.n_layers) fail("ffn_c: layer {} outside [0, {})", l, cfg.n_layers);
  const auto layer = static_cast<size_t>(l);
  std::vector<float> xb(dim), hb(hidden), hb2(hidden);
  reference::rmsnorm(xb, x, w.rms_ffn.subspan(layer * dim, dim));
  reference::matmul(hb, xb, w.w1.subspan(layer * hidden * dim, hidden * dim), cfg.dim, cfg.hidden_dim);
  reference::matmul(hb2, xb, w.w3.subspan(layer * hidden * dim, hidden * dim), cfg.dim, cfg.hidden_dim);
  for (size_t i = 0; i < hidden; ++i) {
    float val = hb[i];
    val *= (1.0f / (1.0f + expf(-val)));
    val *= hb2[i];
    hb[i] = val;
  }
  reference::matmul(xb, hb, w.w2.subspan(layer * dim * hidden, dim * hidden), cfg.hidden_dim, cfg.dim);
  for (size_t i = 0; i < dim; ++i) x[i] += xb[i];
}

int64_t FfnMachine::write_x(int reg, int i) const { return id(wx_name(reg, i)); }
int64_t FfnMachine::swiglu(int l, int c) const { return id(swiglu_name(l, c)); }
int64_t FfnMachine::ffn(int l, int i) const { return id(ffn_name(l, i)); }

FfnMachine build_ffn_machine(const reference::Llama2Checkpoint& ck, const FfnMachineOptions& o) {
  const auto& cfg = ck.config();
  const int dim = cfg.dim, layers = cfg.n_layers;
  if (dim > 64) fail("ffn machine: dim {} needs more than 64 register elements", dim);

  std::vector<std::string> names = {"HDR", "NOP", "DONE"};
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < dim; ++i) names.push_back(wx_name(r, i));
  for (int i = 0; i < dim; ++i) names.push_back(wxb_name(i));
  for (int l = 0; l < layers; ++l)
    for (int i = 0; i < dim; ++i) names.push_back(atto_name(l, i));
  for (const std::string& n : FfnHalf::names(cfg, o)) names.push_back(n);
  // ~400 dense layers of ~30 MB: emitted one at a time into the engine.
  Assembler as(streamed_options(o, dim), names, "DONE");
  compiler::Program& p = as.program();
  const std::vector<ValueId>& x = as.register_out();
  const Assembler::Vector xb = as.vector_register("XB", dim);  // the attention's output (run.c's xb)
  FfnHalf half(as, ck, o);

  // ATTO(l).i: wo xb + x (xb from XB, read only on ATTO cycles), lane dim + i sent up.
  // It runs strictly after the FFN's out block (Program::order): side by side their
  // working values would not fit the width budget.
  const std::vector<ValueId> atto_layer = as.inputs("atto.layer", layers);
  const npu::FfnOut atto = npu::attention_out_block(p, ck, x, xb.out, atto_layer);
  as.gate_clears(atto.first_op, p.ops().size(), atto.enable);
  p.order(half.out_ops(), compiler::OpRange{atto.first_op, p.ops().size()});

  const ValueId send = as.input("send.on");  // set by FFN and ATTO tokens
  std::vector<ValueId> lanes = half.lanes();
  lanes.insert(lanes.end(), atto.x_out.begin(), atto.x_out.end());
  as.send(lanes, send, p.ops().size());

  as.define_header(wx_name(0, 0));
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < dim; ++i)
      as.define(wx_name(r, i), as.write(r, i, i + 1 < dim ? wx_name(r, i + 1) : swiglu_name(r, 0)));
  for (int i = 0; i < dim; ++i)
    as.define(wxb_name(i), as.write(0, xb.first_element + i, i + 1 < dim ? wxb_name(i + 1) : atto_name(0, 0)));
  // Layer l's input x lives in X((l + 1) % 2): ATTO(l) writes x + wo xb into X(l % 2),
  // which SW(l) and FFN(l) read; FFN(l) writes X((l + 1) % 2), layer l + 1's input.
  for (int l = 0; l < layers; ++l) {
    const int from = l % 2, to = (l + 1) % 2;
    for (int i = 0; i < dim; ++i) {
      MicroOp op = as.write(from, i, i + 1 < dim ? atto_name(l, i + 1) : swiglu_name(l, 0));
      op.sets = {{atto_layer[static_cast<size_t>(l)], 1.0f}, {xb.read_flag, 1.0f}, {send, 1.0f}};
      op.lane = dim + i;
      op.read_register = to;
      as.define(atto_name(l, i), std::move(op));
    }
  }
  FfnControl control;
  control.reads = [](int l) { return int64_t{l % 2}; };
  control.writes = [](int l) { return int64_t{(l + 1) % 2}; };
  control.after_ffn = [&](int l) { return l + 1 < layers ? swiglu_name(l + 1, 0) : std::string("DONE"); };
  half.define(0, send, control);
  FfnMachine m;
  static_cast<AssembledMachine&>(m) = as.finish();
  m.dim = dim;
  m.layers = layers;
  m.chunks = half.chunks();
  m.lanes = o.lanes;
  return m;
}

std::vector<int64_t> FfnMachine::prompt(const std::vector<float>& x, int first_layer) const {
  if (x.size() != static_cast<size_t>(dim)) fail("ffn machine: x has {} elements, dim is {}", x.size(), dim);
  if (first_layer < 0 || first_layer >= layers) fail("ffn machine: layer {} outside [0, {})", first_layer, layers);
  std::vector<int64_t> t = {id("HDR")};
  for (int i = 0; i < dim; ++i) {
    t.push_back(write_x(first_layer % 2, i));
    for (int64_t v : value_tokens(x[static_cast<size_t>(i)])) t.push_back(v);
  }
  t.push_back(swiglu(first_layer, 0));
  return t;
}

std::vector<int64_t> FfnMachine::prompt_layer(const std::vector<float>& x, const std::vector<float>& xb, int layer) const {
  if (x.size() != static_cast<size_t>(dim) || xb.size() != static_cast<size_t>(dim))
    fail("ffn machine: x has {} and xb {} elements, dim is {}", x.size(), xb.size(), dim);
  if (layer < 0 || layer >= layers) fail("ffn machine: layer {} outside [0, {})", layer, layers);
  std::vector<int64_t> t = {id("HDR")};
  for (int i = 0; i < dim; ++i) {
    t.push_back(write_x((layer + 1) % 2, i));
    for (int64_t v : value_tokens(x[static_cast<size_t>(i)])) t.push_back(v);
  }
  for (int i = 0; i < dim; ++i) {
    t.push_back(id(wxb_name(i)));
    for (int64_t v : value_tokens(xb[static_cast<size_t>(i)])) t.push_back(v);
  }
  t.push_back(id(atto_name(layer, 0)));
  return t;
}

std::vector<int64_t> FfnMachine::expected_layer(const reference::Llama2Checkpoint& ck, const std::vector<float>& x,
                                                const std::vector<float>& xb, int layer) const {
  // Registers hold what the tokens carry: 0.0f + v (the zero token has no sign).
  const auto& cfg = ck.config();
  const auto n = static_cast<size_t>(dim), ul = static_cast<size_t>(layer);
  std::vector<float> r(n), b(n), xb2(n);
  for (size_t i = 0; i < n; ++i) {
    r[i] = 0.0f + x[i];
    b[i] = 0.0f + xb[i];
  }
  reference::matmul(xb2, b, ck.weights().wo.subspan(ul * n * n, n * n), cfg.dim, cfg.dim);
  for (size_t i = 0; i < n; ++i) r[i] += xb2[i];
  std::vector<int64_t> s;
  for (int i = 0; i < dim; ++i) {
    for (int64_t v : value_tokens(r[static_cast<size_t>(i)])) s.push_back(v);
    s.push_back(i + 1 < dim ? id(atto_name(layer, i + 1)) : swiglu(layer, 0));
  }
  for (int64_t t : expected_stream(ck, r, layer)) s.push_back(t);
  return s;
}

std::vector<int64_t> FfnMachine::expected_stream(const reference::Llama2Checkpoint& ck, const std::vector<float>& x,
                                                 int first_layer) const {
  // Registers hold what the tokens carry: 0.0f + v (the zero token has no sign).
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = 0.0f + x[i];
  std::vector<int64_t> s;
  for (int l = first_layer; l < layers; ++l) {
    for (int c = 1; c < chunks; ++c) s.push_back(swiglu(l, c));
    s.push_back(ffn(l, 0));
    ffn_c(ck, l, r);
    for (int i = 0; i < dim; ++i) {
      for (int64_t v : value_tokens(r[static_cast<size_t>(i)])) s.push_back(v);
      s.push_back(i + 1 < dim ? ffn(l, i + 1) : (l + 1 < layers ? swiglu(l + 1, 0) : done()));
      r[static_cast<size_t>(i)] = 0.0f + r[static_cast<size_t>(i)];
    }
  }
  return s;
}

}  // namespace qpu::machine
