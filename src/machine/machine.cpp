#include "machine/machine.h"

#include <bit>
#include <cmath>

#include "common/error.h"
#include "compiler/clear_dead.h"
#include "compiler/enable.h"
#include "compiler/gdn_layout.h"
#include "machine/delay_line.h"
#include "npu/idle_attention.h"
#include "npu/unit_matvec.h"
#include "npu/uplink.h"

namespace qpu::machine {

using compiler::Lin;
using compiler::Neuron;
using compiler::Program;
using compiler::ValueId;

namespace {

constexpr float kOn = 128.0f;  // silu(128) == 128: a gate of 128 * flag passes up exactly or gives +-0

// The residual values a token embedding sets.
struct TokenInputs {
  npu::InboxValues reg;                 // shared channels, address bits and read flag
  std::vector<ValueId> write_flags;     // per register head
  std::vector<ValueId> matrix_flags;    // A, B
  std::vector<ValueId> lanes;           // one-hot lane to emit
  SignatureFeatures successor_now;      // on the LM head this cycle (= the control features)
  SignatureFeatures successor_delayed;  // parked three cycles in the delay line

  std::vector<ValueId> all() const {
    std::vector<ValueId> v = reg.channels;
    v.insert(v.end(), reg.write_bits.begin(), reg.write_bits.end());
    v.insert(v.end(), reg.read_bits.begin(), reg.read_bits.end());
    v.push_back(reg.read_flag);
    for (const auto* s : {&write_flags, &matrix_flags, &lanes}) v.insert(v.end(), s->begin(), s->end());
    for (const auto* f : {&successor_now, &successor_delayed}) {
      const auto a = f->all();
      v.insert(v.end(), a.begin(), a.end());
    }
    return v;
  }
};

void put(compiler::Interface& io, int64_t token, const npu::InboxInputs& inputs) {
  npu::set_embedding_row(io, token, inputs);
}

// Per value: 1 when every op that writes it is in [first, end) (the gated datapath: the
// matvec unit down to the emission features). Such a value is +0 on every cycle whose
// enable is 0 (the idle contract; a value starts at +0 and only inputs can be -0).
std::vector<char> gated_values(const Program& program, size_t first, size_t end) {
  const auto n = static_cast<size_t>(program.num_values());
  std::vector<char> gated(n, 0), other(n, 0);
  const auto& ops = program.ops();
  for (size_t i = 0; i < ops.size(); ++i)
    for (ValueId v : ops[i].writes()) (i >= first && i < end ? gated : other)[static_cast<size_t>(v)] = 1;
  for (size_t v = 0; v < n; ++v) gated[v] = gated[v] && !other[v];
  return gated;
}

}  // namespace

std::vector<float> matvec_c(const std::vector<float>& w, const std::vector<float>& x) {
  const size_t n = x.size();
  if (w.size() != n * n) fail("machine: matrix of {} entries for a vector of {}", w.size(), n);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    float val = 0.0f;
    for (size_t j = 0; j < n; ++j) val += w[i * n + j] * x[j];
    out[i] = val;
  }
  return out;
}

Machine build_machine(const MachineOptions& o) {
  const int w = o.width;
  if (w < 1 || w > 64) fail("machine: width {} outside [1, 64]", w);
  const auto ww = static_cast<size_t>(w) * static_cast<size_t>(w);
  if (o.a.size() != ww || o.b.size() != ww)
    fail("machine: matrices A ({}) and B ({}) must have {} x {} entries", o.a.size(), o.b.size(), w, w);
  const compiler::GdnLayout layout = compiler::GdnLayout::for_dims(o.key_dim, o.value_dim);
  if (layout.rows() < 3) fail("machine: {} rows per GDN head, the registers X, Y, Z need 3", layout.rows());
  const int bits = std::countr_zero(static_cast<uint64_t>(o.key_dim));

  Machine m;
  m.width = w;
  if (o.value_jmin > o.value_jmax) fail("machine: value binades [{}, {}] are empty", o.value_jmin, o.value_jmax);
  m.encoding.vocab = npu::ValueVocab{0, o.value_jmin, o.value_jmax};
  m.control = ControlVocab{m.encoding.vocab.size(), 3 + 3 * int64_t{w}, 16};
  Program p;

  TokenInputs in;
  in.reg.channels = p.values("reg.channel", m.encoding.channels());
  in.reg.write_bits = p.values("reg.write_bit", bits);
  in.reg.read_bits = p.values("reg.read_bit", bits);
  in.reg.read_flag = p.value("reg.read");
  in.write_flags = p.values("reg.write", w);
  in.matrix_flags = p.values("mv.matrix", 2);
  in.lanes = p.values("mv.lane", w);
  in.successor_now = signature_features(p, m.control, "control");
  in.successor_delayed = signature_features(p, m.control, "successor");

  // Register file: element i of every register in head i.
  std::vector<ValueId> x(static_cast<size_t>(w));
  for (int i = 0; i < w; ++i) {
    npu::InboxValues v = in.reg;
    v.write_flag = in.write_flags[static_cast<size_t>(i)];
    v.hi = p.value("reg.hi");
    v.lo = p.value("reg.lo");
    v.out = x[static_cast<size_t>(i)] = p.value("reg.out");
    npu::inbox(p, m.encoding, v, "register file head " + std::to_string(i));
  }
  m.register_file_heads = w;

  // Matvec (npu/unit_matvec.h): column j of matrix M is one neuron (gate 128 flag_M,
  // weights in its down column), the products rotate through 10 values per lane and the
  // lanes add them in C's order. The unit gates its own constants with the matrix flags'
  // sum; the ops after it get the same enable below.
  const npu::MatvecUnit mv = npu::matvec_unit(p, {{"A", w, w, o.a}, {"B", w, w, o.b}}, x, in.matrix_flags);

  // From here on every constant is the enable value (idle = exact +-0).
  const size_t first_gated = p.ops().size();
  const std::vector<ValueId>& y = mv.y;
  const ValueId result = p.value("mv.result");
  std::vector<Neuron> select;
  for (int i = 0; i < w; ++i)
    select.push_back(Neuron{Lin{{{in.lanes[static_cast<size_t>(i)], kOn}}}, Lin{{{y[static_cast<size_t>(i)], 1.0f / kOn}}},
                            {{result, 1.0f}}});
  p.mlp("mv.select", std::move(select));
  const auto parts = npu::split_parts(p, result);
  std::vector<npu::EmitFeatures> f;
  for (int k = 0; k < 3; ++k) f.push_back(npu::emit_features(p, parts[static_cast<size_t>(k)], m.encoding.vocab));
  compiler::enable_constants(p, first_gated, mv.enable);

  const size_t gated_end = p.ops().size();

  // Delay line: p1 one cycle, p2 two, the successor three; all into the head features.
  std::vector<DelayColumn> delayed;
  for (int k = 1; k <= 2; ++k) {
    const npu::EmitFeatures& src = f[static_cast<size_t>(k)];
    for (size_t j = 0; j < src.positive.size(); ++j) {
      delayed.push_back({src.positive[j], k, f[0].positive[j]});
      delayed.push_back({src.negative[j], k, f[0].negative[j]});
    }
    // emit_features' mantissa one-hot is 2^-7 on the hot entry (what the value head's
    // 2^10 weight reads as 2^3), the other features 1.
    for (size_t j = 0; j < src.mantissa_hot.size(); ++j)
      delayed.push_back({src.mantissa_hot[j], k, f[0].mantissa_hot[j], -7});
    delayed.push_back({src.zero, k, f[0].zero});
  }
  const auto later = in.successor_delayed.all(), now = in.successor_now.all();
  for (size_t j = 0; j < later.size(); ++j) delayed.push_back({later[j], 3, now[j]});
  m.delay_heads = delay_line(p, delayed, layout.capacity(false), "delay line");

  if (o.idle_attention_layer) npu::add_idle_attention_layer(p);

  // Embedding rows.
  compiler::Interface io;
  io.inputs = in.all();
  io.vocab_size = m.control.first + m.control.count;
  io.input_rows.assign(static_cast<size_t>(io.vocab_size) * io.inputs.size(), 0.0f);
  for (int64_t t = 0; t < m.encoding.vocab.size(); ++t)
    put(io, t, npu::value_token_inputs(m.encoding, in.reg, m.encoding.vocab.value(t)));
  auto index = [&](int64_t id) { return m.control.index(id); };
  put(io, m.hdr(), in.successor_now.naming(m.control, index(m.write_x(0))));
  put(io, m.nop(), in.successor_now.naming(m.control, index(m.nop())));
  put(io, m.done(), in.successor_now.naming(m.control, index(m.done())));
  auto write_to = [&](int64_t token, int64_t reg, int i, int64_t next) {
    npu::InboxValues v = in.reg;
    v.write_flag = in.write_flags[static_cast<size_t>(i)];
    put(io, token, npu::write_token_inputs(v, reg));
    put(io, token, in.successor_delayed.naming(m.control, index(next)));
  };
  for (int i = 0; i < w; ++i) write_to(m.write_x(i), kX, i, i + 1 < w ? m.write_x(i + 1) : m.mv_a(0));
  for (int mat = 0; mat < 2; ++mat)
    for (int i = 0; i < w; ++i) {
      const int64_t token = mat == 0 ? m.mv_a(i) : m.mv_b(i);
      const int64_t next = i + 1 < w ? (mat == 0 ? m.mv_a(i + 1) : m.mv_b(i + 1)) : (mat == 0 ? m.mv_b(0) : m.done());
      write_to(token, mat == 0 ? kY : kZ, i, next);
      put(io, token, npu::read_token_inputs(in.reg, mat == 0 ? kX : kY));
      put(io, token, {{in.matrix_flags[static_cast<size_t>(mat)], 1.0f}, {in.lanes[static_cast<size_t>(i)], 1.0f}});
    }

  compiler::EmitOptions eo;
  eo.gdn_key_head_dim = o.key_dim;
  eo.gdn_value_head_dim = o.value_dim;
  if (o.reuse_dims) {
    // Dead values share dims (compiler/clear_dead.h). The LM head reads p0's features
    // and the control features from the final residual stream: their dims must be
    // theirs to the end. The control features are inputs; p0's features are last
    // written by the delay line and read by no op, so they keep their dims.
    // The gated values are +0 on every idle cycle, so their clears read the unit's
    // enable instead of the constant (compiler::DeadClearOptions: no work on idle
    // cycles), and the matvec's own clears of its rotating values (gated by the enable)
    // end their lives. The enable gates its own clear (exactly 0 or 1; +0 when 0).
    compiler::DeadClearOptions clears;
    const std::vector<char> gated = gated_values(p, mv.first_op, gated_end);
    for (size_t v = 0; v < gated.size(); ++v)
      if (gated[v]) clears.enable_of[static_cast<ValueId>(v)] = mv.enable;
    clears.enable_of[mv.enable] = mv.enable;
    compiler::ReusePlan plan = compiler::plan_dim_reuse(p, io, o.limits, clears);
    std::vector<ValueId> head = in.successor_now.all();
    for (const auto* s : {&f[0].positive, &f[0].negative, &f[0].mantissa_hot}) head.insert(head.end(), s->begin(), s->end());
    head.push_back(f[0].zero);
    for (ValueId v : head)
      if (plan.lifetimes[static_cast<size_t>(v)] == compiler::Lifetime::ToLastAccess)
        fail("machine: LM head feature '{}' would give its dim away before the head", plan.program.name(v));
    m.compiled.weights = compiler::emit(plan.program, plan.schedule, plan.allocation, io, eo);
    m.compiled.schedule = std::move(plan.schedule);
    m.compiled.allocation = std::move(plan.allocation);
  } else {
    m.compiled = compiler::compile(p, io, o.limits, eo);
  }
  npu::install_value_head(m.compiled.weights, m.compiled.allocation, f[0], m.encoding.vocab);
  install_control_head(m.compiled.weights, m.compiled.allocation, in.successor_now, m.control);
  return m;
}

std::vector<int64_t> Machine::value_tokens(float v) const {
  const auto parts = npu::split_parts_reference(v);
  return {encoding.vocab.token(parts[0]), encoding.vocab.token(parts[1]), encoding.vocab.token(parts[2])};
}

float Machine::decode(int64_t t0, int64_t t1, int64_t t2) const {
  // The INBOX's order (npu/inbox.h): p1 + p2 is exact, p0 + p2 may round when p0 carried.
  return encoding.vocab.value(t0) + (encoding.vocab.value(t1) + encoding.vocab.value(t2));
}

std::vector<int64_t> Machine::prompt(const std::vector<float>& x) const {
  if (x.size() != static_cast<size_t>(width)) fail("machine: x has {} elements, the machine {}", x.size(), width);
  std::vector<int64_t> t = {hdr()};
  for (int i = 0; i < width; ++i) {
    t.push_back(write_x(i));
    for (int64_t v : value_tokens(x[static_cast<size_t>(i)])) t.push_back(v);
  }
  t.push_back(mv_a(0));
  return t;
}

std::vector<int64_t> Machine::expected_stream(const std::vector<float>& x, const std::vector<float>& a,
                                              const std::vector<float>& b) const {
  // Registers hold what the tokens carry: 0.0f + v (the zero token has no sign).
  std::vector<float> xr(x.size());
  for (size_t i = 0; i < x.size(); ++i) xr[i] = 0.0f + x[i];
  const std::vector<float> y = matvec_c(a, xr);
  const std::vector<float> z = matvec_c(b, y);
  std::vector<int64_t> s;
  for (int mat = 0; mat < 2; ++mat)
    for (int i = 0; i < width; ++i) {
      for (int64_t v : value_tokens((mat == 0 ? y : z)[static_cast<size_t>(i)])) s.push_back(v);
      s.push_back(i + 1 < width ? (mat == 0 ? mv_a(i + 1) : mv_b(i + 1)) : (mat == 0 ? mv_b(0) : done()));
    }
  return s;
}

}  // namespace qpu::machine
