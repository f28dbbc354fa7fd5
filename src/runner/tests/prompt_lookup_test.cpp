// PromptLookup (runner/prompt_lookup.h) against the plain definition, found by scanning
// the whole stream for every prefix: the candidates are the continuations of the latest
// earlier occurrence of each suffix (n = 8 .. 1), then of the token k = 1 .. 5 places
// before the last one (the token k + 1 places after that occurrence); the first whose two
// latest occurrences had the same continuation wins, else the first found. Streams that
// repeat themselves with noise (a looped machine's control stream, value tokens between),
// many seeds; a table far larger than the stream, so no slot is shared and the guesses
// match exactly.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "common/error.h"
#include "runner/prompt_lookup.h"

namespace qpu::runner {
namespace {

struct Candidate {
  int64_t next;
  bool confirmed;
};

// The continuations (index of the token that followed) of every occurrence of a context,
// latest first, as `follows(i)` lists them: a candidate from the latest two.
std::optional<Candidate> candidate(const std::vector<size_t>& continuations, const std::vector<int64_t>& tokens) {
  if (continuations.empty()) return std::nullopt;
  const int64_t next = tokens[continuations[0]];
  return Candidate{next, continuations.size() >= 2 && tokens[continuations[1]] == next};
}

// The guess for the token after tokens[0, end) by definition.
int64_t scan_guess(const std::vector<int64_t>& tokens, size_t end) {
  std::vector<Candidate> found;
  for (size_t n = std::min<size_t>(PromptLookup::kMaxN, end); n >= 1; --n) {
    // Every i + n < end with tokens[i, i + n) == tokens[end - n, end), latest first.
    std::vector<size_t> continuations;
    for (size_t i = end - n; i-- > 0;) {
      bool same = true;
      for (size_t k = 0; k < n && same; ++k) same = tokens[i + k] == tokens[end - n + k];
      if (same) continuations.push_back(i + n);
    }
    if (auto c = candidate(continuations, tokens)) found.push_back(*c);
  }
  for (size_t lag = 1; lag <= PromptLookup::kMaxLag && lag + 1 <= end; ++lag) {
    // Every j with j + lag + 1 < end and tokens[j] == tokens[end - 1 - lag], latest first.
    std::vector<size_t> continuations;
    for (size_t j = end - 1 - lag; j-- > 0;)
      if (tokens[j] == tokens[end - 1 - lag]) continuations.push_back(j + lag + 1);
    if (auto c = candidate(continuations, tokens)) found.push_back(*c);
  }
  for (const Candidate& c : found)
    if (c.confirmed) return c.next;
  return found.empty() ? -1 : found[0].next;
}

std::vector<int64_t> looping_stream(uint64_t seed, size_t length) {
  std::mt19937_64 rng(seed);
  const size_t period = 5 + rng() % 40;
  std::vector<int64_t> loop(period);
  for (int64_t& t : loop) t = static_cast<int64_t>(rng() % 30);
  std::vector<int64_t> s;
  while (s.size() < length) {
    for (size_t i = 0; i < period && s.size() < length; ++i) {
      s.push_back(loop[i]);
      if (rng() % 8 == 0) s.push_back(100 + static_cast<int64_t>(rng() % 50));  // a "value token"
    }
  }
  return s;
}

TEST(PromptLookup, GuessesAsTheScanOfTheWholeStream) {
  int64_t right = 0, guesses = 0, none = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const std::vector<int64_t> s = looping_stream(seed, 400);
    PromptLookup lookup(20);
    EXPECT_EQ(lookup.guess(), -1);
    for (size_t t = 0; t < s.size(); ++t) {
      lookup.push(s[t]);
      const int64_t want = scan_guess(s, t + 1);
      ASSERT_EQ(lookup.guess(), want) << "seed " << seed << " after " << t + 1 << " tokens";
      if (want < 0) ++none;
      if (t + 1 < s.size() && want >= 0) {
        ++guesses;
        right += want == s[t + 1];
      }
    }
  }
  EXPECT_GT(none, 60);  // the first token of every stream, at least
  EXPECT_GT(right, guesses / 2);
}

// The skip-gram candidates: a fixed skeleton with three data tokens after every control
// token (a control token, three values, the next control token). No suffix that ends in
// data repeats (every data token is new), but the control token three places back names
// the next one: after the first two laps every control token is guessed.
TEST(PromptLookup, GuessesTheSkeletonAcrossDataTokens) {
  const int controls = 17;
  int64_t data = 1000, right = 0, asked = 0;
  PromptLookup lookup(20);
  for (int lap = 0; lap < 6; ++lap) {
    for (int c = 0; c < controls; ++c) {
      for (int64_t t : {int64_t{c}, data++, data++, data++}) {
        if (lap >= 2 && t == c) {
          ++asked;
          right += lookup.guess() == t;
        }
        lookup.push(t);
      }
    }
  }
  EXPECT_EQ(right, asked);
  EXPECT_EQ(asked, 4 * controls);
}

// A small table (2^4 slots): slots are shared and guesses may be wrong, but every guess is
// a token that the stream has carried.
TEST(PromptLookup, ASharedSlotGuessesATokenOfTheStream) {
  const std::vector<int64_t> s = looping_stream(7, 500);
  PromptLookup lookup(4);
  std::vector<bool> seen(200, false);
  for (const int64_t t : s) {
    lookup.push(t);
    seen[static_cast<size_t>(t)] = true;
    const int64_t g = lookup.guess();
    ASSERT_TRUE(g == -1 || (g >= 0 && g < 200 && seen[static_cast<size_t>(g)])) << g;
  }
}

TEST(PromptLookup, TableSizeOrATokenOutsideTheRangeIsAnError) {
  EXPECT_THROW(PromptLookup(3), Error);
  EXPECT_THROW(PromptLookup(31), Error);
  PromptLookup lookup(4);
  EXPECT_THROW(lookup.push(-1), Error);
  EXPECT_THROW(lookup.push(int64_t{1} << 31), Error);
}

}  // namespace
}  // namespace qpu::runner
