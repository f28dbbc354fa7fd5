#include "machine/head_part.h"

#include "common/error.h"
#include "compiler/enable.h"
#include "npu/table_lookup.h"
#include "npu/float_ram.h"
#include "npu/unit_greedy_head.h"
#include "npu/unit_matvec.h"
#include "npu/unit_rmsnorm.h"

namespace qpu::machine {

using compiler::ValueId;

std::string story_token_name(int k) { return "TOK." + std::to_string(k); }

std::vector<std::string> HeadPart::names(const reference::Llama2Config& cfg) {
  std::vector<std::string> n = {"HEAD", "RT", "RL"};
  for (int k = 0; k < cfg.vocab_size; ++k) n.push_back(story_token_name(k));
  return n;
}

HeadPart::HeadPart(Assembler& as, const reference::Llama2Checkpoint& ck, const HeadOptions& o,
                   const Assembler::Immediate& tok, const FromFlag& x, const FromFlag& forced)
    : as_(as), vocab_(ck.config().vocab_size), tok_(tok), argmax_successor_(o.argmax_successor) {
  if (o.block_rows < 1) fail("head: {} classifier rows per block", o.block_rows);
  compiler::Program& p = as.program();
  head_ = as.input("head.on");
  const std::vector<ValueId> operand = x(head_);
  // Built before HEAD's gated range: the source of the forced token may write values on
  // other cycles too (a RAM's write address).
  const ValueId forced_token = forced ? forced(head_).at(0) : compiler::kNever;
  const size_t first = p.ops().size();
  const std::vector<float> rms_final(ck.weights().rms_final.begin(), ck.weights().rms_final.end());
  const npu::RmsnormUnit norm = npu::rmsnorm_unit(p, {rms_final}, operand, {head_});
  npu::GreedyBlockOptions go;
  go.block_rows = o.block_rows;
  go.matvec.max_op_neurons = npu::kBudgetMaxOpNeurons;
  const npu::GreedyHead h = npu::greedy_head_blocks(p, norm.out, ck.weights().wcls, vocab_, head_, go);
  logits_ = h.logits;
  std::vector<ValueId> onehot = h.onehot;
  if (forced) {
    // The forced token f (0: none, k + 1: token k) as a one-hot over [0, vocab] (its
    // constants read HEAD's flag: all +-0 when idle), then per token k: the argmax's
    // entry when f = 0 (gate 128 (argmax_k - head + hot_0): 128 for the winner, 0 or
    // -128 otherwise: silu gives 1 or +-0 exactly), or hot_(k+1).
    const size_t first_hot = p.ops().size();
    const std::vector<ValueId> hot = npu::one_hot(p, forced_token, vocab_ + 1, "head.forced");
    compiler::enable_constants(p, first_hot, head_);
    onehot = p.values("head.next", vocab_);
    std::vector<compiler::Neuron> ns;
    for (int k = 0; k < vocab_; ++k) {
      const auto u = static_cast<size_t>(k);
      ns.push_back({compiler::Lin{{{h.onehot[u], 128.0f}, {head_, -128.0f}, {hot[0], 128.0f}}},
                    compiler::Lin{{{head_, 1.0f / 128.0f}}}, {{onehot[u], 1.0f}}});
      ns.push_back({compiler::Lin{{{hot[u + 1], 128.0f}}}, compiler::Lin{{{hot[u + 1], 1.0f / 128.0f}}}, {{onehot[u], 1.0f}}});
    }
    p.mlp("head.next", std::move(ns));
  }
  as.gate_clears(first, p.ops().size(), head_);
  onehot_ = onehot;
  if (o.argmax_successor) as.computed_successor(story_token_name(0), onehot);

  // The winning logit, kept for RL: one row, wiped and written by HEAD.
  logit_read_ = as.input("logit.read");
  const ValueId logit = p.value("logit.out");
  std::vector<npu::FloatRamHead> ram(1);
  ram[0].data = {h.max};
  ram[0].write_flag = ram[0].wipe_flag = head_;
  ram[0].read_flag = logit_read_;
  ram[0].out = {logit};
  npu::float_ram(p, npu::FloatRamWindow{o.logit_low_binade}, ram, head_, "logit RAM");
  lanes_ = {tok.out, logit};
}

void HeadPart::define(int first_lane, ValueId send, const HeadControl& c) {
  {
    MicroOp op;
    op.sets = {{head_, 1.0f}};
    op.sets.insert(op.sets.end(), c.head_sets.begin(), c.head_sets.end());
    op.read_register = c.x_register;
    if (argmax_successor_ || c.next.empty())
      op.timing = SuccessorTiming::Computed;  // the argmax's, or one the machine computes from onehot()
    else
      op.successor = as_.control_index(c.next);
    as_.define("HEAD", std::move(op));
  }
  for (int k = 0; k < vocab_; ++k) {
    MicroOp op = c.story_token(k);
    for (const auto& set : as_.immediate(tok_, k)) op.sets.push_back(set);
    as_.define(story_token_name(k), std::move(op));
  }
  // A read-back token sends lane `lane` up (nothing is written: the host only reads it).
  auto sends = [&](int lane, ValueId read_flag, const std::string& next) {
    MicroOp op = as_.step(next);
    op.sets = {{send, 1.0f}, {read_flag, 1.0f}};
    op.lane = first_lane + lane;
    op.timing = SuccessorTiming::Delayed;
    return op;
  };
  as_.define("RT", sends(0, tok_.read_flag, "RL"));
  as_.define("RL", sends(1, logit_read_, "DONE"));
}

}  // namespace qpu::machine
