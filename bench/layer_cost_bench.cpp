// What one host layer-pass costs for NPU-shaped layers (docs/layer-cost.md).
// `layer_cost_bench [benchmark flags]`; every checkpoint is synthetic and built in memory.
//
//   BM_LayerPass/<shape>/threads:T/gdn:G/path:P/elem:E   one forward per iteration through a
//       stack of identical layers of <shape>; us_per_layer = wall time / layers (the
//       embedding lookup, final norm and a 64-row CSR lm_head are included, amortized
//       over the stack). G: 0 = dense GDN recurrence, 1 = skip exact zeros (the default).
//       P: 0 = SparsePath::Rows (every CSR product walks all its rows: the engine before
//       the column path), 1 = SparsePath::Auto (the default). E: 0 = Elementwise::Dense
//       (the plain scalar loops over the full width), 1 = Elementwise::SkipZeros (the
//       default: vectorized, idle channels skipped). Counters: col_products =
//       products per token that took the column path, nnz_per_layer, weight_MiB.
//         looped1024   hidden 1024, intermediate 1536, GDN 4x128 keys / 8x64 values with
//                      one-hot q and k and exp(g) = 1 (a RAM layer), CSR MLP with 3-10
//                      nonzeros per gate/up row, 3-10 per down column and 100 down
//                      columns with 256-512 nonzeros. 24 layers: items/s = tokens/s of
//                      the looped machine's stack.
//         narrowH_I    hidden H, intermediate I, CSR MLP with 3-10 nonzeros per gate/up
//                      row and down column, idle (all-zero) GDN mixer (1x32 keys / 2x32
//                      values; all-zero weights give exp(g) = 0.5, so the decay runs).
//         narrowattnH_I  the same with a small gated attention mixer (2 heads, 1 kv head,
//                      dim 32, sparse projections); positions 0..255, then a fresh state.
//         idleH        every weight 0 (the floor of a layer-pass).
//         looped1024_active5   looped1024's sizes laid out as 20 micro-ops (Groups below):
//                      each token keeps ~5% of the residual and of the neurons live,
//                      the rest exactly 0.
//         looped1024_idletoken the same layers on tokens that activate nothing.
//   BM_DeepStack/threads:T   4,000 narrow128_256 layers: items/s = tokens/s.
//   BM_LmHead/threads:T      the looped machine's output matrix: 37,400 x 1024 CSR rows
//                            with 4 nonzeros (value-part token scoring, design study 3.5 in docs/journal).
//   BM_ValueHead, BM_Product  single products with sparse inputs (see their comments).
//   BM_IdleAttention/positions:T/skip:S/threads:N   20 looped1024_active5 layers, layer 10
//                            an all-zero full-attention layer (what compiled checkpoints
//                            keep for transformers), decoding at position ~T: items/s =
//                            tokens/s. S: 0 = IdleMixers::Compute (the layer runs, its KV
//                            cache holds T rows), 1 = IdleMixers::Skip (the default).
//   BM_IdleSublayers/hidden:H/layers:L/skip:S/threads:1   a stack of L idle layers
//                            (make_idle_stack): RAM-like GDN (4x128 keys / 8x64 values,
//                            exp(g) = 1) and a CSR MLP (intermediate 1.5 H) that read and
//                            write only the dims d != 0 mod 20, on tokens live only on the
//                            dims d = 0 mod 20: every sublayer is idle. S: 0 =
//                            IdleSublayers::Compute (before), 1 = Skip (the default).
//                            skipped = sublayers skipped per token. Cost of one idle layer =
//                            the difference of two depths / the difference in layers (the
//                            embedding, final norm and head cancel).
//   BM_IdleStack/layers:L/skip:S/threads:1   hidden 1024 (intermediate 512, GDN 2x128 /
//                            4x64): L = 201 is 200 idle layers as above and layer 100
//                            reading and writing the live dims (the NPU machine's depth:
//                            almost every layer idle on a token); L = 1 is that active
//                            layer alone. items/s = tokens/s.
//   BM_Machine/skip:S/threads:1   (built when qpu_machine exists) a real compiled checkpoint:
//                            the M1 machine skeleton (machine::build_machine, w = 8,
//                            random A and B) run as a host runs it: the prompt, then its own
//                            greedy argmax until DONE; one iteration = one whole run.
//                            items/s = tokens/s; stream_ok = the generated stream is the
//                            expected one; bits_equal (skip:1) = Skip and Compute gave
//                            identical logits bits on every token of a run; skipped =
//                            sublayers skipped per token.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/model.h"
#include "engine/packed_matrix.h"
#include "io/qwen35_weights.h"
#if defined(QPU_BENCH_MACHINE)
#include <cmath>
#include <cstring>

#include "machine/testing/machine.h"
#endif

namespace {

using namespace qpu;
using namespace qpu::engine;

enum class Mixer { OneHotGdn, IdleGdn, Attention };

struct Shape {
  std::string name;
  int64_t hidden = 0, intermediate = 0;
  int64_t k_heads = 1, k_dim = 32, v_heads = 2, v_dim = 32;
  Mixer mixer = Mixer::IdleGdn;
  bool idle = false;  // every weight 0
  int64_t layers = 0;
  // > 0: a looped machine's micro-ops (make_weights, "groups"): each token activates one
  // group's residual dims and neurons, the rest of the layer sees exact zeros.
  int64_t groups = 0;
  bool idle_token = false;  // with groups: every embedding row is 0 (no micro-op active)
};

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  int64_t below(int64_t n) { return static_cast<int64_t>(gen_() % static_cast<uint64_t>(n)); }
  float value(float scale) {  // nonzero, either sign
    const float u = static_cast<float>(gen_() >> 40) * 0x1.0p-24f;
    return (gen_() & 1 ? 1.0f : -1.0f) * scale * (0.25f + u);
  }

 private:
  std::mt19937_64 gen_;
};

// rows x cols, each row with nnz in [lo, hi] nonzeros at random columns.
std::vector<float> sparse_rows(Rng& rng, int64_t rows, int64_t cols, int64_t lo, int64_t hi, float scale) {
  std::vector<float> m(static_cast<size_t>(rows * cols), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t nnz = lo + rng.below(hi - lo + 1);
    for (int64_t n = 0; n < nnz; ++n) m[r * cols + rng.below(cols)] = rng.value(scale);
  }
  return m;
}

// down_proj [hidden, intermediate]: columns (neurons) with 3-10 nonzeros, and `wide`
// columns with 256-512 nonzeros (or all rows when hidden is smaller).
std::vector<float> down_columns(Rng& rng, int64_t hidden, int64_t inter, int64_t wide, float scale) {
  std::vector<float> m(static_cast<size_t>(hidden * inter), 0.0f);
  for (int64_t c = 0; c < inter; ++c) {
    const int64_t nnz = c < wide ? std::min(hidden, 256 + rng.below(257)) : 3 + rng.below(8);
    for (int64_t n = 0; n < nnz; ++n) m[rng.below(hidden) * inter + c] = rng.value(scale);
  }
  return m;
}

constexpr int64_t kVocab = 64;

// The micro-op structure of a looped layer (Shape::groups = G): residual dim d belongs
// to group d mod G, except the dims d = 63 (mod 64), which take the mixer's output.
// Neuron n belongs to group n mod G; its gate/up rows read only its group's dims and its
// down column writes only its group's dims (the 100 wide columns all of them). Token t's
// embedding is nonzero only on group t mod G's dims, so a token keeps ~1/G of the
// residual and of the neurons active through the stack; everything else is exact 0.
struct Groups {
  std::vector<std::vector<int64_t>> dims;  // per group
  std::vector<int64_t> mixer_dims;
  Groups(int64_t hidden, int64_t groups) : dims(static_cast<size_t>(groups)) {
    for (int64_t d = 0; d < hidden; ++d) {
      if (d % 64 == 63) mixer_dims.push_back(d);
      else dims[static_cast<size_t>(d % groups)].push_back(d);
    }
  }
  int64_t pick(Rng& rng, int64_t neuron) const {
    const auto& g = dims[static_cast<size_t>(neuron % static_cast<int64_t>(dims.size()))];
    return g[static_cast<size_t>(rng.below(static_cast<int64_t>(g.size())))];
  }
};

// The config of a benchmark stack of shape s (every layer of s.mixer's type).
io::Qwen35Config bench_config(const Shape& s) {
  io::Qwen35Config c;
  c.architecture = "Qwen3_5ForCausalLM";
  c.tensor_prefix = "model.";
  c.vocab_size = kVocab;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.intermediate;
  c.num_hidden_layers = s.layers;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 32;
  c.partial_rotary_factor = 0.25;
  c.rope_theta = 1e7;
  c.linear_num_key_heads = s.k_heads;
  c.linear_num_value_heads = s.v_heads;
  c.linear_key_head_dim = s.k_dim;
  c.linear_value_head_dim = s.v_dim;
  c.linear_conv_kernel_dim = 4;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = false;
  const io::LayerType type = s.mixer == Mixer::Attention ? io::LayerType::FullAttention : io::LayerType::LinearAttention;
  c.layer_types.assign(static_cast<size_t>(s.layers), type);
  return c;
}

std::vector<float> zeros(int64_t n) { return std::vector<float>(static_cast<size_t>(n), 0.0f); }

// A sparse MLP: every gate and up row 3-10 nonzeros, every down column 3-10 (the first
// heavy_columns columns 256-512), the residual dims of neuron n drawn by dim_of(n).
template <typename DimOf>
void sparse_mlp(Rng& rng, io::LayerWeights& lw, int64_t h, int64_t inter, int64_t heavy_columns, DimOf dim_of) {
  lw.gate_proj = zeros(inter * h);
  lw.up_proj = zeros(inter * h);
  lw.down_proj = zeros(h * inter);
  for (int64_t n = 0; n < inter; ++n) {
    for (std::vector<float>* m : {&lw.gate_proj, &lw.up_proj}) {
      const int64_t nnz = 3 + rng.below(8);
      for (int64_t k = 0; k < nnz; ++k) (*m)[n * h + dim_of(n)] = rng.value(1.0f);
    }
    const int64_t nnz = n < heavy_columns ? 256 + rng.below(257) : 3 + rng.below(8);
    for (int64_t k = 0; k < nnz; ++k) lw.down_proj[dim_of(n) * inter + n] = rng.value(0.02f);
  }
}

io::Qwen35Weights make_weights(const Shape& s, uint64_t seed) {
  Rng rng(seed);
  io::Qwen35Weights w;
  w.config = bench_config(s);
  const io::LayerType type = s.mixer == Mixer::Attention ? io::LayerType::FullAttention : io::LayerType::LinearAttention;

  const int64_t h = s.hidden, key_dim = s.k_heads * s.k_dim, value_dim = s.v_heads * s.v_dim;
  const int64_t conv_dim = 2 * key_dim + value_dim;
  w.embed_tokens.resize(static_cast<size_t>(kVocab * h));
  for (float& v : w.embed_tokens) v = rng.value(1.0f);  // dense, nonzero: every dim is live
  const Groups groups(h, std::max<int64_t>(s.groups, 1));
  if (s.groups > 0) {
    for (int64_t t = 0; t < kVocab; ++t) {
      float* row = w.embed_tokens.data() + t * h;
      std::fill(row, row + h, 0.0f);
      if (s.idle_token) continue;
      for (int64_t d : groups.dims[static_cast<size_t>(t % s.groups)]) row[d] = rng.value(1.0f);
    }
  }
  w.lm_head = sparse_rows(rng, kVocab, h, 2, 2, 1.0f);
  w.norm = zeros(h);

  for (int64_t l = 0; l < s.layers; ++l) {
    io::LayerWeights lw;
    lw.type = type;
    lw.input_layernorm = zeros(h);
    lw.post_attention_layernorm = zeros(h);
    if (type == io::LayerType::LinearAttention) {
      io::LinearAttentionWeights& g = lw.linear;
      g.in_proj_qkv = zeros(conv_dim * h);
      g.in_proj_z = zeros(value_dim * h);
      g.in_proj_b = zeros(s.v_heads * h);
      g.in_proj_a = zeros(s.v_heads * h);
      g.conv1d = zeros(conv_dim * 4);
      g.dt_bias = zeros(s.v_heads);
      g.A_log = zeros(s.v_heads);
      g.norm = zeros(s.v_dim);
      g.out_proj = zeros(h * value_dim);
      if (s.mixer == Mixer::OneHotGdn && !s.idle) {
        // q and k: one channel per key head reads one hidden dim (one-hot after silu and
        // l2norm); v, z, out_proj 2 nonzeros per row; beta from one weight; a = 0 and
        // dt_bias = -200 make softplus 0, g = -0, exp(g) = 1 (a RAM layer, 3.4).
        for (int64_t m = 0; m < 2 * s.k_heads; ++m) {
          const int64_t channel = m * s.k_dim + rng.below(s.k_dim);
          g.in_proj_qkv[channel * h + rng.below(h)] = 1.0f;
        }
        for (int64_t ch = 2 * key_dim; ch < conv_dim; ++ch) {
          for (int n = 0; n < 2; ++n) g.in_proj_qkv[ch * h + rng.below(h)] = rng.value(1.0f);
        }
        g.in_proj_z = sparse_rows(rng, value_dim, h, 2, 2, 1.0f);
        for (int64_t j = 0; j < s.v_heads; ++j) g.in_proj_b[j * h + rng.below(h)] = 1.0f;
        for (int64_t ch = 0; ch < conv_dim; ++ch) g.conv1d[ch * 4 + 3] = 1.0f;
        g.dt_bias.assign(static_cast<size_t>(s.v_heads), -200.0f);
        g.norm.assign(static_cast<size_t>(s.v_dim), 1.0f);
        g.out_proj = sparse_rows(rng, h, value_dim, 2, 2, 0.05f);
        if (s.groups > 0) {  // the mixer writes only its own residual dims
          g.out_proj = zeros(h * value_dim);
          for (int64_t d : groups.mixer_dims) {
            for (int n = 0; n < 2; ++n) g.out_proj[d * value_dim + rng.below(value_dim)] = rng.value(0.05f);
          }
        }
      }
    } else {
      io::FullAttentionWeights& a = lw.full;
      a.q_proj = sparse_rows(rng, 2 * 2 * 32, h, 2, 4, 1.0f);
      a.k_proj = sparse_rows(rng, 32, h, 2, 4, 1.0f);
      a.v_proj = sparse_rows(rng, 32, h, 2, 4, 1.0f);
      a.o_proj = sparse_rows(rng, h, 2 * 32, 2, 2, 0.05f);
      a.q_norm = zeros(32);
      a.k_norm = zeros(32);
    }
    if (s.idle) {
      lw.gate_proj = zeros(s.intermediate * h);
      lw.up_proj = zeros(s.intermediate * h);
      lw.down_proj = zeros(h * s.intermediate);
    } else {
      lw.gate_proj = sparse_rows(rng, s.intermediate, h, 3, 10, 1.0f);
      lw.up_proj = sparse_rows(rng, s.intermediate, h, 3, 10, 1.0f);
      lw.down_proj = down_columns(rng, h, s.intermediate, s.mixer == Mixer::OneHotGdn ? 100 : 0, 0.02f);
    }
    if (s.groups > 0 && !s.idle) {
      const int64_t inter = s.intermediate;
      sparse_mlp(rng, lw, h, inter, 100, [&](int64_t n) { return groups.pick(rng, n); });
    }
    w.layers.push_back(std::move(lw));
  }
  return w;
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = [] {
    std::vector<Shape> v;
    Shape looped{"looped1024", 1024, 1536, 4, 128, 8, 64, Mixer::OneHotGdn, false, 24};
    v.push_back(looped);
    Shape active = looped;  // 20 micro-ops: ~5% of the residual and of the neurons per token
    active.name = "looped1024_active5";
    active.groups = 20;
    v.push_back(active);
    active.name = "looped1024_idletoken";  // the same layers on a token that activates nothing
    active.idle_token = true;
    v.push_back(active);
    v.push_back({"narrow128_256", 128, 256, 1, 32, 2, 32, Mixer::IdleGdn, false, 256});
    v.push_back({"narrow256_512", 256, 512, 1, 32, 2, 32, Mixer::IdleGdn, false, 256});
    v.push_back({"narrowattn128_256", 128, 256, 1, 32, 2, 32, Mixer::Attention, false, 64});
    v.push_back({"narrowattn256_512", 256, 512, 1, 32, 2, 32, Mixer::Attention, false, 64});
    v.push_back({"idle128", 128, 256, 1, 32, 2, 32, Mixer::IdleGdn, true, 256});
    v.push_back({"idle256", 256, 512, 1, 32, 2, 32, Mixer::IdleGdn, true, 256});
    v.push_back({"idle1024", 1024, 1536, 4, 128, 8, 64, Mixer::IdleGdn, true, 64});
    return v;
  }();
  return all;
}

void run_stack(benchmark::State& bench, const Model& model, int64_t layers) {
  std::vector<float> logits(kVocab);
  State state = model.new_state();
  int64_t i = 0;
  for (int w = 0; w < 2; ++w) model.forward(i++ % kVocab, state, logits);  // past the first-token path
  const bool attention = model.config().layer_types[0] == io::LayerType::FullAttention;
  const int64_t column_products = PackedMatrix::column_products();
  for (auto _ : bench) {
    if (attention && state.position == 256) {  // positions 0..255 (a story's nested tokens)
      bench.PauseTiming();
      state = model.new_state();
      bench.ResumeTiming();
    }
    model.forward((i++ * 7) % kVocab, state, logits);
    benchmark::DoNotOptimize(logits.data());
  }
  bench.SetItemsProcessed(bench.iterations());  // tokens
  bench.counters["us_per_layer"] = benchmark::Counter(
      static_cast<double>(layers) * 1e-6, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  // Products per token that took the column path (the rest ran every row).
  bench.counters["col_products"] = static_cast<double>(PackedMatrix::column_products() - column_products) /
                                   static_cast<double>(bench.iterations());
}

// path: 0 = SparsePath::Rows (every CSR product walks all rows, as before the column
// path existed), 1 = SparsePath::Auto (the default).
// elem: 0 = Elementwise::Dense, 1 = Elementwise::SkipZeros (the default).
ModelOptions options_for(int64_t gdn, int64_t path, int64_t elem) {
  ModelOptions o;
  o.gdn = gdn == 0 ? GdnRecurrence::Dense : GdnRecurrence::SkipZeros;
  o.sparse_path = path == 0 ? SparsePath::Rows : SparsePath::Auto;
  o.elementwise = elem == 0 ? Elementwise::Dense : Elementwise::SkipZeros;
  return o;
}

int64_t layer_nonzeros(const io::LayerWeights& l) {
  int64_t n = 0;
  auto count = [&](const std::vector<float>& m) {
    for (float v : m) n += v != 0.0f;
  };
  for (const auto* m : {&l.gate_proj, &l.up_proj, &l.down_proj, &l.linear.in_proj_qkv, &l.linear.in_proj_z,
                        &l.linear.in_proj_a, &l.linear.in_proj_b, &l.linear.out_proj, &l.full.q_proj,
                        &l.full.k_proj, &l.full.v_proj, &l.full.o_proj}) {
    count(*m);
  }
  return n;
}

void BM_LayerPass(benchmark::State& bench, size_t shape_index) {
  omp_set_num_threads(static_cast<int>(bench.range(0)));
  const Shape& s = shapes()[shape_index];
  struct Built {
    std::unique_ptr<Model> model;
    int64_t nonzeros = 0;
  };
  static std::map<std::tuple<size_t, int64_t, int64_t, int64_t>, Built> models;
  Built& built = models[{shape_index, bench.range(1), bench.range(2), bench.range(3)}];
  if (!built.model) {
    io::Qwen35Weights w = make_weights(s, 1000 + shape_index);
    built.nonzeros = layer_nonzeros(w.layers[0]);
    built.model = std::make_unique<Model>(std::move(w), options_for(bench.range(1), bench.range(2), bench.range(3)));
  }
  run_stack(bench, *built.model, s.layers);
  bench.counters["nnz_per_layer"] = static_cast<double>(built.nonzeros);
  bench.counters["weight_MiB"] = static_cast<double>(built.model->storage_stats().bytes) / 1048576.0;
}

void BM_DeepStack(benchmark::State& bench) {
  omp_set_num_threads(static_cast<int>(bench.range(0)));
  static std::unique_ptr<Model> model;  // ~2 GB of dense input while building, ~0.2 GB packed
  Shape s = shapes()[3];
  s.layers = 4000;
  if (!model) model = std::make_unique<Model>(make_weights(s, 77), ModelOptions{});
  run_stack(bench, *model, s.layers);
  bench.counters["weight_MiB"] = static_cast<double>(model->storage_stats().bytes) / 1048576.0;
}

void BM_LmHead(benchmark::State& bench) {
  omp_set_num_threads(static_cast<int>(bench.range(0)));
  const int64_t rows = 37400, cols = 1024;
  static PackedMatrix head;
  if (head.rows() == 0) {
    Rng rng(5);
    head = PackedMatrix::pack(sparse_rows(rng, rows, cols, 4, 4, 1.0f), rows, cols, {}, "lm_head");
  }
  std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  Rng rng(6);
  for (float& v : x) v = rng.value(1.0f);
  for (auto _ : bench) {
    head.multiply(x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
}

// x with `active` nonzero entries at random positions (the rest +0).
std::vector<float> sparse_input(int64_t cols, int64_t active, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(cols), 0.0f);
  for (int64_t set = 0; set < active;) {
    const int64_t j = rng.below(cols);
    if (x[static_cast<size_t>(j)] != 0.0f) continue;
    x[static_cast<size_t>(j)] = rng.value(1.0f);
    ++set;
  }
  return x;
}

void run_product(benchmark::State& bench, const PackedMatrix& m, const std::vector<float>& x) {
  std::vector<float> y(static_cast<size_t>(m.rows()));
  for (auto _ : bench) {
    m.multiply(x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  bench.counters["columns"] = m.path_for(x.data()) == PackedMatrix::Path::Columns ? 1 : 0;
}

PackedMatrix::Options path_option(int64_t path) {
  PackedMatrix::Options o;
  o.force = PackedMatrix::Format::SparseCsr;
  o.path = path == 0 ? PackedMatrix::Path::Rows : path == 1 ? PackedMatrix::Path::Auto : PackedMatrix::Path::Columns;
  return o;
}

// BM_ValueHead/threads:T/active:A/path:P   the value-token output matrix of the looped
// machine (src/npu/uplink.h): 23,297 x 1024 CSR, 6 nonzeros per row, with A nonzero
// input dims. P: 0 = rows, 1 = auto, 2 = columns.
void BM_ValueHead(benchmark::State& bench) {
  omp_set_num_threads(static_cast<int>(bench.range(0)));
  const int64_t rows = 23297, cols = 1024;
  static std::map<int64_t, PackedMatrix> heads;
  PackedMatrix& head = heads[bench.range(2)];
  if (head.rows() == 0) {
    Rng rng(9);
    head = PackedMatrix::pack(sparse_rows(rng, rows, cols, 6, 6, 1.0f), rows, cols, path_option(bench.range(2)), "head");
  }
  run_product(bench, head, sparse_input(cols, bench.range(1), 10));
}

// BM_Product/matrix:M/active_permille:A/path:P   one product, A/1000 of the input dims
// nonzero (the threshold of Path::Auto is measured here). M: 0 = gate-like 1536 x 1024
// (3-10 nonzeros per row), 1 = down-like 1024 x 1536 (3-10 per column, 100 columns with
// 256-512), 2 = the value head 23,297 x 1024 (6 per row). P as in BM_ValueHead.
void BM_Product(benchmark::State& bench) {
  omp_set_num_threads(1);
  static std::map<std::pair<int64_t, int64_t>, PackedMatrix> matrices;
  const int64_t kind = bench.range(0);
  PackedMatrix& m = matrices[{kind, bench.range(2)}];
  if (m.rows() == 0) {
    Rng rng(11 + static_cast<uint64_t>(kind));
    const PackedMatrix::Options o = path_option(bench.range(2));
    if (kind == 0) m = PackedMatrix::pack(sparse_rows(rng, 1536, 1024, 3, 10, 1.0f), 1536, 1024, o, "gate");
    if (kind == 1) m = PackedMatrix::pack(down_columns(rng, 1024, 1536, 100, 1.0f), 1024, 1536, o, "down");
    if (kind == 2) m = PackedMatrix::pack(sparse_rows(rng, 23297, 1024, 6, 6, 1.0f), 23297, 1024, o, "head");
  }
  const int64_t active = std::max<int64_t>(1, m.cols() * bench.range(1) / 1000);
  run_product(bench, m, sparse_input(m.cols(), active, 12));
  bench.counters["nnz"] = static_cast<double>(m.nonzeros());
}

// BM_IdleAttention: a compiled-like stack whose layer 10 is an all-zero attention layer.
// The state is fast-forwarded to position T instead of decoding T tokens: that layer's
// keys and values are exactly +0 on every token (zero projections, norms and RoPE of
// +0), so its cache after T real tokens is T rows of +0, which is what is written here.
void BM_IdleAttention(benchmark::State& bench) {
  const int64_t positions = bench.range(0);
  const bool skip = bench.range(1) != 0;
  omp_set_num_threads(static_cast<int>(bench.range(2)));
  constexpr int64_t kIdleLayer = 10;
  static std::map<bool, std::unique_ptr<Model>> models;
  std::unique_ptr<Model>& model = models[skip];
  if (!model) {
    Shape s = shapes()[1];  // looped1024_active5
    s.layers = 20;
    io::Qwen35Weights w = make_weights(s, 2024);
    io::LayerWeights& idle = w.layers[kIdleLayer];
    const io::Qwen35Config& c = w.config;
    const int64_t h = c.hidden_size, d = c.head_dim;
    w.config.layer_types[kIdleLayer] = io::LayerType::FullAttention;
    idle.type = io::LayerType::FullAttention;
    idle.linear = {};
    idle.full.q_proj.assign(static_cast<size_t>(2 * c.num_attention_heads * d * h), 0.0f);
    idle.full.k_proj.assign(static_cast<size_t>(c.num_key_value_heads * d * h), 0.0f);
    idle.full.v_proj.assign(static_cast<size_t>(c.num_key_value_heads * d * h), 0.0f);
    idle.full.o_proj.assign(static_cast<size_t>(h * c.num_attention_heads * d), 0.0f);
    idle.full.q_norm.assign(static_cast<size_t>(d), 0.0f);
    idle.full.k_norm.assign(static_cast<size_t>(d), 0.0f);
    ModelOptions o;
    o.idle_mixers = skip ? IdleMixers::Skip : IdleMixers::Compute;
    model = std::make_unique<Model>(std::move(w), o);
  }
  const io::Qwen35Config& c = model->config();
  std::vector<float> logits(kVocab);
  State state = model->new_state();
  for (int64_t t = 0; t < 2; ++t) model->forward(t, state, logits);  // past the first-token path
  state.position = positions;
  if (!skip) {
    const auto rows = static_cast<size_t>(positions * c.num_key_value_heads * c.head_dim);
    state.key_cache[kIdleLayer].assign(rows, 0.0f);
    state.value_cache[kIdleLayer].assign(rows, 0.0f);
  }
  int64_t i = 0;
  for (auto _ : bench) {
    model->forward((i++ * 7) % kVocab, state, logits);
    benchmark::DoNotOptimize(logits.data());
  }
  bench.SetItemsProcessed(bench.iterations());  // tokens
  bench.counters["idle_cache_rows"] =
      static_cast<double>(state.key_cache[kIdleLayer].size()) / static_cast<double>(c.num_key_value_heads * c.head_dim);
  bench.counters["skipped_layers"] = static_cast<double>(model->skipped_mixers().size());
}

// A stack of RAM-like layers (see BM_IdleSublayers): layer `active` (or none: -1) reads
// and writes the live dims d = 0 mod 20, every other layer the dims d != 0 mod 20; the
// embedding rows are nonzero on the live dims only (and -0 on a few others).
io::Qwen35Weights make_idle_stack(int64_t h, int64_t inter, int64_t k_heads, int64_t v_heads, int64_t layers,
                                  int64_t active, uint64_t seed) {
  Rng rng(seed);
  const Shape s{"idle_stack", h, inter, k_heads, 128, v_heads, 64, Mixer::OneHotGdn, false, layers};
  io::Qwen35Weights w;
  w.config = bench_config(s);  // OneHotGdn: every layer linear attention
  std::vector<int64_t> live, quiet;
  for (int64_t d = 0; d < h; ++d) (d % 20 == 0 ? live : quiet).push_back(d);
  const auto pick = [&](const std::vector<int64_t>& dims) { return dims[static_cast<size_t>(rng.below(static_cast<int64_t>(dims.size())))]; };
  w.embed_tokens = zeros(kVocab * h);
  for (int64_t t = 0; t < kVocab; ++t) {
    for (int64_t d : live) w.embed_tokens[static_cast<size_t>(t * h + d)] = rng.value(1.0f);
    for (int n = 0; n < 8; ++n) w.embed_tokens[static_cast<size_t>(t * h + pick(quiet))] = -0.0f;
  }
  w.lm_head = sparse_rows(rng, kVocab, h, 2, 2, 1.0f);
  w.norm = zeros(h);
  const int64_t key_dim = s.k_heads * s.k_dim, value_dim = s.v_heads * s.v_dim, conv_dim = 2 * key_dim + value_dim;
  for (int64_t l = 0; l < layers; ++l) {
    const std::vector<int64_t>& dims = l == active ? live : quiet;
    io::LayerWeights lw;
    lw.type = io::LayerType::LinearAttention;
    lw.input_layernorm = zeros(h);
    lw.post_attention_layernorm = zeros(h);
    io::LinearAttentionWeights& g = lw.linear;
    g.in_proj_qkv = zeros(conv_dim * h);
    for (int64_t m = 0; m < 2 * s.k_heads; ++m) g.in_proj_qkv[(m * s.k_dim + rng.below(s.k_dim)) * h + pick(dims)] = 1.0f;
    for (int64_t ch = 2 * key_dim; ch < conv_dim; ++ch) {
      for (int n = 0; n < 2; ++n) g.in_proj_qkv[ch * h + pick(dims)] = rng.value(1.0f);
    }
    g.in_proj_z = zeros(value_dim * h);
    for (int64_t r = 0; r < value_dim; ++r) {
      for (int n = 0; n < 2; ++n) g.in_proj_z[r * h + pick(dims)] = rng.value(1.0f);
    }
    g.in_proj_b = zeros(s.v_heads * h);
    for (int64_t j = 0; j < s.v_heads; ++j) g.in_proj_b[j * h + pick(dims)] = 1.0f;
    g.in_proj_a = zeros(s.v_heads * h);
    g.conv1d = zeros(conv_dim * 4);
    for (int64_t ch = 0; ch < conv_dim; ++ch) g.conv1d[ch * 4 + 3] = 1.0f;
    g.dt_bias.assign(static_cast<size_t>(s.v_heads), -200.0f);  // exp(g) = 1: a RAM layer
    g.A_log = zeros(s.v_heads);
    g.norm.assign(static_cast<size_t>(s.v_dim), 1.0f);
    g.out_proj = zeros(h * value_dim);
    for (int64_t d : dims) {
      if (rng.below(8) == 0) g.out_proj[d * value_dim + rng.below(value_dim)] = rng.value(0.05f);
    }
    sparse_mlp(rng, lw, h, inter, 0, [&](int64_t) { return pick(dims); });
    w.layers.push_back(std::move(lw));
  }
  return w;
}

void run_idle_stack(benchmark::State& bench, const Model& model, int64_t layers) {
  const IdleSublayerCounts before = model.skipped_sublayers();
  run_stack(bench, model, layers);
  const IdleSublayerCounts after = model.skipped_sublayers();
  // run_stack's 2 warm-up tokens are counted too.
  bench.counters["skipped"] = static_cast<double>(after.mlp - before.mlp + after.gdn - before.gdn) /
                              static_cast<double>(bench.iterations() + 2);
}

ModelOptions idle_options(bool skip) {
  ModelOptions o;
  o.idle_sublayers = skip ? IdleSublayers::Skip : IdleSublayers::Compute;
  return o;
}

void BM_IdleSublayers(benchmark::State& bench) {
  const int64_t h = bench.range(0), layers = bench.range(1);
  const bool skip = bench.range(2) != 0;
  omp_set_num_threads(static_cast<int>(bench.range(3)));
  static std::map<std::tuple<int64_t, int64_t, bool>, std::unique_ptr<Model>> models;
  const std::tuple<int64_t, int64_t, bool> key{h, layers, skip};
  if (!models.count(key)) {
    models.clear();  // one model at a time (6 layers at 4096 are ~2 GB before packing)
    models[key] = std::make_unique<Model>(make_idle_stack(h, h + h / 2, 4, 8, layers, -1, 4242), idle_options(skip));
  }
  run_idle_stack(bench, *models[key], layers);
}

void BM_IdleStack(benchmark::State& bench) {
  const int64_t layers = bench.range(0);
  const bool skip = bench.range(1) != 0;
  omp_set_num_threads(static_cast<int>(bench.range(2)));
  static std::map<std::pair<int64_t, bool>, std::unique_ptr<Model>> models;
  const std::pair<int64_t, bool> key{layers, skip};
  if (!models.count(key)) {
    models.clear();  // 201 layers: ~2.2 GB of dense input while building
    models[key] = std::make_unique<Model>(make_idle_stack(1024, 512, 2, 4, layers, layers / 2, 4343), idle_options(skip));
  }
  run_idle_stack(bench, *models[key], layers);
}

#if defined(QPU_BENCH_MACHINE)
// The machine tests' inputs (src/machine/tests/machine_test.cpp): floats with a random
// 24-bit significand in binades [lo, hi), random sign; matrices with one zero in 8.
float machine_float(std::mt19937_64& rng, int lo, int hi) {
  const float f = std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f,
                             lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo)));
  return rng() % 2 ? -f : f;
}

struct MachineRun {
  std::vector<int64_t> generated;
  std::vector<std::vector<float>> logits;  // per forward, when kept
};

// One host run: the prompt, then the greedy argmax fed back until DONE.
MachineRun run_machine(const machine::Machine& m, const Model& model, const std::vector<int64_t>& prompt,
                       int64_t max_new, bool keep_logits) {
  std::vector<float> logits(static_cast<size_t>(model.config().vocab_size));
  State state = model.new_state();
  MachineRun r;
  const auto forward = [&](int64_t token) {
    model.forward(token, state, logits);
    if (keep_logits) r.logits.push_back(logits);
  };
  for (int64_t t : prompt) forward(t);
  int64_t next = std::max_element(logits.begin(), logits.end()) - logits.begin();
  while (static_cast<int64_t>(r.generated.size()) < max_new) {
    r.generated.push_back(next);
    if (next == m.done()) break;
    forward(next);
    next = std::max_element(logits.begin(), logits.end()) - logits.begin();
  }
  return r;
}

void BM_Machine(benchmark::State& bench) {
  const bool skip = bench.range(0) != 0;
  omp_set_num_threads(static_cast<int>(bench.range(1)));
  struct Setup {
    machine::Machine m;
    std::vector<int64_t> prompt, expected;
    std::unique_ptr<Model> compute, skip;
    double bits_equal = 0;
  };
  static std::unique_ptr<Setup> setup;
  if (!setup) {
    setup = std::make_unique<Setup>();
    std::mt19937_64 rng(100);
    machine::MachineOptions o;
    o.width = 8;
    for (std::vector<float>* v : {&o.a, &o.b}) {
      v->resize(64);
      for (float& e : *v) e = rng() % 8 == 0 ? 0.0f : machine_float(rng, -4, 1);
    }
    std::vector<float> x(8);
    for (float& e : x) e = rng() % 16 == 0 ? 0.0f : machine_float(rng, -3, 3);
    setup->m = machine::build_machine(o);
    setup->prompt = setup->m.prompt(x);
    setup->expected = setup->m.expected_stream(x, o.a, o.b);
    setup->compute = std::make_unique<Model>(setup->m.compiled.weights, idle_options(false));
    setup->skip = std::make_unique<Model>(setup->m.compiled.weights, idle_options(true));
    // One run of each, every logit compared bit for bit.
    const auto limit = static_cast<int64_t>(setup->expected.size()) + 4;
    const MachineRun a = run_machine(setup->m, *setup->compute, setup->prompt, limit, true);
    const MachineRun b = run_machine(setup->m, *setup->skip, setup->prompt, limit, true);
    bool equal = a.generated == b.generated && a.logits.size() == b.logits.size();
    for (size_t t = 0; equal && t < a.logits.size(); ++t) {
      equal = std::memcmp(a.logits[t].data(), b.logits[t].data(), a.logits[t].size() * sizeof(float)) == 0;
    }
    setup->bits_equal = equal ? 1 : 0;
  }
  const Model& model = skip ? *setup->skip : *setup->compute;
  const IdleSublayerCounts before = model.skipped_sublayers();
  int64_t tokens = 0;
  bool stream_ok = true;
  for (auto _ : bench) {
    const MachineRun r = run_machine(setup->m, model, setup->prompt, static_cast<int64_t>(setup->expected.size()) + 4, false);
    stream_ok = stream_ok && r.generated == setup->expected;
    tokens += static_cast<int64_t>(setup->prompt.size() + r.generated.size()) - 1;  // forwards
  }
  const IdleSublayerCounts after = model.skipped_sublayers();
  bench.SetItemsProcessed(tokens);
  bench.counters["stream_ok"] = stream_ok ? 1 : 0;
  bench.counters["bits_equal"] = setup->bits_equal;
  bench.counters["layers"] = static_cast<double>(model.config().num_hidden_layers);
  bench.counters["hidden"] = static_cast<double>(model.config().hidden_size);
  bench.counters["skipped"] =
      static_cast<double>(after.mlp - before.mlp + after.gdn - before.gdn) / static_cast<double>(std::max<int64_t>(tokens, 1));
}
#endif

}  // namespace

int main(int argc, char** argv) {
  for (size_t i = 0; i < shapes().size(); ++i) {
    benchmark::RegisterBenchmark(("BM_LayerPass/" + shapes()[i].name).c_str(), BM_LayerPass, i)
        ->ArgNames({"threads", "gdn", "path", "elem"})
        ->ArgsProduct({{1, 2}, {0, 1}, {0, 1}, {0, 1}})
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("BM_DeepStack", BM_DeepStack)
      ->ArgNames({"threads"})->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_LmHead", BM_LmHead)
      ->ArgNames({"threads"})->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_ValueHead", BM_ValueHead)
      ->ArgNames({"threads", "active", "path"})
      ->ArgsProduct({{1, 2}, {10, 51, 1024}, {0, 1}})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_Product", BM_Product)
      ->ArgNames({"matrix", "active_permille", "path"})
      ->ArgsProduct({{0, 1, 2}, {10, 20, 50, 100, 200, 300, 500, 1000}, {0, 2}})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_IdleAttention", BM_IdleAttention)
      ->ArgNames({"positions", "skip", "threads"})
      ->ArgsProduct({{10000, 100000}, {0, 1}, {1, 2}})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_IdleSublayers", BM_IdleSublayers)
      ->ArgNames({"hidden", "layers", "skip", "threads"})
      ->Args({1024, 4, 0, 1})->Args({1024, 24, 0, 1})->Args({1024, 4, 1, 1})->Args({1024, 24, 1, 1})
      ->Args({4096, 2, 0, 1})->Args({4096, 6, 0, 1})->Args({4096, 2, 1, 1})->Args({4096, 6, 1, 1})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_IdleStack", BM_IdleStack)
      ->ArgNames({"layers", "skip", "threads"})
      ->ArgsProduct({{1, 201}, {0, 1}, {1}})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
#if defined(QPU_BENCH_MACHINE)
  benchmark::RegisterBenchmark("BM_Machine", BM_Machine)
      ->ArgNames({"skip", "threads"})
      ->ArgsProduct({{0, 1}, {1}})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
#endif
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
