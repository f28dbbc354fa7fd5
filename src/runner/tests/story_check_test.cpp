// The checker against run.c's own greedy run: reference::generate (run.c's generate loop
// with the greedy sampler, traced) gives what a correct machine would stream; replayed
// into the checker it must compare every float and token with 0 differences, and every
// single corruption (a flipped bit of one reference float, a wrong next token, a missing
// or wrong float) must be reported at its own position, layer and element.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "reference/generate.h"
#include "reference/llama2_checkpoint.h"
#include "reference/sampler.h"
#include "reference/tokenizer.h"
#include "reference/transformer.h"
#include "runner/story_check.h"

namespace qpu::runner {
namespace {

using K = reference::TraceKind;
constexpr int kPositions = 8;

const reference::Llama2Checkpoint& stories260k() {
  static const reference::Llama2Checkpoint ck =
      reference::load_llama2_checkpoint(std::string(QPU_SHARED_DIR) + "/models/stories260K/stories260K.bin");
  return ck;
}

struct Event {
  bool story = false;
  bool logits = false;  // a logits vector (values), read on HEAD's cycle
  std::vector<float> values;
  StoryTokenEvent token;
  CrossingEvent crossing;
  std::string name;
};

// run.c's generate loop, greedy, traced: the events a correct machine streams for
// positions 0 .. kPositions - 1 and the story token that follows.
class GoldenStream final : public reference::TraceObserver {
 public:
  GoldenStream() {
    const auto& ck = stories260k();
    reference::Transformer tf(ck);
    reference::Tokenizer tok = reference::Tokenizer::load(std::string(QPU_SHARED_DIR) + "/models/stories260K/tok512.bin",
                                                          ck.config().vocab_size);
    reference::Sampler greedy(ck.config().vocab_size, 0.0f, 0.9f, 1);
    reference::GenerateCallbacks cb;
    cb.trace = this;
    story(0);  // BOS at position 0 comes before any float
    const auto result = reference::generate(tf, tok, greedy, "", kPositions, false, cb);
    EXPECT_EQ(result.positions, kPositions);
    tokens = result.tokens;
  }
  void record(K kind, int pos, int layer, int head, std::span<const float> values) override {
    if (head >= 0) return;
    if (kind == K::logits) {
      Event e;
      e.logits = true;
      e.token.position = pos;
      e.values.assign(values.begin(), values.end());
      events.push_back(std::move(e));
      return;
    }
    if (kind == K::next_token) {
      cross(pos, CrossingOp::Inc, -1, 0, static_cast<float>(pos + 1), "INC");
      story(pos + 1);
      return;
    }
    if (kind != K::x_ffn_res) return;  // x after the attention stays below the uplink (the X1 RAM)
    for (size_t i = 0; i < values.size(); ++i)
      cross(pos, CrossingOp::Ffn, layer, static_cast<int>(i), values[i], fmt::format("FFN({}).{}", layer, i));
  }

  std::vector<Event> events;
  std::vector<int> tokens;

 private:
  void story(int pos) {
    Event e;
    e.story = true;
    e.token.position = pos;
    events.push_back(e);
  }
  void cross(int pos, CrossingOp op, int layer, int element, float v, std::string name) {
    Event e;
    e.crossing = CrossingEvent{nullptr, op, layer, element, v, pos, 0};
    e.name = std::move(name);
    events.push_back(std::move(e));
  }
};

const GoldenStream& golden() {
  static const GoldenStream g;
  return g;
}

// Replays `events` into `checker` until it reports a difference.
void replay(StoryChecker& checker, const std::vector<Event>& events, const std::vector<int>& tokens) {
  for (const Event& e : events) {
    bool same = false;
    if (e.logits) {
      same = checker.check(LogitEvent{e.token.position, e.values, 0});
    } else if (e.story) {
      StoryTokenEvent t = e.token;
      t.token = tokens[static_cast<size_t>(e.token.position)];
      same = checker.check(t);
    } else {
      CrossingEvent c = e.crossing;
      c.name = &e.name;
      same = checker.check(c);
    }
    if (!same) return;
  }
}

int64_t per_position() {
  const auto& c = stories260k().config();
  return static_cast<int64_t>(c.n_layers) * c.dim + 1;
}

std::string hex(float v) { return fmt::format("0x{:08x}", std::bit_cast<uint32_t>(v)); }

TEST(StoryChecker, RunCsOwnGreedyStreamHasNoDifference) {
  const GoldenStream& g = golden();
  ASSERT_EQ(static_cast<int64_t>(g.events.size()), kPositions * per_position() + 2 * kPositions + 1);
  StoryChecker checker(stories260k());
  replay(checker, g.events, g.tokens);
  EXPECT_FALSE(checker.first_difference().has_value()) << checker.first_difference()->message();
  EXPECT_EQ(checker.floats_compared(), kPositions * per_position());
  EXPECT_EQ(checker.tokens_compared(), kPositions + 1);
  EXPECT_EQ(checker.logit_vectors_compared(), kPositions);
  for (int p = 0; p < kPositions; ++p) {
    EXPECT_EQ(checker.reference(p).token, g.tokens[static_cast<size_t>(p)]);
    EXPECT_EQ(checker.reference(p).next, g.tokens[static_cast<size_t>(p) + 1]);
  }
}

TEST(StoryChecker, EveryFlippedReferenceBitIsTheFirstDifferenceAtItsPlace) {
  const GoldenStream& g = golden();
  const auto& cfg = stories260k().config();
  std::mt19937 rng(424242);
  for (int trial = 0; trial < 60; ++trial) {
    const int pos = std::uniform_int_distribution<int>(0, kPositions - 1)(rng);
    const int layer = std::uniform_int_distribution<int>(0, cfg.n_layers - 1)(rng);
    const int element = std::uniform_int_distribution<int>(0, cfg.dim - 1)(rng);
    const int bit = std::uniform_int_distribution<int>(0, 31)(rng);
    StoryChecker checker(stories260k());
    checker.reference(kPositions - 1);  // run.c's whole run first: the flip changes no later position
    float& value = checker.reference(pos).x_ffn_res[static_cast<size_t>(layer)][static_cast<size_t>(element)];
    const float original = value;
    value = std::bit_cast<float>(std::bit_cast<uint32_t>(value) ^ (1u << bit));
    replay(checker, g.events, g.tokens);
    ASSERT_TRUE(checker.first_difference().has_value()) << "trial " << trial;
    const Difference& d = *checker.first_difference();
    EXPECT_EQ(d.position, pos);
    EXPECT_EQ(d.what, fmt::format("x after the FFN of layer {}, element {}", layer, element));
    EXPECT_NE(d.machine.find(hex(original)), std::string::npos) << d.machine;
    EXPECT_NE(d.run_c.find(hex(value)), std::string::npos) << d.run_c;
    EXPECT_NE(d.message().find(fmt::format("nested position {}", pos)), std::string::npos);
    const int64_t index = pos * per_position() + layer * cfg.dim + element;
    EXPECT_EQ(checker.floats_compared(), index + 1);
  }
}

TEST(StoryChecker, EveryFlippedLogitBitIsReportedAtItsEntry) {
  // 60 random (position, entry, bit) flips of the machine's side: each is the first
  // difference, at its position and entry, with both values' bits.
  const GoldenStream& g = golden();
  const int vocab = stories260k().config().vocab_size;
  std::mt19937 rng(20261130);
  for (int trial = 0; trial < 60; ++trial) {
    const int pos = static_cast<int>(rng() % kPositions), entry = static_cast<int>(rng() % static_cast<unsigned>(vocab));
    const int bit = static_cast<int>(rng() % 32);
    std::vector<Event> events = g.events;
    float flipped = 0.0f, original = 0.0f;
    for (Event& e : events) {
      if (!e.logits || e.token.position != pos) continue;
      float& v = e.values[static_cast<size_t>(entry)];
      original = v;
      v = flipped = std::bit_cast<float>(std::bit_cast<uint32_t>(v) ^ (1u << bit));
    }
    StoryChecker checker(stories260k());
    replay(checker, events, g.tokens);
    ASSERT_TRUE(checker.first_difference().has_value()) << trial;
    const Difference& d = *checker.first_difference();
    EXPECT_EQ(d.position, pos);
    EXPECT_EQ(d.what, fmt::format("logit {}", entry));
    EXPECT_NE(d.machine.find(hex(flipped)), std::string::npos) << d.machine;
    EXPECT_NE(d.run_c.find(hex(original)), std::string::npos) << d.run_c;
    EXPECT_EQ(checker.logit_vectors_compared(), pos + 1);
  }
  // A vector of the wrong length.
  StoryChecker checker(stories260k());
  const std::vector<float> short_vector(static_cast<size_t>(vocab - 1), 0.0f);
  EXPECT_FALSE(checker.check(LogitEvent{0, short_vector, 0}));
  ASSERT_TRUE(checker.first_difference().has_value());
  EXPECT_EQ(checker.first_difference()->what, "logits");
}

TEST(StoryChecker, AWrongNextTokenIsReportedAtThePositionItStarts) {
  const GoldenStream& g = golden();
  for (int pos = 0; pos < kPositions; ++pos) {
    StoryChecker checker(stories260k());
    checker.reference(kPositions - 1);
    int& next = checker.reference(pos).next;
    const int original = next;
    next = (next + 1) % stories260k().config().vocab_size;
    replay(checker, g.events, g.tokens);
    ASSERT_TRUE(checker.first_difference().has_value());
    EXPECT_EQ(checker.first_difference()->position, pos + 1);
    EXPECT_EQ(checker.first_difference()->machine, fmt::format("token {}", original));
    EXPECT_EQ(checker.first_difference()->run_c, fmt::format("token {}", next));
    EXPECT_EQ(checker.tokens_compared(), pos + 2);
  }
}

TEST(StoryChecker, MachineSideFaultsAreReported) {
  const GoldenStream& g = golden();
  const auto& cfg = stories260k().config();
  {  // a float missing: the position's count is short when its story token comes
    std::vector<Event> events = g.events;
    // BOS, position 0 (its floats, logits, story token), then position 1's FFN(0).5.
    const auto at = events.begin() + 1 + per_position() + 2 + 5;
    ASSERT_EQ(at->name, "FFN(0).5");
    ASSERT_EQ(at->crossing.position, 1);
    events.erase(at);
    StoryChecker checker(stories260k());
    replay(checker, events, g.tokens);
    ASSERT_TRUE(checker.first_difference().has_value());
    EXPECT_EQ(checker.first_difference()->position, 1);
    EXPECT_EQ(checker.first_difference()->machine, fmt::format("{} floats", per_position() - 1));
  }
  {  // INC's float is not p + 1
    std::vector<Event> events = g.events;
    const auto pp = static_cast<size_t>(per_position());
    const size_t inc = 1 + 2 * (pp + 2) + pp;  // position 2's last float (after its logits)
    ASSERT_EQ(events[inc].name, "INC");
    events[inc].crossing.value = 2.0f;
    StoryChecker checker(stories260k());
    replay(checker, events, g.tokens);
    ASSERT_TRUE(checker.first_difference().has_value());
    EXPECT_EQ(checker.first_difference()->position, 2);
    EXPECT_EQ(checker.first_difference()->what, "POS + 1 (INC)");
    EXPECT_EQ(checker.first_difference()->run_c, float_with_bits(3.0f));
  }
  {  // a layer or element the checkpoint does not have
    std::vector<Event> events = g.events;
    events[1].crossing.layer = cfg.n_layers;
    StoryChecker checker(stories260k());
    replay(checker, events, g.tokens);
    ASSERT_TRUE(checker.first_difference().has_value());
    EXPECT_EQ(checker.first_difference()->position, 0);
    EXPECT_EQ(checker.floats_compared(), 0);
  }
  {  // the first story token is not BOS
    StoryChecker checker(stories260k());
    EXPECT_FALSE(checker.check(StoryTokenEvent{2, 0, false, 0}));
    EXPECT_EQ(checker.first_difference()->run_c, fmt::format("token {}", reference::kBosToken));
  }
}

// With a prompt, run.c's next tokens are the prompt's while they last (run.c forces them),
// then greedy: the checker's reference is run.c's own generate loop with that prompt
// ("Lily saw": tokens the greedy run from BOS would not pick).
TEST(StoryChecker, PromptTokensAreRunCsNextTokensWhileTheyLast) {
  const auto& ck = stories260k();
  const reference::Tokenizer tok = reference::Tokenizer::load(
      std::string(QPU_SHARED_DIR) + "/models/stories260K/tok512.bin", ck.config().vocab_size);
  reference::Transformer tf(ck);
  reference::Sampler greedy(ck.config().vocab_size, 0.0f, 0.9f, 1);
  const auto run_c = reference::generate(tf, tok, greedy, "Lily saw", kPositions, false, {});
  ASSERT_GE(run_c.prompt_tokens.size(), 3u);
  StoryChecker with(ck, run_c.prompt_tokens), without(ck);
  int forced_differs = 0;
  for (int p = 0; p < run_c.positions; ++p) {
    EXPECT_EQ(with.reference(p).token, run_c.tokens[static_cast<size_t>(p)]) << p;
    EXPECT_EQ(with.reference(p).next, run_c.tokens[static_cast<size_t>(p) + 1]) << p;
    if (p + 1 < static_cast<int>(run_c.prompt_tokens.size()))
      forced_differs += without.reference(p).next != with.reference(p).next ? 1 : 0;
  }
  EXPECT_GT(forced_differs, 0);
  EXPECT_THROW(StoryChecker(ck, {403}), Error);  // a prompt starts with BOS
}

// With run.c's sampler the checker's next tokens are run.c's sampled run (reference::
// generate with the same -t, -p, -s), prompt tokens forced without a coin, `sampled` set
// exactly on the sampled positions; a story token that is the greedy one where run.c
// sampled another is a difference.
TEST(StoryChecker, SampledNextTokensAreRunCsSampledRun) {
  const auto& ck = stories260k();
  const reference::Tokenizer tok = reference::Tokenizer::load(
      std::string(QPU_SHARED_DIR) + "/models/stories260K/tok512.bin", ck.config().vocab_size);
  struct Run {
    const char* prompt;
    float t, topp;
    uint64_t seed;
  };
  const int steps = 24;
  for (const Run& r : {Run{"", 1.0f, 1.0f, 42}, Run{"Lily", 0.8f, 1.0f, 7}, Run{"Once upon", 1.0f, 0.9f, 9}}) {
    reference::Transformer tf(ck);
    reference::Sampler sampler(ck.config().vocab_size, r.t, r.topp, r.seed);
    const auto run_c = reference::generate(tf, tok, sampler, r.prompt, steps, false, {});
    StoryChecker checker(ck, run_c.prompt_tokens, reference::Sampler(ck.config().vocab_size, r.t, r.topp, r.seed));
    StoryChecker greedy(ck, run_c.prompt_tokens);
    int differs = 0;
    for (int p = 0; p < run_c.positions; ++p) {
      EXPECT_EQ(checker.reference(p).token, run_c.tokens[static_cast<size_t>(p)]) << r.prompt << " " << p;
      EXPECT_EQ(checker.reference(p).next, run_c.tokens[static_cast<size_t>(p) + 1]) << r.prompt << " " << p;
      EXPECT_EQ(checker.reference(p).sampled, p + 1 >= static_cast<int>(run_c.prompt_tokens.size())) << p;
      differs += greedy.reference(p).next != checker.reference(p).next ? 1 : 0;
    }
    ASSERT_GT(differs, 0) << r.prompt;  // the runs leave the greedy story
    // The first position where run.c's sample differs from the argmax (same history):
    // the greedy token there is reported as the difference.
    for (int p = 0; p < run_c.positions; ++p) {
      const ReferencePosition& at = checker.reference(p);
      const int argmax = static_cast<int>(std::max_element(at.logits.begin(), at.logits.end()) - at.logits.begin());
      if (!at.sampled || argmax == at.next) continue;
      StoryChecker fresh(ck, run_c.prompt_tokens, reference::Sampler(ck.config().vocab_size, r.t, r.topp, r.seed));
      StoryTokenEvent e;
      e.position = p + 1;
      e.token = argmax;
      fresh.reference(p);
      EXPECT_FALSE(fresh.check(e));
      ASSERT_TRUE(fresh.first_difference().has_value());
      EXPECT_EQ(fresh.first_difference()->what, "the story token (run.c's sampled next token)");
      break;
    }
  }
}

}  // namespace
}  // namespace qpu::runner
