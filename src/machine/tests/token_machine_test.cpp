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
// bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "machine/token_machine.h"
#include "machine_runner.h"
#include "npu/tests/unit_harness.h"
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

// run.c's run from `prompt` (BOS first): the records of positions 0 .. positions - 1,
// the next token forced to the prompt's while it lasts, else greedy.
std::vector<PositionRecord> run_c(const std::vector<int>& prompt, int positions, int* forced_differs = nullptr) {
  const auto& ck = stories260k();
  reference::Transformer tf(ck);
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
    r.next = forced ? prompt[static_cast<size_t>(pos + 1)] : argmax;
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

const TokenMachine& machine() {
  static const TokenMachine m = [] {
    TokenMachineOptions o;
    o.max_positions = 16;  // two blocks of 8 positions
    const auto start = std::chrono::steady_clock::now();
    TokenMachine built = build_token_machine(stories260k(), o);
    testing::print_shape("token machine", built);
    std::printf("built in %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return built;
  }();
  return m;
}

// Runs the machine from its prompt for `steps` positions; every generated token must be
// what run.c implies, through the last story token and DONE.
void expect_story(const std::vector<int>& prompt, int steps) {
  const TokenMachine& m = machine();
  const std::vector<PositionRecord> records = run_c(prompt, steps);
  std::vector<int64_t> expected = {m.id("TOK.1")};
  std::vector<size_t> ends;
  for (const PositionRecord& r : records) {
    for (int64_t t : m.expected_position(r)) expected.push_back(t);
    ends.push_back(expected.size());
  }
  const int positions = static_cast<int>(records.size());
  expected.push_back(m.done());
  auto hosts = testing::engine_hosts(m.model());
  const testing::Run run = testing::run_greedy(m, m.prompt(prompt, steps), hosts(), static_cast<int64_t>(expected.size()) + 4);
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
