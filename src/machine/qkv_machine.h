#pragma once
// M2b, first step (docs/npu-machine.md, "M2b plan"): the nested model's QKV micro-op on
// the looped machine, with the position in a scalar register. A prompt loads run.c's x
// at the start of layer l into register X and the position into POS and names QKV(l);
// QKV(l) (1 cycle, sends nothing) runs
//
//   rmsnorm(xb, x, rms_att[l]); q = wq xb; k = wk xb; v = wv xb; RoPE(pos) on q and k
//
// (npu::qkv_block) and writes q, k and v down into float RAMs (npu/float_ram.h, wiped
// and written at once). The read-back micro-ops RQ.i, RK.i, RV.i (4 cycles each) read the
// RAMs and send element i up, so a test sees every float the QKV cycle stored. The
// KV cache proper (rows per position, npu/kv_address.h) comes next; here k and v of the
// current position are kept like q.
//
// Stack: register file + POS → QKV block → q, k, v RAMs → uplink (assembler.h).
#include <cstdint>
#include <vector>

#include "machine/assembler.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::machine {

struct QkvMachineOptions {
  int64_t key_dim = 16, value_dim = 64;
  bool idle_attention_layer = true;
  int value_jmin = -70, value_jmax = 20;
  // RAM window: nonzero |q|, |k|, |v| in [2^low, 2^(low + 37)) (docs/trace-ranges.md:
  // q_rope binades -22..5, k_rope -24..4, v -23..1).
  int ram_low_binade = -31;
  compiler::ScheduleLimits limits{.max_neurons_per_mlp = 1024, .sink = true};
};

struct QkvMachine : AssembledMachine {
  int dim = 0, kv_dim = 0, layers = 0;

  int64_t qkv(int l) const;  // QKV(l)
  // HDR, WX.i + the parts of x_i for every i, WPOS + the parts of pos, QKV(l).
  std::vector<int64_t> prompt(const std::vector<float>& x, int pos, int layer) const;
  // What the machine generates after that prompt: RQ.0, then per float of q, k, v (in
  // that order) its three parts and the next control token, DONE last.
  std::vector<int64_t> expected_stream(const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<float>& v) const;
};

// Dimensions come from the checkpoint's header (dim <= 64 register elements). Throws
// qpu::Error for options the units or heads cannot hold.
QkvMachine build_qkv_machine(const reference::Llama2Checkpoint& checkpoint, const QkvMachineOptions& options);

}  // namespace qpu::machine
