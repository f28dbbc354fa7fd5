// The token register (npu/token_register.h) feeding the embedding lookup
// (npu/table_lookup.h): a random stream of story tokens, lookups and no-ops, one host
// token per forward with the state kept, on the engine and under HostSim's random
// summation orders. After every token that reads, x must be run.c's
// token_embedding_table row of the last story token, bit for bit; after every other
// token the lookup's outputs must be +-0 (idle).
#include <gtest/gtest.h>

#include <random>

#include "common/error.h"
#include "common/float_bits.h"
#include "compiler/emit.h"
#include "compiler/host_sim.h"
#include "npu/engine_host.h"
#include "npu/table_lookup.h"
#include "npu/token_register.h"
#include "unit_harness.h"

namespace qpu::npu {
namespace {

using compiler::ValueId;

struct Checkpoint {
  compiler::Compiled compiled;
  std::vector<ValueId> x;
  int vocab = 0;  // nested ids; host ids: [0, V) story, [V, 2V) story + read, 2V lookup, 2V + 1 no-op
  int64_t lookup() const { return 2 * int64_t{vocab}; }
  int64_t nop() const { return lookup() + 1; }
};

Checkpoint build(const reference::Llama2Checkpoint& nested) {
  Checkpoint c;
  c.vocab = nested.config().vocab_size;
  compiler::Program p;
  const TokenRegister r = token_register(p, c.vocab, "tok");
  c.x = embedding_lookup(p, nested, r.read_flag, r.id).out;
  compiler::Interface io;
  io.inputs = {r.id_in, r.write_flag, r.read_flag};
  io.outputs = c.x;
  io.vocab_size = c.nop() + 1;
  for (int64_t t = 0; t < io.vocab_size; ++t) {
    const bool story = t < c.lookup();
    const float id = story ? static_cast<float>(t % c.vocab) : 0.0f;
    io.input_rows.insert(io.input_rows.end(), {id, story ? 1.0f : 0.0f, (t >= c.vocab && t <= c.lookup()) ? 1.0f : 0.0f});
  }
  compiler::EmitOptions eo;
  eo.gdn_key_head_dim = 16;
  eo.gdn_value_head_dim = 64;
  c.compiled = compiler::compile(p, io, {}, eo);
  return c;
}

// Tokens of a random stream (starting with a story token) and the id each one must read
// (-1: it does not read).
struct Stream {
  std::vector<int64_t> tokens;
  std::vector<int> reads;
};

Stream random_stream(const Checkpoint& c, int64_t length, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Stream s;
  int current = -1;
  for (int64_t i = 0; i < length; ++i) {
    const uint64_t kind = i == 0 ? 0 : rng() % 20;
    const int id = static_cast<int>(rng() % static_cast<uint64_t>(c.vocab));
    if (kind < 7) {  // story token
      s.tokens.push_back(id);
      s.reads.push_back(-1);
      current = id;
    } else if (kind < 10) {  // story token whose cycle also reads (the read sees the write)
      s.tokens.push_back(c.vocab + id);
      s.reads.push_back(id);
      current = id;
    } else if (kind < 17) {
      s.tokens.push_back(c.lookup());
      s.reads.push_back(current);
    } else {
      s.tokens.push_back(c.nop());
      s.reads.push_back(-1);
    }
  }
  return s;
}

// Returns the number of tokens whose outputs differ; describes the first.
int64_t run_stream(const Checkpoint& c, const reference::Llama2Checkpoint& nested, const Stream& s,
                   const Forward& forward, std::string* first) {
  const auto table = nested.weights().token_embedding;
  const int dim = nested.config().dim;
  std::vector<float> hidden(static_cast<size_t>(c.compiled.weights.config.hidden_size));
  int64_t bad = 0;
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    forward(s.tokens[i], hidden);
    for (int d = 0; d < dim; ++d) {
      const float got = hidden[static_cast<size_t>(c.compiled.allocation.dim(c.x[static_cast<size_t>(d)]))];
      const bool ok = s.reads[i] < 0 ? got == 0.0f
                                     : float_bits(got) == float_bits(0.0f + table[static_cast<size_t>(s.reads[i] * dim + d)]);
      if (!ok) {
        if (bad == 0 && first)
          *first = "token " + std::to_string(i) + " (id " + std::to_string(s.tokens[i]) + ") x[" + std::to_string(d) +
                   "] = " + describe_float(got);
        ++bad;
        break;
      }
    }
  }
  return bad;
}

TEST(TokenRegister, StoryTokensFeedTheEmbeddingLookupOnTheEngine) {
  const auto& nested = unit_testing::stories260k();
  const Checkpoint c = build(nested);
  const Stream s = random_stream(c, 3000, 7);
  std::string first;
  EXPECT_EQ(run_stream(c, nested, s, engine_host()(c.compiled.weights), &first), 0) << first;
  int64_t reads = 0;
  for (int r : s.reads) reads += r >= 0;
  EXPECT_GT(reads, 1000);
  std::printf("token register + lookup: %zu tokens, %lld reads; layers %lld, hidden %lld\n", s.tokens.size(),
              static_cast<long long>(reads), static_cast<long long>(c.compiled.weights.config.num_hidden_layers),
              static_cast<long long>(c.compiled.weights.config.hidden_size));
}

TEST(TokenRegister, StoryTokensFeedTheEmbeddingLookupUnderRandomOrders) {
  const auto& nested = unit_testing::stories260k();
  const Checkpoint c = build(nested);
  const Stream s = random_stream(c, 60, 8);
  const auto w = std::make_shared<io::Qwen35Weights>(c.compiled.weights);
  const auto sim = std::make_shared<compiler::HostSim>(*w, 99);
  std::string first;
  EXPECT_EQ(run_stream(c, nested, s, [w, sim](int64_t t, std::span<float> h) { sim->forward(t, {}, h); }, &first), 0)
      << first;
}

TEST(TokenRegister, RejectsVocabulariesThatDoNotFitTheCells) {
  compiler::Program p;
  EXPECT_THROW(token_register(p, 0, "t"), Error);
  EXPECT_THROW(token_register(p, 1 << 24, "t"), Error);
}

}  // namespace
}  // namespace qpu::npu
