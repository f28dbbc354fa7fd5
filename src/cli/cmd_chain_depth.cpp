// `qpu chain-depth MODEL`: the measured floor on the NPU's depth. Runs run.c's forward
// pass (greedy, from BOS) on the shadow type of npu/chain_depth.h and prints, per
// position, the longest chain of dependent C roundings to any logit and the same chain
// in NPU MLP sublayers under the primitives' costs; checks the shadow's logits against
// the reference's bit for bit on every position.
#include <cstdio>
#include <cstring>

#include "cli/command_registry.h"
#include "common/error.h"
#include "npu/chain_depth.h"
#include "reference/transformer.h"

namespace {

struct Options {
  std::string model;
  int steps = 256;
  double expf_cost = 150;
  int every = 16;
};

int run(const Options& o) {
  const auto ckpt = qpu::reference::load_llama2_checkpoint(o.model);
  if (o.steps < 1 || o.steps > ckpt.config().seq_len)
    qpu::fail("chain-depth: --steps {} outside [1, seq_len = {}]", o.steps, ckpt.config().seq_len);
  qpu::npu::ChainCosts costs;
  costs.expf = o.expf_cost;
  qpu::npu::ChainShadow shadow(ckpt, costs);
  qpu::reference::Transformer ref(ckpt);
  std::vector<float> logits;
  int token = 1;  // BOS, as run.c without a prompt
  double sum_c = 0, sum_s = 0;
  std::printf("%6s %6s %14s %16s\n", "pos", "token", "C roundings", "NPU sublayers");
  for (int pos = 0; pos < o.steps; ++pos) {
    const qpu::npu::ChainDepth d = shadow.forward(token, pos, logits);
    const auto expect = ref.forward(token, pos);
    if (std::memcmp(expect.data(), logits.data(), logits.size() * sizeof(float)) != 0)
      qpu::fail("chain-depth: the shadow's logits differ from the reference at position {}", pos);
    sum_c += d.c_roundings;
    sum_s += d.sublayers;
    if (pos % o.every == 0 || pos == o.steps - 1) std::printf("%6d %6d %14d %16.1f\n", pos, token, d.c_roundings, d.sublayers);
    int best = 0;  // greedy: first maximum wins
    for (size_t i = 1; i < logits.size(); ++i)
      if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int>(i);
    token = best;
  }
  std::printf("mean over %d positions: %.1f C roundings, %.1f NPU sublayers (expf = %.0f sublayers); "
              "logits identical to the reference at every position\n",
              o.steps, sum_c / o.steps, sum_s / o.steps, o.expf_cost);
  return 0;
}

qpu::cli::Runner setup(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("model", o->model, "llama2.c checkpoint (e.g. stories260K.bin)")->required();
  app.add_option("-n,--steps", o->steps, "positions to run (greedy from BOS)")->capture_default_str();
  app.add_option("--expf-cost", o->expf_cost, "NPU sublayers of one expf")->capture_default_str();
  app.add_option("--every", o->every, "print every N-th position")->capture_default_str()->check(CLI::PositiveNumber);
  return [o] { return run(*o); };
}

qpu::cli::Registration reg{"chain-depth", "Measure the chain of dependent roundings of a llama2.c forward pass", setup};

}  // namespace
