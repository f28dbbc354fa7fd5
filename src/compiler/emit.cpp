#include "compiler/emit.h"

#include <cmath>

#include "common/error.h"

namespace qpu::compiler {

namespace {

using io::LayerType;

float pow2(int e) { return std::ldexp(1.0f, e); }

struct Emitter {
  const Program& program;
  const Allocation& alloc;
  const EmitOptions& options;
  int64_t hidden;
  float value_scale;  // 2^k: weight multiplier for a residual value (normed by 2^-k)
  float rail_scale;   // 1/8: weight multiplier for the constant (the rail arrives as 8)

  // Adds w * lin into row `row` (length hidden) of a weight matrix.
  void add_lin(std::vector<float>& matrix, int64_t row, const Lin& lin, float scale = 1.0f) const {
    for (const Term& t : lin.terms) add_term(matrix, row, t.value, t.weight * scale);
  }
  void add_term(std::vector<float>& matrix, int64_t row, ValueId v, float w) const {
    const int64_t col = v == kOne ? alloc.rail_dims[0] : alloc.dim(v);
    matrix[static_cast<size_t>(row * hidden + col)] += w * (v == kOne ? rail_scale : value_scale);
  }
};

}  // namespace

float rail_value(int norm_exponent) { return pow2(norm_exponent + 3); }

io::Qwen35Weights emit(const Program& program, const Schedule& schedule, const Allocation& alloc,
                       const Interface& interface, const EmitOptions& options) {
  const int k = options.norm_exponent;
  if (k < 24 || k > 56) fail("emit: norm exponent {} outside [24, 56]", k);
  const int64_t hd = options.head_dim;
  if (hd < 16 || (hd & (hd - 1)) != 0 || (std::countr_zero(static_cast<uint64_t>(hd)) % 2) != 0)
    fail("emit: head_dim {} is not a power of 4 >= 16 (its 1/sqrt must be exact)", hd);
  if (interface.vocab_size < static_cast<int64_t>(interface.outputs.size()) || interface.vocab_size < 1)
    fail("emit: vocab size {} smaller than the {} outputs", interface.vocab_size, interface.outputs.size());
  if (interface.input_rows.size() != static_cast<size_t>(interface.vocab_size) * interface.inputs.size())
    fail("emit: input_rows has {} floats, expected {} x {}", interface.input_rows.size(), interface.vocab_size,
         interface.inputs.size());

  const int64_t H = alloc.hidden_size;
  const int64_t I = alloc.intermediate_size;
  const int64_t L = std::max<int64_t>(alloc.num_layers, 1);
  const int64_t nkv = alloc.num_kv_heads;
  const int64_t lhd = options.linear_head_dim;
  Emitter e{program, alloc, options, H, pow2(k), 1.0f / 8.0f};

  io::Qwen35Weights w;
  io::Qwen35Config& c = w.config;
  c.architecture = "Qwen3_5ForCausalLM";
  c.tensor_prefix = "model.";
  c.vocab_size = interface.vocab_size;
  c.hidden_size = H;
  c.intermediate_size = I;
  c.num_hidden_layers = L;
  c.num_attention_heads = nkv;
  c.num_key_value_heads = nkv;
  c.head_dim = hd;
  c.partial_rotary_factor = 0.25;
  c.rope_theta = 1e7;
  c.linear_num_key_heads = 1;
  c.linear_num_value_heads = 1;
  c.linear_key_head_dim = lhd;
  c.linear_value_head_dim = lhd;
  c.linear_conv_kernel_dim = 4;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = false;
  for (int64_t l = 0; l < L; ++l)
    c.layer_types.push_back(l < alloc.num_layers && alloc.layer_has_attention[static_cast<size_t>(l)]
                                ? LayerType::FullAttention
                                : LayerType::LinearAttention);

  // Token embedding: rails plus the inputs of each row.
  w.embed_tokens.assign(static_cast<size_t>(c.vocab_size * H), 0.0f);
  for (int64_t r = 0; r < c.vocab_size; ++r) {
    float* row = &w.embed_tokens[static_cast<size_t>(r * H)];
    for (int64_t d : alloc.rail_dims) row[d] = rail_value(k);
    for (size_t i = 0; i < interface.inputs.size(); ++i)
      row[alloc.dim(interface.inputs[i])] = interface.input_rows[static_cast<size_t>(r) * interface.inputs.size() + i];
  }
  w.norm.assign(static_cast<size_t>(H), pow2(k));  // 1 + 2^k == 2^k in fp32
  w.lm_head.assign(static_cast<size_t>(c.vocab_size * H), 0.0f);
  for (size_t o = 0; o < interface.outputs.size(); ++o)
    w.lm_head[o * static_cast<size_t>(H) + static_cast<size_t>(alloc.dim(interface.outputs[o]))] = 1.0f;

  const int64_t rot = static_cast<int64_t>(static_cast<double>(hd) * c.partial_rotary_factor);
  for (int64_t l = 0; l < L; ++l) {
    io::LayerWeights lw;
    lw.type = c.layer_types[static_cast<size_t>(l)];
    lw.input_layernorm.assign(static_cast<size_t>(H), 0.0f);
    lw.post_attention_layernorm.assign(static_cast<size_t>(H), 0.0f);
    lw.gate_proj.assign(static_cast<size_t>(I * H), 0.0f);
    lw.up_proj.assign(static_cast<size_t>(I * H), 0.0f);
    lw.down_proj.assign(static_cast<size_t>(H * I), 0.0f);
    if (lw.type == LayerType::LinearAttention) {
      // An idle Gated DeltaNet: every projection 0, so q = k = v = 0 and the output
      // is exactly +0 (l2norm(0) = 0, the gated norm of 0 is 0).
      auto& la = lw.linear;
      const int64_t conv_dim = 3 * lhd;
      la.in_proj_qkv.assign(static_cast<size_t>(conv_dim * H), 0.0f);
      la.in_proj_z.assign(static_cast<size_t>(lhd * H), 0.0f);
      la.in_proj_b.assign(static_cast<size_t>(H), 0.0f);
      la.in_proj_a.assign(static_cast<size_t>(H), 0.0f);
      la.conv1d.assign(static_cast<size_t>(conv_dim * 4), 0.0f);
      la.dt_bias.assign(1, 0.0f);
      la.A_log.assign(1, 0.0f);
      la.norm.assign(static_cast<size_t>(lhd), 1.0f);
      la.out_proj.assign(static_cast<size_t>(H * lhd), 0.0f);
    } else {
      auto& fa = lw.full;
      fa.q_proj.assign(static_cast<size_t>(2 * nkv * hd * H), 0.0f);
      fa.k_proj.assign(static_cast<size_t>(nkv * hd * H), 0.0f);
      fa.v_proj.assign(static_cast<size_t>(nkv * hd * H), 0.0f);
      fa.o_proj.assign(static_cast<size_t>(H * nkv * hd), 0.0f);
      // q and k of a memory head: 64 (hd/4) dims of size A = 2^10 per token, so the
      // per-head RMSNorm scale is exactly 2/A; with 1 + w = 32 each such dim becomes 64
      // and one matching dim adds 64 * 64 / sqrt(hd) >= 256 to the score.
      fa.q_norm.assign(static_cast<size_t>(hd), 31.0f);
      fa.k_norm.assign(static_cast<size_t>(hd), 31.0f);
      // Output gate of every head: closed (sigmoid(-128) == 0) unless an op opens it.
      for (int64_t h = 0; h < nkv; ++h)
        for (int64_t d = 0; d < hd; ++d) {
          const int64_t row = 2 * hd * h + hd + d;
          e.add_term(fa.q_proj, row, kOne, -128.0f);
        }
    }
    w.layers.push_back(std::move(lw));
  }

  const auto& ops = program.ops();
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const int64_t l = schedule.sublayer[i] / 2;
    io::LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    if (op.kind == OpKind::Mlp) {
      int64_t row = alloc.first_neuron[i];
      for (const Neuron& n : op.neurons) {
        e.add_lin(lw.gate_proj, row, n.gate);
        e.add_lin(lw.up_proj, row, n.up);
        for (const Term& t : n.down) {
          if (t.value == kOne) fail("emit: op '{}' writes the constant", op.label);
          lw.down_proj[static_cast<size_t>(alloc.dim(t.value) * I + row)] += t.weight;
        }
        ++row;
      }
      continue;
    }
    const AttnMemory& m = op.memory;
    const int64_t h = alloc.first_neuron[i];
    const int64_t n_bits = static_cast<int64_t>(m.key_bits.size());
    const int64_t ones = hd / 4;  // dims of size A in every q and k
    if (n_bits + 1 > ones || rot + n_bits + 1 + ones > hd)
      fail("emit: memory op '{}' has {} address bits; head_dim {} allows {}", op.label, n_bits, hd,
           std::min(ones - 1, hd - rot - ones - 1));
    if (static_cast<int64_t>(m.data.size()) > hd)
      fail("emit: memory op '{}' stores {} values; head_dim is {}", op.label, m.data.size(), hd);
    auto& fa = lw.full;
    const float A = 1024.0f;
    // Dual-rail code: bit j -> dims (rot + 2j, rot + 2j + 1) = (A b, A (1 - b)); then the
    // flag pair; then constant pads so that exactly hd/4 dims hold A whatever the bits.
    auto encode = [&](std::vector<float>& proj, int64_t head_row0, const std::vector<ValueId>& bits, ValueId flag) {
      for (int64_t j = 0; j <= n_bits; ++j) {
        const ValueId b = j < n_bits ? bits[static_cast<size_t>(j)] : flag;
        e.add_term(proj, head_row0 + rot + 2 * j, b, A);
        e.add_term(proj, head_row0 + rot + 2 * j + 1, kOne, A);
        e.add_term(proj, head_row0 + rot + 2 * j + 1, b, -A);
      }
      for (int64_t p = 0; p < ones - n_bits - 1; ++p) e.add_term(proj, head_row0 + rot + 2 * (n_bits + 1) + p, kOne, A);
    };
    encode(fa.k_proj, h * hd, m.key_bits, m.write_flag);
    encode(fa.q_proj, 2 * hd * h, m.query_bits, kOne);
    for (size_t d = 0; d < m.data.size(); ++d) {
      e.add_term(fa.v_proj, h * hd + static_cast<int64_t>(d), m.data[d], 1.0f);
      // Gate: -128 (closed, set above) + 256 * read_flag.
      e.add_term(fa.q_proj, 2 * hd * h + hd + static_cast<int64_t>(d), m.read_flag, 256.0f);
      fa.o_proj[static_cast<size_t>(alloc.dim(m.out[d]) * nkv * hd + h * hd + static_cast<int64_t>(d))] = 1.0f;
    }
  }
  return w;
}

Compiled compile(const Program& program, const Interface& interface, const ScheduleLimits& limits,
                 const EmitOptions& options) {
  program.validate();
  Compiled c;
  c.schedule = schedule(program, limits);
  c.allocation = allocate(program, c.schedule);
  c.weights = emit(program, c.schedule, c.allocation, interface, options);
  return c;
}

}  // namespace qpu::compiler
