#pragma once
// The machine assembler (docs/npu-machine.md, "M2 build order", step 2): the parts every
// looped machine shares, so that a machine is only its units and its micro-op table.
//
//  * the control vocabulary, named up front (the LM head signature needs the count);
//  * the register file: `elements` INBOX heads, element i of every register in head i,
//    register r = row r (npu/inbox.h). A micro-op token reads one register (all elements
//    at once, tap 0) and names the destination (register, element) of the float that
//    follows it (written three cycles later, at the p2 cycle);
//  * the uplink: the datapath's lanes, one selected by the token's lane flag, split into
//    3 parts, the LM head features of each, the delay line (p1 one cycle later, p2 two,
//    the parked successor three), the value and control LM head rows;
//  * the micro-op table: per control token, the unit flags its embedding sets, the
//    register it reads, where the float it sends goes, and its successor, emitted either
//    at once (a micro-op that sends nothing: 1 cycle) or three cycles later (after the
//    three value tokens of the float it sends or the prompt gives);
//  * compilation with dim reuse (compiler/clear_dead.h) and the dead-value clears of a
//    gated range of ops driven by that range's enable.
//
// Use: construct with the control names, append units to program() reading
// register_out() and inputs(), call send() once with the lanes to emit, define() every
// control token, then finish().
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "compiler/emit.h"
#include "engine/model.h"
#include "machine/control_vocab.h"
#include "npu/inbox.h"
#include "npu/uplink.h"

namespace qpu::machine {

// What every machine's options share: the host's GDN head shape, the value tokens and the
// schedule limits (the width budget of docs/npu-machine.md "M2": <= 1,024 neurons per MLP
// sublayer, ops sunk as late as useful).
struct HostOptions {
  int64_t key_dim = 16;      // GDN head dims of every GDN layer (one-hot reads: dk a power of 4)
  int64_t value_dim = 64;
  bool idle_attention_layer = true;  // stock transformers 5.24.0 needs one; HostSim rejects it
  int value_jmin = -70, value_jmax = 20;  // binades of the value tokens (npu::ValueVocab; narrower: smaller machines)
  // At most 4 GDN memories (RAM and register heads) per mixer: a GDN layer's projections
  // cost the hidden size times its head count on every layer of a dense checkpoint, and
  // one crowded mixer would set that count for all of them.
  compiler::ScheduleLimits limits{.max_neurons_per_mlp = 1024, .max_gdn_memories_per_mixer = 4, .sink = true};
  // The machine's program, schedule, allocation and shape (compiled.weights.config) only:
  // no embedding, LM head or layers, so it can be sized but not run or written. What a
  // search over shapes builds for each candidate (the embedding alone is vocabulary x
  // hidden floats).
  bool shape_only = false;
};

struct AssemblerOptions : HostOptions {
  int elements = 8;          // register file heads: elements per register
  bool reuse_dims = true;    // compiler::plan_dim_reuse: dead values share dims
  // false: compiled.weights holds only the globals (config, embedding, LM head) and the
  // layers are emitted on demand (AssembledMachine::model, layer): a machine of hundreds
  // of dense layers never exists in memory at once. Needs reuse_dims.
  bool emit_layers = true;
};

// The options of a machine of many dense layers: the host's, `elements` register
// elements, layers emitted on demand (AssemblerOptions::emit_layers off).
AssemblerOptions streamed_options(const HostOptions& host, int elements);

// When a micro-op's successor reaches the LM head.
enum class SuccessorTiming {
  Now,      // this cycle: the token sends nothing (HDR, NOP, DONE, a write-down micro-op)
  Delayed,  // three cycles later, after the three value tokens that follow the token
  // This cycle, chosen by the datapath (Assembler::computed_successor): the embedding
  // names none; MicroOp::successor is -1.
  Computed,
  // This cycle, one of two named by the embedding: MicroOp::successor when the branch
  // condition (Assembler::branch) is 1, MicroOp::otherwise when it is 0.
  Branch,
  // Three cycles later, like Delayed: the continuation that the latest calling micro-op
  // (MicroOp::call) parked in the return register (Assembler::return_register). The
  // embedding names none; MicroOp::successor is -1.
  Return,
};

struct MicroOp {
  std::vector<std::pair<compiler::ValueId, float>> sets;  // unit flags its embedding sets
  int lane = -1;                // the lane of send() whose float this token sends (-1: none)
  int64_t read_register = -1;   // register row read in every element (-1: none)
  int64_t write_register = -1;  // register row the following float is written to (-1: none)
  int write_element = 0;        // ... in this element
  int64_t successor = -1;       // control index of the next micro-op
  int64_t otherwise = -1;       // SuccessorTiming::Branch: the next one when the condition is 0
  // A call: this token parks the continuation `call` (a control index) in the return
  // register, where a later SuccessorTiming::Return micro-op finds it (-1: no call).
  int64_t call = -1;
  SuccessorTiming timing = SuccessorTiming::Now;
};

// What every assembled machine is: the compiled checkpoint and how to talk to it.
// Where a value can be seen in the host's residual stream (engine::SublayerTap): in dim
// `dim` of the residual after sublayer `after_sublayer`.
struct ValueProbe {
  int64_t after_sublayer = 0;
  int64_t dim = 0;
};

struct AssembledMachine {
  // schedule, allocation, and the weights: every layer, or only the globals when
  // AssemblerOptions::emit_layers is off (layers empty; config complete).
  compiler::Compiled compiled;
  compiler::Program program;      // what was scheduled (with the dead-value clears)
  compiler::Interface interface;  // the embedding rows
  compiler::EmitOptions emit_options;
  npu::InboxEncoding encoding;  // value tokens at ids [0, encoding.vocab.size())
  ControlVocab control;
  std::vector<std::string> control_names;
  int delay_heads = 0;
  int64_t register_file_heads = 0;
  int64_t done_id = -1;  // the control token that ends a run

  int64_t done() const { return done_id; }
  // The engine model of this checkpoint; streams the layers from the program when they
  // were not emitted (one dense layer alive at a time).
  engine::Model model(const engine::ModelOptions& options = {}) const;
  // The dense weights of layer l (emitted now when compiled.weights has no layers).
  io::LayerWeights layer(int64_t l) const;
  // The same for many layers: the returned function shares one emitter between its calls
  // (layer(l) sets one up, which checks the whole program, per call). It must not
  // outlive the machine.
  std::function<io::LayerWeights(int64_t)> layers() const;
  // Every tensor dense (for export: small machines only; a copy when already dense).
  io::Qwen35Weights dense_weights() const;
  // Host id of the control token named `name`; throws for an unknown name.
  int64_t id(const std::string& name) const;
  // The value tokens of float x (split_parts_reference), 3 ids.
  std::vector<int64_t> value_tokens(float x) const;
  // Parts back to the float as the register file adds them: p0 + (p1 + p2), exact.
  float decode(int64_t t0, int64_t t1, int64_t t2) const;
  // For a unit's outputs, complete before their first reader that does not also write
  // them (ops that read and write v accumulate into it, e.g. a matvec's partial sums;
  // v's clear comes after its last reader): the residual entering that reader's sublayer
  // holds v in v's dim (the allocation keeps it there from its first access to its
  // last). For tools and tests that look at a cycle's work inside the forward pass; the
  // machine's stream never needs them. Throws for a value that no such op reads, or that
  // sublayer 0 reads (the embedding is not a sublayer).
  std::vector<ValueProbe> probes(const std::vector<compiler::ValueId>& values) const;
};

class Assembler {
 public:
  // `controls`: the names of the control tokens, in id order; `done`: the one that ends
  // a run. Throws for an empty or repeated name, or options the heads cannot hold.
  Assembler(const AssemblerOptions& options, std::vector<std::string> controls, const std::string& done);

  compiler::Program& program() { return p_; }
  const AssemblerOptions& options() const { return o_; }
  const npu::InboxEncoding& encoding() const { return m_.encoding; }
  int64_t control_index(const std::string& name) const;

  // Element i of the register the token reads (+0 when it reads none).
  const std::vector<compiler::ValueId>& register_out() const { return register_out_; }
  // A scalar register: one more INBOX head with one row and its own read flag, so a
  // micro-op reads it in the same cycle as a vector register (a head answers one query
  // per token). Written like an element: MicroOp::write_element = `element`,
  // write_register 0; read by setting `read_flag` (MicroOp::sets). Call before send().
  struct Scalar {
    compiler::ValueId out = 0;        // the value read (+0 when not read)
    compiler::ValueId read_flag = 0;  // a token input
    int element = 0;                  // its write target
  };
  Scalar scalar_register(const std::string& name);
  // The same with `elements` heads sharing one read flag (e.g. XB, the attention's output,
  // read in the same cycle as X): element i is written at write_element first_element + i.
  struct Vector {
    std::vector<compiler::ValueId> out;
    compiler::ValueId read_flag = 0;
    int first_element = 0;
  };
  Vector vector_register(const std::string& name, int elements);
  // A scalar register written by the token itself (an immediate): its own GDN head, one
  // row, key and data at conv tap 0, so a token whose embedding sets immediate(r, k)
  // writes the integer k there on its own cycle (a read on a later cycle sees it). The
  // token carries k + 32 in one data column and 32 in another (silu passes both exactly:
  // 0 or >= 18), decoded with +1 and -1 into `out` (k, exact); every overwrite is an
  // exact difference of small integers. Read by setting `read_flag`. Call before send().
  struct Immediate {
    compiler::ValueId out = 0;        // the value read (+0 when not read)
    compiler::ValueId read_flag = 0;  // a token input
    compiler::ValueId write_flag = 0, data = 0, bias = 0;  // token inputs (data k + 32, bias 32)
  };
  Immediate immediate_register(const std::string& name);
  // What a token's embedding sets to write k (0 <= k < 2^20) into r (for MicroOp::sets).
  std::vector<std::pair<compiler::ValueId, float>> immediate(const Immediate& r, int64_t k) const;

  // x[i] when one of `flags` (0/1 token inputs, at most one set) is 1, else +-0: one
  // neuron per value, gate 128 * the flags' sum (no constant). A unit whose operands
  // other micro-ops also read (a register, a RAM's out values) reads them through this,
  // so that it sees zeros when idle (the units' idle contract: flags 0 AND operands 0).
  // The outputs' dead-value clears are gated by the flag (several flags: by their sum,
  // one more neuron of the op), so that they cost nothing on other cycles.
  std::vector<compiler::ValueId> gated(const std::vector<compiler::ValueId>& x,
                                       const std::vector<compiler::ValueId>& flags, const std::string& label);
  // The same for the sum of several sources (all of one size) of which at most one is
  // nonzero on any cycle (e.g. a register or a table lookup): up is their sum / 128,
  // exact because every other term is +-0.
  std::vector<compiler::ValueId> gated(const std::vector<std::vector<compiler::ValueId>>& sources,
                                       const std::vector<compiler::ValueId>& flags, const std::string& label);
  // gated()'s neurons for one group of values, appended to `ns` instead of making an op,
  // so that several groups share one op (the caller's p.mlp(op_label, ns)): the outputs
  // (labelled `label`) with their clears gated as gated() gates them; with several flags
  // their sum is one more value, labelled `enable_label`.
  std::vector<compiler::ValueId> gated_neurons(const std::vector<std::vector<compiler::ValueId>>& sources,
                                               const std::vector<compiler::ValueId>& flags, const std::string& label,
                                               const std::string& enable_label, std::vector<compiler::Neuron>& ns);

  // Values that token embeddings set (unit flags): exactly 0 or 1, since each one's
  // dead-value clear is gated by itself (a token that sets 2 would leave -2 behind). An
  // integer operand goes in as bits (a Lin over them) or an immediate register.
  compiler::ValueId input(const std::string& name);
  std::vector<compiler::ValueId> inputs(const std::string& name, int count);

  // The float this cycle sends: lanes[i] on the cycle of a micro-op with MicroOp::lane i.
  // Ops [first_gated_op, now) are the datapath whose every constant becomes `enable`
  // (compiler::enable_constants): with enable = 0 it writes exact +-0, so the cycles after
  // a sending micro-op emit nothing of their own; a micro-op that sends sets `enable` too.
  // Call once, before defining a micro-op that sends.
  //
  // The lane is named by two flags, a group and a member (groups of ceil(sqrt(lanes))), and
  // picked in two steps: per member, the lane of the hot group (one live term); then the
  // hot member's. The flags live from the embedding to the select, near the bottom of the
  // stack: about 2 sqrt(lanes) dims instead of one per lane.
  void send(const std::vector<compiler::ValueId>& lanes, compiler::ValueId enable, size_t first_gated_op);

  // Values written only by ops [first_op, end_op) are +0 whenever `enable` is 0: their
  // dead-value clears read `enable` instead of the constant (no work on idle cycles).
  void gate_clears(size_t first_op, size_t end_op, compiler::ValueId enable);
  // The same for chosen values (wherever they are written): each is +0 whenever `enable`
  // is, and `enable` is exactly 0 or 1 (compiler::DeadClearOptions::enable_of). A value
  // that is itself exactly 0 or 1 (a flag, an address bit) may be its own enable.
  void gate_clears_of(const std::vector<compiler::ValueId>& values, compiler::ValueId enable);
  // Each value its own enable (values exactly 0 or 1 at their last write).
  void gate_own_clears(const std::vector<compiler::ValueId>& flags);
  // Values a unit writes that no op reads (e.g. the greedy head's one-hot where another
  // part chooses the successor): clear_dead.h keeps an unread value's dim to the end of the
  // program, so each gets a self-clear here (gate 128 enable, up -v/128, +1 onto v: one
  // op), which ends its dim's use right after it. `enable`: exactly 1 or +-0, and +-0
  // only where every value is (the unit's enable).
  void discard(const std::vector<compiler::ValueId>& values, compiler::ValueId enable, const std::string& label);

  // A computed successor: control tokens first, first + 1, ... first + onehot.size() - 1
  // (consecutive names) are chosen by `onehot` (values exactly 0 or 1, at most one 1,
  // all +-0 on every cycle whose token is not a Computed micro-op): one neuron per token
  // adds the hot entry into the control signature features (the LM head's, as an
  // embedding that names the token would), so the chosen token scores 2^20 + 2^10 like
  // any control token. Appends one MLP op (no constants: free when idle). A micro-op
  // with SuccessorTiming::Computed ends in it. Call once.
  void computed_successor(const std::string& first, const std::vector<compiler::ValueId>& onehot);

  // A one-deep return register, so that a routine of micro-ops shared by many callers (the
  // carry crossing, machine/crossing_routine.h) goes back to the micro-op its caller
  // names: a GDN head of one row, wiped and written with the code of MicroOp::call on a
  // calling token's cycle, read on a SuccessorTiming::Return token's cycle into the
  // delayed successor code (then three cycles in the delay line, as a Delayed token's
  // own). The code is 0/1 floats (control_vocab.h), exact in a float RAM. Call before
  // send().
  void return_register();

  void define(const std::string& control, MicroOp op);
  // A branch condition: `cond` exactly 0 or 1, and 0 on every cycle where no micro-op of
  // its unit runs (several units may add theirs; on a cycle at most one is 1). A
  // SuccessorTiming::Branch micro-op's successor is MicroOp::successor when the sum is 1
  // and MicroOp::otherwise when it is 0: its embedding names both into two staging
  // feature sets, and one op (2 neurons per control feature, after every condition)
  // copies the chosen set into the control features. Call before finish().
  void branch(compiler::ValueId cond);
  // A Branch micro-op (successor names: `then` when the condition is 1, else `otherwise`).
  MicroOp branch_step(const std::string& then, const std::string& otherwise) const;

  // Micro-op builders, successors by name. step: a token that sends nothing (its
  // successor reaches the LM head on its own cycle). write: a token followed by the three
  // value tokens of a float (the datapath's or the prompt's) that lands in element
  // `element` of register row `reg` (its successor waits three cycles in the delay line).
  MicroOp step(const std::string& successor) const;
  MicroOp write(int64_t reg, int element, const std::string& successor) const;
  // HDR (host position 0: reads and writes nothing, names `first`), NOP and DONE (each
  // names itself).
  void define_header(const std::string& first);

  // Builds the embedding rows, compiles, installs the LM head rows. Throws when a control
  // token is undefined or names an unknown successor, register or element.
  AssembledMachine finish();

 private:
  AssemblerOptions o_;
  AssembledMachine m_;
  std::map<std::string, int64_t> index_;
  compiler::Program p_;
  npu::InboxValues reg_;                      // shared channels, address bits and read flag
  std::vector<npu::InboxValues> heads_;       // the register file's elements, then the scalars
  std::vector<compiler::ValueId> register_out_;
  std::vector<compiler::ValueId> inputs_;     // unit flags (token-set)
  int64_t lanes_sent_ = 0;                    // send()'s lanes
  std::vector<compiler::ValueId> lane_group_, lane_member_;  // the flags that name a lane
  // The LM head's control features (written by the successor decoder, the computed
  // successor), and the successors as codes (control_vocab.h) from the token to the
  // decoder: this token's, the one parked for three cycles, and a branch's two.
  SignatureFeatures now_;
  SuccessorCode now_code_, delayed_;
  std::vector<npu::EmitFeatures> features_;   // p0, p1, p2 of the sent float
  std::vector<std::pair<std::pair<size_t, size_t>, compiler::ValueId>> gated_;
  std::vector<std::pair<compiler::ValueId, compiler::ValueId>> clear_enables_;  // gate_clears_of: (value, enable)
  std::vector<std::pair<compiler::ValueId, compiler::ValueId>> immediate_data_;  // (data or bias, its write flag)
  bool computed_ = false;
  std::vector<compiler::ValueId> conditions_;   // branch(): summed by the selecting op
  SuccessorCode then_, otherwise_;              // the staging codes a Branch token sets
  // return_register(): the code a calling token parks, and the write and read flags.
  SuccessorCode return_;
  compiler::ValueId return_write_ = compiler::kNever, return_read_ = compiler::kNever;
  std::vector<MicroOp> ops_;
  std::vector<char> defined_;
};

}  // namespace qpu::machine
