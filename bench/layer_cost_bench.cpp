// What one host layer-pass costs for NPU-shaped layers (docs/layer-cost.md).
// `layer_cost_bench [benchmark flags]`; every checkpoint is synthetic and built in memory.
//
//   BM_LayerPass/<shape>/threads:T/gdn:G   one forward per iteration through a stack of
//       identical layers of <shape>; us_per_layer = wall time / layers (the embedding
//       lookup, final norm and a 64-row CSR lm_head are included, amortized over the
//       stack). G: 0 = dense GDN recurrence, 1 = skip exact zeros (the default).
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
//   BM_DeepStack/threads:T   4,000 narrow128_256 layers: items/s = tokens/s.
//   BM_LmHead/threads:T      the looped machine's output matrix: 37,400 x 1024 CSR rows
//                            with 4 nonzeros (value-part token scoring, npu-machine.md 3.5).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/packed_matrix.h"
#include "io/qwen35_weights.h"

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

io::Qwen35Weights make_weights(const Shape& s, uint64_t seed) {
  Rng rng(seed);
  io::Qwen35Weights w;
  io::Qwen35Config& c = w.config;
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

  const int64_t h = s.hidden, key_dim = s.k_heads * s.k_dim, value_dim = s.v_heads * s.v_dim;
  const int64_t conv_dim = 2 * key_dim + value_dim;
  auto zeros = [](int64_t n) { return std::vector<float>(static_cast<size_t>(n), 0.0f); };
  w.embed_tokens.resize(static_cast<size_t>(kVocab * h));
  for (float& v : w.embed_tokens) v = rng.value(1.0f);  // dense, nonzero: every dim is live
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
    w.layers.push_back(std::move(lw));
  }
  return w;
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = [] {
    std::vector<Shape> v;
    Shape looped{"looped1024", 1024, 1536, 4, 128, 8, 64, Mixer::OneHotGdn, false, 24};
    v.push_back(looped);
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
}

ModelOptions options_for(int64_t gdn) {
  ModelOptions o;
  o.gdn = gdn == 0 ? GdnRecurrence::Dense : GdnRecurrence::SkipZeros;
  return o;
}

void BM_LayerPass(benchmark::State& bench, size_t shape_index) {
  omp_set_num_threads(static_cast<int>(bench.range(0)));
  const Shape& s = shapes()[shape_index];
  static std::map<std::pair<size_t, int64_t>, std::unique_ptr<Model>> models;
  auto& model = models[{shape_index, bench.range(1)}];
  if (!model) model = std::make_unique<Model>(make_weights(s, 1000 + shape_index), options_for(bench.range(1)));
  run_stack(bench, *model, s.layers);
}

void BM_DeepStack(benchmark::State& bench) {
  omp_set_num_threads(static_cast<int>(bench.range(0)));
  static std::unique_ptr<Model> model;  // ~2 GB of dense input while building, ~0.2 GB packed
  Shape s = shapes()[1];
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

}  // namespace

int main(int argc, char** argv) {
  for (size_t i = 0; i < shapes().size(); ++i) {
    benchmark::RegisterBenchmark(("BM_LayerPass/" + shapes()[i].name).c_str(), BM_LayerPass, i)
        ->ArgNames({"threads", "gdn"})
        ->ArgsProduct({{1, 2}, {0, 1}})
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("BM_DeepStack", BM_DeepStack)
      ->ArgNames({"threads"})->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_LmHead", BM_LmHead)
      ->ArgNames({"threads"})->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
