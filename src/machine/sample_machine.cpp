#include "machine/sample_machine.h"

#include <string>

#include "common/error.h"

namespace qpu::machine {

using compiler::ValueId;

namespace {

std::string name(const char* prefix, int i) { return std::string(prefix) + "." + std::to_string(i); }

}  // namespace

int64_t SampleMachine::story_token(int k) const {
  if (k < 0 || k >= vocab) fail("sample machine: no story token {} (vocab {})", k, vocab);
  return id(story_token_name(k));
}

std::vector<int64_t> SampleMachine::load_and_run(const std::vector<float>& x, float temperature, float coin) const {
  if (x.size() != static_cast<size_t>(dim)) fail("sample machine: x has {} elements, dim is {}", x.size(), dim);
  std::vector<int64_t> t;
  auto write = [&](const std::string& op, float v) {
    t.push_back(id(op));
    for (int64_t p : value_tokens(v)) t.push_back(p);
  };
  for (int i = 0; i < dim; ++i) write(name("WX", i), x[static_cast<size_t>(i)]);
  write("WT", temperature);
  write("WC", coin);
  t.push_back(id("HEAD"));
  return t;
}

std::vector<int64_t> SampleMachine::expected(int k, float logit) const {
  std::vector<int64_t> s;
  for (int b = 0; b < blocks; ++b) s.push_back(id(SamplePart::temp_name(b)));
  s.push_back(id("MAX"));
  for (int b = 0; b < blocks; ++b) s.push_back(id(SamplePart::exp_name(b)));
  s.push_back(id("SUM"));
  for (int b = 0; b < blocks; ++b) s.push_back(id(SamplePart::prob_name(b)));
  s.push_back(id("CDF"));
  s.push_back(story_token(k));
  s.push_back(id("RT"));
  for (int64_t v : value_tokens(static_cast<float>(k))) s.push_back(v);
  s.push_back(id("RL"));
  for (int64_t v : value_tokens(logit)) s.push_back(v);
  s.push_back(done());
  return s;
}

SampleMachine build_sample_machine(const reference::Llama2Checkpoint& ck, const SampleMachineOptions& options) {
  const auto& cfg = ck.config();
  const int dim = cfg.dim;
  if (dim > 64) fail("sample machine: dim {} needs more than 64 register elements", dim);
  SampleMachineOptions o = options;
  o.argmax_successor = false;  // the CDF's one-hot chooses the story token
  std::vector<std::string> names = {"HDR", "NOP", "DONE", "WT", "WC"};
  for (int i = 0; i < dim; ++i) names.push_back(name("WX", i));
  for (const std::string& n : HeadPart::names(cfg)) names.push_back(n);
  for (const std::string& n : SamplePart::names(cfg, o.sample)) names.push_back(n);
  Assembler as(streamed_options(o, dim), names, "DONE");
  compiler::Program& p = as.program();
  const Assembler::Immediate tok = as.immediate_register("TOK");
  const Assembler::Scalar temperature = as.scalar_register("T");
  const Assembler::Scalar coin = as.scalar_register("COIN");
  // X is read only by HEAD tokens, T only by TEMP's, COIN only by CDF: each unit's
  // operands are +0 whenever its flag is (the idle contract without a gate).
  const size_t first_head_op = p.ops().size();
  HeadPart head(as, ck, o, tok, [&](ValueId) { return as.register_out(); });
  const compiler::OpRange head_ops{first_head_op, p.ops().size()};
  SamplePart sample(as, cfg, o.sample, head.logits(), head.flag(), temperature.out, temperature.read_flag, coin.out,
                    coin.read_flag);
  p.order(head_ops, compiler::OpRange{head_ops.end, p.ops().size()});  // the sampler's stages below HEAD
  as.computed_successor(story_token_name(0), sample.onehot());
  const ValueId send = as.input("send.on");
  as.send(head.lanes(), send, p.ops().size());

  as.define_header(name("WX", 0));
  for (int i = 0; i < dim; ++i) as.define(name("WX", i), as.write(0, i, i + 1 < dim ? name("WX", i + 1) : std::string("WT")));
  as.define("WT", as.write(0, temperature.element, "WC"));
  as.define("WC", as.write(0, coin.element, "HEAD"));
  HeadControl control;
  control.x_register = 0;
  control.next = SamplePart::temp_name(0);
  control.story_token = [&](int) { return as.step("RT"); };
  head.define(0, send, control);
  sample.define();
  SampleMachine m;
  static_cast<AssembledMachine&>(m) = as.finish();
  m.dim = dim;
  m.vocab = cfg.vocab_size;
  m.blocks = sample.blocks();
  m.block = o.sample.block;
  const SampleValues& v = sample.values();
  std::vector<ValueId> probed = v.scaled;
  probed.push_back(v.block_max);
  probed.push_back(v.max);
  for (const auto* s : {&v.mant, &v.exponent}) probed.insert(probed.end(), s->begin(), s->end());
  probed.push_back(v.sum);
  for (const auto* s : {&v.pm, &v.cdf, &v.lt, &v.onehot}) probed.insert(probed.end(), s->begin(), s->end());
  m.value_probes = m.probes(probed);
  return m;
}

}  // namespace qpu::machine
