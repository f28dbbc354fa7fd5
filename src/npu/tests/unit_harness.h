#pragma once
// Test harness of the looped machine's units (unit_rmsnorm/matvec/rope tests): a unit
// is compiled ONCE into a checkpoint whose vocab rows are test cases (its inputs set by
// the token embedding), then every batch of cases gets a copy of those weights with its
// own embedding rows and runs on the engine or on the order-adversarial HostSim; every
// output is compared bit for bit with C's result as the NPU delivers it (0.0f + c).
// Also: the "idle = zero" check after every layer, and the golden records of run.c.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "common/float_bits.h"
#include "compiler/emit.h"
#include "compiler/host_sim.h"
#include "compiler/split_mlp.h"
#include "npu/engine_host.h"
#include "reference/generate.h"
#include "reference/trace.h"

namespace qpu::npu::unit_testing {

// A random float with a uniform binade in [emin, emax], a uniform mantissa and a random
// sign (the units' random cases).
inline float rand_float(std::mt19937_64& rng, int emin, int emax) {
  const int e = emin + static_cast<int>(rng() % static_cast<uint64_t>(emax - emin + 1));
  const float x = std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f, e);
  return (rng() & 1) ? -x : x;
}

// The order-adversarial host: a HostSim (a fresh random summation order in every dot
// product) per checkpoint it is given, seeds seed, seed + 1, ...
inline HostFactory host_sim(uint64_t seed) {
  auto next = std::make_shared<uint64_t>(seed);
  return [next](const io::Qwen35Weights& w) -> Forward {
    auto hs = std::make_shared<compiler::HostSim>(w, (*next)++);
    auto logits = std::make_shared<std::vector<float>>(static_cast<size_t>(w.config.vocab_size));
    return [hs, logits](int64_t token, std::span<float> hidden) { hs->forward(token, *logits, hidden); };
  };
}

// The v1 width budget (docs/npu-machine.md, "M2 ... The width budget"): at most 1,024
// neurons per MLP sublayer and 1,024 live values, ops sunk as late as useful.
inline compiler::ScheduleLimits budget_limits() {
  compiler::ScheduleLimits limits;
  limits.max_neurons_per_mlp = 1024;
  limits.sink = true;
  return limits;
}
inline constexpr int64_t kBudgetHidden = 1024, kBudgetNeurons = 1024;

// A synthetic llama2.c checkpoint of `cfg` (the units' and machines' "dims from the
// header only" tests): every float of binades [-6, -1] with a random sign, then the
// weight vectors `norms` (e.g. &reference::Llama2Layout::rms_ffn) drawn again from
// binades [-1, 1], in that order from `rng`.
inline reference::Llama2Checkpoint random_checkpoint(const reference::Llama2Config& cfg, std::mt19937_64& rng,
                                                     std::initializer_list<reference::Llama2Layout::Range reference::Llama2Layout::*> norms) {
  const reference::Llama2Layout lay = reference::llama2_layout(cfg);
  std::vector<float> floats(lay.total_floats);
  for (auto& f : floats) f = rand_float(rng, -6, -1);
  for (const auto norm : norms)
    for (size_t i = 0; i < (lay.*norm).count; ++i) floats[(lay.*norm).offset + i] = rand_float(rng, -1, 1);
  return reference::Llama2Checkpoint(cfg, std::move(floats));
}

struct UnitProgram {
  compiler::Program program;
  std::vector<compiler::ValueId> inputs, outputs;
};

struct UnitRun {
  int64_t cases = 0, mismatches = 0;
  std::string first_mismatch;
};

class UnitHarness {
 public:
  // max_neurons > 0: the unit on a host of that intermediate size, its wide MLP ops split
  // (compiler/split_mlp.h; program() is then the split program).
  UnitHarness(UnitProgram unit, int64_t rows, int64_t max_neurons = 0) : unit_(std::move(unit)), rows_(rows) {
    compiler::ScheduleLimits limits;
    if (max_neurons > 0) {
      unit_.program = compiler::split_wide_mlps(unit_.program, max_neurons);
      limits.max_neurons_per_mlp = max_neurons;
    }
    compiler::Interface io;
    io.inputs = unit_.inputs;
    io.outputs = unit_.outputs;
    io.vocab_size = std::max<int64_t>(rows, static_cast<int64_t>(unit_.outputs.size()));
    io.input_rows.assign(static_cast<size_t>(io.vocab_size) * io.inputs.size(), 0.0f);
    rows_ = io.vocab_size;
    compiled_ = compiler::compile(unit_.program, io, limits);
  }
  const compiler::Compiled& compiled() const { return compiled_; }
  const compiler::Program& program() const { return unit_.program; }
  int64_t layers() const { return compiled_.weights.config.num_hidden_layers; }
  int64_t hidden() const { return compiled_.weights.config.hidden_size; }
  int64_t neurons() const {
    int64_t n = 0;
    for (int64_t v : compiled_.allocation.neurons_per_layer) n += v;
    return n;
  }

  // in: count x inputs, expect: count x outputs (C's results).
  UnitRun run(const std::vector<float>& in, const std::vector<float>& expect, bool sim, uint64_t seed = 1) const {
    const size_t n_in = unit_.inputs.size(), n_out = unit_.outputs.size();
    const auto count = static_cast<int64_t>(in.size() / n_in);
    UnitRun r;
    for (int64_t first = 0; first < count; first += rows_) {
      const int64_t batch = std::min(rows_, count - first);
      auto w = std::make_shared<io::Qwen35Weights>(compiled_.weights);
      const int64_t H = w->config.hidden_size;
      for (int64_t row = 0; row < batch; ++row)
        for (size_t i = 0; i < n_in; ++i)
          w->embed_tokens[static_cast<size_t>(row * H + compiled_.allocation.dim(unit_.inputs[i]))] =
              in[static_cast<size_t>(first + row) * n_in + i];
      Forward fwd;
      if (sim) {
        auto hs = std::make_shared<compiler::HostSim>(*w, seed + static_cast<uint64_t>(first));
        auto logits = std::make_shared<std::vector<float>>(static_cast<size_t>(w->config.vocab_size));
        fwd = [w, hs, logits](int64_t token, std::span<float> hidden) { hs->forward(token, *logits, hidden); };
      } else {
        fwd = engine_host()(*w);
      }
      std::vector<float> hidden(static_cast<size_t>(H));
      for (int64_t row = 0; row < batch; ++row) {
        fwd(row, hidden);
        const int64_t c = first + row;
        ++r.cases;
        for (size_t o = 0; o < n_out; ++o) {
          const float got = hidden[static_cast<size_t>(compiled_.allocation.dim(unit_.outputs[o]))];
          const float want = 0.0f + expect[static_cast<size_t>(c) * n_out + o];
          if (float_bits(got) != float_bits(want)) {
            if (r.mismatches == 0)
              r.first_mismatch = "case " + std::to_string(c) + " output " + std::to_string(o) + ": expected " +
                                 describe_float(want) + " got " + describe_float(got);
            ++r.mismatches;
            break;
          }
        }
      }
    }
    return r;
  }

  // The engine's outputs for count x inputs (count x outputs), for tests that chain units
  // (one unit's outputs are the next one's inputs).
  std::vector<float> outputs(const std::vector<float>& in) const {
    const size_t n_in = unit_.inputs.size(), n_out = unit_.outputs.size();
    const auto count = static_cast<int64_t>(in.size() / n_in);
    std::vector<float> out;
    for (int64_t first = 0; first < count; first += rows_) {
      const int64_t batch = std::min(rows_, count - first);
      io::Qwen35Weights w = compiled_.weights;
      const int64_t H = w.config.hidden_size;
      for (int64_t row = 0; row < batch; ++row)
        for (size_t i = 0; i < n_in; ++i)
          w.embed_tokens[static_cast<size_t>(row * H + compiled_.allocation.dim(unit_.inputs[i]))] =
              in[static_cast<size_t>(first + row) * n_in + i];
      const Forward fwd = engine_host()(w);
      std::vector<float> hidden(static_cast<size_t>(H));
      for (int64_t row = 0; row < batch; ++row) {
        fwd(row, hidden);
        for (size_t o = 0; o < n_out; ++o)
          out.push_back(hidden[static_cast<size_t>(compiled_.allocation.dim(unit_.outputs[o]))]);
      }
    }
    return out;
  }

  // With every input 0: is every value of the program +-0 after every `step`-th layer
  // and the last one (engine)? Returns the first value found nonzero, or "".
  std::string idle_nonzero(int64_t step = 1) const {
    const int64_t L = layers();
    for (int64_t l = std::min(step, L); l <= L; l = (l == L) ? L + 1 : std::min(L, l + step)) {
      io::Qwen35Weights w = compiled_.weights;
      w.layers.resize(static_cast<size_t>(l));
      w.config.num_hidden_layers = l;
      w.config.layer_types.resize(static_cast<size_t>(l));
      const Forward fwd = engine_host()(w);
      std::vector<float> hidden(static_cast<size_t>(w.config.hidden_size));
      fwd(0, hidden);
      for (int64_t v = 0; v < unit_.program.num_values(); ++v) {
        const float x = hidden[static_cast<size_t>(compiled_.allocation.dim(static_cast<compiler::ValueId>(v)))];
        if (x != 0.0f)
          return "value '" + unit_.program.name(static_cast<compiler::ValueId>(v)) + "' = " + describe_float(x) +
                 " after layer " + std::to_string(l);
      }
    }
    return "";
  }

 private:
  UnitProgram unit_;
  int64_t rows_;
  compiler::Compiled compiled_;
};

// Every record of a greedy run of stories260K (reference/trace.h), by (kind, pos, layer).
// Per-head records (att_out) are concatenated in head order under head -1; every
// per-head record (att_scaled, att_max, att_exp, ...) is also kept by head.
struct Golden {
  std::map<std::tuple<reference::TraceKind, int, int>, std::vector<float>> records;
  std::map<std::tuple<reference::TraceKind, int, int, int>, std::vector<float>> heads;
  int positions = 0;
  const std::vector<float>& at(reference::TraceKind k, int pos, int layer) const { return records.at({k, pos, layer}); }
  const std::vector<float>& head(reference::TraceKind k, int pos, int layer, int h) const {
    return heads.at({k, pos, layer, h});
  }
};

class GoldenCollector final : public reference::TraceObserver {
 public:
  explicit GoldenCollector(Golden& g) : g_(g) {}
  void record(reference::TraceKind kind, int pos, int layer, int head, std::span<const float> values) override {
    if (head >= 0) g_.heads[{kind, pos, layer, head}].assign(values.begin(), values.end());
    if (head >= 0 && kind != reference::TraceKind::att_out) return;  // only xb's pieces are concatenated
    auto& r = g_.records[{kind, pos, layer}];
    if (head <= 0) r.clear();
    r.insert(r.end(), values.begin(), values.end());
  }

 private:
  Golden& g_;
};

inline std::string model_dir() { return std::string(QPU_SHARED_DIR) + "/models/stories260K/"; }

inline const reference::Llama2Checkpoint& stories260k() {
  static const reference::Llama2Checkpoint c = reference::load_llama2_checkpoint(model_dir() + "stories260K.bin");
  return c;
}

// The greedy story of "Once upon a time" over `positions` positions (>= 64).
inline const Golden& golden(int positions = 96) {
  static const Golden g = [positions] {
    Golden out;
    const auto tok = reference::Tokenizer::load(model_dir() + "tok512.bin", 512);
    reference::Transformer tf(stories260k());
    reference::Sampler sampler(512, 0.0f, 0.9f, 42);
    GoldenCollector c(out);
    reference::GenerateCallbacks cb;
    cb.trace = &c;
    out.positions = reference::generate(tf, tok, sampler, "Once upon a time", positions, false, cb).positions;
    return out;
  }();
  return g;
}

}  // namespace qpu::npu::unit_testing
