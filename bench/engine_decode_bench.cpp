// Engine decode speed. `engine_decode_bench [--checkpoint DIR] [--threads N]
// [--warmup N] [--steps N] [--full-load] [benchmark flags]`
//
// The checkpoint is loaded as `qpu run` and `qpu generate` load it (engine::load_model:
// one layer in fp32 at a time); --full-load reads every tensor into fp32 first
// (io::load_qwen35) and packs from that copy, for comparing the two loads' peak memory
// (run under /usr/bin/time -v) and time (printed).
//
//   BM_Decode         one forward per iteration on DIR (a real Qwen3.5 checkpoint),
//                     after --warmup prompt tokens, --steps iterations, greedy
//                     feedback; items/s = decode tokens/s. Skipped without --checkpoint.
//   BM_MatVec/<fmt>   one 3584 x 1024 matrix-vector product (the MLP shape of
//                     Qwen3.5-0.8B) per iteration, fp32, bf16 and CSR (5% nonzeros).
//   BM_GreedyPick/vocab:V/kernel:K   the host's greedy pick over V logits shaped like a
//                     machine cycle's (one winner at 2^20 + 2^10, the rest at or below
//                     2^20): K = 0 the scalar passes `qpu story` used (std::max_element,
//                     then a count of logits above 2^20), K = 1 elementwise's argmax
//                     kernel (both in one vector pass). V = 26,352 is the 256-position
//                     token machine's vocabulary, 248,320 Qwen3.5's.
//
// python/bench_transformers.py runs BM_Decode next to transformers on the same
// checkpoint with the same protocol (docs/results.md).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/dot.h"
#include "engine/load_model.h"
#include "engine/elementwise.h"
#include "engine/model.h"
#include "engine/packed_matrix.h"
#include "engine/sampler.h"
#include "io/qwen35_weights.h"

namespace {

using namespace qpu::engine;

std::string g_checkpoint;
int g_warmup = 16;
bool g_allow_bf16 = true;
bool g_full_load = false;
int g_steps = 64;

void BM_Decode(benchmark::State& bench) {
  if (g_checkpoint.empty()) {
    bench.SkipWithError("no --checkpoint given");
    return;
  }
  static std::unique_ptr<Model> model;  // loaded once (seconds), shared by repetitions
  if (!model) {
    ModelOptions options;
    options.allow_bf16 = g_allow_bf16;
    options.build_threads = omp_get_max_threads();
    const auto start = std::chrono::steady_clock::now();
    model = g_full_load ? std::make_unique<Model>(qpu::io::load_qwen35(g_checkpoint), options)
                        : std::make_unique<Model>(qpu::engine::load_model(g_checkpoint, options));
    std::fprintf(stderr, "%s load: %.2f s\n", g_full_load ? "full" : "streamed",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const int64_t vocab = model->config().vocab_size;
  State state = model->new_state();
  std::vector<float> logits(static_cast<size_t>(vocab));
  int64_t token = 0;
  for (int i = 0; i < g_warmup; ++i) {  // a fixed pseudo-prompt
    token = (i * 7919 + 13) % vocab;
    model->forward(token, state, logits);
  }
  token = argmax(logits);
  for (auto _ : bench) {
    model->forward(token, state, logits);
    token = argmax(logits);
  }
  bench.SetItemsProcessed(bench.iterations());
  const StorageStats stats = model->storage_stats();
  bench.counters["weight_MiB"] = static_cast<double>(stats.bytes) / 1048576.0;
  bench.counters["threads"] = omp_get_max_threads();
  bench.SetLabel(std::string("kernels=") + dot::isa_name(dot::active_isa()));
}

void BM_MatVec(benchmark::State& bench) {
  const auto format = static_cast<PackedMatrix::Format>(bench.range(0));
  const int64_t rows = 3584, cols = 1024;
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 0.03f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  for (float& v : w) {
    v = normal(gen);
    if (format == PackedMatrix::Format::SparseCsr && unit(gen) > 0.05f) v = 0.0f;
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bits &= 0xffff0000u;  // bf16 numbers, so every format can hold them
    std::memcpy(&v, &bits, 4);
  }
  for (float& v : x) v = normal(gen);
  PackedMatrix::Options options;
  options.force = format;
  const PackedMatrix m = PackedMatrix::pack(w, rows, cols, options, "bench");
  for (auto _ : bench) {
    m.multiply(x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  bench.SetBytesProcessed(bench.iterations() * static_cast<int64_t>(m.bytes()));
  bench.SetLabel(format_name(format));
}

void BM_GreedyPick(benchmark::State& bench) {
  const auto vocab = static_cast<size_t>(bench.range(0));
  const bool kernel = bench.range(1) != 0;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> below(-0x1p20f, 0x1p20f);
  std::vector<float> logits(vocab);
  for (float& v : logits) v = below(gen);
  logits[vocab * 3 / 5] = 0x1p20f + 0x1p10f;
  int64_t picked = 0, above = 0;
  for (auto _ : bench) {
    if (kernel) {
      picked = elementwise::kernels().argmax(logits.data(), static_cast<int64_t>(vocab), 0x1p20f, &above);
    } else {
      picked = std::max_element(logits.begin(), logits.end()) - logits.begin();
      above = std::count_if(logits.begin(), logits.end(), [](float v) { return v > 0x1p20f; });
    }
    benchmark::DoNotOptimize(picked);
    benchmark::DoNotOptimize(above);
  }
  if (picked != static_cast<int64_t>(vocab * 3 / 5) || above != 1) bench.SkipWithError("wrong pick");
  bench.SetLabel(kernel ? std::string("kernel ") + dot::isa_name(dot::active_isa()) : "scalar passes");
}

}  // namespace

BENCHMARK(BM_GreedyPick)
    ->ArgNames({"vocab", "kernel"})
    ->ArgsProduct({{26352, 248320}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_MatVec)
    ->Arg(static_cast<int>(PackedMatrix::Format::DenseF32))
    ->Arg(static_cast<int>(PackedMatrix::Format::DenseBf16))
    ->Arg(static_cast<int>(PackedMatrix::Format::SparseCsr))
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

int main(int argc, char** argv) {
  // Our flags first; the rest go to Google Benchmark.
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--checkpoint") g_checkpoint = value("--checkpoint");
    else if (a == "--threads") omp_set_num_threads(std::atoi(value("--threads")));
    else if (a == "--warmup") g_warmup = std::atoi(value("--warmup"));
    else if (a == "--steps") g_steps = std::atoi(value("--steps"));
    else if (a == "--fp32-weights") g_allow_bf16 = false;
    else if (a == "--full-load") g_full_load = true;
    else rest.push_back(argv[i]);
  }
  // The decode benchmark runs exactly --steps tokens (the KV cache grows with each).
  benchmark::RegisterBenchmark("BM_Decode", BM_Decode)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->Iterations(g_steps);
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
