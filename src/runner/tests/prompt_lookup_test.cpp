// PromptLookup (runner/prompt_lookup.h) against the plain definition: for every prefix of a
// stream, the continuation of the most recent earlier occurrence of the longest suffix
// (n <= 8) that occurred before, found by scanning the whole stream. Streams that repeat
// themselves with noise (a looped machine's control stream, value tokens between), many
// seeds; a table far larger than the stream, so no slot is shared and the guesses match
// exactly.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/error.h"
#include "runner/prompt_lookup.h"

namespace qpu::runner {
namespace {

// The guess for the token after tokens[0, end) by definition.
int64_t scan_guess(const std::vector<int64_t>& tokens, size_t end) {
  for (size_t n = std::min<size_t>(PromptLookup::kMaxN, end); n >= 1; --n) {
    // The latest i + n < end with tokens[i, i + n) == tokens[end - n, end): its next token.
    for (size_t i = end - n; i-- > 0;) {
      bool same = true;
      for (size_t k = 0; k < n && same; ++k) same = tokens[i + k] == tokens[end - n + k];
      if (same) return tokens[i + n];
    }
  }
  return -1;
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

TEST(PromptLookup, TableSizeOutsideTheRangeIsAnError) {
  EXPECT_THROW(PromptLookup(3), Error);
  EXPECT_THROW(PromptLookup(31), Error);
}

}  // namespace
}  // namespace qpu::runner
