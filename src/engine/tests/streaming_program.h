#pragma once
// A compiled-machine-shaped program for the streaming construction tests and the peak
// RSS measurement (measure_streaming_rss.cpp): per host layer, a Gated DeltaNet mixer
// full of GDN memories (16 heads of 16 x 64 at full size) and an MLP of ~1,000 neurons
// over ~1,000 residual values, chained so that every layer has work. The values stay
// bounded (each neuron replaces its value by a contraction of others), so the engine
// runs on finite numbers whatever the depth.
#include <cstdint>
#include <random>
#include <string>

#include "compiler/emit.h"

namespace qpu::engine::testing {

struct StreamingProgramSize {
  int layers = 6;
  int values = 60;        // MLP neurons per layer = values written per layer
  int memories = 4;       // GDN memories per mixer (heads)
  int data = 4;           // data values per memory
  int64_t key_dim = 16;
  int64_t value_dim = 16;
};

struct StreamingProgram {
  compiler::Program program;
  compiler::Interface io;
  compiler::ScheduleLimits limits;
  compiler::EmitOptions options;
  std::vector<compiler::ValueId> x;  // the values the MLPs write
};

inline StreamingProgram streaming_program(const StreamingProgramSize& s, uint64_t seed) {
  using compiler::kOne;
  using compiler::Lin;
  using compiler::Neuron;
  using compiler::ValueId;
  std::mt19937_64 rng(seed);
  StreamingProgram r;
  compiler::Program& p = r.program;
  const ValueId in = p.value("in"), flag = p.value("flag");
  const auto bits = p.values("bit", 4);
  r.x = p.values("x", s.values);
  const auto& x = r.x;
  const auto y = p.values("y", s.memories * s.data);
  const auto X = static_cast<size_t>(s.values);
  for (int l = 0; l < s.layers; ++l) {
    // The mixer: memory g stores x values (written by the previous MLP) and reads into y.
    for (int g = 0; g < s.memories; ++g) {
      compiler::GdnMemory m;
      m.key_bits = {bits[static_cast<size_t>(g) % 4], bits[static_cast<size_t>(g + 1) % 4]};
      m.query_bits = {bits[static_cast<size_t>(g + 2) % 4], bits[static_cast<size_t>(g + 3) % 4]};
      m.write_flag = flag;
      m.read_flag = flag;
      for (int d = 0; d < s.data; ++d) {
        m.data.push_back(x[(static_cast<size_t>(l * 61 + g * s.data + d)) % X]);
        m.out.push_back(y[static_cast<size_t>(g * s.data + d)]);
      }
      p.gdn_memory("mem" + std::to_string(l) + "." + std::to_string(g), m);
    }
    // The MLP: x_j = 0.5 x_a - 0.25 x_b + 0.125 y_c + 2^-4 in (replacing x_j).
    std::vector<Neuron> neurons;
    for (size_t j = 0; j < X; ++j) {
      const ValueId a = x[(j + 1 + rng() % (X - 1)) % X], b = x[(j + 1 + rng() % (X - 1)) % X];
      const ValueId c = y[rng() % y.size()];
      Lin up{{{x[j], -1.0f / 128}, {a, 0.5f / 128}, {b, -0.25f / 128}, {c, 0.125f / 128}, {in, 0.0625f / 128}}};
      neurons.push_back(Neuron{Lin{{{kOne, 128.0f}}}, up, {{x[j], 1.0f}}});
    }
    p.mlp("mlp" + std::to_string(l), std::move(neurons));
  }
  r.io.inputs = {in, flag, bits[0], bits[1], bits[2], bits[3]};
  r.io.outputs = {x[0], x[1], y[0], y[1]};
  r.io.vocab_size = 16;
  for (int64_t t = 0; t < r.io.vocab_size; ++t) {
    r.io.input_rows.push_back(static_cast<float>(t) - 7.5f);  // in
    r.io.input_rows.push_back(t % 3 == 0 ? 0.0f : 1.0f);       // flag
    for (int i = 0; i < 4; ++i) r.io.input_rows.push_back(static_cast<float>((t >> i) & 1));
  }
  r.limits.max_neurons_per_mlp = s.values;
  r.limits.max_gdn_memories_per_mixer = s.memories;
  r.options.gdn_key_head_dim = s.key_dim;
  r.options.gdn_value_head_dim = s.value_dim;
  return r;
}

}  // namespace qpu::engine::testing
