// M3 on the machine (machine/testing/sample_machine.h): prompts load run.c's x after the last
// nested layer, the temperature and the coin, and run HEAD; the sampler's stages follow
// (TEMP.b, MAX, EXP.b, SUM, PROB.b, CDF) and CDF's one-hot is the computed successor, the
// story token TOK.k. Cases: sampled positions of run.c's runs (reference::Transformer and
// reference::Sampler on stories260K, topp 1: run.c's sample_mult path) -t 1.0 -s 42,
// -t 0.8 -s 7 -i "Lily" and -t 0.5 -s 42 -i "Once upon", each with run.c's own coin, plus
// coin 0 and a coin above the final cdf (run.c's fallback n - 1). At every case k must be
// run.c's token, and every value the stages compute (seen on their cycles through
// AssembledMachine::probes) must equal run.c's sample() bit for bit: each scaled logit and
// block max, the max, every e, the sum, every p, every cdf, [coin < cdf] and the one-hot.
// All cases run in one host session (every RAM refilled from case to case).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "common/error.h"
#include "common/float_bits.h"
#include "machine/testing/sample_machine.h"
#include "machine_runner.h"
#include "npu/tests/unit_harness.h"
#include "npu/unit_attention.h"
#include "npu/unit_sample.h"
#include "npu/unit_topp.h"
#include "reference/generate.h"
#include "reference/sampler.h"
#include "reference/tokenizer.h"

namespace qpu::machine {
namespace {

using K = reference::TraceKind;
using npu::unit_testing::model_dir;
using npu::unit_testing::stories260k;

struct Case {
  std::string what;
  std::vector<float> x, logits;
  float temperature = 1.0f, coin = 0.0f;
  uint64_t seed = 0;      // run.c's -s
  int plen = 0, pos = 0;  // the prompt's tokens (with BOS), the position
  int run_c = -1;  // run.c's token (its Sampler's for the runs' own positions, sample_mult's otherwise)
};

// x_ffn_res of the last layer per position.
class LastX final : public reference::TraceObserver {
 public:
  explicit LastX(int layer) : layer_(layer) {}
  void record(K kind, int pos, int layer, int, std::span<const float> values) override {
    if (kind == K::x_ffn_res && layer == layer_) x[pos].assign(values.begin(), values.end());
  }
  std::map<int, std::vector<float>> x;

 private:
  int layer_;
};

// Every `every`-th sampled position of run.c's run (temperature t, topp 1, seed, prompt)
// with the coin it drew there, up to `count` of them.
std::vector<Case> run_c_cases(float t, uint64_t seed, const char* prompt, int steps, int every, int count,
                              float topp = 1.0f) {
  const auto& ck = stories260k();
  const auto tok = reference::Tokenizer::load(model_dir() + "tok512.bin", ck.config().vocab_size);
  reference::Transformer tf(ck);
  reference::Sampler sampler(ck.config().vocab_size, t, topp, seed);
  LastX last(ck.config().n_layers - 1);
  uint64_t coins = seed;  // the same draws, one per sampled position
  std::vector<Case> out;
  int sampled = 0;
  reference::GenerateCallbacks cb;
  cb.trace = &last;
  cb.on_step = [&](const reference::GenerateStep& st) {
    if (st.forced) return;
    const float coin = reference::random_f32(coins);
    if (sampled++ % every != 0 || static_cast<int>(out.size()) >= count) return;
    Case c;
    c.what = "-t " + std::to_string(t) + " -p " + std::to_string(topp) + " -s " + std::to_string(seed) + " pos " +
             std::to_string(st.pos);
    c.x = last.x.at(st.pos);
    c.logits.assign(st.logits.begin(), st.logits.end());
    c.temperature = t;
    c.coin = coin;
    c.seed = seed;
    c.pos = st.pos;
    c.run_c = st.next;
    out.push_back(std::move(c));
  };
  const auto run = reference::generate(tf, tok, sampler, prompt, steps, false, cb);
  for (Case& c : out) c.plen = static_cast<int>(run.prompt_tokens.size());
  return out;
}

uint32_t bits(float x) { return float_bits(x); }

// The machine's probed values (SampleMachine::value_probes' order) as a forward's tap
// leaves them in `seen`.
struct ProbeTap {
  explicit ProbeTap(const SampleMachine& machine) : m(machine), seen(machine.value_probes.size()) {
    after.resize(static_cast<size_t>(2 * m.compiled.weights.config.num_hidden_layers));
    for (size_t i = 0; i < m.value_probes.size(); ++i)
      after[static_cast<size_t>(m.value_probes[i].after_sublayer)].push_back(i);
  }
  engine::SublayerTap tap() {
    return [this](int64_t sublayer, std::span<const float> residual) {
      for (size_t i : after[static_cast<size_t>(sublayer)]) seen[i] = residual[static_cast<size_t>(m.value_probes[i].dim)];
    };
  }
  const SampleMachine& m;
  std::vector<std::vector<size_t>> after;  // per sublayer: the probes read after it
  std::vector<float> seen;
};

// Runs every case in one host session and checks the stream and every stage's values.
void expect_run_c(const SampleMachine& m, const std::vector<Case>& cases) {
  const int n = m.vocab, B = m.block, NB = m.blocks;
  // The engine with a tap: the probed values of each cycle, filed by the stage that ran.
  const engine::Model model = m.model();
  engine::State state = model.new_state();
  ProbeTap probes(m);
  std::vector<float>& seen = probes.seen;
  const engine::SublayerTap tap = probes.tap();
  // Offsets into the probes (SampleMachine::value_probes' order).
  const size_t o_scaled = 0, o_bmax = o_scaled + B, o_max = o_bmax + 1, o_mant = o_max + 1, o_exp = o_mant + B,
               o_sum = o_exp + B, o_pm = o_sum + 1, o_cdf = o_pm + B, o_lt = o_cdf + n, o_hot = o_lt + n;
  ASSERT_EQ(m.value_probes.size(), o_hot + n + (m.rng ? 1 : 0));
  std::map<int64_t, std::pair<char, int>> stage;  // token id -> (stage, block)
  for (int b = 0; b < NB; ++b) {
    stage[m.id(SamplePart::temp_name(b))] = {'T', b};
    stage[m.id(SamplePart::exp_name(b))] = {'E', b};
    stage[m.id(SamplePart::prob_name(b))] = {'P', b};
  }
  stage[m.id("MAX")] = {'M', 0};
  stage[m.id("SUM")] = {'S', 0};
  stage[m.id("CDF")] = {'C', 0};
  struct Observed {
    std::vector<float> scaled, bmax, mant, exponent, pm, cdf, lt, hot;
    float max = -1.0f, sum = -1.0f, coin = -1.0f;
  } got;
  auto reset = [&] {
    got = Observed{};
    for (auto* v : {&got.scaled, &got.mant, &got.exponent, &got.pm, &got.cdf, &got.lt, &got.hot})
      v->assign(static_cast<size_t>(n), -1.0f);
    got.bmax.assign(static_cast<size_t>(NB), -1.0f);
  };
  double stage_seconds = 0;
  int64_t stage_cycles = 0;
  // The idle contract: on the prompt's cycles (before HEAD) every probed value is +-0. Not
  // checked on the other cycles: an active unit's `greater` can leave a residue below the
  // residual's exact window in a dim its clear cannot empty exactly (docs/npu-machine.md,
  // M3 "On the machine"), which idle values further down the same dim then show.
  bool in_prompt = true;
  const int64_t head_id = m.id("HEAD");
  int64_t idle_nonzero = 0, idle_checked = 0;
  const testing::Step step = [&](int64_t token, std::span<float> logits, std::span<float> hidden) {
    const auto it = stage.find(token);
    if (token == head_id) in_prompt = false;
    const auto start = std::chrono::steady_clock::now();
    model.forward(token, state, logits, hidden, it == stage.end() && !in_prompt ? engine::SublayerTap{} : tap);
    if (in_prompt) {
      for (size_t i = 0; i < seen.size(); ++i) {
        ++idle_checked;
        if (seen[i] != 0.0f && ++idle_nonzero <= 5)
          ADD_FAILURE() << "probe " << i << " is " << seen[i] << " on a prompt cycle (token " << token << ")";
      }
    }
    if (it == stage.end()) return;
    stage_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++stage_cycles;
    const auto [kind, b] = it->second;
    const auto q0 = static_cast<size_t>(b * B);
    for (size_t s = 0; s < static_cast<size_t>(B); ++s) {
      if (kind == 'T') got.scaled[q0 + s] = seen[o_scaled + s];
      if (kind == 'E') got.mant[q0 + s] = seen[o_mant + s], got.exponent[q0 + s] = seen[o_exp + s];
      if (kind == 'P') got.pm[q0 + s] = seen[o_pm + s];
    }
    if (kind == 'T') got.bmax[static_cast<size_t>(b)] = seen[o_bmax];
    if (kind == 'M') got.max = seen[o_max], got.coin = m.rng ? seen[o_hot + static_cast<size_t>(n)] : -1.0f;
    if (kind == 'S') got.sum = seen[o_sum];
    if (kind == 'C')
      for (size_t q = 0; q < static_cast<size_t>(n); ++q)
        got.cdf[q] = seen[o_cdf + q], got.lt[q] = seen[o_lt + q], got.hot[q] = seen[o_hot + q];
  };

  std::set<int> tokens;
  int greedy = 0;
  int64_t cycles = 0;
  double seconds = 0;
  bool first = true;
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    const bool sampled = k.temperature != 0.0f;  // run.c: temperature 0 is the greedy argmax
    const auto argmax = static_cast<size_t>(reference::sample_argmax(k.logits));
    const npu::SampleTrace tr = npu::sample_reference(k.logits, sampled ? k.temperature : 1.0f, k.coin);
    ASSERT_EQ(sampled ? tr.index : static_cast<int>(argmax), k.run_c);  // the C composition is run.c's sampler
    std::vector<int64_t> prompt;
    if (first) prompt.push_back(m.id("HDR"));
    first = false;
    for (int64_t t : m.rng ? m.load_and_run_seeded(k.x, k.temperature, k.seed, k.plen, k.pos)
                               : m.load_and_run(k.x, k.temperature, k.coin))
      prompt.push_back(t);
    const std::vector<int64_t> want = m.expected(k.run_c, k.logits[argmax], sampled);
    reset();
    in_prompt = true;
    const testing::Run r = testing::run_greedy(m, prompt, step, static_cast<int64_t>(want.size()) + 4);
    EXPECT_EQ(r.ambiguous, 0);
    EXPECT_LE(r.max_nonzero_on_value_cycles, 3);
    ASSERT_EQ(r.generated.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(r.generated[i], want[i]) << "generated token " << i;
    const std::vector<int64_t>& g = r.generated;
    const size_t rt = want.size() - 9;  // RT, k, RL, the logit, DONE
    EXPECT_EQ(m.decode(g[rt + 1], g[rt + 2], g[rt + 3]), static_cast<float>(k.run_c));
    tokens.insert(k.run_c);
    cycles += r.generate_forwards;
    seconds += r.generate_seconds;
    if (!sampled) {  // HEAD named TOK.k itself: no stage ran
      greedy += 1;
      continue;
    }
    // Every stage's values, bit for bit (+0 for a cdf of 0: C's cdf is never -0).
    int wrong = 0;
    auto check = [&](float have, float want_value, const std::string& what) {
      if (bits(have) == bits(want_value)) return;
      if (++wrong <= 8)
        ADD_FAILURE() << what << ": machine " << describe_float(have) << ", run.c " << describe_float(want_value);
    };
    for (size_t q = 0; q < static_cast<size_t>(n); ++q) {
      const std::string at = " " + std::to_string(q);
      check(got.scaled[q], tr.scaled[q], "scaled" + at);
      check(std::ldexp(got.mant[q], static_cast<int>(got.exponent[q])), tr.e[q], "e" + at);
      check(std::ldexp(got.pm[q], static_cast<int>(got.exponent[q])), tr.prob[q], "p" + at);
      bool high = false;
      check(0.0f + npu::attn_sum_decode(got.cdf[q], &high), tr.cdf[q], "cdf" + at);
      check(got.lt[q], static_cast<float>(tr.lt[q]), "coin < cdf" + at);
      check(got.hot[q], static_cast<int>(q) == tr.index ? 1.0f : 0.0f, "one-hot" + at);
    }
    for (size_t b = 0; b < static_cast<size_t>(NB); ++b) {
      float bm = tr.scaled[b * static_cast<size_t>(B)];
      for (size_t s = 1; s < static_cast<size_t>(B); ++s) bm = std::max(bm, tr.scaled[b * static_cast<size_t>(B) + s]);
      check(got.bmax[b], bm, "block max " + std::to_string(b));
    }
    check(got.max, tr.max, "max");
    check(got.sum, tr.sum, "sum");
    if (m.rng) check(got.coin, k.coin, "the coin drawn from the seed");
    EXPECT_EQ(wrong, 0);
  }
  EXPECT_GE(tokens.size(), 6u);  // different story tokens, not one lucky id
  EXPECT_EQ(idle_nonzero, 0) << "of " << idle_checked << " probe reads on prompt cycles";
  EXPECT_GT(idle_checked, 100000);
  std::printf("sample machine%s: %zu cases (%d greedy), %zu distinct story tokens, bit-exact over %lld generated cycles, %.3f ms per "
              "cycle; the %lld stage cycles %.3f ms each\n",
              m.rng ? " (coins from the seed)" : "", cases.size(), greedy, tokens.size(), static_cast<long long>(cycles),
              cycles ? 1e3 * seconds / static_cast<double>(cycles) : 0.0, static_cast<long long>(stage_cycles),
              stage_cycles ? 1e3 * stage_seconds / static_cast<double>(stage_cycles) : 0.0);
}

TEST(SampleMachine, RunCSampledTokensAndEveryStageBitExactOnTheEngine) {
  const auto build_start = std::chrono::steady_clock::now();
  const SampleMachine m = build_sample_machine(stories260k(), SampleMachineOptions{});
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - build_start).count();
  testing::print_shape("sample machine", m);
  std::printf("sample machine: built in %.1f s, %d blocks of %d\n", build_s, m.blocks, m.block);
  EXPECT_LE(m.compiled.weights.config.intermediate_size, 1024);
  const int n = m.vocab;

  std::vector<Case> cases;
  for (auto& k : run_c_cases(1.0f, 42, "", 48, 9, 5)) cases.push_back(std::move(k));
  for (auto& k : run_c_cases(0.8f, 7, "Lily", 48, 9, 5)) cases.push_back(std::move(k));
  for (auto& k : run_c_cases(0.5f, 42, "Once upon", 48, 9, 4)) cases.push_back(std::move(k));
  // The temperature's ends for stories260K's logits ([2^-23, 24.6]): 0.1 (scaled logits up
  // to ~250) and 3 (down to ~2^-25).
  for (auto& k : run_c_cases(0.1f, 1, "", 24, 11, 2)) cases.push_back(std::move(k));
  for (auto& k : run_c_cases(3.0f, 2, "", 24, 11, 2)) cases.push_back(std::move(k));
  ASSERT_GE(cases.size(), 16u);
  float widest = 0.0f, narrowest = 1e9f;  // the scaled logits' range over the cases
  for (const Case& k : cases)
    for (float l : npu::sample_reference(k.logits, k.temperature, 0.0f).scaled)
      if (l != 0.0f) widest = std::max(widest, std::fabs(l)), narrowest = std::min(narrowest, std::fabs(l));
  std::printf("sample machine: scaled logits with |x| in [%a, %a]\n", static_cast<double>(narrowest),
              static_cast<double>(widest));
  EXPECT_GT(widest, 0x1p7f);  // above the logit RAM's window: the scaled RAMs' own matters
  {  // coin 0 at a position whose first probability is below... any: run.c picks the first p > 0
    Case z = cases[1];
    z.what += ", coin 0";
    z.coin = 0.0f;
    z.run_c = reference::sample_mult(npu::sample_reference(z.logits, z.temperature, 0.0f).prob, 0.0f);
    cases.push_back(std::move(z));
  }
  {  // the fallback: the smallest coin on run.c's 2^-24 grid at or above the final cdf (< 1)
    bool found = false;
    for (const Case& k : cases) {
      const npu::SampleTrace tr = npu::sample_reference(k.logits, k.temperature, 0.0f);
      const double grid = std::ceil(static_cast<double>(tr.cdf.back()) * 0x1p24);
      if (grid >= 0x1p24) continue;
      Case f = k;
      f.what += ", coin above the final cdf";
      f.coin = static_cast<float>(grid * 0x1p-24);
      f.run_c = reference::sample_mult(tr.prob, f.coin);
      EXPECT_EQ(f.run_c, n - 1);
      cases.push_back(std::move(f));
      found = true;
      break;
    }
    ASSERT_TRUE(found) << "no case whose final cdf is below 1 - 2^-24";
  }
  // Temperature 0: run.c's greedy argmax, HEAD's own choice (the story "Once upon a time"),
  // between sampled cases and at the end.
  std::vector<Case> greedy = run_c_cases(0.0f, 42, "Once upon a time", 40, 7, 4);
  ASSERT_EQ(greedy.size(), 4u);
  cases.insert(cases.begin() + 3, greedy.begin(), greedy.begin() + 2);
  cases.insert(cases.end(), greedy.begin() + 2, greedy.end());
  expect_run_c(m, cases);
}

// Step 4 of M3: the coin from the seed on MAX's cycle (npu::rng_draw, draw POS - PLEN + 2)
// instead of the prompt's: run.c's sampled runs with seeds 42 and 7, every stage and the
// drawn coin bit for bit.
TEST(SampleMachine, CoinsFromTheSeedGiveRunCSampledTokensOnTheEngine) {
  SampleMachineOptions o;
  o.rng = true;
  const SampleMachine m = build_sample_machine(stories260k(), o);
  testing::print_shape("sample machine with the RNG", m);
  EXPECT_LE(m.compiled.weights.config.intermediate_size, 1024);
  std::vector<Case> cases;
  for (auto& k : run_c_cases(1.0f, 42, "", 48, 11, 4)) cases.push_back(std::move(k));
  for (auto& k : run_c_cases(0.8f, 7, "Lily", 48, 11, 4)) cases.push_back(std::move(k));
  for (auto& k : run_c_cases(0.5f, 42, "Once upon", 48, 11, 3)) cases.push_back(std::move(k));
  ASSERT_GE(cases.size(), 10u);
  EXPECT_GT(cases[4].plen, 1);  // "Lily": a prompt after BOS, so the first draw is past position 0
  expect_run_c(m, cases);
}


// run.c's top-p on the sample machine (docs/npu-machine.md, M3 "Top-p on the sample
// machine"): with SampleOptions::topp, PROB.b also computes the cutoff and each block's
// keep bits, KEEP.b the slots c_q = #{kept q' < q} and writes each kept (p, q) into the
// kept RAM at its slot (a data-addressed write), SLOT.r reads the kept RAM's slots 8r ..
// 8r + 7 back with n0 (SLOT.15 refuses n0 = 0 and n0 > 128: REFUSE, DONE), RANK.i.j for
// the block pairs below n0 and RSUM.i give every kept slot its stable descending rank and
// write the sorted RAM, SORTED.b reads it back and runs NUCLEUS (SORTED.15 also R), PICK.b
// picks, and PICK.15 names the story token. reference::sample_topp_trace (whose pick must
// be run.c's token) is the oracle for the cutoff, every count, keep bit and slot, every
// kept slot's (p, q) (+0 past n0: KEEP.0 wipes the kept RAM), n0, every rank, every sorted
// (p, q), every running sum, last_idx, cumulative_prob, r and the pick; the stream names
// run.c's token (or REFUSE). All cases in one host session (stale RAM rows from the case
// before: the masks past n0 must hold).
// x = 0: run.c's rmsnorm gives 0 and every classifier dot product 0, so every logit is +0
// and softmax is flat: p = 1/512 for every token (run.c: expf(0) = 1, sum 512).
Case flat_case(float coin) {
  Case c;
  c.what = "x = 0 (flat: every p = 2^-9)";
  c.x.assign(static_cast<size_t>(stories260k().config().dim), 0.0f);
  c.logits.assign(static_cast<size_t>(stories260k().config().vocab_size), 0.0f);
  c.coin = coin;
  return c;
}

std::string name_of(const SampleMachine& m, int64_t token) {
  for (const std::string& n : m.control_names)
    if (m.id(n) == token) return n;
  return "value token " + std::to_string(token);
}

void expect_topp(const SampleMachine& m, float topp, const std::vector<Case>& cases) {
  const int n = m.vocab, B = m.block, NB = m.blocks, rows = SamplePart::slot_rows();
  const size_t slots = static_cast<size_t>(npu::kToppSlots);
  const engine::Model model = m.model();
  engine::State state = model.new_state();
  ProbeTap probes(m);
  std::vector<float>& seen = probes.seen;
  const engine::SublayerTap tap = probes.tap();
  // SampleMachine::value_probes' order; with top-p no cdf and lt (no CDF)
  const size_t o_cutoff = static_cast<size_t>(B + 1 + 1 + 2 * B + 1 + B + n), o_count = o_cutoff + 1,
               o_keep = o_count + 1, o_slot = o_keep + B, o_kp = o_slot + B, o_kq = o_kp + 8;
  const size_t o_n0 = o_kq + 8, o_rank = o_n0 + 1, o_sp = o_rank + 8, o_sq = o_sp + 8, o_cum = o_sq + 8,
               o_last = o_cum + slots, o_cp = o_last + 1, o_r = o_cp + 1, o_pick = o_r + 1;
  const size_t o_cum_in = o_pick + 1, o_part = o_cum_in + 1;
  ASSERT_EQ(m.value_probes.size(), o_part + 1 + (m.rng ? 1 : 0));
  std::map<int64_t, std::pair<char, int>> stage;
  for (int b = 0; b < NB; ++b) {
    stage[m.id(SamplePart::prob_name(b))] = {'P', b};
    stage[m.id(SamplePart::keep_name(b))] = {'K', b};
  }
  for (int r = 0; r < rows; ++r) {
    stage[m.id(SamplePart::slot_name(r))] = {'R', r};
    stage[m.id(SamplePart::rsum_name(r))] = {'S', r};
    stage[m.id(SamplePart::sorted_name(r))] = {'O', r};
  }
  for (int r = 0; r < rows; ++r) stage[m.id(SamplePart::pick_name(r))] = {'X', r};
  std::vector<float> cutoff, count_in, keep, slot, kept_p, kept_q, n0, rank, sorted_p, sorted_q, cum, cum_in, part;
  float last_idx = -1.0f, cumulative_prob = -1.0f, r = -1.0f, pick = -1.0f;
  bool in_prompt = true;
  int64_t idle_nonzero = 0, idle_checked = 0;
  const int64_t head_id = m.id("HEAD");
  const testing::Step step = [&](int64_t token, std::span<float> logits, std::span<float> hidden) {
    const auto it = stage.find(token);
    if (token == head_id) in_prompt = false;
    model.forward(token, state, logits, hidden, it == stage.end() && !in_prompt ? engine::SublayerTap{} : tap);
    if (in_prompt)
      for (size_t i = 0; i < seen.size(); ++i)
        if (++idle_checked, seen[i] != 0.0f && ++idle_nonzero <= 5)
          ADD_FAILURE() << "probe " << i << " is " << seen[i] << " on a prompt cycle";
    if (it == stage.end()) return;
    const auto [kind, b] = it->second;
    const auto at = static_cast<size_t>(b);
    if (kind == 'P') cutoff[at] = seen[o_cutoff];
    if (kind == 'K') {
      count_in[at] = seen[o_count];
      for (size_t s = 0; s < static_cast<size_t>(B); ++s)
        keep[at * static_cast<size_t>(B) + s] = seen[o_keep + s], slot[at * static_cast<size_t>(B) + s] = seen[o_slot + s];
    }
    if (kind == 'R') {
      for (size_t h = 0; h < 8; ++h) kept_p[at * 8 + h] = seen[o_kp + h], kept_q[at * 8 + h] = seen[o_kq + h];
      n0[at] = seen[o_n0];
    }
    if (kind == 'S')
      for (size_t h = 0; h < 8; ++h) rank[at * 8 + h] = seen[o_rank + h];
    if (kind == 'O') {
      for (size_t h = 0; h < 8; ++h)
        sorted_p[at * 8 + h] = seen[o_sp + h], sorted_q[at * 8 + h] = seen[o_sq + h], cum[at * 8 + h] = seen[o_cum + at * 8 + h];
      if (b + 1 == rows) last_idx = seen[o_last], cumulative_prob = seen[o_cp], r = seen[o_r];
    }
    if (kind == 'X') {
      cum_in[at] = seen[o_cum_in];
      part[at] = seen[o_part];
      if (b + 1 == rows) pick = seen[o_pick];
    }
  };

  bool first = true;
  int64_t kept_checked = 0, picked = 0, refused = 0, cycles = 0;
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    const auto argmax = static_cast<size_t>(reference::sample_argmax(k.logits));
    const npu::SampleTrace tr = npu::sample_reference(k.logits, k.temperature, k.coin);
    // The oracle: run.c's top-p (the reference throws where run.c reads out of bounds)
    std::vector<reference::ProbIndex> scratch;
    size_t kept_n = 0;
    for (float pr : tr.prob) kept_n += pr >= (1.0f - topp) / static_cast<float>(n - 1) ? 1 : 0;
    const bool refuse = kept_n == 0 || kept_n > slots;
    reference::TopPTrace want;
    if (kept_n == 0) {
      EXPECT_THROW(reference::sample_topp(tr.prob, topp, k.coin, scratch), Error);
      want.cutoff = (1.0f - topp) / static_cast<float>(n - 1);
    } else {
      want = reference::sample_topp_trace(tr.prob, topp, k.coin);
      ASSERT_EQ(want.pick, reference::sample_topp(tr.prob, topp, k.coin, scratch));
      if (k.run_c >= 0) {
        ASSERT_EQ(want.pick, k.run_c);  // run.c's own token at its own positions
      }
    }
    ASSERT_EQ(want.kept.size(), kept_n);
    std::vector<int64_t> prompt;
    if (first) prompt.push_back(m.id("HDR"));
    first = false;
    for (int64_t t : m.load_and_run(k.x, k.temperature, k.coin)) prompt.push_back(t);
    const std::vector<int64_t> stream = m.expected(want.pick, k.logits[argmax], true, static_cast<int>(kept_n));
    cutoff.assign(static_cast<size_t>(NB), -1.0f);
    count_in.assign(static_cast<size_t>(NB), -1.0f);
    keep.assign(static_cast<size_t>(n), -1.0f);
    slot.assign(static_cast<size_t>(n), -1.0f);
    kept_p.assign(slots, -1.0f);
    kept_q.assign(slots, -1.0f);
    n0.assign(static_cast<size_t>(rows), -1.0f);
    rank.assign(slots, -1.0f);
    sorted_p.assign(slots, -1.0f);
    sorted_q.assign(slots, -1.0f);
    cum.assign(slots, -1.0f);
    cum_in.assign(static_cast<size_t>(rows), -1.0f);
    part.assign(static_cast<size_t>(rows), -1.0f);
    last_idx = cumulative_prob = r = pick = -1.0f;
    in_prompt = true;
    const testing::Run run = testing::run_greedy(m, prompt, step, static_cast<int64_t>(stream.size()) + 4);
    EXPECT_EQ(run.ambiguous, 0);
    for (size_t i = 0; i < std::min(stream.size(), run.generated.size()); ++i)
      if (run.generated[i] != stream[i]) {
        ADD_FAILURE() << "generated token " << i << ": " << name_of(m, run.generated[i]) << ", expected "
                      << name_of(m, stream[i]) << " (n0 " << kept_n << ")";
        break;
      }
    EXPECT_EQ(run.generated.size(), stream.size());
    cycles += static_cast<int64_t>(stream.size());

    int wrong = 0;
    auto check = [&](float have, float want_value, const std::string& what) {
      if (bits(have) == bits(want_value)) return;
      if (++wrong <= 8) ADD_FAILURE() << what << ": machine " << describe_float(have) << ", run.c " << describe_float(want_value);
    };
    for (int b = 0; b < NB; ++b) check(cutoff[static_cast<size_t>(b)], want.cutoff, "cutoff on PROB." + std::to_string(b));
    int before = 0;  // kept entries before q (run.c's order of the kept array)
    for (int q = 0; q < n; ++q) {
      const bool kept = tr.prob[static_cast<size_t>(q)] >= want.cutoff;
      if (q % B == 0) check(count_in[static_cast<size_t>(q / B)], static_cast<float>(before), "count before block " + std::to_string(q / B));
      check(keep[static_cast<size_t>(q)], kept ? 1.0f : 0.0f, "keep " + std::to_string(q));
      check(slot[static_cast<size_t>(q)], static_cast<float>(before), "slot " + std::to_string(q));
      before += kept ? 1 : 0;
    }
    for (int row = 0; row < rows; ++row)
      check(n0[static_cast<size_t>(row)], static_cast<float>(kept_n), "n0 on SLOT." + std::to_string(row));
    for (size_t i = 0; i < slots; ++i) {
      const bool used = i < kept_n;  // only the first kToppSlots when n0 > kToppSlots
      check(kept_p[i], used ? want.kept[i].prob : 0.0f, "kept p at slot " + std::to_string(i));
      check(kept_q[i], used ? static_cast<float>(want.kept[i].index) : 0.0f, "kept q at slot " + std::to_string(i));
      kept_checked += used ? 1 : 0;
    }
    if (refuse) {  // no stage after SLOT ran
      ++refused;
      EXPECT_EQ(rank[0], -1.0f);
      EXPECT_EQ(pick, -1.0f);
      EXPECT_EQ(wrong, 0);
      continue;
    }
    for (size_t i = 0; i < slots; ++i) {
      const bool used = i < kept_n;
      // RANK: run.c's stable descending order (0 past n0)
      check(rank[i], used ? static_cast<float>(want.rank[i]) : 0.0f, "rank of slot " + std::to_string(i));
      // the sorted RAM: run.c's probindex after qsort (+0 past n0)
      check(sorted_p[i], used ? want.sorted[i].prob : 0.0f, "sorted p at rank " + std::to_string(i));
      check(sorted_q[i], used ? static_cast<float>(want.sorted[i].index) : 0.0f, "sorted q at rank " + std::to_string(i));
      // NUCLEUS: C's running sum (past n0 it adds +0: the last sum)
      check(cum[i], want.cumulative[std::min(i, kept_n - 1)], "cumulative at rank " + std::to_string(i));
    }
    for (size_t b = 0; b < static_cast<size_t>(rows); ++b) {  // PICK.b: the rank before the block, the block's token
      check(cum_in[b], b == 0 ? 0.0f : want.cumulative[std::min(8 * b - 1, kept_n - 1)], "cum before PICK." + std::to_string(b));
      const bool here = static_cast<size_t>(want.pick_rank) / 8 == b;
      check(part[b], here ? static_cast<float>(want.pick) : 0.0f, "token of PICK." + std::to_string(b));
    }
    check(last_idx, static_cast<float>(want.last_idx), "last_idx");
    check(cumulative_prob, want.cumulative_prob, "cumulative_prob");
    check(r, want.r, "r");
    check(pick, static_cast<float>(want.pick), "the pick (rank " + std::to_string(want.pick_rank) + ", last_idx " +
                                                   std::to_string(want.last_idx) + ")");
    ++picked;
    EXPECT_EQ(wrong, 0);
  }
  EXPECT_EQ(idle_nonzero, 0) << "of " << idle_checked << " probe reads on prompt cycles";
  std::printf("top-p %g: %zu cases (%lld picked, %lld refused), %lld kept entries bit-exact, %lld generated cycles\n",
              static_cast<double>(topp), cases.size(), static_cast<long long>(picked), static_cast<long long>(refused),
              static_cast<long long>(kept_checked), static_cast<long long>(cycles));
}

TEST(SampleMachine, ToppPicksRunCTokenEveryStageBitExact) {
  SampleMachineOptions o;
  o.sample.topp = 0.9f;
  const auto build_start = std::chrono::steady_clock::now();
  const SampleMachine m = build_sample_machine(stories260k(), o);
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - build_start).count();
  testing::print_shape("sample machine with top-p", m);
  std::printf("sample machine with top-p: built in %.1f s\n", build_s);
  EXPECT_LE(m.compiled.weights.config.intermediate_size, 1024);
  ASSERT_TRUE(m.topp);
  const size_t slots = static_cast<size_t>(npu::kToppSlots);
  auto kept_count = [](const Case& k) {
    return reference::sample_topp_trace(npu::sample_reference(k.logits, k.temperature, k.coin).prob, 0.9f, k.coin).kept.size();
  };
  std::vector<Case> cases;
  for (auto& k : run_c_cases(1.0f, 42, "", 24, 5, 4, 0.9f)) cases.push_back(std::move(k));
  for (auto& k : run_c_cases(0.8f, 7, "Lily", 24, 5, 3, 0.9f)) cases.push_back(std::move(k));
  {  // coin 0 (rank 0) and 1 - 2^-24 (r just below cumulative_prob) at run.c's positions
    Case z = cases[1], w = cases[5];
    z.what += ", coin 0";
    z.coin = 0.0f;
    z.run_c = -1;
    w.what += ", coin 1 - 2^-24";
    w.coin = 1.0f - 0x1p-24f;
    w.run_c = -1;
    cases.push_back(std::move(z));
    cases.push_back(std::move(w));
  }
  {  // n0 > kToppSlots (run.c -t 3 -p 0.9): refused; then the flat x = 0 (n0 = 512): refused
    std::vector<Case> hot = run_c_cases(3.0f, 2, "", 8, 1, 8, 0.9f);
    const auto it = std::find_if(hot.begin(), hot.end(), [&](const Case& k) { return kept_count(k) > slots; });
    ASSERT_NE(it, hot.end()) << "no -t 3 position with more than " << slots << " kept entries";
    cases.push_back(*it);
    cases.push_back(flat_case(0.5f));
  }
  {  // the -t 1.0 run's two widest kept sets of 96 steps (n0 near the measured max of 95),
     // right after the refusals (their RAM rows stale)
    std::vector<Case> all = run_c_cases(1.0f, 42, "", 96, 1, 96, 0.9f);
    std::sort(all.begin(), all.end(), [&](const Case& a, const Case& b) { return kept_count(a) > kept_count(b); });
    cases.insert(cases.end(), all.begin(), all.begin() + 2);
    EXPECT_GT(kept_count(all.front()), 64u);  // rows past 8: every row bit of the kept RAM written
  }
  cases.push_back(cases[4]);  // a narrow one after the widest (stale partial ranks past n0)
  expect_topp(m, 0.9f, cases);
}

// n0 = 0: run.c's cutoff (1 - topp) / 511 is above 1/512 for topp < 1/512, so a flat
// softmax keeps nothing (run.c reads probindex[-1]; the reference throws): the machine
// refuses. Real positions at that topp keep a few entries and pick run.c's token.
TEST(SampleMachine, ToppRefusesNothingKept) {
  SampleMachineOptions o;
  for (float outside : {0.99999f, 1.0f - 0x1p-24f, 0x1p-41f}) {  // run.c's cutoff below 2^-24; topp below 2^-40
    o.sample.topp = outside;
    EXPECT_THROW(build_sample_machine(stories260k(), o), Error) << outside;
  }
  EXPECT_TRUE(SamplePart::topp_fits(1.0f - 511 * 0x1p-24f, 512));  // the largest that fits: cutoff 2^-24
  EXPECT_FALSE(SamplePart::topp_fits(1.0f - 510 * 0x1p-24f, 512));
  o.sample.topp = 0.001f;
  const SampleMachine m = build_sample_machine(stories260k(), o);
  std::vector<Case> cases = run_c_cases(1.0f, 42, "", 12, 5, 2, 0.001f);
  cases.insert(cases.begin() + 1, flat_case(0.25f));
  expect_topp(m, 0.001f, cases);
}

}  // namespace
}  // namespace qpu::machine
