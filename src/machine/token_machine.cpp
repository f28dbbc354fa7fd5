#include "machine/token_machine.h"

#include <string>

#include "common/error.h"
#include "npu/table_lookup.h"

namespace qpu::machine {

using compiler::Lin;
using compiler::Neuron;
using compiler::ValueId;

namespace {

constexpr int64_t kX0 = 0, kX1 = 1;  // register rows: a layer's input, x after its attention

std::string layer_name(const char* prefix, int l, int i) {
  return std::string(prefix) + "(" + std::to_string(l) + ")." + std::to_string(i);
}

// out[i] = a[i] + b[i] when one of `flags` is 1, else +-0: one neuron per value, gate 128
// times the flags' sum, up (a[i] + b[i]) / 128. Exact because on every cycle at least one
// of a[i], b[i] is +-0 (x comes from a register or from the embedding, never both).
std::vector<ValueId> gated_either(compiler::Program& p, const std::vector<ValueId>& a, const std::vector<ValueId>& b,
                                  const std::vector<ValueId>& flags, const std::string& label) {
  std::vector<ValueId> out = p.values(label, static_cast<int>(a.size()));
  Lin gate;
  for (ValueId f : flags) gate.terms.push_back({f, 128.0f});
  std::vector<Neuron> ns;
  for (size_t i = 0; i < a.size(); ++i)
    ns.push_back(Neuron{gate, Lin{{{a[i], 1.0f / 128.0f}, {b[i], 1.0f / 128.0f}}}, {{out[i], 1.0f}}});
  p.mlp(label, std::move(ns));
  return out;
}

}  // namespace

TokenMachine build_token_machine(const reference::Llama2Checkpoint& ck, const TokenMachineOptions& options) {
  const auto& cfg = ck.config();
  const int dim = cfg.dim, layers = cfg.n_layers;
  if (dim > 64) fail("token machine: dim {} needs more than 64 register elements", dim);
  TokenMachineOptions o = options;
  o.attention = true;
  std::vector<std::string> names = {"HDR", "NOP", "DONE", "INC"};
  for (const std::string& n : AttentionHalf::names(cfg, o)) names.push_back(n);
  for (const std::string& n : FfnHalf::names(cfg, o)) names.push_back(n);
  for (const std::string& n : HeadPart::names(cfg)) names.push_back(n);
  Assembler as(streamed_options(o, dim), names, "DONE");
  compiler::Program& p = as.program();
  const Assembler::Scalar pos = as.scalar_register("POS");
  const Assembler::Immediate tok = as.immediate_register("TOK");

  // Layer 0's x is the embedding of TOK (no crossing): QKV.0 and ATTO(0).i set `emb` and
  // read TOK; the other layers' micro-ops read X0. Either way the units get x through one
  // gate on their own flags.
  const ValueId emb = as.input("emb.on");
  const size_t first_attention_op = p.ops().size();
  const std::vector<ValueId> embedding = npu::embedding_lookup(p, ck, emb, tok.out).out;
  AttentionHalf attention(as, ck, o, pos, [&](const std::vector<ValueId>& flags, const std::string& label) {
    return gated_either(p, as.register_out(), embedding, flags, label);
  });
  const compiler::OpRange attention_ops{first_attention_op, p.ops().size()};
  FfnHalf ffn(as, ck, o);
  const compiler::OpRange ffn_ops{attention_ops.end, p.ops().size()};
  HeadPart head(as, ck, o, tok, [&](ValueId on) { return as.gated(as.register_out(), {on}, "head.x"); });
  const compiler::OpRange head_ops{ffn_ops.end, p.ops().size()};
  p.order(attention_ops, ffn_ops);
  p.order(ffn_ops, head_ops);

  // INC: pos + 1 (one neuron: gate 128 inc, up (pos + 1) / 128, an exact small integer).
  const ValueId send = as.input("send.on");
  const size_t first_sum = p.ops().size();
  const ValueId inc = as.input("inc");
  const ValueId next_pos = p.value("pos.next");
  p.mlp("pos + 1", {Neuron{Lin{{{inc, 128.0f}}}, Lin{{{pos.out, 1.0f / 128.0f}, {compiler::kOne, 1.0f / 128.0f}}},
                           {{next_pos, 1.0f}}}});
  std::vector<ValueId> lanes = {next_pos};
  const int attention_lane = static_cast<int>(lanes.size());
  lanes.insert(lanes.end(), attention.lanes().begin(), attention.lanes().end());
  const int ffn_lane = static_cast<int>(lanes.size());
  lanes.insert(lanes.end(), ffn.lanes().begin(), ffn.lanes().end());
  const int head_lane = static_cast<int>(lanes.size());
  lanes.insert(lanes.end(), head.lanes().begin(), head.lanes().end());
  as.send(lanes, send, first_sum);

  // HDR: run.c's first token, BOS (1), at position 0 (POS starts empty: 0).
  as.define_header(story_token_name(1));
  {
    MicroOp op = as.write(0, pos.element, "HEAD");
    op.sets = {{send, 1.0f}, as.lane_flag(0), {pos.read_flag, 1.0f}, {inc, 1.0f}};
    as.define("INC", std::move(op));
  }
  AttentionControl ac;
  ac.chained = true;
  ac.atto_register = kX1;
  ac.after_atto = [](int l) { return swiglu_name(l, 0); };
  ac.reads_x = [&](MicroOp& op, int l) {
    if (l > 0) {
      op.read_register = kX0;
      return;
    }
    op.sets.push_back({emb, 1.0f});
    op.sets.push_back({tok.read_flag, 1.0f});
  };
  attention.define(attention_lane, send, ac);
  FfnControl fc;
  fc.reads = [](int) { return kX1; };
  fc.writes = [](int) { return kX0; };
  fc.after_ffn = [&](int l) { return l + 1 < layers ? std::string("QKV.") + std::to_string(l + 1) : std::string("INC"); };
  ffn.define(ffn_lane, send, fc);
  head.define(head_lane, send, kX0, "QKV.0");

  TokenMachine m;
  static_cast<AssembledMachine&>(m) = as.finish();
  m.dim = dim;
  m.layers = layers;
  m.vocab = cfg.vocab_size;
  m.chunks = ffn.chunks();
  m.heads = attention.heads();
  m.exp_groups = attention.exp_groups();
  return m;
}

std::vector<int64_t> TokenMachine::expected_position(const PositionRecord& r) const {
  if (r.x_att_res.size() != static_cast<size_t>(layers) || r.x_ffn_res.size() != static_cast<size_t>(layers))
    fail("token machine: a record of {} and {} layers, the machine has {}", r.x_att_res.size(), r.x_ffn_res.size(), layers);
  std::vector<int64_t> s;
  auto emit = [&](const std::string& n) { s.push_back(id(n)); };
  // The floats of a crossing micro-op kind, each followed by the next control token.
  auto floats = [&](const std::vector<float>& v, const char* kind, int l, const std::string& after) {
    for (size_t i = 0; i < v.size(); ++i) {
      for (int64_t t : value_tokens(v[i])) s.push_back(t);
      emit(i + 1 < v.size() ? layer_name(kind, l, static_cast<int>(i + 1)) : after);
    }
  };
  const int blocks = r.pos / 8 + 1;
  emit("QKV.0");  // each layer's last FFN names the next QKV
  for (int l = 0; l < layers; ++l) {
    for (int b = 0; b < blocks; ++b) emit(layer_name("SCORE", l, b));
    emit("MAX(" + std::to_string(l) + ")");
    for (int b = 0; b < blocks; ++b)
      for (int g = 0; g < exp_groups; ++g) emit(layer_name("EXP", l, b) + "." + std::to_string(g));
    for (int h = 0; h < heads; ++h) emit(layer_name("SUM", l, h));
    for (int b = 0; b < blocks; ++b)
      for (int g = 0; g < exp_groups; ++g) emit(layer_name("PROB", l, b) + "." + std::to_string(g));
    for (int h = 0; h < heads; ++h) emit(layer_name("WSUM", l, h));
    emit(layer_name("ATTO", l, 0));
    floats(r.x_att_res[static_cast<size_t>(l)], "ATTO", l, swiglu_name(l, 0));
    for (int c = 1; c < chunks; ++c) emit(swiglu_name(l, c));
    emit(ffn_name(l, 0));
    floats(r.x_ffn_res[static_cast<size_t>(l)], "FFN", l, l + 1 < layers ? "QKV." + std::to_string(l + 1) : "INC");
  }
  for (int64_t t : value_tokens(static_cast<float>(r.pos + 1))) s.push_back(t);
  emit("HEAD");
  emit(story_token_name(r.next));
  return s;
}

}  // namespace qpu::machine
