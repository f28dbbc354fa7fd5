#pragma once
// Runs a compiled machine the way a host does: the prompt one token per forward, then
// the host's greedy argmax fed back one token per forward until DONE (test helper).
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "engine/model.h"
#include "machine/testing/machine.h"

namespace qpu::machine::testing {

// One forward: consumes a token, writes the logits (and, if not empty, the residual
// stream after the last layer).
using Step = std::function<void(int64_t token, std::span<float> logits, std::span<float> hidden)>;

// A fresh host (empty cache) per call: one engine::Model shared by all, or a HostSim
// with a new summation-order seed each time (keeps a reference to `weights`).
using Hosts = std::function<Step()>;
Hosts engine_hosts(io::Qwen35Weights weights);  // pass a moved-from copy to save memory
Hosts engine_hosts(engine::Model model);
// Hosts on a shared model whose forwards call `tap` after every sublayer (may be empty).
Hosts engine_hosts(std::shared_ptr<const engine::Model> model, engine::SublayerTap tap);
Hosts sim_hosts(const io::Qwen35Weights& weights, uint64_t seed);

struct Run {
  std::vector<int64_t> generated;
  std::vector<int64_t> prompt_argmax;  // the host's argmax after each prompt token
  int64_t ambiguous = 0;    // cycles whose maximum is not 2^20 + 2^10 or not unique
  int64_t max_nonzero_on_value_cycles = 0;  // nonzero non-rail hidden dims when a generated value token is input
  double generate_seconds = 0;  // wall time of the forwards of generated tokens (with the test's own checks)
  int64_t generate_forwards = 0;
};

Run run_greedy(const AssembledMachine& m, const std::vector<int64_t>& prompt, const Step& step, int64_t max_new);

// Prints "<what>: layers L, hidden H, intermediate I, GDN heads per layer G, vocab V".
void print_shape(const char* what, const AssembledMachine& m);

// The floats decoded from a generated stream (groups p0 p1 p2 control): y then z.
std::vector<float> decode_stream(const AssembledMachine& m, const std::vector<int64_t>& generated);

// A float with a random 24-bit significand in binades [lo, hi), random sign.
float random_float(std::mt19937_64& rng, int lo, int hi);

// The M1 machine's options at w = 8 with random matrices: entries in [2^-4, 2^1), A's
// entries k = 4 mod 9 and B's k = 3 mod 11 exactly 0.
MachineOptions random_m1_options(std::mt19937_64& rng);

}  // namespace qpu::machine::testing
