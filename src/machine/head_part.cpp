#include "machine/head_part.h"

#include "common/error.h"
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
                   const Assembler::Immediate& tok, const std::function<std::vector<ValueId>(ValueId)>& x)
    : as_(as), vocab_(ck.config().vocab_size), tok_(tok) {
  if (o.block_rows < 1) fail("head: {} classifier rows per block", o.block_rows);
  compiler::Program& p = as.program();
  head_ = as.input("head.on");
  const std::vector<ValueId> operand = x(head_);
  const size_t first = p.ops().size();
  const std::vector<float> rms_final(ck.weights().rms_final.begin(), ck.weights().rms_final.end());
  const npu::RmsnormUnit norm = npu::rmsnorm_unit(p, {rms_final}, operand, {head_});
  npu::GreedyBlockOptions go;
  go.block_rows = o.block_rows;
  go.matvec.max_op_neurons = npu::kBudgetMaxOpNeurons;
  const npu::GreedyHead h = npu::greedy_head_blocks(p, norm.out, ck.weights().wcls, vocab_, head_, go);
  as.gate_clears(first, p.ops().size(), head_);
  as.computed_successor(story_token_name(0), h.onehot);

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

void HeadPart::define(int first_lane, ValueId send, int64_t x_register, const std::string& after_token) {
  {
    MicroOp op;
    op.sets = {{head_, 1.0f}};
    op.read_register = x_register;
    op.timing = SuccessorTiming::Computed;
    as_.define("HEAD", std::move(op));
  }
  for (int k = 0; k < vocab_; ++k) {
    MicroOp op = as_.step(after_token);
    op.sets = as_.immediate(tok_, k);
    as_.define(story_token_name(k), std::move(op));
  }
  // A read-back token sends lane `lane` up (nothing is written: the host only reads it).
  auto sends = [&](int lane, ValueId read_flag, const std::string& next) {
    MicroOp op = as_.step(next);
    op.sets = {{send, 1.0f}, as_.lane_flag(first_lane + lane), {read_flag, 1.0f}};
    op.timing = SuccessorTiming::Delayed;
    return op;
  };
  as_.define("RT", sends(0, tok_.read_flag, "RL"));
  as_.define("RL", sends(1, logit_read_, "DONE"));
}

}  // namespace qpu::machine
