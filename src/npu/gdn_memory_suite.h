#pragma once
// Conformance of the Gated DeltaNet memory (docs/npu-gdn-memory.md): one host layer
// whose GDN heads are row memories. A stream of host tokens writes random rows at
// random addresses (overwriting rows, wiping heads), and reads rows back; every
// value read must have the bits of the value last written there (+0 for rows never
// written since the last wipe). Two value classes alternate over the heads:
//   integer cells (offset 4096): integers in [-4078, 4096), overwritten freely;
//   float cells (exponent 8):    +0 or positive floats in [18 * 2^-8, 2^35],
//                                written once per row between wipes.
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/emit.h"
#include "npu/suite.h"

namespace qpu::npu {

struct GdnMemoryOptions {
  int64_t heads = 4;              // GDN memory ops (heads) in the layer
  int64_t key_head_dim = 128;     // Qwen3.5's head shape: two-hot reads
  int64_t value_head_dim = 128;
  int64_t tokens = 64;
  double write_probability = 0.9;  // per head and token
  double read_probability = 0.9;
  double wipe_probability = 0.01;  // plus a wipe whenever a float head has no free row
  uint64_t seed = 5;
};

// The compiled checkpoint and what each token must read.
struct GdnMemoryCase {
  compiler::Compiled compiled;
  std::vector<int64_t> out_dims;       // residual dim of every out value, head-major
  std::vector<float> expected;         // [tokens, out_dims.size()]: +0 where nothing is read
  std::vector<bool> read;              // [tokens, heads]: whether the head reads
  int64_t values_written = 0, values_read = 0, overwrites = 0, wipes = 0;
  int64_t values_read_from_written_rows = 0;  // the rest read empty rows (+0)
  int64_t cells_per_head = 0;          // rows * data columns (integer heads)
};

GdnMemoryCase build_gdn_memory_case(const GdnMemoryOptions& options);

struct GdnMemoryResult {
  int64_t tokens = 0, values_written = 0, values_read = 0, overwrites = 0, wipes = 0;
  int64_t values_read_from_written_rows = 0;
  int64_t mismatches = 0;
  int64_t hidden_size = 0, cells_per_head = 0;
  double seconds_per_token = 0;  // host forward time only
  std::string first_mismatch;
};

// Runs the case on a host (the engine, HostSim) one token per forward step.
GdnMemoryResult run_gdn_memory_suite(const GdnMemoryOptions& options, const HostFactory& host);

}  // namespace qpu::npu
