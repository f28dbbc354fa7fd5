#include "machine/testing/sample_machine.h"

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

namespace {

// The prompt's writes: `op` and the three value tokens of v.
void write(const SampleMachine& m, std::vector<int64_t>& t, const std::string& op, float v) {
  t.push_back(m.id(op));
  for (int64_t p : m.value_tokens(v)) t.push_back(p);
}

std::vector<int64_t> load_x(const SampleMachine& m, const std::vector<float>& x, float temperature) {
  if (x.size() != static_cast<size_t>(m.dim)) fail("sample machine: x has {} elements, dim is {}", x.size(), m.dim);
  std::vector<int64_t> t;
  for (int i = 0; i < m.dim; ++i) write(m, t, name("WX", i), x[static_cast<size_t>(i)]);
  write(m, t, "WT", temperature);
  return t;
}

}  // namespace

std::vector<int64_t> SampleMachine::load_and_run(const std::vector<float>& x, float temperature, float coin) const {
  if (rng) fail("sample machine: the coin comes from the seed (load_and_run_seeded)");
  std::vector<int64_t> t = load_x(*this, x, temperature);
  write(*this, t, "WC", coin);
  t.push_back(id("HEAD"));
  return t;
}

std::vector<int64_t> SampleMachine::load_and_run_seeded(const std::vector<float>& x, float temperature, uint64_t seed,
                                                        int plen, int pos) const {
  if (!rng) fail("sample machine: the coin is the prompt's (load_and_run)");
  std::vector<int64_t> t = load_x(*this, x, temperature);
  for (int j = 0; j < 4; ++j) write(*this, t, name("WS", j), static_cast<float>((seed >> (16 * j)) & 0xffff));
  write(*this, t, "WPLEN", static_cast<float>(plen));
  write(*this, t, "WPOS", static_cast<float>(pos));
  t.push_back(id("HEAD"));
  return t;
}

std::vector<int64_t> SampleMachine::expected(int k, float logit, bool sampled, int kept) const {
  std::vector<int64_t> s;
  if (sampled) {
    for (const std::string& n : SamplePart::stream(blocks, topp, kept)) s.push_back(id(n));
    if (topp && s.back() == id("REFUSE")) {  // no story token
      s.push_back(done());
      return s;
    }
  }
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
  std::vector<std::string> names = {"HDR", "NOP", "DONE", "WT"};
  if (o.rng) {
    for (int j = 0; j < 4; ++j) names.push_back(name("WS", j));
    names.push_back("WPLEN");
    names.push_back("WPOS");
  } else {
    names.push_back("WC");
  }
  for (int i = 0; i < dim; ++i) names.push_back(name("WX", i));
  for (const std::string& n : HeadPart::names(cfg)) names.push_back(n);
  for (const std::string& n : SamplePart::names(cfg, o.sample)) names.push_back(n);
  Assembler as(streamed_options(o, dim), names, "DONE");
  compiler::Program& p = as.program();
  const Assembler::Immediate tok = as.immediate_register("TOK");
  const Assembler::Scalar temperature = as.scalar_register("T");
  // X is read only by HEAD tokens, T only by TEMP's, COIN only by CDF (the seed, PLEN and
  // POS only by MAX): each unit's operands are +0 whenever its flag is (the idle contract
  // without a gate).
  SampleCoin coin;
  std::vector<std::pair<std::string, Assembler::Scalar>> coin_registers;  // (write micro-op, register)
  if (o.rng) {
    coin.rng = true;
    coin.max_draws = o.max_draws;
    for (int j = 0; j < 4; ++j) {
      coin_registers.push_back({name("WS", j), as.scalar_register(name("SEED", j))});
      coin.seed_limbs[static_cast<size_t>(j)] = coin_registers.back().second.out;
    }
    coin_registers.push_back({"WPLEN", as.scalar_register("PLEN")});
    coin.plen = coin_registers.back().second.out;
    coin_registers.push_back({"WPOS", as.scalar_register("POS")});
    coin.pos = coin_registers.back().second.out;
    for (const auto& r : coin_registers) coin.reads.push_back(r.second.read_flag);  // MAX reads them all
  } else {
    coin_registers.push_back({"WC", as.scalar_register("COIN")});
    coin.value = coin_registers.back().second.out;
    coin.read = coin_registers.back().second.read_flag;
  }
  const size_t first_head_op = p.ops().size();
  HeadPart head(as, ck, o, tok, [&](ValueId) { return as.register_out(); });
  const compiler::OpRange head_ops{first_head_op, p.ops().size()};
  SamplePart sample(as, cfg, o.sample, head.logits(), head.flag(), temperature.out, temperature.read_flag, coin);
  p.order(head_ops, sample.stages());  // the sampler's stages below HEAD
  // TOK.0 ... TOK.(vocab - 1), TEMP.0: HEAD's argmax when T = 0, else TEMP.0; CDF's pick.
  as.computed_successor(story_token_name(0), sample.successor(head.onehot(), head.flag(), temperature.out));
  const ValueId send = as.input("send.on");
  as.send(head.lanes(), send, p.ops().size());

  as.define_header(name("WX", 0));
  for (int i = 0; i < dim; ++i) as.define(name("WX", i), as.write(0, i, i + 1 < dim ? name("WX", i + 1) : std::string("WT")));
  as.define("WT", as.write(0, temperature.element, coin_registers[0].first));
  for (size_t r = 0; r < coin_registers.size(); ++r)
    as.define(coin_registers[r].first, as.write(0, coin_registers[r].second.element,
                                                r + 1 < coin_registers.size() ? coin_registers[r + 1].first : std::string("HEAD")));
  HeadControl control;
  control.x_register = 0;
  control.head_sets = {{temperature.read_flag, 1.0f}};  // greedy (T = 0) or sampled
  control.story_token = [&](int) { return as.step("RT"); };
  head.define(0, send, control);
  sample.define();
  SampleMachine m;
  static_cast<AssembledMachine&>(m) = as.finish();
  m.dim = dim;
  m.vocab = cfg.vocab_size;
  m.blocks = sample.blocks();
  m.block = o.sample.block;
  m.rng = o.rng;
  m.topp = o.sample.topp_on();
  const SampleValues& v = sample.values();
  std::vector<ValueId> probed = v.scaled;
  probed.push_back(v.block_max);
  probed.push_back(v.max);
  for (const auto* s : {&v.mant, &v.exponent}) probed.insert(probed.end(), s->begin(), s->end());
  probed.push_back(v.sum);
  for (const auto* s : {&v.pm, &v.cdf, &v.lt, &v.onehot}) probed.insert(probed.end(), s->begin(), s->end());
  if (o.rng) probed.push_back(v.coin);
  if (m.topp) {
    probed.push_back(v.cutoff);
    probed.push_back(v.count_in);
    for (const auto* s : {&v.keep, &v.slot, &v.kept_p, &v.kept_q}) probed.insert(probed.end(), s->begin(), s->end());
    probed.push_back(v.n0);
    probed.insert(probed.end(), v.rank.begin(), v.rank.end());
    probed.insert(probed.end(), v.sorted_p.begin(), v.sorted_p.end());
    probed.insert(probed.end(), v.sorted_q.begin(), v.sorted_q.end());
    probed.insert(probed.end(), v.cum.begin(), v.cum.end());
    probed.push_back(v.last_idx);
    probed.push_back(v.cumulative_prob);
    probed.push_back(v.r);
    probed.push_back(v.pick);
    probed.push_back(v.pick_cum_in);
    probed.push_back(v.pick_part);
  }
  m.value_probes = m.probes(probed);
  m.probed_values = probed;
  return m;
}

}  // namespace qpu::machine
