#pragma once
// The attention half of a nested layer as a part of a looped machine, shared by the QKV
// machine (machine/testing/qkv_machine.h, its tests) and the whole-token machine
// (machine/token_machine.h):
//
//  * QKV(l) (1 cycle, sends nothing): rmsnorm (rms_att[l]) -> wq, wk, wv -> RoPE(POS)
//    (npu::qkv_block); q into the q RAM, k and v into the KV cache at POS;
//  * with the attention stages (machine/attention_stages.h): SCORE ... WSUM below the
//    cache, and ATTO(l).i (4 cycles each): x + wo xb, element i sent up; or, with
//    AttentionOptions::atto_writes_down, ATTO(l).0 alone (1 cycle, sends nothing; the name
//    the stages' last WSUM gives its successor): all of x + wo xb written down into the
//    X1 RAM (machine/wide_float_ram.h) for the parts below;
//  * read-backs (4 cycles each, for tests and tools): RQ.i (q), RK(l).i / RV(l).i (k / v of
//    layer l at the position POS holds), and the stages' own.
//
// The machine around it owns the registers: POS (a scalar register the part reads), and
// x, which QKV(l) and ATTO(l) read through `x_operand` (the machine decides what a
// layer's x is: a register, or the nested token's embedding).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "machine/assembler.h"
#include "machine/attention_stages.h"
#include "reference/llama2_checkpoint.h"

namespace qpu::machine {

// The largest nested head size the attention stages take (AttentionHalf refuses more).
inline constexpr int kMaxHeadSize = 16;

struct AttentionOptions {
  // RAM window: nonzero |q|, |k|, |v| in [2^low, 2^(low + 37)) (docs/trace-ranges.md:
  // q_rope binades -22..5, k_rope -24..4, v -23..1).
  int ram_low_binade = -31;
  int kv_banks = 32;      // heads per (layer, kv head); a multiple of 8 or less than 8
  int max_positions = 0;  // positions the cache holds (0: the checkpoint's seq_len)
  int positions(const reference::Llama2Config& c) const { return max_positions > 0 ? max_positions : c.seq_len; }
  // M2c (machine/attention_stages.h): SCORE(l).b, MAX(l), EXP(l).b, ... and ATTO below
  // the cache. Needs kv_banks a multiple of 8. Off: the M2b machine.
  bool attention = false;
  int wave_heads = 4;  // heads SCORE computes side by side (the rest in waves below them)
  // MAX takes its heads in waves too past this many blocks (its trees side by side set
  // the width of a long cache's machine).
  int max_side_by_side_blocks = 32;
  int exp_heads = 2;   // heads one EXP cycle exponentiates
  // Blocks of 8 positions one SLOW cycle adds up: SLOW's depth, and the segments whose carry
  // crosses up between cycles (AttentionGeometry::slow_segment_blocks).
  int slow_segment_blocks = 4;
  int wsum_segment_blocks = 8;  // the same for WSUM
  int sum_segment_blocks = 16;  // and for SUM
  // With SLOW's segments WSUM's (AttentionGeometry::slow_shares_wsum_heads), SLOW's chain
  // runs beside WSUM's instead of below it (AttentionGeometry::slow_beside_wsum).
  bool slow_beside_wsum = false;
  // true: ATTO(l).0 writes x + wo xb into the X1 RAM (AttentionHalf::x1) in one cycle, for
  // a reader ordered below this part (the FFN half); false: ATTO(l).i sends element i up
  // (4 cycles each), for a reader above or outside the host. Needs `attention`.
  bool atto_writes_down = false;
};

// x of layer l for the units that `flags` (0/1 token inputs, one per layer, at most one
// set) switch on: exact, and +-0 whenever no flag is set (the units' idle contract).
using XOperand = std::function<std::vector<compiler::ValueId>(const std::vector<compiler::ValueId>& flags,
                                                              const std::string& label)>;

// How the part's micro-ops chain (AttentionHalf::define).
struct AttentionControl {
  // true: QKV(l) -> SCORE(l).0, MAX(l) -> EXP(l).0.0, the last WSUM(l) -> ATTO(l).0 (one
  // nested layer's attention runs itself); false: QKV(l) -> RQ.0, MAX(l) -> RM.0, the
  // last WSUM(l) -> DONE (each stage started by the host, for tests).
  bool chained = false;
  // The successor of ATTO(l).(dim - 1), or of ATTO(l).0 when ATTO writes down.
  std::function<std::string(int layer)> after_atto;
  // ATTO(l).i only: -1: it only sends x + wo xb up; else the register row whose element i
  // it lands in.
  int64_t atto_register = -1;
  // What a micro-op of layer l that reads x sets (QKV(l), ATTO(l).i): a register read,
  // or the flags of another source of x.
  std::function<void(MicroOp& op, int layer)> reads_x;
};

class AttentionHalf {
 public:
  // The control names it adds: QKV(l), RQ.i, RK(l).i, RV(l).i, and with the attention
  // the stages' and ATTO(l).i (ATTO(l).0 alone when ATTO writes down).
  static std::vector<std::string> names(const reference::Llama2Config& config, const AttentionOptions& options);

  // Appends the units and RAMs to as.program(). Throws qpu::Error for options the units or
  // heads cannot hold.
  AttentionHalf(Assembler& as, const reference::Llama2Checkpoint& checkpoint, const AttentionOptions& options,
                const Assembler::Scalar& pos, const XOperand& x_operand);

  // The values the part sends up, in lane order: q, k || v of every kv head (the cache
  // read back), then ATTO's x (unless ATTO writes down), then the stages' read-backs.
  const std::vector<compiler::ValueId>& lanes() const { return lanes_; }
  // ATTO writing down only: the X1 RAM's out values (x + wo xb of the latest ATTO(l).0, read
  // bit for bit when the machine sets x1_read(); +0 otherwise) and that read flag.
  const std::vector<compiler::ValueId>& x1() const { return x1_; }
  compiler::ValueId x1_read() const { return x1_read_; }
  int heads() const { return stages_ ? geometry_.heads : 0; }
  int exp_groups() const { return geometry_.exp_groups(); }
  const AttentionGeometry& geometry() const { return geometry_; }

  // Defines its micro-ops; its lanes start at `first_lane` of the machine's send(), whose
  // enable is `send`.
  void define(int first_lane, compiler::ValueId send, const AttentionControl& control);

 private:
  Assembler& as_;
  const reference::Llama2Config config_;
  AttentionGeometry geometry_;
  Assembler::Scalar pos_;
  std::optional<AttentionStages> stages_;
  std::vector<compiler::ValueId> layer_flags_, kv_write_, kv_read_, atto_layer_;
  compiler::ValueId store_ = 0, q_read_ = 0;
  bool atto_writes_down_ = false;
  std::vector<compiler::ValueId> x1_;
  compiler::ValueId x1_store_ = 0, x1_read_ = 0;
  std::vector<compiler::ValueId> lanes_;
};

}  // namespace qpu::machine
