#pragma once
// M2a (docs/npu-machine.md, "M2 build order", step 3): the nested model's FFN half-layers
// and the attention's output step (ATTO) on the looped machine. A prompt loads the residual x (dim floats) into register X0 (or
// X1) and names the first micro-op; the machine then runs, for every layer l from there
// to the last, run.c's
//
//   rmsnorm(xb, x, rms_ffn[l]); hb = w1 xb; hb2 = w3 xb; hb = silu(hb) * hb2;
//   xb = w2 hb; x += xb
//
// as micro-ops over the register file, writing the new x into the other register
// (layer l's FFN reads X(l % 2), writes X((l + 1) % 2); its ATTO reads X((l + 1) % 2)
// and XB and writes X(l % 2)):
//
//  * SW(l).c, c < chunks (1 cycle each, sends nothing): rmsnorm(x) -> the chunk's rows of
//    w1 and w3 -> silu * on its `lanes` lanes (npu::ffn_chunk_unit, the (l, c) flag), the
//    products written down into the product RAM (npu/float_ram.h: head c, wiped and
//    written at once); its successor is emitted on the same cycle;
//  * ATTO(l).i, i < dim (4 cycles each): run.c's x += wo xb (npu::attention_out_block),
//    xb (the attention's output) read from register XB, lane i sent up into element i of
//    the register the SW(l) micro-ops read;
//  * FFN(l).i, i < dim (4 cycles each: the token, then p0, p1, p2 of x_out[i]): all
//    hidden_dim products read back from the RAM -> w2 -> + x (npu::ffn_out_block), lane i
//    sent up and written into element i of the other register at the p2 cycle, whose
//    output is the parked successor (FFN(l).i+1, SW(l+1).0 or DONE).
//
// Stack, top to bottom: register file and XB -> chunk unit -> product RAM -> out unit ->
// ATTO block (ordered after the out block: the width budget) -> uplink (assembler.h).
// There is no attention itself: a prompt gives xb (run.c's attention output) for ATTO,
// and the FFNs of the later layers compose as run.c's would without attention.
#include <cstdint>
#include <vector>

#include "machine/assembler.h"
#include "machine/ffn_half.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::machine {

struct FfnMachineOptions : HostOptions, FfnOptions {};

struct FfnMachine : AssembledMachine {
  int dim = 0, layers = 0, chunks = 0, lanes = 0;

  int64_t write_x(int reg, int i) const;  // WX(reg).i
  int64_t swiglu(int l, int c) const;     // SW(l).c
  int64_t ffn(int l, int i) const;        // FFN(l).i

  // HDR, WX(l % 2).i + the parts of x_i for every i, then SW(l).0.
  std::vector<int64_t> prompt(const std::vector<float>& x, int first_layer) const;
  // What the machine generates after that prompt: per layer from first_layer on, SW(l).1
  // .. FFN(l).0, then per i the parts of x_out[i] and the next control token; DONE last.
  std::vector<int64_t> expected_stream(const reference::Llama2Checkpoint& checkpoint, const std::vector<float>& x,
                                       int first_layer) const;
  // The whole layer but the attention itself: HDR, x (layer l's input) into X((l + 1) % 2),
  // the attention's output xb into XB, then ATTO(l).0.
  std::vector<int64_t> prompt_layer(const std::vector<float>& x, const std::vector<float>& xb, int layer) const;
  // What it generates: per i the parts of x + wo xb and the next control token (the last
  // one SW(l).0), then expected_stream from that x at layer l.
  std::vector<int64_t> expected_layer(const reference::Llama2Checkpoint& checkpoint, const std::vector<float>& x,
                                      const std::vector<float>& xb, int layer) const;
};

// Dimensions come from the checkpoint's header. Throws qpu::Error for options the units
// or the heads cannot hold.
FfnMachine build_ffn_machine(const reference::Llama2Checkpoint& checkpoint, const FfnMachineOptions& options);

// run.c's FFN half-layer of layer l, in place on x.
void ffn_c(const reference::Llama2Checkpoint& checkpoint, int layer, std::vector<float>& x);

}  // namespace qpu::machine
