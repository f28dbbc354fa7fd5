// M2e end to end (machine/token_machine.h): the whole nested model on one looped machine.
// The host gets HDR and nothing else; from there its own greedy output, fed back one
// token per forward, runs stories260K from BOS: per nested position every layer's QKV,
// attention stages, ATTO, FFN chunks and FFN, then INC, HEAD and the story token TOK.k
// that starts the next position. Every generated host token must equal the stream that
// run.c's forward implies: every control token in order, every float sent up (x after
// the attention and after the FFN of every layer, POS + 1) bit for bit, and TOK.k with
// k = run.c's greedy next token.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "machine/token_machine.h"
#include "machine_runner.h"
#include "npu/tests/unit_harness.h"
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

// run.c's greedy run from BOS: the records of positions 0 .. positions - 1.
std::vector<PositionRecord> greedy_records(int positions) {
  const auto& ck = stories260k();
  reference::Transformer tf(ck);
  Residuals res;
  tf.set_trace(&res);
  std::vector<PositionRecord> out;
  int token = 1;
  for (int pos = 0; pos < positions; ++pos) {
    const std::span<float> logits = tf.forward(token, pos);
    PositionRecord r;
    r.pos = pos;
    r.next = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());  // the first maximum
    for (int l = 0; l < ck.config().n_layers; ++l) {
      r.x_att_res.push_back(res.at(pos, l).first);
      r.x_ffn_res.push_back(res.at(pos, l).second);
    }
    token = r.next;
    out.push_back(std::move(r));
  }
  return out;
}

TEST(TokenMachine, GreedyStoryFromBosBitExactOnTheEngine) {
  constexpr int kPositions = 10;  // crosses into the second block of 8 positions
  TokenMachineOptions o;
  o.max_positions = 16;
  const auto start = std::chrono::steady_clock::now();
  const TokenMachine m = build_token_machine(stories260k(), o);
  testing::print_shape("token machine", m);
  std::printf("built in %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  std::fflush(stdout);
  const std::vector<PositionRecord> records = greedy_records(kPositions);
  std::vector<int64_t> expected = {m.id("TOK.1")};
  std::vector<size_t> ends;
  for (const PositionRecord& r : records) {
    for (int64_t t : m.expected_position(r)) expected.push_back(t);
    ends.push_back(expected.size());
  }
  auto hosts = testing::engine_hosts(m.model());
  const testing::Run run = testing::run_greedy(m, {m.id("HDR")}, hosts(), static_cast<int64_t>(expected.size()));
  EXPECT_EQ(run.ambiguous, 0);
  EXPECT_LE(run.max_nonzero_on_value_cycles, 3);
  ASSERT_EQ(run.generated.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto pos = std::upper_bound(ends.begin(), ends.end(), i) - ends.begin();
    ASSERT_EQ(run.generated[i], expected[i]) << "generated token " << i << " (nested position " << pos << ")";
  }
  std::string story;
  for (const PositionRecord& r : records) story += " " + std::to_string(r.next);
  std::printf("token machine: %d nested positions, %zu host cycles (%.0f per position), %.3f ms per cycle; tokens%s\n",
              kPositions, expected.size(), static_cast<double>(expected.size()) / kPositions,
              1e3 * run.generate_seconds / static_cast<double>(std::max<int64_t>(1, run.generate_forwards)), story.c_str());
}

}  // namespace
}  // namespace qpu::machine
