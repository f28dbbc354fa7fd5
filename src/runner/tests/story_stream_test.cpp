// The stream parser on synthetic host-token streams: a small vocabulary shaped like the
// token machine's (value tokens first, then control names), streams built from random
// story tokens and floats (fixed seeds), every event checked against what was put in,
// and every grammar break reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "runner/story_stream.h"

namespace qpu::runner {
namespace {

constexpr int kLayers = 3, kDim = 4, kVocab = 20;
constexpr int64_t kValueTokens = 64;  // ids 0..63: value tokens

// A toy value code: token t is the part t / 4 - 4, a float is p0 + (p1 + p2) (the
// machine's order of adding its 3 parts).
float part(int64_t t) { return static_cast<float>(t) * 0.25f - 4.0f; }

struct Synthetic {
  StreamVocabulary vocab;
  std::vector<std::string> names;

  Synthetic() {
    names = {"HDR", "NOP", "DONE", "INC", "HEAD"};
    for (int l = 0; l < kLayers; ++l) {
      names.push_back("QKV." + std::to_string(l));
      names.push_back("SCORE(" + std::to_string(l) + ").0");
      names.push_back("ATTO(" + std::to_string(l) + ").0");  // writes down: no crossing
      names.push_back("SW(" + std::to_string(l) + ").0");
      for (int i = 0; i < kDim; ++i) names.push_back("FFN(" + std::to_string(l) + ")." + std::to_string(i));
    }
    names.push_back("RT");  // sends a float but is no crossing
    for (int k = 0; k < kVocab; ++k) names.push_back("TOK." + std::to_string(k));
    for (int k = 0; k < kVocab; ++k) names.push_back("TOKF." + std::to_string(k));
    names.push_back("REFUSE");  // the sampler's top-p refusal (machine/sample_part.h)
    vocab.first_control = kValueTokens;
    vocab.control_names = names;
    vocab.done_id = id("DONE");
    vocab.decode = [](int64_t a, int64_t b, int64_t c) { return part(a) + (part(b) + part(c)); };
  }
  int64_t id(const std::string& name) const {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return kValueTokens + static_cast<int64_t>(i);
    ADD_FAILURE() << "no name " << name;
    return -1;
  }
};

struct Expected {
  std::vector<StoryTokenEvent> story;
  std::vector<CrossingEvent> crossings;
  std::vector<std::string> crossing_names;
  std::vector<int64_t> stream;
  int64_t other_controls = 0, other_floats = 0;
};

// `positions` nested positions as the token machine streams them, random tokens and
// random value tokens (so the floats are whatever the toy code makes of them).
Expected make_stream(const Synthetic& s, int positions, std::mt19937& rng) {
  Expected e;
  std::uniform_int_distribution<int64_t> value(0, kValueTokens - 1);
  std::uniform_int_distribution<int> token(0, kVocab - 1);
  auto control = [&](const std::string& n) {
    e.stream.push_back(s.id(n));
    if (n.starts_with("TOK")) return;
    if (n != "INC" && !n.starts_with("FFN")) ++e.other_controls;
  };
  auto float_after = [&](const std::string& n, CrossingOp op, int layer, int element, int pos) {
    const int64_t cycle = static_cast<int64_t>(e.stream.size());
    control(n);
    const int64_t a = value(rng), b = value(rng), c = value(rng);
    e.stream.insert(e.stream.end(), {a, b, c});
    e.crossing_names.push_back(n);
    e.crossings.push_back(CrossingEvent{nullptr, op, layer, element, part(a) + (part(b) + part(c)), pos, cycle});
  };
  auto story = [&](int k, bool first_printed, int pos) {
    e.story.push_back(StoryTokenEvent{k, pos, first_printed, static_cast<int64_t>(e.stream.size())});
    control((first_printed ? "TOKF." : "TOK.") + std::to_string(k));
  };
  story(1, false, 0);
  for (int pos = 0; pos < positions; ++pos) {
    for (int l = 0; l < kLayers; ++l) {
      const std::string L = "(" + std::to_string(l) + ").";
      control("QKV." + std::to_string(l));
      control("SCORE" + L + "0");
      control("ATTO" + L + "0");
      control("SW" + L + "0");
      for (int i = 0; i < kDim; ++i) float_after("FFN" + L + std::to_string(i), CrossingOp::Ffn, l, i, pos);
    }
    float_after("INC", CrossingOp::Inc, -1, 0, pos);
    if (pos % 3 == 1) {  // a float after a control token that is not a crossing
      control("RT");
      e.stream.insert(e.stream.end(), {value(rng), value(rng), value(rng)});
      ++e.other_floats;
    }
    control("HEAD");
    story(token(rng), pos == 0, pos + 1);
  }
  return e;
}

TEST(StreamParser, RandomStreamsGiveEveryEventInOrder) {
  const Synthetic s;
  std::mt19937 rng(20261130);
  for (int trial = 0; trial < 50; ++trial) {
    const int positions = 1 + trial % 7;
    const Expected e = make_stream(s, positions, rng);
    StreamParser parser(s.vocab);
    std::vector<StoryTokenEvent> story;
    std::vector<CrossingEvent> crossings;
    std::vector<std::string> names;
    StreamCallbacks cb;
    cb.on_story = [&](const StoryTokenEvent& ev) { story.push_back(ev); return true; };
    cb.on_crossing = [&](const CrossingEvent& ev) {
      crossings.push_back(ev);
      names.push_back(*ev.name);
      return true;
    };
    for (int64_t t : e.stream) ASSERT_TRUE(parser.feed(t, cb));
    ASSERT_EQ(story.size(), e.story.size());
    for (size_t i = 0; i < story.size(); ++i) {
      EXPECT_EQ(story[i].token, e.story[i].token) << i;
      EXPECT_EQ(story[i].position, e.story[i].position) << i;
      EXPECT_EQ(story[i].first_printed, e.story[i].first_printed) << i;
      EXPECT_EQ(story[i].cycle, e.story[i].cycle) << i;
    }
    ASSERT_EQ(crossings.size(), e.crossings.size());
    for (size_t i = 0; i < crossings.size(); ++i) {
      EXPECT_EQ(names[i], e.crossing_names[i]) << i;
      EXPECT_EQ(crossings[i].op, e.crossings[i].op) << i;
      EXPECT_EQ(crossings[i].layer, e.crossings[i].layer) << i;
      EXPECT_EQ(crossings[i].element, e.crossings[i].element) << i;
      EXPECT_EQ(std::bit_cast<uint32_t>(crossings[i].value), std::bit_cast<uint32_t>(e.crossings[i].value)) << i;
      EXPECT_EQ(crossings[i].position, e.crossings[i].position) << i;
      EXPECT_EQ(crossings[i].cycle, e.crossings[i].cycle) << i;
    }
    const StreamCounts& c = parser.counts();
    EXPECT_EQ(c.cycles, static_cast<int64_t>(e.stream.size()));
    EXPECT_EQ(c.story_tokens, positions + 1);
    EXPECT_EQ(c.crossings, positions * (kLayers * kDim + 1));
    EXPECT_EQ(c.other_floats, e.other_floats);
    EXPECT_EQ(c.other_controls, e.other_controls);
    EXPECT_FALSE(c.done);
  }
}

TEST(StreamParser, CallbacksStopTheStreamAndDoneEndsIt) {
  const Synthetic s;
  std::mt19937 rng(7);
  const Expected e = make_stream(s, 3, rng);
  StreamParser parser(s.vocab);
  int seen = 0;
  StreamCallbacks cb;
  cb.on_crossing = [&](const CrossingEvent&) { return ++seen < 5; };
  size_t fed = 0;
  while (fed < e.stream.size() && parser.feed(e.stream[fed], cb)) ++fed;
  EXPECT_EQ(seen, 5);
  EXPECT_EQ(static_cast<int64_t>(fed), e.crossings[4].cycle + 3);  // stopped on the 5th float's last value token

  StreamParser done_parser(s.vocab);
  EXPECT_TRUE(done_parser.feed(s.id("TOK.1"), {}));
  EXPECT_FALSE(done_parser.feed(s.id("DONE"), {}));
  EXPECT_TRUE(done_parser.counts().done);
  EXPECT_FALSE(done_parser.counts().refused);
}

// Top-p's REFUSE (no entry, or more than 128, at run.c's cutoff): counted, no story token,
// then DONE ends the stream; the host turns it into an error (qpu story).
TEST(StreamParser, RefuseIsCountedAndDoneFollows) {
  const Synthetic s;
  StreamParser parser(s.vocab);
  int stories = 0;
  StreamCallbacks cb;
  cb.on_story = [&](const StoryTokenEvent&) { return ++stories > 0; };
  EXPECT_TRUE(parser.feed(s.id("TOK.1"), cb));
  EXPECT_TRUE(parser.feed(s.id("HEAD"), cb));
  EXPECT_FALSE(parser.counts().refused);
  EXPECT_TRUE(parser.feed(s.id("REFUSE"), cb));
  EXPECT_TRUE(parser.counts().refused);
  EXPECT_FALSE(parser.feed(s.id("DONE"), cb));
  EXPECT_TRUE(parser.counts().done);
  EXPECT_EQ(parser.counts().story_tokens, 1);
  EXPECT_EQ(stories, 1);
  EXPECT_EQ(parser.counts().other_controls, 3);  // HEAD, REFUSE, DONE
}

// The message of the qpu::Error that feeding `stream` throws ("" when none).
std::string grammar_error(const Synthetic& s, const std::vector<int64_t>& stream) {
  StreamParser parser(s.vocab);
  try {
    for (int64_t t : stream) parser.feed(t, {});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(StreamParser, GrammarBreaksAreErrorsNamingTheCycle) {
  const Synthetic s;
  EXPECT_NE(grammar_error(s, {5}).find("cycle 0: value token 5 before any control token"), std::string::npos);
  EXPECT_NE(grammar_error(s, {s.id("FFN(0).1"), 3, 4, s.id("NOP")}).find("cycle 3: control token 'NOP' after 2 of the 3 value tokens that follow 'FFN(0).1'"),
            std::string::npos);
  EXPECT_NE(grammar_error(s, {s.id("FFN(2).3"), s.id("NOP")}).find("cycle 1: crossing micro-op 'FFN(2).3' is not followed by its float"),
            std::string::npos);
  EXPECT_NE(grammar_error(s, {s.id("INC"), 1, 2, 3, 4}).find("cycle 4: a fourth value token after 'INC'"), std::string::npos);
  const int64_t outside = kValueTokens + static_cast<int64_t>(s.names.size());
  EXPECT_NE(grammar_error(s, {s.id("HDR"), outside}).find("cycle 1: host token " + std::to_string(outside) + " is outside"),
            std::string::npos);
  EXPECT_NE(grammar_error(s, {-1}).find("host token -1 is outside"), std::string::npos);
  EXPECT_EQ(grammar_error(s, {s.id("INC"), 1, 2, 3, s.id("HEAD"), s.id("TOK.4")}), "");
}

TEST(StreamParser, BadVocabulariesAreRejected) {
  Synthetic s;
  StreamVocabulary repeated = s.vocab;
  repeated.control_names.push_back("INC");
  EXPECT_THROW(StreamParser{repeated}, Error);
  StreamVocabulary no_decoder = s.vocab;
  no_decoder.decode = nullptr;
  EXPECT_THROW(StreamParser{no_decoder}, Error);
  StreamVocabulary bad_story = s.vocab;
  bad_story.control_names.push_back("TOK.x");
  EXPECT_THROW(StreamParser{bad_story}, Error);
}

TEST(StreamParser, NamesThatOnlyLookLikeCrossingsAreOtherControls) {
  Synthetic s;
  StreamVocabulary v = s.vocab;
  // ATTO(l).i: the machine's ATTO writes x down, it never crosses.
  const std::vector<std::string> odd = {"ATTO(1)", "ATTO(1).2", "ATTOX(1).2", "FFN(a).1", "FFN(1).", "INC2", "SW(9).0", "TOKEN.3"};
  for (const std::string& n : odd) v.control_names.push_back(n);
  StreamParser parser(v);
  int crossings = 0;
  StreamCallbacks cb;
  cb.on_crossing = [&](const CrossingEvent&) { return ++crossings, true; };
  for (size_t i = 0; i < odd.size(); ++i) {
    const int64_t id = kValueTokens + static_cast<int64_t>(s.names.size() + i);
    // Sends nothing or a float: either way no crossing event.
    ASSERT_TRUE(parser.feed(id, cb));
    for (int64_t t : {1, 2, 3}) ASSERT_TRUE(parser.feed(t, cb));
  }
  EXPECT_EQ(crossings, 0);
  EXPECT_EQ(parser.counts().other_floats, static_cast<int64_t>(odd.size()));
  EXPECT_EQ(parser.counts().other_controls, static_cast<int64_t>(odd.size()));
}

// The machine options of every run length: whole blocks of 8 positions covering the run,
// at least 16, and a KV bank count (min(banks, positions)) that is a power of two, which
// npu::kv_address requires (24 positions would make 24 banks).
TEST(TokenMachineOptions, EveryLengthGetsWholeBlocksAndAPowerOfTwoOfBanks) {
  for (int n = 1; n <= 512; ++n) {
    const machine::TokenMachineOptions o = token_machine_options(n);
    EXPECT_GE(o.max_positions, std::max(n, 16)) << n;
    EXPECT_EQ(o.max_positions % 8, 0) << n;
    EXPECT_LT(o.max_positions, std::max(n, 32) + 8) << n;  // never a block more than needed above 32
    const int banks = std::min(o.kv_banks, o.max_positions);
    EXPECT_TRUE(std::has_single_bit(static_cast<unsigned>(banks))) << n << ": " << banks << " banks";
  }
  EXPECT_EQ(token_machine_options(20).max_positions, 32);
  EXPECT_EQ(token_machine_options(40).max_positions, 40);
  EXPECT_EQ(token_machine_options(256).max_positions, 256);
  EXPECT_THROW(token_machine_options(0), Error);
}

}  // namespace
}  // namespace qpu::runner
