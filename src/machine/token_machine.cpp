#include "machine/token_machine.h"

#include <algorithm>
#include <optional>
#include <string>

#include "common/error.h"
#include "npu/float_ram.h"
#include "npu/kv_address.h"
#include "npu/table_lookup.h"
#include "npu/unit_attention.h"

namespace qpu::machine {

using compiler::Lin;
using compiler::Neuron;
using compiler::ValueId;

namespace {

// Register row X0: a layer's input (x after the previous layer's FFN). x after the
// attention needs no register: ATTO(l).0 writes it down into the X1 RAM (the attention
// half's), which SW(l) and FFN(l), ordered below, read.
constexpr int64_t kX0 = 0;

std::string layer_name(const char* prefix, int l, int i) {
  return std::string(prefix) + "(" + std::to_string(l) + ")." + std::to_string(i);
}


}  // namespace

TokenMachine build_token_machine(const reference::Llama2Checkpoint& ck, const TokenMachineOptions& options) {
  const auto& cfg = ck.config();
  const int dim = cfg.dim, layers = cfg.n_layers;
  if (dim > 64) fail("token machine: dim {} needs more than 64 register elements", dim);
  TokenMachineOptions o = options;
  o.attention = true;
  o.atto_writes_down = true;
  o.argmax_successor = !o.sampling;  // sampling: SamplePart::successor chooses TOK.k or TEMP.0
  // The sampler's registers (T, SEED.j, PLEN) and their writes, in the prompt's order.
  const std::vector<std::string> sample_writes = {"WT", "WS.0", "WS.1", "WS.2", "WS.3", "WPLEN"};
  std::vector<std::string> names = {"HDR", "NOP", "DONE", "INC", "WSTEPS", "WPOS", "WF", "PST"};
  if (o.sampling) names.insert(names.end(), sample_writes.begin(), sample_writes.end());
  for (const std::string& n : AttentionHalf::names(cfg, o)) names.push_back(n);
  for (const std::string& n : FfnHalf::names(cfg, o)) names.push_back(n);
  for (const std::string& n : HeadPart::names(cfg)) names.push_back(n);
  // Right after TOK.(vocab - 1): TEMP.0 is the last entry of the computed successor.
  if (o.sampling)
    for (const std::string& n : SamplePart::names(cfg, o.sample)) names.push_back(n);
  Assembler as(streamed_options(o, dim), names, "DONE");
  compiler::Program& p = as.program();
  const Assembler::Scalar pos = as.scalar_register("POS");
  const Assembler::Immediate tok = as.immediate_register("TOK");
  const Assembler::Scalar steps = as.scalar_register("STEPS");    // run.c's steps (-n)
  const Assembler::Scalar forced = as.scalar_register("FORCED");  // a prompt token + 1, on its way to the prompt RAM
  // Sampling: T (HEAD and TEMP read it), then what MAX reads for the coin: SEED.0-3, PLEN.
  std::vector<Assembler::Scalar> sample_registers;
  if (o.sampling)
    for (const char* r : {"T", "SEED.0", "SEED.1", "SEED.2", "SEED.3", "PLEN"})
      sample_registers.push_back(as.scalar_register(r));

  // Layer 0's x is the embedding of TOK (no crossing): QKV.0 and ATTO(0).0 set `emb` and
  // read TOK; the other layers' micro-ops read X0. Either way the units get x through one
  // gate on their own flags.
  const ValueId emb = as.input("emb.on");
  const size_t first_attention_op = p.ops().size();
  const std::vector<ValueId> embedding = npu::embedding_lookup(p, ck, emb, tok.out).out;
  AttentionHalf attention(as, ck, o, pos, [&](const std::vector<ValueId>& flags, const std::string& label) {
    return as.gated({as.register_out(), embedding}, flags, label);  // never both nonzero
  });
  const compiler::OpRange attention_ops{first_attention_op, p.ops().size()};
  FfnHalf ffn(as, ck, o, attention.x1());
  const compiler::OpRange ffn_ops{attention_ops.end, p.ops().size()};
  // The prompt RAM: position j's forced token + 1 (0: none), written by PST from FORCED at
  // the address POS holds, read by HEAD at POS (= the position whose token HEAD chooses:
  // INC ran before it). Banked like the KV cache (npu/kv_address.h).
  const ValueId store_prompt = as.input("prompt.store");
  ValueId forced_token = compiler::kNever;  // the prompt RAM's read: t + 1 on a forced position, else 0
  auto prompt_ram = [&](ValueId head_on) {
    const int positions = o.positions(cfg);
    const int banks = std::min(o.kv_banks, positions);
    const int row_bits = npu::kv_row_bits(banks, positions);
    // Idle, an address unit's values are +-0: their clears read its enable.
    const npu::KvAddress waddr = npu::kv_address(p, pos.out, store_prompt, banks, row_bits);
    as.gate_clears(waddr.first_op, p.ops().size(), store_prompt);
    const npu::KvAddress raddr = npu::kv_address(p, pos.out, head_on, banks, row_bits);
    as.gate_clears(raddr.first_op, p.ops().size(), head_on);
    const ValueId out = p.value("prompt.forced");
    std::vector<npu::FloatRamHead> data(1);
    data[0].data = {forced.out};
    const auto negated = npu::float_ram_negations(p, data, store_prompt, "prompt RAM");
    // One RAM per bank, all reading into `out` (one bank reads at a time; the compiler
    // places writes of one value in different sublayers).
    for (int b = 0; b < banks; ++b) {
      npu::FloatRamHead h = data[0];
      h.negated = negated[0];
      h.key_bits = waddr.row_bits;
      h.write_flag = waddr.bank[static_cast<size_t>(b)];
      h.write_enable = store_prompt;  // the address unit's: idle, its bits and banks are +-0
      h.query_bits = raddr.row_bits;
      h.read_flag = raddr.bank[static_cast<size_t>(b)];
      h.out = {out};
      npu::float_ram(p, npu::FloatRamWindow{-20}, {h}, store_prompt, "prompt RAM bank " + std::to_string(b));  // k + 1 <= 2^16
    }
    forced_token = out;
    return std::vector<ValueId>{out};
  };
  HeadPart head(as, ck, o, tok, [&](ValueId on) { return as.gated(as.register_out(), {on}, "head.x"); }, prompt_ram);
  const compiler::OpRange head_ops{ffn_ops.end, p.ops().size()};
  // The FFN half below the attention half (it reads the X1 RAM that ATTO writes). HEAD is
  // not ordered below the FFN: it reads only register X0 and its own RAMs, so it runs in
  // the same layers as the halves (a cycle wakes one of them) and the stack is as deep as
  // the deeper of the two, not their sum.
  p.order(attention_ops, ffn_ops);
  std::optional<SamplePart> sample;
  if (o.sampling) {
    const Assembler::Scalar& t = sample_registers[0];
    // run.c draws no coin for a prompt token: the sampler sees T only where nothing is
    // forced. One neuron: gate 128 (head - forced) is 128 exactly when HEAD runs on an
    // unforced position, <= -128 on a forced one (forced = t + 1 >= 1: silu gives +-0) and
    // +0 on every other cycle; up T / 128 (exact: T >= 2^-5).
    const ValueId t_free = p.value("head.t_free");
    p.mlp("head.t_free", {Neuron{Lin{{{head.flag(), 128.0f}, {forced_token, -128.0f}}}, Lin{{{t.out, 1.0f / 128.0f}}},
                                 {{t_free, 1.0f}}}});
    as.gate_clears_of({t_free}, head.flag());
    SampleCoin coin;
    coin.rng = true;
    for (size_t j = 0; j < 4; ++j) coin.seed_limbs[j] = sample_registers[j + 1].out;
    coin.plen = sample_registers[5].out;
    coin.pos = pos.out;
    for (size_t r = 1; r < sample_registers.size(); ++r) coin.reads.push_back(sample_registers[r].read_flag);
    coin.reads.push_back(pos.read_flag);
    coin.max_draws = o.positions(cfg);  // n <= the story's positions
    coin.draw_offset = 1;               // POS = run.c's pos + 1 (INC ran before HEAD)
    sample.emplace(as, cfg, o.sample, head.logits(), head.flag(), t.out, t.read_flag, coin);
    p.order(head_ops, sample->stages());  // the sampler's stages below HEAD
    // TOK.0 ... TOK.(vocab - 1), TEMP.0: HEAD's one-hot (argmax or forced) when T = 0 or
    // forced, else TEMP.0; on CDF's cycle CDF's pick.
    as.computed_successor(story_token_name(0), sample->successor(head.onehot(), head.flag(), t_free));
  }

  // The story token's branch: TOK.k for k != BOS goes on to QKV.0 while POS < STEPS (run.c's
  // `while (pos < steps)`), else to DONE; TOK.1 (BOS) goes on only at position 0 (run.c
  // starts with it and stops when the model picks it). Built before send(): the
  // constants stay 1, the flags make both conditions 0 on every other cycle.
  const ValueId tok_next = as.input("tok.next"), tok_bos = as.input("tok.bos");
  {
    const ValueId below = npu::attn_int_positive(p, Lin{{{steps.out, 1.0f}, {pos.out, -1.0f}}}, "tok.below_steps");
    as.branch(npu::attn_int_positive(p, Lin{{{below, 1.0f}, {tok_next, 1.0f}, {compiler::kOne, -1.0f}}}, "tok.go_on"));
    as.branch(npu::attn_int_positive(p, Lin{{{tok_bos, 1.0f}, {pos.out, -1.0f}}}, "tok.bos_start"));
  }

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

  // The prompt (TokenMachine::prompt): HDR, WSTEPS and n; per prompt token j >= 1 WPOS j,
  // WF t_j + 1 and PST; WPOS 0. Its last write names TOK.1: run.c's first token, BOS (1),
  // at position 0.
  as.define_header("WSTEPS");
  as.define("WSTEPS", as.write(0, steps.element, story_token_name(1)));
  as.define("WPOS", as.write(0, pos.element, story_token_name(1)));
  as.define("WF", as.write(0, forced.element, "PST"));
  for (size_t r = 0; r < sample_registers.size(); ++r)
    as.define(sample_writes[r], as.write(0, sample_registers[r].element, story_token_name(1)));
  {
    MicroOp op = as.step("NOP");
    op.sets = {{store_prompt, 1.0f}, {forced.read_flag, 1.0f}, {pos.read_flag, 1.0f}};
    as.define("PST", std::move(op));
  }
  {
    MicroOp op = as.write(0, pos.element, "HEAD");
    op.sets = {{send, 1.0f}, {pos.read_flag, 1.0f}, {inc, 1.0f}};
    op.lane = 0;
    as.define("INC", std::move(op));
  }
  AttentionControl ac;
  ac.chained = true;
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
  fc.reads = [](int) { return int64_t{-1}; };  // x from the X1 RAM
  fc.x_sets = {{attention.x1_read(), 1.0f}};
  fc.writes = [](int) { return kX0; };
  fc.after_ffn = [&](int l) { return l + 1 < layers ? std::string("QKV.") + std::to_string(l + 1) : std::string("INC"); };
  ffn.define(ffn_lane, send, fc);
  HeadControl hc;
  hc.x_register = kX0;
  hc.head_sets = {{pos.read_flag, 1.0f}};  // the prompt RAM's read address
  if (o.sampling) hc.head_sets.push_back({sample_registers[0].read_flag, 1.0f});  // T: greedy or sampled
  hc.story_token = [&](int k) {
    MicroOp op = as.branch_step("QKV.0", "DONE");  // the conditions above
    op.sets = {{k == 1 ? tok_bos : tok_next, 1.0f}, {pos.read_flag, 1.0f}};
    if (k != 1) op.sets.push_back({steps.read_flag, 1.0f});
    return op;
  };
  head.define(head_lane, send, hc);
  if (sample) sample->define();

  TokenMachine m;
  static_cast<AssembledMachine&>(m) = as.finish();
  m.dim = dim;
  m.layers = layers;
  m.vocab = cfg.vocab_size;
  m.seq_len = cfg.seq_len;
  m.chunks = ffn.chunks();
  m.heads = attention.heads();
  m.exp_groups = attention.exp_groups();
  m.max_positions = o.positions(cfg);
  m.first_segment_positions = std::min(attention.geometry().wsum_positions(), attention.geometry().sum_positions());
  m.sample_blocks = sample ? sample->blocks() : 0;
  m.sample_topp = o.sampling && o.sample.topp_on();
  m.topp = m.sample_topp ? o.sample.topp : 1.0f;
  m.logit_probes = m.probes(head.logits());
  return m;
}

std::vector<int64_t> TokenMachine::prompt(const std::vector<int>& nested, int steps, float temperature,
                                          uint64_t seed) const {
  return story_interface().prompt(nested, steps, temperature, seed);
}

StoryInterface TokenMachine::story_interface() const {
  StoryInterface::Fields f;
  f.host_vocab = compiled.weights.config.vocab_size;
  f.values = encoding.vocab;
  f.first_control = control.first;
  f.controls = control_names;
  f.max_positions = max_positions;
  f.nested_vocab = vocab;
  f.nested_seq_len = seq_len;
  f.sampler = sample_blocks == 0 ? SamplerKind::Greedy : sample_topp ? SamplerKind::TopP : SamplerKind::SampleMult;
  f.topp = sample_topp ? topp : 1.0f;
  if (sample_blocks > 0) {
    f.min_temperature = kMinTemperature;
    f.max_temperature = kMaxTemperature;
  }
  f.logit_probes = logit_probes;
  return StoryInterface(std::move(f), "token machine");
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
  if (r.pos >= first_segment_positions)
    fail("token machine: position {} lies past the first segment of WSUM or SUM ({} positions)", r.pos,
         first_segment_positions);
  const int blocks = r.pos / 8 + 1;
  emit("QKV.0");  // each layer's last FFN names the next QKV
  for (int l = 0; l < layers; ++l) {
    for (int b = 0; b < blocks; ++b) emit(layer_name("SCORE", l, b));
    emit("MAX(" + std::to_string(l) + ")");
    for (int b = 0; b < blocks; ++b)
      for (int g = 0; g < exp_groups; ++g) emit(layer_name("EXP", l, b) + "." + std::to_string(g));
    for (int h = 0; h < heads; ++h) emit(layer_name("SUM", l, h) + ".0");
    for (int b = 0; b < blocks; ++b)
      for (int g = 0; g < exp_groups; ++g) emit(layer_name("PROB", l, b) + "." + std::to_string(g));
    for (int h = 0; h < heads; ++h) {  // no head unsafe at the positions a test checks this way
      emit(layer_name("WSUM", l, h) + ".0");
      emit(layer_name("WSUMX", l, h));
    }
    emit(layer_name("ATTO", l, 0));  // one micro-op: x_att_res goes down into the X1 RAM, no float
    for (int c = 0; c < chunks; ++c) emit(swiglu_name(l, c));
    emit(ffn_name(l, 0));
    floats(r.x_ffn_res[static_cast<size_t>(l)], "FFN", l, l + 1 < layers ? "QKV." + std::to_string(l + 1) : "INC");
  }
  for (int64_t t : value_tokens(static_cast<float>(r.pos + 1))) s.push_back(t);
  emit("HEAD");
  if (r.sampled) {
    if (sample_blocks == 0) fail("token machine: a sampled record on a greedy machine");
    for (const std::string& n : SamplePart::stream(sample_blocks, sample_topp, r.kept)) emit(n);
    if (sample_topp && s.back() == id("REFUSE")) {  // top-p refused: no story token
      emit("DONE");
      return s;
    }
  }
  emit(story_token_name(r.next));
  return s;
}

}  // namespace qpu::machine
