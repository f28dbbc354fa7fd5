#include "machine/testing/head_machine.h"

#include <string>

#include "common/error.h"

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
  const int dim = cfg.dim;
  if (dim > 64) fail("head machine: dim {} needs more than 64 register elements", dim);
  std::vector<std::string> names = {"HDR", "NOP", "DONE"};
  for (int i = 0; i < dim; ++i) names.push_back(name("WX", i));
  for (const std::string& n : HeadPart::names(cfg)) names.push_back(n);
  Assembler as(streamed_options(o, dim), names, "DONE");
  compiler::Program& p = as.program();
  const Assembler::Immediate tok = as.immediate_register("TOK");
  // X is read only by HEAD tokens, so the units' operands are +0 whenever their flag is
  // (their idle contract holds without an x gate).
  HeadPart head(as, ck, o, tok, [&](ValueId) { return as.register_out(); });
  const ValueId send = as.input("send.on");
  as.send(head.lanes(), send, p.ops().size());

  as.define_header(name("WX", 0));
  for (int i = 0; i < dim; ++i) as.define(name("WX", i), as.write(0, i, i + 1 < dim ? name("WX", i + 1) : std::string("HEAD")));
  HeadControl control;
  control.x_register = 0;
  control.story_token = [&](int) { return as.step("RT"); };
  head.define(0, send, control);
  HeadMachine m;
  static_cast<AssembledMachine&>(m) = as.finish();
  m.dim = dim;
  m.vocab = cfg.vocab_size;
  return m;
}

}  // namespace qpu::machine
