#include "compiler/emit.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "common/error.h"
#include "compiler/gdn_layout.h"

namespace qpu::compiler {

namespace {

using io::LayerType;

float pow2(int e) { return std::ldexp(1.0f, e); }

// A projection as it is emitted: a dense array of +0 written in place, or the same writes
// recorded (io::SparseMatrixBuilder, which replays them in the same order per position).
void make_matrix(std::vector<float>& m, int64_t rows, int64_t cols) { m.assign(static_cast<size_t>(rows * cols), 0.0f); }
void make_matrix(io::SparseMatrixBuilder& m, int64_t rows, int64_t cols) { m = io::SparseMatrixBuilder(rows, cols); }
void add_at(std::vector<float>& m, int64_t i, float w) { m[static_cast<size_t>(i)] += w; }
void add_at(io::SparseMatrixBuilder& m, int64_t i, float w) { m.add(i, w); }
void set_at(std::vector<float>& m, int64_t i, float w) { m[static_cast<size_t>(i)] = w; }
void set_at(io::SparseMatrixBuilder& m, int64_t i, float w) { m.set(i, w); }

struct Emitter {
  const Program& program;
  const Allocation& alloc;
  const EmitOptions& options;
  int64_t hidden;
  float value_scale;  // 2^k: weight multiplier for a residual value (normed by 2^-k)
  float rail_scale;   // 1/8: weight multiplier for the constant (the rail arrives as 8)

  // Adds w * lin into row `row` (length hidden) of a weight matrix.
  template <class M>
  void add_lin(M& matrix, int64_t row, const Lin& lin, float scale = 1.0f) const {
    for (const Term& t : lin.terms) add_term(matrix, row, t.value, t.weight * scale);
  }
  template <class M>
  void add_term(M& matrix, int64_t row, ValueId v, float w) const {
    const int64_t col = v == kOne ? alloc.rail_dims[0] : alloc.dim(v);
    add_at(matrix, row * hidden + col, w * (v == kOne ? rail_scale : value_scale));
  }
};

// out = cell * read_scale * 2^-norm_exponent * 32 * W = (cell - offset) * 2^-data_exponent.
float gdn_decode_weight(const GdnMemory& m, const GdnLayout& g) {
  return std::ldexp(1.0f / (32.0f * g.read_scale), g.norm_exponent - m.data_exponent);
}

// What emit_gdn_memory needs of the op (checked for every op before any layer is built).
void check_gdn_memory(const Op& op, const GdnLayout& g) {
  const GdnMemory& m = op.gdn;
  const auto n_bits = static_cast<int64_t>(m.key_bits.size());
  if (n_bits > 62 || (int64_t{1} << n_bits) > g.key_dim)
    fail("emit: GDN memory '{}' has {} address bits; the head has {} rows", op.label, n_bits, g.rows());
  const bool has_offset = m.offset != 0.0f;
  const auto D = static_cast<int64_t>(m.data.size());
  if (D > g.capacity(has_offset))
    fail("emit: GDN memory '{}' stores {} values; a row holds {}", op.label, D, g.capacity(has_offset));
  if (m.wipe_flag == kOne) fail("emit: GDN memory '{}' wipes on every token", op.label);
  const float W = gdn_decode_weight(m, g);
  for (int64_t c = 0; c < D; ++c) {
    if (!std::isnormal(W * m.out_weight(static_cast<size_t>(c))))
      fail("emit: GDN memory '{}' column {}: decode weight {} x {} is not a normal float", op.label, c, W,
           m.out_weight(static_cast<size_t>(c)));
  }
}

// What the attention memory emission needs of the op.
void check_attn_memory(const Op& op, int64_t hd, int64_t rot) {
  const AttnMemory& m = op.memory;
  const auto n_bits = static_cast<int64_t>(m.key_bits.size());
  const int64_t ones = hd / 4;  // dims of size A in every q and k
  if (n_bits + 1 > ones || rot + n_bits + 1 + ones > hd)
    fail("emit: memory op '{}' has {} address bits; head_dim {} allows {}", op.label, n_bits, hd,
         std::min(ones - 1, hd - rot - ones - 1));
  if (static_cast<int64_t>(m.data.size()) > hd)
    fail("emit: memory op '{}' stores {} values; head_dim is {}", op.label, m.data.size(), hd);
}

void check_mlp(const Op& op) {
  for (const Neuron& n : op.neurons)
    for (const Term& t : n.down)
      if (t.value == kOne) fail("emit: op '{}' writes the constant", op.label);
}

// One GDN memory in head h of a linear_attention layer (docs/npu-gdn-memory.md).
// Every pre-silu q/k/v/z/b value below is a sum of a few small integer multiples of
// powers of two (exact in any order); the conv picks one token (the op's taps).
template <class M>
void emit_gdn_memory(const Emitter& e, const Op& op, int64_t h, const GdnLayout& g, int64_t heads,
                     io::BasicLinearAttentionWeights<M>& la) {
  const GdnMemory& m = op.gdn;
  const int64_t dk = g.key_dim, dv = g.value_dim;
  const auto n_bits = static_cast<int64_t>(m.key_bits.size());
  const bool has_offset = m.offset != 0.0f;
  const auto D = static_cast<int64_t>(m.data.size());
  const int64_t key_total = heads * dk;
  const int64_t q0 = h * dk, k0 = key_total + h * dk, v0 = 2 * key_total + h * dv;
  const float hot = 128.0f;  // silu(128) == 128 and l2norm of one such entry is exactly 1
  // Row i: hot * (flag - number of address bits that differ from i's): hot for the
  // addressed row when the flag is 1, <= 0 otherwise (silu(0) = 0, silu(-128 n) = -0).
  // The constants of each side: the rail, or the side's enable (ir.h, GdnMemory::key_enable).
  const ValueId key_one = m.key_enable, query_one = m.query_enable;
  auto address = [&](int64_t row0, const std::vector<ValueId>& bits, ValueId flag, ValueId one) {
    const int64_t rows = std::min<int64_t>(g.rows(), int64_t{1} << n_bits);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t r = row0 + i;
      e.add_term(la.in_proj_qkv, r, flag, hot);
      for (int64_t j = 0; j < n_bits; ++j) {
        const ValueId b = bits[static_cast<size_t>(j)];
        if ((i >> j) & 1) {
          e.add_term(la.in_proj_qkv, r, b, hot);
          e.add_term(la.in_proj_qkv, r, one, -hot);
        } else {
          e.add_term(la.in_proj_qkv, r, b, -hot);
        }
      }
    }
  };
  address(k0, m.key_bits, m.write_flag, key_one);
  address(q0, m.query_bits, m.read_flag, query_one);
  if (g.two_hot) e.add_term(la.in_proj_qkv, q0 + dk - 1, m.read_flag, hot);  // the partner row
  const float cell_scale = std::ldexp(1.0f, m.data_exponent);
  for (int64_t c = 0; c < D; ++c) {
    e.add_term(la.in_proj_qkv, v0 + c, m.data[static_cast<size_t>(c)], cell_scale);
    if (has_offset) e.add_term(la.in_proj_qkv, v0 + c, key_one, m.offset);
  }
  if (has_offset) e.add_term(la.in_proj_qkv, v0 + g.offset_column(D), key_one, m.offset);
  for (int64_t c = g.first_rail(); c < dv; ++c) e.add_term(la.in_proj_qkv, v0 + c, key_one, g.rail_cell);
  // Conv weights one-hot at position 3 - tap: the channel is the projection of token
  // t - tap exactly (the other three products are +-0: the history is finite, and 0
  // before position 0). Offset and rail columns are constants: tap 0.
  auto tap_weight = [&](int64_t channel, int tap) { la.conv1d[static_cast<size_t>(channel * 4 + 3 - tap)] = 1.0f; };
  for (int64_t i = 0; i < dk; ++i) {
    tap_weight(q0 + i, m.query_tap);
    tap_weight(k0 + i, m.key_tap);
  }
  for (int64_t c = 0; c < dv; ++c) tap_weight(v0 + c, c < D ? m.data_tap(static_cast<size_t>(c)) : 0);
  // beta = sigmoid(32) == 1; decay exp(-exp(0) * softplus(a - 1000)): softplus(-1000) == 0
  // gives exp(-0) == 1, a wipe (a = 2000) gives softplus(1000) = 1000 and exp(-1000) == 0.
  e.add_term(la.in_proj_b, h, key_one, 32.0f);
  if (m.wipe_flag != kNever) e.add_term(la.in_proj_a, h, m.wipe_flag, 2000.0f);
  la.dt_bias[static_cast<size_t>(h)] = -1000.0f;
  la.A_log[static_cast<size_t>(h)] = 0.0f;
  // Output gate silu(z) = silu(32) == 32 on the data and offset columns (rails: z = 0).
  const int64_t gated = D + (has_offset ? 1 : 0);
  for (int64_t c = 0; c < gated; ++c) e.add_term(la.in_proj_z, h * dv + c, query_one, 32.0f);
  // W: gdn_decode_weight. Column c is scaled by its decode weight w_c = +-2^i (several columns may add into
  // one out value: exact by the op's contract, ir.h).
  const float W = gdn_decode_weight(m, g);
  const int64_t vd = heads * dv;
  for (int64_t c = 0; c < D; ++c) {
    const float Wc = W * m.out_weight(static_cast<size_t>(c));
    const int64_t dim = e.alloc.dim(m.out[static_cast<size_t>(c)]);
    set_at(la.out_proj, dim * vd + h * dv + c, Wc);
    if (has_offset) set_at(la.out_proj, dim * vd + h * dv + g.offset_column(D), -Wc);
  }
}

}  // namespace

float rail_value(int norm_exponent) { return pow2(norm_exponent + 3); }

LayerEmitter::LayerEmitter(const Program& program, const Schedule& schedule, const Allocation& alloc,
                           const Interface& interface, const EmitOptions& options)
    : program_(program), alloc_(alloc), interface_(interface), options_(options) {
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

  const int64_t L = std::max<int64_t>(alloc.num_layers, 1);
  const bool has_gdn = alloc.num_gdn_heads > 0;
  const int64_t lkd = has_gdn ? options.gdn_key_head_dim : options.linear_head_dim;
  const int64_t lvd = has_gdn ? options.gdn_value_head_dim : options.linear_head_dim;
  const GdnLayout gl = has_gdn ? GdnLayout::for_dims(lkd, lvd) : GdnLayout{};

  io::Qwen35Config& c = config_;
  c.architecture = "Qwen3_5ForCausalLM";
  c.tensor_prefix = "model.";
  c.vocab_size = interface.vocab_size;
  c.hidden_size = alloc.hidden_size;
  c.intermediate_size = alloc.intermediate_size;
  c.num_hidden_layers = L;
  c.num_attention_heads = alloc.num_kv_heads;
  c.num_key_value_heads = alloc.num_kv_heads;
  c.head_dim = hd;
  c.partial_rotary_factor = 0.25;
  c.rope_theta = 1e7;
  c.linear_num_key_heads = has_gdn ? alloc.num_gdn_heads : 1;
  c.linear_num_value_heads = c.linear_num_key_heads;
  c.linear_key_head_dim = lkd;
  c.linear_value_head_dim = lvd;
  c.linear_conv_kernel_dim = 4;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = false;
  for (int64_t l = 0; l < L; ++l)
    c.layer_types.push_back(l < alloc.num_layers && alloc.layer_has_attention[static_cast<size_t>(l)]
                                ? LayerType::FullAttention
                                : LayerType::LinearAttention);

  // Every check of an op runs here, in program order, so that no layer is built (nor
  // handed to a sink) for a program that cannot be emitted; the index is all that
  // layer(l) needs to visit its own ops only.
  const auto& ops = program.ops();
  if (schedule.sublayer.size() != ops.size())
    fail("emit: the schedule places {} ops, the program has {}", schedule.sublayer.size(), ops.size());
  const int64_t rot = static_cast<int64_t>(static_cast<double>(hd) * c.partial_rotary_factor);
  ops_of_layer_.resize(static_cast<size_t>(L));
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const int64_t l = schedule.sublayer[i] / 2;
    if (schedule.sublayer[i] < 0 || l >= L)
      fail("emit: op '{}' is scheduled in sublayer {}; the allocation has {} layers", op.label,
           schedule.sublayer[i], L);
    switch (op.kind) {
      case OpKind::Mlp: check_mlp(op); break;
      case OpKind::GdnMemory: check_gdn_memory(op, gl); break;
      case OpKind::AttnMemory: check_attn_memory(op, hd, rot); break;
    }
    ops_of_layer_[static_cast<size_t>(l)].push_back(i);
  }
}

io::Qwen35Weights LayerEmitter::globals() const {
  const io::Qwen35Config& c = config_;
  const Allocation& alloc = alloc_;
  const Interface& interface = interface_;
  const int64_t H = c.hidden_size;
  const int k = options_.norm_exponent;
  io::Qwen35Weights w;
  w.config = c;
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
  return w;
}

io::LayerWeights LayerEmitter::layer(int64_t l) const { return emit_layer<std::vector<float>>(l); }

io::SparseLayerWeights LayerEmitter::sparse_layer(int64_t l) const {
  return io::convert_matrices<io::SparseMatrix>(emit_layer<io::SparseMatrixBuilder>(l),
                                                [](io::SparseMatrixBuilder&& b, const char*) { return b.finish(); });
}

template <class M>
io::BasicLayerWeights<M> LayerEmitter::emit_layer(int64_t l) const {
  const io::Qwen35Config& c = config_;
  if (l < 0 || l >= c.num_hidden_layers) fail("emit: layer {} outside [0, {})", l, c.num_hidden_layers);
  const Allocation& alloc = alloc_;
  const int64_t H = c.hidden_size;
  const int64_t I = c.intermediate_size;
  const int64_t nkv = c.num_key_value_heads;
  const int64_t hd = c.head_dim;
  const int64_t gdn_heads = c.linear_num_key_heads;
  const int64_t lkd = c.linear_key_head_dim;
  const int64_t lvd = c.linear_value_head_dim;
  const GdnLayout gl = alloc.num_gdn_heads > 0 ? GdnLayout::for_dims(lkd, lvd) : GdnLayout{};
  const int64_t rot = static_cast<int64_t>(static_cast<double>(hd) * c.partial_rotary_factor);
  const Emitter e{program_, alloc, options_, H, pow2(options_.norm_exponent), 1.0f / 8.0f};

  io::BasicLayerWeights<M> lw;
  lw.type = c.layer_types[static_cast<size_t>(l)];
  lw.input_layernorm.assign(static_cast<size_t>(H), 0.0f);
  lw.post_attention_layernorm.assign(static_cast<size_t>(H), 0.0f);
  make_matrix(lw.gate_proj, I, H);
  make_matrix(lw.up_proj, I, H);
  make_matrix(lw.down_proj, H, I);
  if (lw.type == LayerType::LinearAttention) {
    // An idle Gated DeltaNet: every projection 0, so q = k = v = 0 and the output
    // is exactly +0 (l2norm(0) = 0, the gated norm of 0 is 0).
    // GDN memory ops overwrite the weights of their heads below.
    auto& la = lw.linear;
    const int64_t conv_dim = gdn_heads * (2 * lkd + lvd);
    make_matrix(la.in_proj_qkv, conv_dim, H);
    make_matrix(la.in_proj_z, gdn_heads * lvd, H);
    make_matrix(la.in_proj_b, gdn_heads, H);
    make_matrix(la.in_proj_a, gdn_heads, H);
    la.conv1d.assign(static_cast<size_t>(conv_dim * 4), 0.0f);
    // Decay exp(-exp(0) * softplus(0 - 1000)) == 1 in every head, the unused ones too (as
    // a memory's): their state stays +0 either way, and a layer whose every head decays by
    // exactly 1 when idle keeps its state untouched, so the engine may skip it whenever its
    // inputs are idle again (docs/engine.md, "Idle sublayers"; a decay of 0.5 in one unused
    // head kept a layer awake for good once it had run).
    la.dt_bias.assign(static_cast<size_t>(gdn_heads), -1000.0f);
    la.A_log.assign(static_cast<size_t>(gdn_heads), 0.0f);
    la.norm.assign(static_cast<size_t>(lvd), 1.0f);
    make_matrix(la.out_proj, H, gdn_heads * lvd);
  } else {
    auto& fa = lw.full;
    make_matrix(fa.q_proj, 2 * nkv * hd, H);
    make_matrix(fa.k_proj, nkv * hd, H);
    make_matrix(fa.v_proj, nkv * hd, H);
    make_matrix(fa.o_proj, H, nkv * hd);
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

  // This layer's ops in program order: the same += sequence into every weight as a
  // pass over the whole program would make (ops of other layers touch other tensors).
  const auto& ops = program_.ops();
  for (size_t i : ops_of_layer_[static_cast<size_t>(l)]) {
    const Op& op = ops[i];
    if (op.kind == OpKind::Mlp) {
      int64_t row = alloc.first_neuron[i];
      for (const Neuron& n : op.neurons) {
        e.add_lin(lw.gate_proj, row, n.gate);
        e.add_lin(lw.up_proj, row, n.up);
        for (const Term& t : n.down) add_at(lw.down_proj, alloc.dim(t.value) * I + row, t.weight);
        ++row;
      }
      continue;
    }
    if (op.kind == OpKind::GdnMemory) {
      emit_gdn_memory(e, op, alloc.first_neuron[i], gl, gdn_heads, lw.linear);
      continue;
    }
    const AttnMemory& m = op.memory;
    const int64_t h = alloc.first_neuron[i];
    const int64_t n_bits = static_cast<int64_t>(m.key_bits.size());
    const int64_t ones = hd / 4;  // dims of size A in every q and k
    auto& fa = lw.full;
    const float A = 1024.0f;
    // Dual-rail code: bit j -> dims (rot + 2j, rot + 2j + 1) = (A b, A (1 - b)); then the
    // flag pair; then constant pads so that exactly hd/4 dims hold A whatever the bits.
    auto encode = [&](M& proj, int64_t head_row0, const std::vector<ValueId>& bits, ValueId flag) {
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
      set_at(fa.o_proj, alloc.dim(m.out[d]) * nkv * hd + h * hd + static_cast<int64_t>(d), 1.0f);
    }
  }
  return lw;
}

io::Qwen35Weights emit_streaming(const Program& program, const Schedule& schedule, const Allocation& allocation,
                                 const Interface& interface, const EmitOptions& options, const LayerSink& sink) {
  const LayerEmitter emitter(program, schedule, allocation, interface, options);
  if (!sink) fail("emit_streaming: no layer sink");
  io::Qwen35Weights globals = emitter.globals();
  for (int64_t l = 0; l < emitter.num_layers(); ++l) sink(l, emitter.layer(l));
  return globals;
}

io::Qwen35Weights emit(const Program& program, const Schedule& schedule, const Allocation& allocation,
                       const Interface& interface, const EmitOptions& options) {
  std::vector<io::LayerWeights> layers;
  io::Qwen35Weights w = emit_streaming(program, schedule, allocation, interface, options,
                                       [&](int64_t, io::LayerWeights&& layer) { layers.push_back(std::move(layer)); });
  w.layers = std::move(layers);
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
