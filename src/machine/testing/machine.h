#pragma once
// The looped machine, M1 skeleton (docs/npu-machine.md, "M1 skeleton (built)"): one
// compiled Qwen3.5 checkpoint that runs two chained matvecs, one host token per cycle
// through all layers, driven only by the host's own greedy argmax.
//
// Host vocabulary: the value tokens (npu::ValueVocab, ids [0, 23297)), then the control
// tokens: HDR (host position 0; reads and writes nothing), NOP, DONE, WX(i) (write
// element i of register X: the caller's prompt loads x), MV(A, i) (y_i = (A x)_i into
// Y[i]) and MV(B, i) (z_i = (B y)_i into Z[i]).
//
// Stack, top to bottom:
//  * register file: w GDN heads, element i of every register in head i, register r =
//    row r (npu/inbox.h: a float arrives as C, p0, p1, p2 and is written at the p2
//    cycle with key tap 3 = C); a micro-op token reads its source register in all heads
//    at once (query at tap 0);
//  * matvec (npu::matvec_unit): one neuron per (matrix, column) gated by the matrix flag
//    (weights in down columns), C's addition chain per lane over rotating product sets
//    (10 values per lane, so the hidden size grows linearly with w);
//  * lane select (the token's one-hot lane flag), split into 3 parts, the LM head
//    features of all three parts (npu::emit_features, three copies in parallel);
//  * delay line (delay_line.h): p1's features one cycle later, p2's two, the successor
//    control token three (the p2 cycle);
//  * LM head: value-token rows (npu::install_value_head) on p0's features, control rows
//    (control_vocab.h) on the control signature features.
// Every unit above the delay line writes exact +-0 when its micro-op is idle
// (compiler::enable_constants with the matrix flags' sum). Compiled with dim reuse
// (compiler/clear_dead.h) unless MachineOptions::reuse_dims is off.
#include <cstdint>
#include <vector>

#include "compiler/emit.h"
#include "machine/assembler.h"

namespace qpu::machine {

struct MachineOptions : HostOptions {
  // M1 predates the width budget: no neuron limit (sink only: ops moved as late as useful
  // before the dead-value clears, schedule.h: hidden 1,792 -> 1,408 at w = 8, 1,920 ->
  // 1,536 at w = 64, same layers and streams).
  MachineOptions() { limits = compiler::ScheduleLimits{.sink = true}; }

  int width = 8;             // w: elements per vector register (= register heads)
  std::vector<float> a, b;   // w x w, row-major (run.c's layout: w[i * n + j])
  bool reuse_dims = true;  // compiler::plan_dim_reuse: dead values share dims (hidden ~ max live values)
};

enum Register : int64_t { kX = 0, kY = 1, kZ = 2 };

struct Machine : AssembledMachine {
  int width = 0;

  int64_t hdr() const { return control.id(0); }
  int64_t nop() const { return control.id(1); }
  int64_t write_x(int i) const { return control.id(3 + i); }
  int64_t mv_a(int i) const { return control.id(3 + width + i); }
  int64_t mv_b(int i) const { return control.id(3 + 2 * width + i); }

  // HDR, then WX(i), p0, p1, p2 of x_i for every i, then MV(A, 0).
  std::vector<int64_t> prompt(const std::vector<float>& x) const;
  // What the machine must generate after the prompt: the parts of y_i then the next
  // control token, for every i, then the same for z, ending with DONE (8 w tokens).
  std::vector<int64_t> expected_stream(const std::vector<float>& x, const std::vector<float>& a,
                                       const std::vector<float>& b) const;
};

// Throws qpu::Error for a width outside [1, 64], matrices of the wrong size, or head
// dims the registers or the delay line do not fit.
Machine build_machine(const MachineOptions& options);

// run.c's matmul: out[i] = ((0 + w[i n + 0] x[0]) + w[i n + 1] x[1]) + ...
std::vector<float> matvec_c(const std::vector<float>& w, const std::vector<float>& x);

}  // namespace qpu::machine
