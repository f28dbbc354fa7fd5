// Speculative decoding's engine half (docs/engine.md, "Forward pairs"): a journaled forward
// that Model::undo takes back bit for bit, and forward_pair, whose two forwards run on two
// threads, the second trailing the first layer by layer. Against forwards run one at a
// time: every logit bit, and every State vector and counter after every step, whether the
// draft was right (the state keeps both tokens) or wrong (undo leaves the first alone). On
// the idle-wiring checkpoints (idle_wiring.h), whose sublayers go idle, wake up, skip whole
// runs of 16 layers and keep live GDN histories and states, with every engine option.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/float_bits.h"
#include "engine/gated_delta_net.h"
#include "engine/model.h"
#include "engine/packed_matrix.h"
#include "idle_wiring.h"
#include "tiny_model.h"

namespace qpu::engine {
namespace {

using namespace testing;  // idle_wiring.h, tiny_model.h

// expect_same_state and the conv block counts too: after an undo nothing may differ.
void expect_identical_state(const State& got, const State& want, const std::string& what) {
  expect_same_state(got, want, what);
  EXPECT_EQ(got.conv_zero_blocks, want.conv_zero_blocks) << what;
}

// 40 layers (two whole idle runs of 16 and a partial one), GDN with random decays and
// attention layers, some with an all-zero o_proj (skipped mixers).
io::Qwen35Weights pair_checkpoint(uint64_t seed) {
  TinySpec spec = random_spec(seed);
  spec.layers.assign(40, LayerType::LinearAttention);
  for (size_t l = 5; l < spec.layers.size(); l += 9) spec.layers[l] = LayerType::FullAttention;
  io::Qwen35Weights w = random_checkpoint(seed, spec);
  for (size_t l = 14; l < spec.layers.size(); l += 18) std::fill(w.layers[l].full.o_proj.begin(), w.layers[l].full.o_proj.end(), 0.0f);
  return w;
}

std::vector<ModelOptions> every_path() {
  std::vector<ModelOptions> all(4);
  all[1].storage = WeightStorage::Sparse;
  all[1].sparse_path = SparsePath::Columns;
  all[2].storage = WeightStorage::Dense;
  all[2].gdn = GdnRecurrence::Dense;  // every head written on every step
  all[2].elementwise = Elementwise::Dense;
  all[3].idle_sublayers = IdleSublayers::Compute;
  all[3].idle_mixers = IdleMixers::Compute;
  return all;
}

// A journaled forward of any token, then undo: the State is what it was, bit for bit; and
// the journaled forward's logits are forward's. Checked before every step of a run.
TEST(StateJournal, UndoRestoresEveryBit) {
  int64_t saved = 0;
  const std::vector<ModelOptions> paths = every_path();
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const io::Qwen35Weights w = pair_checkpoint(seed);
    const Model model(w, paths[seed % paths.size()]);
    const int64_t vocab = w.config.vocab_size;
    const std::vector<int64_t> tokens = random_tokens(seed, vocab, 30);
    const std::vector<int64_t> others = random_tokens(seed + 100, vocab, 30);
    State state = model.new_state();
    std::vector<float> logits(static_cast<size_t>(vocab)), journaled(static_cast<size_t>(vocab));
    StateJournal journal;
    for (size_t t = 0; t < tokens.size(); ++t) {
      const std::string at = "seed " + std::to_string(seed) + " step " + std::to_string(t);
      const State before = state;
      for (const int64_t token : {others[t], tokens[t]}) {
        model.forward(token, state, journaled, journal);
        saved += journal.saved_floats();
        State plain = before;
        model.forward(token, plain, logits);
        expect_bits(journaled, logits, at + " journaled logits");
        expect_identical_state(state, plain, at + " journaled state");
        model.undo(journal, state);
        EXPECT_TRUE(journal.empty());
        expect_identical_state(state, before, at + " after undo");
        if (HasFatalFailure()) return;
      }
      model.forward(tokens[t], state, logits);
    }
  }
  EXPECT_GT(saved, 0);
}

TEST(StateJournal, UndoRefusesAJournalOfAnotherStep) {
  const io::Qwen35Weights w = pair_checkpoint(3);
  const Model model(w);
  State state = model.new_state();
  std::vector<float> logits(static_cast<size_t>(w.config.vocab_size));
  StateJournal journal;
  EXPECT_THROW(model.undo(journal, state), Error);  // nothing recorded
  model.forward(1, state, logits, journal);
  model.forward(4, state, logits);  // the journal is no longer the latest forward's
  const State before = state;
  EXPECT_THROW(model.undo(journal, state), Error);
  expect_identical_state(state, before, "refused undo");
}

// Runs `tokens` in pairs: at each step the draft is the next token (right) or, at random,
// another one (wrong). Against the sequential run: both logits, and the State after the
// step (after both tokens when right; after undo when wrong).
struct PairCounts {
  int right = 0, wrong = 0;
};
PairCounts expect_pairs_give_sequential_bits(const Model& model, const std::vector<int64_t>& tokens, uint64_t seed,
                                             const std::string& what) {
  const auto vocab = static_cast<size_t>(model.config().vocab_size);
  // The sequential run: logits and State after every token.
  std::vector<std::vector<float>> want_logits;
  std::vector<State> want_state;
  {
    State s = model.new_state();
    for (const int64_t token : tokens) {
      want_logits.emplace_back(vocab);
      model.forward(token, s, want_logits.back());
      want_state.push_back(s);
    }
  }
  TinyRandom rng(seed);
  PairCounts n;
  State state = model.new_state();
  std::vector<float> logits(vocab), draft_logits(vocab), plain(vocab);
  StateJournal journal;
  size_t t = 0;
  while (t + 1 < tokens.size()) {
    const std::string at = what + " step " + std::to_string(t);
    const bool right = rng.unit() < 0.6;
    int64_t draft = tokens[t + 1];
    if (!right) {
      while (draft == tokens[t + 1]) draft = static_cast<int64_t>(rng.unit() * static_cast<double>(vocab));
    }
    const State before = state;
    model.forward_pair(tokens[t], draft, state, logits, draft_logits, journal);
    expect_bits(logits, want_logits[t], at + " logits");
    if (right) {
      expect_bits(draft_logits, want_logits[t + 1], at + " draft logits");
      expect_identical_state(state, want_state[t + 1], at + " state after the pair");
      ++n.right;
      t += 2;
    } else {
      // The wrong draft's own logits are still its forward's.
      State s = want_state[t];
      model.forward(draft, s, plain);
      expect_bits(draft_logits, plain, at + " wrong draft logits");
      expect_identical_state(state, s, at + " state with the wrong draft");
      model.undo(journal, state);
      expect_identical_state(state, want_state[t], at + " state after undo");
      ++n.wrong;
      t += 1;
    }
    if (::testing::Test::HasFatalFailure()) return n;
  }
  return n;
}

TEST(ForwardPair, GivesTheSequentialBitsOnEveryPath) {
  PairCounts total;
  const std::vector<ModelOptions> paths = every_path();
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const io::Qwen35Weights w = pair_checkpoint(seed);
    const Model model(w, paths[seed % paths.size()]);
    const PairCounts n = expect_pairs_give_sequential_bits(model, random_tokens(seed, w.config.vocab_size, 40),
                                                           seed * 13, "seed " + std::to_string(seed));
    if (HasFatalFailure()) return;
    total.right += n.right;
    total.wrong += n.wrong;
  }
  EXPECT_GT(total.right, 100);
  EXPECT_GT(total.wrong, 60);
}

// The OpenMP regions inside each forward (the wide GDN heads, the products) at 1, 2 and 3
// threads per forward: the same bits.
TEST(ForwardPair, SameBitsAtEveryThreadCount) {
  for (const int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    for (uint64_t seed = 20; seed <= 23; ++seed) {
      const io::Qwen35Weights w = pair_checkpoint(seed);
      const Model model(w);
      expect_pairs_give_sequential_bits(model, random_tokens(seed, w.config.vocab_size, 24), seed,
                                        "threads " + std::to_string(threads) + " seed " + std::to_string(seed));
      if (HasFatalFailure()) break;
    }
  }
  omp_set_num_threads(1);
}

TEST(ForwardPair, BadInputLeavesTheStateAlone) {
  const io::Qwen35Weights w = pair_checkpoint(5);
  const Model model(w);
  const int64_t vocab = w.config.vocab_size;
  State state = model.new_state();
  std::vector<float> logits(static_cast<size_t>(vocab)), draft_logits(static_cast<size_t>(vocab)), short_logits(3);
  StateJournal journal;
  model.forward(2, state, logits);
  const State before = state;
  EXPECT_THROW(model.forward_pair(1, vocab, state, logits, draft_logits, journal), Error);
  EXPECT_THROW(model.forward_pair(-1, 1, state, logits, draft_logits, journal), Error);
  EXPECT_THROW(model.forward_pair(1, 2, state, logits, short_logits, journal), Error);
  expect_identical_state(state, before, "after refused pairs");
  // And the model still pairs afterwards.
  model.forward_pair(1, 2, state, logits, draft_logits, journal);
  EXPECT_EQ(state.position, before.position + 2);
}

// GatedDeltaNet::step's StepSaves on their own: every value head and every conv block whose
// state bits changed was copied first, with its old bits. Random states and inputs with
// exact zeros (idle conv blocks, with and without the block counters), one-hot-like heads
// at rest, decays of 1 and not, and non-finite inputs (the dense write of a head at rest).
TEST(GdnStepSaves, EveryWrittenPartIsCopiedFirst) {
  int heads_copied = 0, heads_untouched = 0, blocks_copied = 0, blocks_untouched = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    TinySpec spec;
    spec.seed = seed;
    spec.layers = {LayerType::LinearAttention};
    spec.k_heads = 2;
    spec.v_heads = 4;
    spec.k_dim = 16;
    spec.v_dim = seed % 3 == 0 ? 8 : seed % 3 == 1 ? 6 : 10;  // conv_dim 96, 88, 104: a partial last block at 6 and 10
    io::Qwen35Weights w = make_tiny_weights(spec);
    TinyRandom rng(seed * 5 + 2);
    io::LinearAttentionWeights& lw = w.layers[0].linear;
    if (seed % 2 == 0) std::fill(lw.dt_bias.begin(), lw.dt_bias.end(), -200.0f);  // decay 1
    // Zero the q/k rows of some heads' conv channels: heads at rest.
    const int64_t h = spec.hidden, key_dim = spec.k_heads * spec.k_dim;
    for (int64_t m = 0; m < spec.k_heads; ++m) {
      if (rng.unit() < 0.5) continue;
      for (int64_t r = m * spec.k_dim; r < (m + 1) * spec.k_dim; ++r)
        for (const int64_t base : {int64_t{0}, key_dim})
          std::fill_n(lw.in_proj_qkv.begin() + (base + r) * h, h, 0.0f);
    }
    // Dim 0 feeds q, k and v only: an inf there (below) makes v and delta non-finite while
    // b and a stay finite (decay stays 1 where dt_bias makes it 1).
    for (auto* m : {&lw.in_proj_b, &lw.in_proj_a})
      for (size_t r = 0; r < m->size(); r += static_cast<size_t>(h)) (*m)[r] = 0.0f;
    const GatedDeltaNetShape shape{h, spec.k_heads, spec.v_heads, spec.k_dim, spec.v_dim, spec.conv_kernel};
    // CSR stores no zero weight, so the zeroed q and k rows give +0 (not 0 * inf) for the
    // inf of dim 0: those heads stay at rest with a non-finite delta (their dense write).
    PackedMatrix::Options packing;
    if (seed % 4 == 2) packing.force = PackedMatrix::Format::SparseCsr;
    const GatedDeltaNet gdn(std::move(lw), shape, 1e-6f, packing, "gdn", seed % 3 != 0, seed % 5 != 0);
    std::vector<float> conv(static_cast<size_t>(shape.conv_state_size()), 0.0f);
    std::vector<float> rec(static_cast<size_t>(shape.recurrent_state_size()));
    for (float& x : rec) x = rng.unit() < 0.3 ? 0.0f : rng.uniform(2.0);
    // The block counters (as Model keeps them) in most seeds, none in the others.
    const bool tracked = seed % 7 != 0;
    std::vector<uint8_t> counts(tracked ? static_cast<size_t>(gdn.conv_blocks()) : 0,
                                static_cast<uint8_t>(spec.conv_kernel - 1));
    std::vector<float> input(static_cast<size_t>(h)), out(static_cast<size_t>(h));
    const int64_t head = spec.k_dim * spec.v_dim, history = spec.conv_kernel - 1;
    const int64_t conv_dim = shape.conv_dim(), full = conv_dim / 16 * 16;
    std::vector<float> heads(static_cast<size_t>(shape.recurrent_state_size()));
    std::vector<float> convs(conv.size());
    std::vector<uint8_t> heads_saved(static_cast<size_t>(spec.v_heads));
    std::vector<uint8_t> conv_saved(static_cast<size_t>(gdn.conv_blocks() + 1));
    for (int step = 0; step < 8; ++step) {
      // Idle inputs now and then: the conv history drains and blocks go untouched.
      const bool idle = rng.unit() < 0.4;
      for (float& x : input) x = idle || rng.unit() < 0.5 ? 0.0f : rng.uniform(1.0);
      if (seed % 4 == 2 && step >= 5) input[0] = kInf;  // non-finite v and delta (decay 1)
      const std::vector<float> rec_before = rec, conv_before = conv;
      std::fill(heads_saved.begin(), heads_saved.end(), 0);
      std::fill(conv_saved.begin(), conv_saved.end(), 0);
      const StepSaves saves{heads.data(), heads_saved.data(), convs.data(), conv_saved.data()};
      gdn.step(input.data(), conv, rec, step == 0, out.data(), counts, false, nullptr, &saves);
      const std::string at = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      // [first, first + size) of `now` against `before`, and of the copy when saved.
      const auto check = [&](const std::vector<float>& now, const std::vector<float>& before,
                             const std::vector<float>& copy, size_t first, size_t size, bool saved, int& copied,
                             int& untouched, const std::string& what) {
        bool changed = false;
        for (size_t i = first; i < first + size; ++i) changed = changed || float_bits(now[i]) != float_bits(before[i]);
        if (saved) {
          ++copied;
          for (size_t i = first; i < first + size; ++i)
            ASSERT_EQ(float_bits(copy[i]), float_bits(before[i])) << at << " " << what << " [" << i << "]";
        } else {
          ++untouched;
          ASSERT_FALSE(changed) << at << " " << what << " written without a copy";
        }
      };
      for (int64_t j = 0; j < spec.v_heads; ++j) {
        check(rec, rec_before, heads, static_cast<size_t>(j * head), static_cast<size_t>(head),
              heads_saved[static_cast<size_t>(j)] != 0, heads_copied, heads_untouched, "head " + std::to_string(j));
        if (HasFatalFailure()) return;
      }
      for (int64_t c = 0; c < conv_dim; c += 16) {
        const int64_t channels = std::min<int64_t>(16, conv_dim - c);
        check(conv, conv_before, convs, static_cast<size_t>(c * history), static_cast<size_t>(channels * history),
              conv_saved[static_cast<size_t>(c / 16)] != 0, blocks_copied, blocks_untouched,
              "conv block " + std::to_string(c / 16) + (c >= full ? " (the tail)" : ""));
        if (HasFatalFailure()) return;
      }
    }
  }
  EXPECT_GT(heads_copied, 100);
  EXPECT_GT(heads_untouched, 100);
  EXPECT_GT(blocks_copied, 300);
  EXPECT_GT(blocks_untouched, 300);
}

}  // namespace
}  // namespace qpu::engine
