#pragma once
// The FFN half of a nested layer as a part of a looped machine, shared by the FFN machine
// (machine/testing/ffn_machine.h) and the whole-token machine (machine/token_machine.h):
//
//   rmsnorm(xb, x, rms_ffn[l]); hb = w1 xb; hb2 = w3 xb; hb = silu(hb) * hb2;
//   xb = w2 hb; x += xb
//
//  * SW(l).c, c < chunks (1 cycle each, sends nothing): rmsnorm(x) -> the chunk's rows of
//    w1 and w3 -> silu * on its `lanes` lanes (npu::ffn_chunk_unit), the products written
//    down into the product RAM (npu/float_ram.h: head c, wiped and written at once);
//  * FFN(l).i, i < dim (4 cycles each): lane i read from the out RAM, sent up and written
//    into element i of a register; FFN(l).0 first computes every lane: every product read
//    back from the product RAM -> w2 -> + x (npu::ffn_out_block) -> the out RAM (as wide
//    as the uplink, machine/wide_float_ram.h), so the out block runs once per layer.
//
// x is what the machine gives the constructor: the register the micro-op reads
// (Assembler::register_out, the FFN machine) or a RAM's out values read on SW and FFN
// cycles (the token machine's X1 RAM, machine/wide_float_ram.h). SW reads it through a
// gate on its own flags (x is also nonzero on FFN cycles, and a register on other
// micro-ops' cycles), the out block directly (its idle contract holds for any x while its
// flags are 0).
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/ir.h"
#include "machine/assembler.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::machine {

struct FfnOptions {
  // SWIGLU chunk lanes (docs/npu-machine.md: 7 lanes fit the width budget; qpu story's
  // machine, past that budget anyway, takes 22: fewer SW cycles, runner::token_machine_options).
  int lanes = 7;
  // Product RAM window: nonzero |product| in [2^low, 2^(low + 37)) (docs/trace-ranges.md:
  // stories260K's ffn_prod spans binades -32..3).
  int product_low_binade = -33;
};

// Layer l's registers and what follows it.
struct FfnControl {
  std::function<int64_t(int layer)> reads;          // the register SW(l) and FFN(l) read (-1: none)
  // What SW(l) and FFN(l) also set to read x (e.g. the X1 RAM's read flag).
  std::vector<std::pair<compiler::ValueId, float>> x_sets;
  std::function<int64_t(int layer)> writes;         // the register FFN(l).i writes element i of
  std::function<std::string(int layer)> after_ffn;  // FFN(l).(dim - 1)'s successor
};

class FfnHalf {
 public:
  // SW(l).c and FFN(l).i for every layer.
  static std::vector<std::string> names(const reference::Llama2Config& config, const FfnOptions& options);

  // Appends the chunk unit, the product RAM and the out block to as.program(). x: dim
  // values, +0 on every cycle but SW's and FFN's (empty: as.register_out()). Throws
  // qpu::Error for a lane count outside [1, hidden_dim] or an x of another size.
  FfnHalf(Assembler& as, const reference::Llama2Checkpoint& checkpoint, const FfnOptions& options,
          const std::vector<compiler::ValueId>& x = {});

  int chunks() const { return chunks_; }
  // The out block's and the out RAM's ops (for Program::order) and the lanes FFN sends
  // (x_out as the out RAM reads it back, dim values).
  compiler::OpRange out_ops() const { return out_ops_; }
  const std::vector<compiler::ValueId>& lanes() const { return lanes_; }

  // Defines SW and FFN; FFN's lanes start at `first_lane` of the machine's send() (enable
  // `send`).
  void define(int first_lane, compiler::ValueId send, const FfnControl& control);

 private:
  Assembler& as_;
  int dim_ = 0, layers_ = 0, chunks_ = 0;
  std::vector<compiler::ValueId> sw_layer_, sw_chunk_, ram_write_, out_layer_;
  compiler::ValueId ram_read_ = 0, out_store_ = 0, out_read_ = 0;
  compiler::OpRange out_ops_{};
  std::vector<compiler::ValueId> lanes_;
};

// SW(l).c and FFN(l).i.
std::string swiglu_name(int layer, int chunk);
std::string ffn_name(int layer, int i);

}  // namespace qpu::machine
