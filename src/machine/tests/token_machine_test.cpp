// M2e end to end (machine/token_machine.h): the whole nested model on one looped machine.
// The host gets the prompt (HDR, the number of steps, the nested prompt's tokens for the
// prompt RAM) and nothing else; from there its own greedy output, fed back one token per
// forward, runs stories260K from BOS: per nested position every layer's QKV, attention
// stages, ATTO, FFN chunks and FFN, then INC, HEAD and the story token TOK.k that starts
// the next position, until DONE after the last step. Every generated host token must
// equal the stream that run.c's forward implies: every control token in order, every
// float sent up (x after the FFN of every layer, POS + 1) bit for bit, and TOK.k with k =
// run.c's next token (the prompt's while it lasts, else greedy). x after the attention
// no longer crosses (ATTO(l).0 writes it into the X1 RAM); every FFN float depends on it
// bit for bit. The sampling machine (TokenMachineOptions::sampling) runs run.c's
// temperature sampling (topp 1: sample_mult) below HEAD with the coin drawn from the seed:
// on sampled positions the stream also has TEMP.0 ... CDF, and TOK.k is run.c's sampled
// token (reference::Sampler, and reference::generate's story).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "compiler/window_check.h"
#include "machine/token_machine.h"
#include "machine_runner.h"
#include "npu/tests/unit_harness.h"
#include "reference/generate.h"
#include "reference/sampler.h"
#include "reference/tokenizer.h"
#include "reference/transformer.h"

namespace qpu::machine {
namespace {

using K = reference::TraceKind;
using npu::unit_testing::stories260k;

// x after the attention and after the FFN, per (position, layer), from run.c's trace.
class Residuals final : public reference::TraceObserver {
 public:
  void record(K kind, int pos, int layer, int head, std::span<const float> values) override {
    if (head >= 0 || (kind != K::x_att_res && kind != K::x_ffn_res)) return;
    auto& r = records_[{pos, layer}];
    (kind == K::x_att_res ? r.first : r.second).assign(values.begin(), values.end());
  }
  const std::pair<std::vector<float>, std::vector<float>>& at(int pos, int layer) const { return records_.at({pos, layer}); }

 private:
  std::map<std::pair<int, int>, std::pair<std::vector<float>, std::vector<float>>> records_;
};

// run.c's sampler settings (-t, -s, -p; topp 1: sample_mult). Temperature 0: greedy.
struct Sampling {
  float temperature = 0.0f;
  uint64_t seed = 0;
  float topp = 1.0f;
};

// run.c's run from `prompt` (BOS first): the records of positions 0 .. positions - 1,
// the next token forced to the prompt's while it lasts, else run.c's sample() (greedy at
// temperature 0: the first maximum).
std::vector<PositionRecord> run_c(const std::vector<int>& prompt, int positions, int* forced_differs = nullptr,
                                  Sampling sampling = {}) {
  const auto& ck = stories260k();
  reference::Transformer tf(ck);
  reference::Sampler sampler(ck.config().vocab_size, sampling.temperature, sampling.topp, sampling.seed);
  Residuals res;
  tf.set_trace(&res);
  std::vector<PositionRecord> out;
  int token = prompt.at(0);
  for (int pos = 0; pos < positions; ++pos) {
    const std::span<float> logits = tf.forward(token, pos);
    PositionRecord r;
    r.pos = pos;
    const int argmax = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());  // the first maximum
    const bool forced = pos + 1 < static_cast<int>(prompt.size());
    r.sampled = !forced && sampling.temperature > 0.0f;
    std::vector<float> scratch(logits.begin(), logits.end());  // sample() works in place
    r.next = forced ? prompt[static_cast<size_t>(pos + 1)] : sampler.sample(scratch);
    if (r.sampled && sampling.topp > 0.0f && sampling.topp < 1.0f) {  // n0: scratch holds run.c's probabilities now
      const float cutoff = (1.0f - sampling.topp) / static_cast<float>(ck.config().vocab_size - 1);
      r.kept = static_cast<int>(std::count_if(scratch.begin(), scratch.end(), [&](float p) { return p >= cutoff; }));
    }
    if (forced_differs && forced && r.next != argmax) ++*forced_differs;
    for (int l = 0; l < ck.config().n_layers; ++l) {
      r.x_att_res.push_back(res.at(pos, l).first);
      r.x_ffn_res.push_back(res.at(pos, l).second);
    }
    token = r.next;
    out.push_back(std::move(r));
    if (token == 1) break;  // run.c: if (next == 1) break;
  }
  return out;
}

TokenMachine build(bool sampling, float topp = 1.0f) {
  TokenMachineOptions o;
  o.max_positions = 16;  // two blocks of 8 positions
  o.sampling = sampling;
  o.sample.topp = topp;
  const auto start = std::chrono::steady_clock::now();
  TokenMachine built = build_token_machine(stories260k(), o);
  testing::print_shape(topp < 1.0f ? "top-p token machine" : sampling ? "sampling token machine" : "token machine", built);
  std::printf("built in %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return built;
}

const TokenMachine& machine() {
  static const TokenMachine m = build(false);
  return m;
}

const TokenMachine& sampling_machine() {
  static const TokenMachine m = build(true);
  return m;
}

const TokenMachine& topp_machine() {  // run.c's default -p 0.9
  static const TokenMachine m = build(true, 0.9f);
  return m;
}

// One engine model per machine, shared by its tests (building it takes most of a test's
// setup); each call of the hosts is a fresh host on it.
std::shared_ptr<const engine::Model> engine_model(const TokenMachine& m) {
  static std::map<const TokenMachine*, std::shared_ptr<const engine::Model>> made;
  auto it = made.find(&m);
  if (it == made.end()) it = made.emplace(&m, std::make_shared<const engine::Model>(m.model())).first;
  return it->second;
}

const testing::Hosts& hosts(const TokenMachine& m) {
  static std::map<const TokenMachine*, testing::Hosts> made;
  auto it = made.find(&m);
  if (it == made.end()) it = made.emplace(&m, testing::engine_hosts(engine_model(m), {})).first;
  return it->second;
}

// Runs the machine from its prompt for `steps` positions; every generated token must be
// what run.c implies, through the last story token and DONE. `records`: run.c's records.
void expect_story(const std::vector<int>& prompt, int steps, const TokenMachine& m = machine(), Sampling sampling = {},
                  std::vector<PositionRecord>* records_out = nullptr) {
  const std::vector<PositionRecord> records = run_c(prompt, steps, nullptr, sampling);
  if (records_out) *records_out = records;
  std::vector<int64_t> expected = {m.id("TOK.1")};
  std::vector<size_t> ends;
  for (const PositionRecord& r : records) {
    for (int64_t t : m.expected_position(r)) expected.push_back(t);
    ends.push_back(expected.size());
  }
  const int positions = static_cast<int>(records.size());
  expected.push_back(m.done());
  const testing::Run run = testing::run_greedy(m, m.prompt(prompt, steps, sampling.temperature, sampling.seed), hosts(m)(),
                                               static_cast<int64_t>(expected.size()) + 4);
  EXPECT_EQ(run.ambiguous, 0);
  EXPECT_LE(run.max_nonzero_on_value_cycles, 3);
  ASSERT_EQ(run.generated.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto pos = std::upper_bound(ends.begin(), ends.end(), i) - ends.begin();
    ASSERT_EQ(run.generated[i], expected[i]) << "generated token " << i << " (nested position " << pos << ")";
  }
  std::string story;
  for (const PositionRecord& r : records) {
    story += ' ';
    story += std::to_string(r.next);
  }
  std::printf("token machine: %d nested positions (prompt of %zu), %zu host cycles (%.0f per position), %.3f ms per "
              "cycle; tokens%s\n",
              positions, prompt.size(), expected.size(), static_cast<double>(expected.size()) / positions,
              1e3 * run.generate_seconds / static_cast<double>(std::max<int64_t>(1, run.generate_forwards)), story.c_str());
}

// From BOS alone, 10 positions: the attention's second block from position 8 on.
TEST(TokenMachine, GreedyStoryFromBosBitExactOnTheEngine) { expect_story({1}, 10); }

// BOS as the next token ends the story as run.c's `if (next == 1) break;` does, before
// the last step: here a prompt forces it at position 2 (the model picking it takes the
// same branch: TOK.1 goes on only at position 0).
TEST(TokenMachine, BosEndsTheStoryAsRunC) {
  const std::vector<int> prompt = {1, 403, 1};
  ASSERT_EQ(run_c(prompt, 8).size(), 2u);  // run.c stops after position 1
  expect_story(prompt, 8);
}

// A prompt run.c's greedy run would not write ("Lily saw"): its tokens forced, then greedy.
TEST(TokenMachine, PromptTokensForcedThenGreedyOnTheEngine) {
  const auto tok = reference::Tokenizer::load(npu::unit_testing::model_dir() + "tok512.bin", 512);
  const std::vector<int> prompt = tok.encode("Lily saw", true, false);
  ASSERT_GE(prompt.size(), 3u);
  const int steps = static_cast<int>(prompt.size()) + 2;
  int differs = 0;
  run_c(prompt, steps, &differs);
  EXPECT_GT(differs, 0);  // the forced tokens are not the argmax: the test sees the prompt RAM at work
  expect_story(prompt, steps);
}

}  // namespace
}  // namespace qpu::machine

namespace qpu::machine {
namespace {

// run.c's story for (prompt text, steps, temperature, seed, topp 1) through
// reference::generate: its tokens after BOS (a final BOS included).
std::vector<int> generated_story(const std::string& text, int steps, Sampling sampling) {
  const auto& ck = stories260k();
  const auto tok = reference::Tokenizer::load(npu::unit_testing::model_dir() + "tok512.bin", ck.config().vocab_size);
  reference::Transformer tf(ck);
  reference::Sampler sampler(ck.config().vocab_size, sampling.temperature, sampling.topp, sampling.seed);
  const reference::GenerateResult g = reference::generate(tf, tok, sampler, text, steps);
  return {g.tokens.begin() + 1, g.tokens.end()};
}

// A sampled story on the sampling machine: every host token as run.c implies (the stages'
// tokens on sampled positions), and the story tokens = reference::generate's.
void expect_sampled_story(const std::string& text, int steps, Sampling sampling, const TokenMachine& m = sampling_machine()) {
  const auto tok = reference::Tokenizer::load(npu::unit_testing::model_dir() + "tok512.bin", 512);
  const std::vector<int> prompt = tok.encode(text, true, false);
  std::vector<PositionRecord> records;
  expect_story(prompt, steps, m, sampling, &records);
  std::vector<int> story;
  int sampled = 0;
  for (const PositionRecord& r : records) {
    story.push_back(r.next);
    sampled += r.sampled ? 1 : 0;
  }
  // Every position after the prompt drew its coin on the machine.
  EXPECT_EQ(sampled, static_cast<int>(records.size() - (prompt.size() - 1)));
  EXPECT_EQ(story, generated_story(text, steps, sampling));
  // run.c's coins pick other tokens than the argmax here: the test sees the coins.
  std::vector<int> greedy;
  for (const PositionRecord& r : run_c(prompt, steps)) greedy.push_back(r.next);
  EXPECT_NE(story, greedy);
}

// run.c -t 1.0 -s 42 -p 1 from BOS: every position sampled, the coin of draw n = pos + 1
// (the story leaves the greedy one at position 8: "big", not "little"; the attention's
// second block of 8 positions).
TEST(TokenMachineSampling, RunCSampledStoryFromBosBitExactOnTheEngine) { expect_sampled_story("", 10, {1.0f, 42}); }

// run.c -t 0.8 -s 7 -p 1 -i "Lily": the prompt's tokens forced (no coin drawn), then sampled
// from draw 1 on.
TEST(TokenMachineSampling, RunCSampledStoryAfterAPromptBitExactOnTheEngine) {
  expect_sampled_story("Lily", 7, {0.8f, 7});
}

// Temperature 0 on the sampling machine: HEAD's argmax names TOK.k at once (no stage runs),
// the greedy machine's story token for token.
TEST(TokenMachineSampling, TemperatureZeroIsTheGreedyStory) {
  std::vector<PositionRecord> records;
  expect_story({1}, 6, sampling_machine(), {0.0f, 42}, &records);
  const std::vector<PositionRecord> greedy = run_c({1}, 6);
  ASSERT_EQ(records.size(), greedy.size());
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_FALSE(records[i].sampled);
    EXPECT_EQ(records[i].next, greedy[i].next) << "position " << i;
  }
}

// run.c -t 0.8 -p 0.9 -s 7 -i "Lily" (run.c's default -p): top-p on the machine (KEEP ...
// PICK.15 between HEAD and TOK.k, RANK over the block pairs below each position's n0),
// every host token as run.c implies and the story = reference::generate's.
TEST(TokenMachineTopp, RunCToppStoryAfterAPromptBitExactOnTheEngine) {
  expect_sampled_story("Lily", 7, {0.8f, 7, 0.9f}, topp_machine());
}

// The builders' contract on every stage of a machine (compiler/window_check.h): on a run
// of run.c's story for (prompt, steps, sampling), every value an op reads is +-0 or in the
// value window and every value starts on a dim that holds exactly +0, so that every
// dead-value clear is exact and leaves +0 for the dim's next occupant. Checked on the
// first 2 cycles of every control token and the first 64 value-token cycles (a check
// reads every op's inputs of the whole pass).
void expect_contract_kept(const TokenMachine& m, const std::string& text, int steps, Sampling sampling) {
  const auto tok = reference::Tokenizer::load(npu::unit_testing::model_dir() + "tok512.bin", 512);
  compiler::WindowCheck check(m.program, m.compiled.schedule, m.compiled.allocation, m.interface.inputs,
                              m.emit_options.norm_exponent);
  bool on = false;
  const testing::Step inner = testing::engine_hosts(engine_model(m), [&](int64_t s, std::span<const float> residual) {
    if (on) check.before_sublayer(s + 1, residual);
  })();
  std::map<int64_t, int> seen;
  int64_t checked = 0;
  const int64_t values = static_cast<int64_t>(m.encoding.vocab.size()), H = m.compiled.weights.config.hidden_size;
  const testing::Step step = [&](int64_t token, std::span<float> logits, std::span<float> hidden) {
    const int64_t key = token < values ? -1 : token;
    on = seen[key]++ < (key < 0 ? 64 : 2);
    if (on) {
      ++checked;
      check.before_sublayer(0, std::span<const float>(m.compiled.weights.embed_tokens)
                                   .subspan(static_cast<size_t>(token * H), static_cast<size_t>(H)));
    }
    inner(token, logits, hidden);
  };
  const testing::Run run =
      testing::run_greedy(m, m.prompt(tok.encode(text, true, false), steps, sampling.temperature, sampling.seed), step, 1000000);
  ASSERT_FALSE(run.generated.empty());
  EXPECT_EQ(run.generated.back(), m.done());
  std::string first;
  for (const std::string& v : check.first_violations()) first += "\n  " + v;
  EXPECT_EQ(check.violations(), 0) << first;
  std::printf("value window: %lld of %zu cycles checked (%zu distinct tokens), %lld violations%s\n",
              static_cast<long long>(checked), run.generated.size(), seen.size(),
              static_cast<long long>(check.violations()), first.c_str());
}

TEST(TokenMachine, EveryReadInTheValueWindowAndEveryValueStartsOnPlusZero) {
  expect_contract_kept(machine(), "", 10, {});
}

TEST(TokenMachineTopp, EveryReadInTheValueWindowAndEveryValueStartsOnPlusZero) {
  expect_contract_kept(topp_machine(), "Lily", 7, {0.8f, 7, 0.9f});
}

}  // namespace
}  // namespace qpu::machine
