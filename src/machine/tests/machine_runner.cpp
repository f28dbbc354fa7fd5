#include "machine_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "compiler/host_sim.h"
#include "engine/model.h"

namespace qpu::machine::testing {

Hosts engine_hosts(io::Qwen35Weights weights) { return engine_hosts(engine::Model(std::move(weights))); }

Hosts engine_hosts(engine::Model m) { return engine_hosts(std::make_shared<const engine::Model>(std::move(m)), {}); }

Hosts engine_hosts(std::shared_ptr<const engine::Model> model, engine::SublayerTap tap) {
  return [model, tap]() -> Step {
    auto state = std::make_shared<engine::State>(model->new_state());
    return [model, state, tap](int64_t token, std::span<float> logits, std::span<float> hidden) {
      model->forward(token, *state, logits, hidden, tap);
    };
  };
}

Hosts sim_hosts(const io::Qwen35Weights& weights, uint64_t seed) {
  // The logits from the hidden state: every LM head row of the machine has at most two
  // nonzeros, on features that are 0, 1 or 2^-7 (exact in any order), and the final norm
  // passes the residual through unchanged (compiler/emit.h); HostSim's dense shuffled
  // 23K-row head would cost seconds per token.
  struct Head {
    std::vector<std::vector<std::pair<int64_t, float>>> rows;
  };
  auto head = std::make_shared<Head>();
  const int64_t H = weights.config.hidden_size;
  const auto& out = weights.output_weights();
  head->rows.resize(static_cast<size_t>(weights.config.vocab_size));
  for (int64_t r = 0; r < weights.config.vocab_size; ++r)
    for (int64_t d = 0; d < H; ++d)
      if (const float c = out[static_cast<size_t>(r * H + d)]; c != 0.0f) head->rows[static_cast<size_t>(r)].push_back({d, c});
  auto next_seed = std::make_shared<uint64_t>(seed);
  return [&weights, next_seed, head]() -> Step {
    auto sim = std::make_shared<compiler::HostSim>(weights, (*next_seed)++);
    return [sim, head](int64_t token, std::span<float> logits, std::span<float> hidden) {
      sim->forward(token, {}, hidden);
      for (size_t r = 0; r < logits.size(); ++r) {
        float s = 0.0f;
        for (const auto& [d, c] : head->rows[r]) s += c * hidden[static_cast<size_t>(d)];
        logits[r] = s;
      }
    };
  };
}

namespace {

// Argmax (first maximum, as torch and the host's greedy pick) and whether the winner is
// the only score above 2^20 and exactly a signature's: 2^20 + 2^10 (control tokens, the
// zero token) or 2^20 + 2^3 (a value token: emit_features' mantissa one-hot is 2^-7).
int64_t argmax(const std::vector<float>& logits, bool& exact) {
  const auto it = std::max_element(logits.begin(), logits.end());
  exact = (*it == 0x1p20f + 0x1p10f || *it == 0x1p20f + 0x1p3f) &&
          std::count_if(logits.begin(), logits.end(), [](float v) { return v > 0x1p20f; }) == 1;
  if (!exact && std::getenv("QPU_MACHINE_DEBUG"))
    std::fprintf(stderr, "argmax %lld: max %a, %lld ties\n", static_cast<long long>(it - logits.begin()),
                 static_cast<double>(*it), static_cast<long long>(std::count(logits.begin(), logits.end(), *it)));
  return it - logits.begin();
}

}  // namespace

Run run_greedy(const AssembledMachine& m, const std::vector<int64_t>& prompt, const Step& step, int64_t max_new) {
  const auto& cfg = m.compiled.weights.config;
  std::vector<float> logits(static_cast<size_t>(cfg.vocab_size)), hidden(static_cast<size_t>(cfg.hidden_size));
  std::vector<bool> rail(hidden.size(), false);
  for (int64_t d : m.compiled.allocation.rail_dims) rail[static_cast<size_t>(d)] = true;
  Run r;
  bool exact = false;
  for (int64_t t : prompt) {
    step(t, logits, hidden);
    r.prompt_argmax.push_back(argmax(logits, exact));
  }
  int64_t next = r.prompt_argmax.back();
  r.ambiguous += exact ? 0 : 1;
  while (static_cast<int64_t>(r.generated.size()) < max_new) {
    r.generated.push_back(next);
    if (next == m.done()) break;
    const auto start = std::chrono::steady_clock::now();
    step(next, logits, hidden);
    r.generate_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++r.generate_forwards;
    if (!m.control.contains(next)) {
      int64_t nonzero = 0;
      for (size_t d = 0; d < hidden.size(); ++d) nonzero += !rail[d] && hidden[d] != 0.0f ? 1 : 0;
      r.max_nonzero_on_value_cycles = std::max(r.max_nonzero_on_value_cycles, nonzero);
    }
    next = argmax(logits, exact);
    r.ambiguous += exact ? 0 : 1;
  }
  return r;
}

void print_shape(const char* what, const AssembledMachine& m) {
  const auto& c = m.compiled.weights.config;
  std::printf("%s: layers %lld, hidden %lld, intermediate %lld, GDN heads per layer %lld, vocab %lld\n", what,
              static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.intermediate_size), static_cast<long long>(m.compiled.allocation.num_gdn_heads),
              static_cast<long long>(c.vocab_size));
}

std::vector<float> decode_stream(const AssembledMachine& m, const std::vector<int64_t>& g) {
  std::vector<float> out;
  for (size_t i = 0; i + 2 < g.size(); i += 4)
    out.push_back(m.decode(g[i], g[i + 1], g[i + 2]));
  return out;
}

float random_float(std::mt19937_64& rng, int lo, int hi) {
  const float f = std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f,
                             lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo)));
  return rng() % 2 ? -f : f;
}

MachineOptions random_m1_options(std::mt19937_64& rng) {
  MachineOptions o;
  o.width = 8;
  for (int k = 0; k < 64; ++k) {
    o.a.push_back(k % 9 == 4 ? 0.0f : random_float(rng, -4, 1));
    o.b.push_back(k % 11 == 3 ? 0.0f : random_float(rng, -4, 1));
  }
  return o;
}

}  // namespace qpu::machine::testing
