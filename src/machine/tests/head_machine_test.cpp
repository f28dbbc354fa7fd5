// M2d end to end (machine/testing/head_machine.h): prompts load run.c's x after the last nested
// layer (golden x_ffn_res of layer n_layers - 1) into register X and run HEAD, whose
// computed successor is the story token TOK.k; TOK.k writes k into TOK and names RT, which
// sends k up, then RL sends the winning logit up. At every tested position of the greedy
// story, k must be run.c's next token (golden next_token, chosen by sample_argmax) and
// the logit golden logits[k] bit for bit; every token of the stream as expected, no
// ambiguous cycle. All positions run in one host session, so TOK and the logit RAM are
// overwritten from case to case.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "common/float_bits.h"
#include "machine/testing/head_machine.h"
#include "machine_runner.h"
#include "npu/tests/unit_harness.h"
#include "reference/sampler.h"

namespace qpu::machine {
namespace {

using K = reference::TraceKind;
using npu::unit_testing::golden;
using npu::unit_testing::stories260k;

TEST(HeadMachine, GreedyStoryTokenAndLogitBitExactOnTheEngine) {
  const HeadMachine m = build_head_machine(stories260k(), HeadMachineOptions{});
  const auto& c = m.compiled.weights.config;
  testing::print_shape("head machine", m);
  EXPECT_LE(c.hidden_size, 1024);
  EXPECT_LE(c.intermediate_size, 1024);
  const auto& gold = golden();
  const int last = stories260k().config().n_layers - 1;
  auto hosts = testing::engine_hosts(m.model());
  const testing::Step host = hosts();
  int64_t cycles = 0, cases = 0;
  double seconds = 0;
  std::set<int> tokens;
  bool first = true;
  int last_pos = 0;
  // Every 7th position after the prompt (run.c sampled there), and the prompt's last.
  for (int pos = 0; pos < gold.positions; ++pos) {
    const std::vector<float>& next = gold.at(K::next_token, pos, -1);
    if (next[1] != 0.0f || pos % 7 != 3) continue;  // forced by the prompt, or not tested
    SCOPED_TRACE("position " + std::to_string(pos));
    const std::vector<float>& logits = gold.at(K::logits, pos, -1);
    const int k = static_cast<int>(next[0]);
    ASSERT_EQ(k, reference::sample_argmax(logits));  // greedy: run.c's choice is the argmax
    std::vector<int64_t> prompt;
    if (first) prompt.push_back(m.id("HDR"));
    first = false;
    for (int64_t t : m.load_and_run(gold.at(K::x_ffn_res, pos, last))) prompt.push_back(t);
    const std::vector<int64_t> want = m.expected(k, logits[static_cast<size_t>(k)]);
    const testing::Run r = testing::run_greedy(m, prompt, host, static_cast<int64_t>(want.size()) + 4);
    EXPECT_EQ(r.ambiguous, 0);
    EXPECT_LE(r.max_nonzero_on_value_cycles, 3);
    ASSERT_EQ(r.generated.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(r.generated[i], want[i]) << "generated token " << i;
    // The stream decoded: k, then the logit, bit for bit.
    const std::vector<int64_t>& g = r.generated;
    EXPECT_EQ(m.decode(g[2], g[3], g[4]), static_cast<float>(k));
    EXPECT_EQ(float_bits(m.decode(g[6], g[7], g[8])), float_bits(logits[static_cast<size_t>(k)]));
    tokens.insert(k);
    last_pos = pos;
    ++cases;
    cycles += r.generate_forwards;
    seconds += r.generate_seconds;
  }
  // The HEAD cycle itself (a prompt token, not timed above): the last case's prompt again,
  // token by token, timing HEAD's forward; its argmax is the story token once more.
  double head_ms = 0;
  {
    const int pos = last_pos;
    std::vector<float> logits(static_cast<size_t>(c.vocab_size)), hidden(static_cast<size_t>(c.hidden_size));
    const std::vector<int64_t> prompt = m.load_and_run(gold.at(K::x_ffn_res, pos, last));
    for (size_t i = 0; i + 1 < prompt.size(); ++i) host(prompt[i], logits, hidden);
    const auto start = std::chrono::steady_clock::now();
    host(prompt.back(), logits, hidden);
    head_ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int k = static_cast<int>(gold.at(K::next_token, pos, -1)[0]);
    EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), m.story_token(k));
  }
  std::printf("head machine: the HEAD cycle %.3f ms\n", head_ms);
  EXPECT_GE(cases, 8);
  EXPECT_GE(tokens.size(), 5u);  // different story tokens, not one lucky id
  std::printf("head machine: %lld positions, %zu distinct story tokens, bit-exact over %lld generated cycles, %.3f ms "
              "per cycle\n",
              static_cast<long long>(cases), tokens.size(), static_cast<long long>(cycles),
              cycles ? 1e3 * seconds / static_cast<double>(cycles) : 0.0);
}

}  // namespace
}  // namespace qpu::machine
