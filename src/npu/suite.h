#pragma once
// The conformance suite: every primitive compiled into a tiny Qwen3.5 checkpoint
// whose token embedding rows are test cases (many lanes per row), run by a host
// (the engine, transformers or the order-adversarial HostSim), compared bit for bit
// with the same operation in C.
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "compiler/emit.h"
#include "compiler/ir.h"
#include "npu/primitives.h"

namespace qpu::npu {

// One host forward step on a compiled checkpoint: token -> residual after the last layer.
using Forward = std::function<void(int64_t token, std::span<float> hidden)>;
// Makes a fresh host (engine model, simulator, ...) for compiled weights.
using HostFactory = std::function<Forward(const io::Qwen35Weights&)>;

struct PrimitiveSpec {
  std::string name;
  int inputs = 0;   // per case
  int outputs = 0;  // per case
  // Appends one lane's ops; returns its outputs.
  std::function<std::vector<compiler::ValueId>(compiler::Program&, const std::vector<compiler::ValueId>&)> build;
  // The C operation: in[inputs] -> out[outputs].
  std::function<void(const float* in, float* out)> reference;
  // A random case inside the primitive's window.
  std::function<void(std::mt19937_64&, float* in)> random_case;
  // Edge cases (zeros, window edges, ties...), each `inputs` floats.
  std::vector<std::vector<float>> edge_cases;
  // The short slices (default tests) run cases / short_divisor random cases: the
  // division and sqrt checkpoints are ~40 layers deep, 2 ms per case on the engine.
  int64_t short_divisor = 1;
};

// Every primitive of the suite, built with fixed seeds.
std::vector<PrimitiveSpec> all_primitives();

// The suite's name for greater on a window: "greater_<lo>_<hi>" (suite.cpp lists the
// windows it checks); greater_spec_names() adds "greater_const" (constant_window).
std::string greater_spec_name(npu::GreaterWindow w);
std::vector<npu::GreaterWindow> greater_suite_windows();
std::vector<std::string> greater_spec_names();

struct SuiteResult {
  std::string name;
  int64_t cases = 0;
  int64_t mismatches = 0;
  int64_t layers = 0, sublayers = 0, neurons_per_lane = 0, values_per_lane = 0;
  std::string first_mismatch;  // description of the first bad case
};

struct SuiteOptions {
  int64_t cases = 1 << 20;  // random cases (edge cases come on top)
  int64_t rows = 1024;      // vocab rows per checkpoint
  int64_t max_hidden = 512; // lanes are packed until the hidden size reaches this
  uint64_t seed = 1;
};

// Compiles lanes of `spec` into checkpoints, runs every case, compares with C.
SuiteResult run_primitive(const PrimitiveSpec& spec, const HostFactory& host, const SuiteOptions& options);

// The checkpoint of one batch, exposed for cross-checks with other hosts: `inputs`
// holds rows * lanes cases. Returns the weights and, per case, the residual dims of
// its outputs (and the outputs' logit indices are the same order).
struct Batch {
  compiler::Compiled compiled;
  int64_t lanes = 0;
  std::vector<int64_t> output_dims;  // [lane * outputs + o]
};
Batch build_batch(const PrimitiveSpec& spec, int64_t lanes, int64_t rows, const std::vector<float>& inputs);
int64_t lanes_for(const PrimitiveSpec& spec, int64_t max_hidden);

}  // namespace qpu::npu
