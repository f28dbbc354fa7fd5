#include "machine/head_machine.h"

#include <string>

#include "common/error.h"
#include "npu/float_ram.h"
#include "npu/unit_greedy_head.h"
#include "npu/unit_matvec.h"
#include "npu/unit_rmsnorm.h"

namespace qpu::machine {

using compiler::ValueId;

namespace {

std::string name(const char* prefix, int i) { return std::string(prefix) + "." + std::to_string(i); }

}  // namespace

int64_t HeadMachine::story_token(int k) const {
  if (k < 0 || k >= vocab) fail("head machine: no story token {} (vocab {})", k, vocab);
  return id(name("TOK", k));
}

std::vector<int64_t> HeadMachine::load_and_run(const std::vector<float>& x) const {
  if (x.size() != static_cast<size_t>(dim)) fail("head machine: x has {} elements, dim is {}", x.size(), dim);
  std::vector<int64_t> t;
  for (int i = 0; i < dim; ++i) {
    t.push_back(id(name("WX", i)));
    for (int64_t v : value_tokens(x[static_cast<size_t>(i)])) t.push_back(v);
  }
  t.push_back(id("HEAD"));
  return t;
}

std::vector<int64_t> HeadMachine::expected(int k, float logit) const {
  std::vector<int64_t> s = {story_token(k), id("RT")};
  for (int64_t v : value_tokens(static_cast<float>(k))) s.push_back(v);
  s.push_back(id("RL"));
  for (int64_t v : value_tokens(logit)) s.push_back(v);
  s.push_back(done());
  return s;
}

HeadMachine build_head_machine(const reference::Llama2Checkpoint& ck, const HeadMachineOptions& o) {
  const auto& cfg = ck.config();
  const int dim = cfg.dim, vocab = cfg.vocab_size;
  if (dim > 64) fail("head machine: dim {} needs more than 64 register elements", dim);
  if (o.block_rows < 1) fail("head machine: {} classifier rows per block", o.block_rows);

  std::vector<std::string> names = {"HDR", "NOP", "DONE", "HEAD", "RT", "RL"};
  for (int i = 0; i < dim; ++i) names.push_back(name("WX", i));
  for (int k = 0; k < vocab; ++k) names.push_back(name("TOK", k));
  Assembler as(streamed_options(o, dim), names, "DONE");
  compiler::Program& p = as.program();
  const Assembler::Immediate tok = as.immediate_register("TOK");

  // HEAD: X is read only by HEAD tokens, so the units' operands are +0 whenever their
  // flag is (their idle contract holds without an x gate).
  const ValueId head = as.input("head.on");
  const size_t first = p.ops().size();
  const std::vector<float> rms_final(ck.weights().rms_final.begin(), ck.weights().rms_final.end());
  const npu::RmsnormUnit norm = npu::rmsnorm_unit(p, {rms_final}, as.register_out(), {head});
  npu::GreedyBlockOptions go;
  go.block_rows = o.block_rows;
  go.matvec.max_op_neurons = npu::kBudgetMaxOpNeurons;
  const npu::GreedyHead h = npu::greedy_head_blocks(p, norm.out, ck.weights().wcls, vocab, head, go);
  as.gate_clears(first, p.ops().size(), head);
  as.computed_successor(name("TOK", 0), h.onehot);

  // The winning logit, kept for RL: one row, wiped and written by HEAD.
  const ValueId logit_read = as.input("logit.read");
  const ValueId logit = p.value("logit.out");
  std::vector<npu::FloatRamHead> ram(1);
  ram[0].data = {h.max};
  ram[0].write_flag = ram[0].wipe_flag = head;
  ram[0].read_flag = logit_read;
  ram[0].out = {logit};
  npu::float_ram(p, npu::FloatRamWindow{o.logit_low_binade}, ram, head, "logit RAM");

  const ValueId send = as.input("send.on");
  as.send({tok.out, logit}, send, p.ops().size());

  as.define_header(name("WX", 0));
  for (int i = 0; i < dim; ++i) as.define(name("WX", i), as.write(0, i, i + 1 < dim ? name("WX", i + 1) : std::string("HEAD")));
  {
    MicroOp op;
    op.sets = {{head, 1.0f}};
    op.read_register = 0;
    op.timing = SuccessorTiming::Computed;
    as.define("HEAD", std::move(op));
  }
  for (int k = 0; k < vocab; ++k) {
    MicroOp op = as.step("RT");
    op.sets = as.immediate(tok, k);
    as.define(name("TOK", k), std::move(op));
  }
  // A read-back token sends lane `lane` up (nothing is written: the host only reads it).
  auto sends = [&](int lane, ValueId read_flag, const std::string& next) {
    MicroOp op = as.step(next);
    op.sets = {{send, 1.0f}, as.lane_flag(lane), {read_flag, 1.0f}};
    op.timing = SuccessorTiming::Delayed;
    return op;
  };
  as.define("RT", sends(0, tok.read_flag, "RL"));
  as.define("RL", sends(1, logit_read, "DONE"));

  HeadMachine m;
  static_cast<AssembledMachine&>(m) = as.finish();
  m.dim = dim;
  m.vocab = vocab;
  return m;
}

}  // namespace qpu::machine
