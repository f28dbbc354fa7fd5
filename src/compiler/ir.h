#pragma once
// The NPU's intermediate representation: a program of exact operations on residual
// "values" (one fp32 residual dim each, for the life of the program).
//
// Every operation is one sublayer's worth of work whose result the host's residual
// add commits: an MLP op is a set of neurons, out[dst] += down * silu(gate) * up,
// where gate and up are linear forms of the values (in value units; the emitter folds
// the exact power-of-two input-norm scale in). An attention-memory op is one hard
// attention read/write of a bank (one KV head). Exactness is the op builder's job
// (src/npu): the compiler only guarantees the placement rules that keep it —
//  * an op sees every value as it was at the start of its sublayer,
//  * an op that reads a value runs in a later sublayer than every earlier op that
//    writes it, and ops that write the same value keep their program order,
//  * ops never share a destination inside one sublayer (rule of one term is then
//    per op, under the builder's control),
//  * and, opt-in, explicit ordering constraints (Program::order): an op runs in a
//    strictly later sublayer than the ops it is ordered after, with or without a data
//    dependence. They only move ops, never change what an op computes.
#include <cstdint>
#include <string>
#include <vector>

namespace qpu::compiler {

using ValueId = int32_t;
// The constant 1.0 (the emitter turns it into a rail dim of exactly known size).
inline constexpr ValueId kOne = -1;

struct Term {
  ValueId value = kOne;
  float weight = 0.0f;
};

// sum of weight * value over the terms (kOne terms are constants).
struct Lin {
  std::vector<Term> terms;
};

struct Neuron {
  Lin gate;
  Lin up;
  std::vector<Term> down;  // destination values and the weight of this neuron into each
};

// A write-once associative memory in one KV head of a full-attention layer. Every host
// token stores (address, data) with a flag; a token whose read flag is 1 gets, in `out`,
// the data row of the one earlier-or-current token whose write flag was 1 and whose
// address equals the query address. Addresses are bit vectors (values exactly 0 or 1).
struct AttnMemory {
  std::vector<ValueId> key_bits;    // address written by this token
  ValueId write_flag = kOne;        // 1: this token's row is a valid entry
  std::vector<ValueId> data;        // the row stored (<= head_dim values)
  std::vector<ValueId> query_bits;  // address read by this token
  ValueId read_flag = kOne;         // 1: add the row read into `out`
  std::vector<ValueId> out;         // same length as data
};

// Marks an optional flag of a GDN memory that is never set.
inline constexpr ValueId kNever = -2;

// A row memory in one head of a Gated DeltaNet (linear_attention) mixer: the state
// of the head is rows() x row_capacity() cells (docs/npu-gdn-memory.md). Per host
// token, in this order: if wipe_flag is 1, every row becomes empty; if write_flag is
// 1, row key_bits becomes `data` (each cell = data value * 2^data_exponent + offset);
// if read_flag is 1, `out` += the row query_bits as stored (read after the write),
// decoded back to the data values; an empty row reads as +0. Addresses are bit
// vectors (values exactly 0 or 1), least significant first. Exact when, per data
// value x, the cell c = x * 2^data_exponent + offset is 0 or in [18, 2^44) and is
// computed exactly (one or two terms), and every write onto a non-empty row keeps
// c - old and old + (c - old) exact (e.g. integer cells below 2^24; offset != 0).
// The state belongs to the layer the op is scheduled in: it holds functions of
// that layer's input only (docs/npu-machine.md, "The depth law").
//
// Conv taps (Qwen3.5's causal conv1d, kernel 4, on every q/k/v channel): an operand
// may be taken from the layer input of token t - tau instead of the current token t
// (tau = tap, 0..3; before host position 0 the history is the zero initial state, so
// a tap reaching past the start reads 0). key_bits and write_flag share key_tap,
// query_bits and read_flag share query_tap, data value d uses data_taps[d]. The wipe
// (in_proj_a) and beta (in_proj_b) have no conv: they always act on token t. A write
// whose key is all 0 (flag 0 at the tapped token, or no history yet) is an exact
// no-op.
//
// Decode weights: a read adds out_weights[d] * (cell - offset) * 2^-data_exponent
// into out[d] (empty out_weights = all 1; each weight is +-2^i). `out` may repeat a
// value id: the columns that name it add into it. Exactness contract for repeated
// ids (the caller's): the decoded terms of one out value (and the out value's
// previous content) add exactly in every order and grouping, e.g. the disjoint-bit
// parts of one float (npu/inbox.h). Repeated out ids need offset 0.
struct GdnMemory {
  std::vector<ValueId> key_bits;    // row written by this token
  ValueId write_flag = kOne;
  std::vector<ValueId> data;        // <= row capacity values (ids may repeat, e.g. with other taps)
  std::vector<ValueId> query_bits;  // row read by this token
  ValueId read_flag = kOne;
  std::vector<ValueId> out;         // same length as data (ids may repeat: those columns add)
  ValueId wipe_flag = kNever;       // kNever: the head is never wiped
  int data_exponent = 0;            // cell = x * 2^data_exponent + offset
  float offset = 0.0f;              // != 0: integer cells (one offset column per row)
  int key_tap = 0;                  // key_bits and write_flag come from token t - key_tap
  int query_tap = 0;                // query_bits and read_flag come from token t - query_tap
  std::vector<int> data_taps;       // per data value (empty: all 0)
  std::vector<float> out_weights;   // per data value, +-2^i (empty: all 1)
  // The constants of the memory's projections (emit.cpp: beta, the output gate z, the
  // address complement, the row's rail and offset cells) read the rail, a dim that is
  // live on every token, so a mixer holding such a memory is never idle (docs/engine.md,
  // "Idle sublayers"). An enable replaces the constant of one side: key_enable (beta,
  // the key's address complement, rails, offsets) and query_enable (the query's address
  // complement, z). The caller's contract: the enable is exactly 1 or +-0 on every token,
  // and on every token where it is +-0 the side's flag and address bits are +-0 too
  // (e.g. the enable of the unit that computes them; npu/kv_address.h). Then with the
  // enable 1 every projection is the same float as with the constant (the term moves to
  // another column, compiler/enable.h), and with it 0 the side's key (query) is all +-0:
  // no row is written (read), whatever beta, the rails or z are (z = +0 gives an output
  // of +-0 as q = +-0 does). Needs tap 0 on that side (beta and z have no conv): key_tap
  // and every data tap for key_enable, query_tap for query_enable. kOne: the constant.
  ValueId key_enable = kOne;
  ValueId query_enable = kOne;

  int data_tap(size_t d) const { return data_taps.empty() ? 0 : data_taps[d]; }
  float out_weight(size_t d) const { return out_weights.empty() ? 1.0f : out_weights[d]; }
};

enum class OpKind { Mlp, AttnMemory, GdnMemory };

// Ops [begin, end) in program order (indices into Program::ops()).
struct OpRange {
  size_t begin = 0;
  size_t end = 0;
};

// Every op of `after` goes to a strictly later sublayer than every op of `before`
// (before.end <= after.begin: constraints point forward in program order, like data).
struct OpOrder {
  OpRange before;
  OpRange after;
};

struct Op {
  OpKind kind = OpKind::Mlp;
  std::string label;
  std::vector<Neuron> neurons;  // kind == Mlp
  // kind == Mlp, the builder's promise: on every token at most one neuron of the op adds
  // anything but +-0 (a one-hot select), so the neurons may be spread over several ops
  // that add into the same values one after another (compiler/split_mlp.h).
  bool one_live_neuron = false;
  // The builder's promise for every value the op writes: on every token, of all the ops
  // with this flag that write that value, at most one adds anything but +-0 to it (e.g.
  // the picks of a RAM's heads, one per position or segment, each gated by its own flag).
  // Such writes commute and their sum is exact in any order, so the schedulers let them
  // share a sublayer (schedule_rules.h, waw_gap: 0 between two of them instead of 1).
  bool exclusive_writes = false;
  AttnMemory memory;            // kind == AttnMemory
  GdnMemory gdn;                // kind == GdnMemory

  std::vector<ValueId> reads() const;   // sorted, unique, without kOne
  std::vector<ValueId> writes() const;  // sorted, unique
};

class Program {
 public:
  // A new residual value named for diagnostics. Starts as +0 unless the harness sets it.
  ValueId value(std::string name);
  std::vector<ValueId> values(const std::string& prefix, int count);

  void mlp(std::string label, std::vector<Neuron> neurons);
  // An MLP op with Op::one_live_neuron set: the caller promises that on every token at
  // most one of the neurons adds anything but +-0.
  void mlp_select(std::string label, std::vector<Neuron> neurons);
  // Sets Op::exclusive_writes on the ops of `range` (the caller's promise, see there).
  // Throws qpu::Error unless the range is a non-empty range of existing ops.
  void mark_exclusive_writes(OpRange range);
  void memory(std::string label, AttnMemory memory);
  void gdn_memory(std::string label, GdnMemory memory);

  int64_t num_values() const { return static_cast<int64_t>(names_.size()); }
  const std::string& name(ValueId v) const;
  const std::vector<Op>& ops() const { return ops_; }
  // For IR transforms (compiler/enable.h), which must keep every op's exactness. A
  // transform that removes or reorders ops must keep orders() pointing at the same ops
  // (appending ops and shrinking back to the original size, as clear_dead does, is fine).
  std::vector<Op>& mutable_ops() { return ops_; }

  // Explicit ordering, with no data dependence needed: `after_op` is placed in a strictly
  // later sublayer than `before_op` (before_op < after_op). E.g. to compute two
  // independent wide blocks one after the other instead of side by side, so that the
  // first one's temporaries are dead (their dims free) before the second one starts.
  // Throws qpu::Error unless both are existing ops and before_op < after_op.
  void order(size_t before_op, size_t after_op);
  // Every op of `after` strictly later than every op of `before` (one constraint, however
  // many ops): typically `before` = the ops one builder call appended, `after` = those of
  // the next. Throws qpu::Error unless both ranges are non-empty ranges of existing ops
  // and before.end <= after.begin.
  void order(OpRange before, OpRange after);
  const std::vector<OpOrder>& orders() const { return orders_; }

  // Throws qpu::Error naming the op when a value id is out of range, an op is empty,
  // a memory op's data and out differ in length (or key and query bits), a weight is
  // not finite, or a GDN memory's offset/exponent/taps/decode weights are unusable, or
  // an ordering constraint names ops that no longer exist (check_orders).
  void validate() const;
  // Throws qpu::Error when an ordering constraint is not a forward pair of non-empty
  // ranges of existing ops (the scheduler calls it: mutable_ops() may have shrunk).
  void check_orders() const;

 private:
  std::vector<std::string> names_;
  std::vector<Op> ops_;
  std::vector<OpOrder> orders_;
};

}  // namespace qpu::compiler
