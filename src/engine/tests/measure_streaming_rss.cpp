// Peak memory of compiling a machine-shaped program into an engine model, dense
// (compiler::compile's whole checkpoint, then engine::Model) or streamed
// (npu::emit_model: one dense layer at a time). Not a test: run it under
// /usr/bin/time -v, e.g.
//   measure_streaming_rss dense 120
//   measure_streaming_rss stream 120
// It prints the sizes, the model's storage, a checksum of the logits of every vocab
// token (the same in both modes) and its own peak RSS (getrusage).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/float_bits.h"
#include "compiler/emit.h"
#include "engine/model.h"
#include "npu/engine_host.h"
#include "streaming_program.h"

int main(int argc, char** argv) {
  using namespace qpu;
  if (argc != 3 || (std::strcmp(argv[1], "dense") != 0 && std::strcmp(argv[1], "stream") != 0)) {
    std::fprintf(stderr, "usage: %s dense|stream LAYERS\n", argv[0]);
    return 2;
  }
  const bool dense = std::strcmp(argv[1], "dense") == 0;
  engine::testing::StreamingProgramSize size;
  size.layers = std::stoi(argv[2]);
  size.values = 1000;
  size.memories = 16;
  size.data = 8;
  size.key_dim = 16;
  size.value_dim = 64;
  const auto sp = engine::testing::streaming_program(size, 1);
  const auto start = std::chrono::steady_clock::now();
  sp.program.validate();
  const compiler::Schedule schedule = compiler::schedule(sp.program, sp.limits);
  const compiler::Allocation alloc = compiler::allocate(sp.program, schedule);
  const auto t_schedule = std::chrono::steady_clock::now();
  engine::Model model = dense ? engine::Model(compiler::emit(sp.program, schedule, alloc, sp.io, sp.options))
                              : npu::emit_model(sp.program, schedule, alloc, sp.io, sp.options);
  const auto t_model = std::chrono::steady_clock::now();
  const io::Qwen35Config& c = model.config();
  const int64_t conv = c.linear_num_key_heads * (2 * c.linear_key_head_dim + c.linear_value_head_dim);
  const int64_t vd = c.linear_num_value_heads * c.linear_value_head_dim;
  const int64_t layer_floats = (conv + vd + 2) * c.hidden_size + vd * c.hidden_size + 3 * c.intermediate_size * c.hidden_size;
  uint64_t hash = 1469598103934665603ull;
  engine::State state = model.new_state();
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  for (int64_t t = 0; t < c.vocab_size; ++t) {
    model.forward(t, state, logits);
    for (float v : logits) hash = (hash ^ float_bits(v)) * 1099511628211ull;
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::printf("%s: %lld layers, hidden %lld, intermediate %lld, GDN %lld heads %lldx%lld\n", argv[1],
              static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.intermediate_size), static_cast<long long>(c.linear_num_key_heads),
              static_cast<long long>(c.linear_key_head_dim), static_cast<long long>(c.linear_value_head_dim));
  std::printf("dense layer %.1f MB (all layers %.2f GB); engine weights %.1f MB\n",
              static_cast<double>(layer_floats) * 4e-6, static_cast<double>(layer_floats * c.num_hidden_layers) * 4e-9,
              static_cast<double>(model.storage_stats().bytes) * 1e-6);
  std::printf("schedule+allocate %.2f s, emit+pack %.2f s; logits checksum %016llx; peak RSS %.1f MB\n",
              seconds(start, t_schedule), seconds(t_schedule, t_model), static_cast<unsigned long long>(hash),
              static_cast<double>(ru.ru_maxrss) / 1024.0);
  return 0;
}
