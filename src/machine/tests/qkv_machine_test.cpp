// M2b end to end (machine/testing/qkv_machine.h): prompts load run.c's x at the start of layer l
// (the golden record x_in of the greedy story) into register X and a position into POS
// and run QKV(l), which stores q into the q RAM and k, v into the KV cache row of that
// position, all in one cycle. In one host session: QKV(l) at p1; POS = p2 - 1 and INC
// (POS becomes p2, sent up as a float); QKV(l) at p2 and RQ sends q up; then with
// POS = p1 and POS = p2, RK(l)/RV(l) send the cached k and v up.
// Every stream must equal the expected one token for token, i.e. every float equals
// run.c's q_rope (p2), k_rope and v (p1 and p2) bit for bit, and the later write did not
// touch the earlier row.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "machine/carry_crossing.h"
#include "machine/testing/qkv_machine.h"
#include "machine_runner.h"
#include "npu/tests/unit_harness.h"
#include "npu/expf_model.h"
#include "npu/unit_attention.h"

namespace qpu::machine {
namespace {

using K = reference::TraceKind;
using npu::unit_testing::golden;
using npu::unit_testing::stories260k;

struct Tally {
  int64_t floats = 0, cycles = 0;
  double seconds = 0;
};

// One run from the current host state; checks the stream.
void expect_run(const QkvMachine& m, const std::vector<int64_t>& prompt, const testing::Step& host,
                const std::vector<int64_t>& expected, Tally& t) {
  const testing::Run r = testing::run_greedy(m, prompt, host, static_cast<int64_t>(expected.size()) + 4);
  EXPECT_EQ(r.ambiguous, 0);
  EXPECT_LE(r.max_nonzero_on_value_cycles, 3);
  ASSERT_EQ(r.generated.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(r.generated[i], expected[i]) << "generated token " << i;
  t.floats += static_cast<int64_t>(expected.size() / 4);
  t.cycles += r.generate_forwards;
  t.seconds += r.generate_seconds;
}

TEST(QkvMachine, GoldenRecordsAndTheKvCacheBitExactOnTheEngine) {
  const QkvMachine m = build_qkv_machine(stories260k(), QkvMachineOptions{});
  const auto& c = m.compiled.weights.config;
  testing::print_shape("qkv machine", m);
  EXPECT_LE(c.intermediate_size, 1024);
  const auto& gold = golden();
  auto hosts = testing::engine_hosts(m.model());
  Tally t;
  // Positions in different banks and rows (32 banks: 95 = row 2 bank 31), every layer.
  for (const auto& [p1, p2, l] : std::vector<std::tuple<int, int, int>>{{0, 37, 0}, {37, 95, 1}, {95, 1, 2}, {12, 44, 3}, {64, 63, 4}}) {
    SCOPED_TRACE("positions " + std::to_string(p1) + ", " + std::to_string(p2) + ", layer " + std::to_string(l));
    const testing::Step host = hosts();
    // QKV(l) at p1; then x of p2 with POS = p2 - 1, and INC sends p2 up into POS.
    std::vector<int64_t> prompt = {m.id("HDR")};
    for (int64_t tok : m.load_and_run(gold.at(K::x_in, p1, l), p1, l)) prompt.push_back(tok);
    for (int64_t tok : m.load_x(gold.at(K::x_in, p2, l))) prompt.push_back(tok);
    for (int64_t tok : m.set_pos(p2 - 1)) prompt.push_back(tok);
    prompt.push_back(m.id("INC"));
    std::vector<int64_t> incremented = m.value_tokens(static_cast<float>(p2));
    incremented.push_back(m.done());
    expect_run(m, prompt, host, incremented, t);
    // QKV(l) at the incremented position, then q read back.
    expect_run(m, {m.qkv(l), m.id("RQ.0")}, host, m.expected_q(gold.at(K::q_rope, p2, l)), t);
    for (const int p : {p1, p2}) {
      std::vector<int64_t> read = m.set_pos(p);
      read.push_back(m.id("RK(" + std::to_string(l) + ").0"));
      expect_run(m, read, host, m.expected_kv(l, gold.at(K::k_rope, p, l), gold.at(K::v, p, l)), t);
    }
  }
  std::printf("qkv machine: %lld floats bit-exact (q, and k, v from the cache) over %lld generated cycles, %.3f ms per "
              "cycle\n",
              static_cast<long long>(t.floats), static_cast<long long>(t.cycles),
              t.cycles ? 1e3 * t.seconds / static_cast<double>(t.cycles) : 0.0);
}

// run.c's records of head h at (pos, layer), one float per position t <= pos (or one).
std::vector<float> per_head(K kind, int pos, int layer, int heads, size_t index) {
  std::vector<float> v;
  for (int h = 0; h < heads; ++h) v.push_back(golden().head(kind, pos, layer, h).at(index));
  return v;
}

// M2c's stages (options.attention). The cache of layer l is filled by QKV(l) at
// positions 0..pos (golden x_in) and at a later position (a stale row inside pos's
// block). At POS = pos, SCORE(l).0 starts the block loop, which the machine runs itself
// (SCORE(l).1 .. SCORE(l).(pos / 8) chosen by branches on POS), then MAX(l), and RM sends
// every head's max. EXP(l).0.0 alone runs the rest the same way: EXP(l).b.g over the
// blocks and head groups, SUM(l).h for every head, PROB(l).b.g, WSUM(l).h. Then RS,
// RE/RX and RP/RPX at a few positions t send every head's scaled score, its exp as (mant,
// exponent) and its probability as (pm, exponent), RSUM every head's softmax sum and RXB
// every head's xb and unsafe bit. Expected: run.c's att_scaled, att_max, expf_parts'
// split of run.c's exp (mant 2^exponent == att_exp, checked here too), att_sum, att_prob
// (pm 2^exponent, checked here too) and att_out (through the fast path's C model, equal
// to att_out wherever its unsafe bit is 0), bit for bit; then ATTO sends run.c's
// x_att_res (x_in + wo xb): the attention half-layer from x_in to x_att_res on the
// machine. A second case at another layer and a smaller position runs in the same host
// session after the first, so the score and exp RAMs (wiped at each group's row 0) and
// the block-max RAM (blocks past pos still hold the first case's maxima) carry stale
// values the stages must leave out. A third case, layer 0 at position 40, runs blocks
// 4 and 5 (more blocks than the cache's 4 bank groups: the exp RAM's per-block wipe
// flags; the 256-position story once went wrong there, docs/npu-machine.md M2e). MAX
// takes its heads in waves here, as it does past 32 blocks.
TEST(QkvMachine, AttentionStagesBitExactOnTheEngine) {
  QkvMachineOptions o;
  o.attention = true;
  o.max_positions = 64;  // 8 blocks
  o.max_side_by_side_blocks = 4;  // MAX's heads in waves, as a long cache's machine has them
  const QkvMachine m = build_qkv_machine(stories260k(), o);
  const auto& c = m.compiled.weights.config;
  testing::print_shape("qkv machine with the attention stages", m);
  EXPECT_LE(c.intermediate_size, 1024);
  const auto& cfg = stories260k().config();
  const int heads = cfg.n_heads, head_size = cfg.dim / cfg.n_heads, kv_mul = cfg.n_heads / cfg.n_kv_heads;
  ASSERT_EQ(m.heads, heads);
  const auto& gold = golden();
  auto hosts = testing::engine_hosts(m.model());
  const testing::Step host = hosts();
  Tally t;
  bool first = true;
  int stale_wins = 0;  // heads whose max would change if the rows past pos took part
  int unsafe_heads = 0;
  for (const auto& [l, pos, stale] : std::vector<std::tuple<int, int, int>>{{1, 37, 39}, {3, 9, -1}, {0, 40, -1}}) {
    SCOPED_TRACE("layer " + std::to_string(l) + ", position " + std::to_string(pos));
    std::vector<int64_t> prompt;
    if (first) prompt.push_back(m.id("HDR"));
    first = false;
    if (stale >= 0)
      for (int64_t tok : m.load_and_run(gold.at(K::x_in, stale, l), stale, l)) prompt.push_back(tok);
    for (int p = 0; p <= pos; ++p)
      for (int64_t tok : m.load_and_run(gold.at(K::x_in, p, l), p, l)) prompt.push_back(tok);
    for (int64_t tok : m.set_pos(pos)) prompt.push_back(tok);
    // SCORE(l).0 starts the block loop; the machine branches from POS to SCORE(l).1 ...
    // SCORE(l).(pos / 8), then MAX(l).
    const std::vector<int64_t> scores = m.score_and_max(l, pos);
    prompt.push_back(scores[0]);
    std::vector<int64_t> loop(scores.begin() + 1, scores.end());
    const std::vector<float> max = per_head(K::att_max, pos, l, heads, 0);
    if (stale >= 0) {
      // The rows of pos's block past pos: the stale row's score (q of pos, k of the later
      // position) and +0 for the empty ones.
      const std::vector<float>& q = gold.at(K::q_rope, pos, l);
      const std::vector<float>& k = gold.at(K::k_rope, stale, l);
      for (int h = 0; h < heads; ++h) {
        float st = 0.0f;
        const float mh = npu::attn_score_block_reference(q.data() + h * head_size, k.data() + (h / kv_mul) * head_size, 1,
                                                        head_size, false, 0.0f, &st);
        stale_wins += std::max({max[static_cast<size_t>(h)], mh, 0.0f}) != max[static_cast<size_t>(h)];
      }
    }
    for (int64_t tok : m.expected_max(max)) loop.push_back(tok);
    expect_run(m, prompt, host, loop, t);
    // EXP(l).0.0 alone: the machine runs EXP over the blocks up to POS, SUM for every
    // head, PROB over the blocks, WSUM for every head, then DONE.
    std::vector<int64_t> stages = m.exps(l, pos);
    for (int64_t tok : m.sums(l)) stages.push_back(tok);
    for (int64_t tok : m.probs(l, pos)) stages.push_back(tok);
    for (int64_t tok : m.wsums(l)) stages.push_back(tok);
    stages.push_back(m.done());
    expect_run(m, {stages[0]}, host, std::vector<int64_t>(stages.begin() + 1, stages.end()), t);
    for (const int at : {0, 7, 8, pos - 1, pos}) {
      const auto ts = static_cast<size_t>(at);
      std::vector<float> mant, exponent;
      for (int h = 0; h < heads; ++h) {
        const npu::ExpfParts e = npu::expf_reference_parts(gold.head(K::att_shifted, pos, l, h).at(ts));
        const float want = gold.head(K::att_exp, pos, l, h).at(ts);
        ASSERT_EQ(std::bit_cast<uint32_t>(std::ldexp(e.mant, e.exponent)), std::bit_cast<uint32_t>(want));
        mant.push_back(e.mant);
        exponent.push_back(static_cast<float>(e.exponent));
      }
      std::vector<int64_t> read = m.set_pos(at);
      read.push_back(m.id("RE.0"));
      expect_run(m, read, host, m.expected_exps(mant, exponent), t);
      std::vector<float> pm;
      for (int h = 0; h < heads; ++h) {
        const float p = npu::attn_probability_reference(mant[static_cast<size_t>(h)], static_cast<int>(exponent[static_cast<size_t>(h)]),
                                                        gold.head(K::att_sum, pos, l, h).at(0));
        ASSERT_EQ(std::bit_cast<uint32_t>(std::ldexp(p, static_cast<int>(exponent[static_cast<size_t>(h)]))),
                  std::bit_cast<uint32_t>(gold.head(K::att_prob, pos, l, h).at(ts)));
        pm.push_back(p);
      }
      read = m.set_pos(at);
      read.push_back(m.id("RP.0"));
      expect_run(m, read, host, m.expected_probs(pm, exponent), t);
      read = m.set_pos(at);
      read.push_back(m.id("RS.0"));
      expect_run(m, read, host, m.expected_scores(per_head(K::att_scaled, pos, l, heads, ts)), t);
    }
    expect_run(m, {m.id("RSUM.0")}, host, m.expected_sums(per_head(K::att_sum, pos, l, heads, 0)), t);
    // xb of every head: the fast path's chain (its C model, lane by lane) and its unsafe
    // bit; where the bit is 0 the model's xb is run.c's att_out, bit for bit.
    for (int h = 0; h < heads; ++h) {
      const std::vector<float>& prob = gold.head(K::att_prob, pos, l, h);
      std::vector<float> vs;
      for (int tt = 0; tt <= pos; ++tt) {
        const std::vector<float>& vt = gold.at(K::v, tt, l);
        vs.insert(vs.end(), vt.begin() + (h / kv_mul) * head_size, vt.begin() + (h / kv_mul + 1) * head_size);
      }
      std::vector<float> xb;
      bool unsafe = false;
      for (int i = 0; i < head_size; ++i) {
        const npu::WeightedSumModel w = npu::attn_weighted_sum_fast_model(prob.data(), vs.data() + i, pos + 1, head_size);
        xb.push_back(w.xb);
        unsafe |= w.unsafe;
      }
      if (!unsafe) {
        for (int i = 0; i < head_size; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(xb[static_cast<size_t>(i)]),
                    std::bit_cast<uint32_t>(gold.head(K::att_out, pos, l, h).at(static_cast<size_t>(i))));
      }
      unsafe_heads += unsafe;
      expect_run(m, {m.id("RXB(" + std::to_string(h) + ").0")}, host, m.expected_xb(h, xb, unsafe), t);
    }
    // ATTO: X still holds x_in of (pos, l) (the last QKV's): x + wo xb is run.c's x_att_res.
    if (unsafe_heads == 0)
      expect_run(m, {m.id("ATTO(" + std::to_string(l) + ").0")}, host, m.expected_atto(l, gold.at(K::x_att_res, pos, l)), t);
  }
  std::printf("attention stages: %lld floats bit-exact over %lld generated cycles, %.3f ms per cycle; %d heads whose "
              "max the stale rows would have changed; %d heads the fast weighted sum marks unsafe\n",
              static_cast<long long>(t.floats), static_cast<long long>(t.cycles),
              t.cycles ? 1e3 * t.seconds / static_cast<double>(t.cycles) : 0.0, stale_wins, unsafe_heads);
  EXPECT_GT(stale_wins, 0);  // the case exercises the mask
}

// Whether run.c's weighted sum of head h at (pos, layer) is unsafe on the fast path: any
// lane's unsafe bit of the fast path's C model on run.c's probabilities and v.
bool fast_path_unsafe(int pos, int layer, int h) {
  const auto& cfg = stories260k().config();
  const int head_size = cfg.dim / cfg.n_heads, kv_mul = cfg.n_heads / cfg.n_kv_heads;
  const std::vector<float>& prob = golden().head(K::att_prob, pos, layer, h);
  std::vector<float> vs;
  for (int t = 0; t <= pos; ++t) {
    const std::vector<float>& vt = golden().at(K::v, t, layer);
    vs.insert(vs.end(), vt.begin() + (h / kv_mul) * head_size, vt.begin() + (h / kv_mul + 1) * head_size);
  }
  bool unsafe = false;
  for (int i = 0; i < head_size; ++i)
    unsafe |= npu::attn_weighted_sum_fast_model(prob.data(), vs.data() + i, pos + 1, head_size).unsafe;
  return unsafe;
}

// What SUM of head h at (pos, layer) generates after SUM(l).h.0 with segments of `width`
// positions: per segment before POS's, the crossing of C's running sum after it (its tier
// encoding, the last two floats of the routine) and the next segment's SUM token.
std::vector<int64_t> expected_sum_path(const QkvMachine& m, int pos, int layer, int h, int width) {
  const auto& cfg = stories260k().config();
  const int floats = 4 * (cfg.dim / cfg.n_heads);  // the routine holds SLOW's carry: 2 values per lane
  const std::vector<float>& shifted = golden().head(K::att_shifted, pos, layer, h);
  const std::string sum = "SUM(" + std::to_string(layer) + ")." + std::to_string(h) + ".";
  std::vector<int64_t> s;
  float acc = 0.0f;
  for (int seg = 0; (seg + 1) * width <= pos; ++seg) {
    std::vector<float> mant, exponent;
    for (int t = seg * width; t < (seg + 1) * width; ++t) {
      const npu::ExpfParts e = npu::expf_reference_parts(shifted[static_cast<size_t>(t)]);
      mant.push_back(e.mant);
      exponent.push_back(static_cast<float>(e.exponent));
    }
    acc = npu::attn_sum_block_reference(mant.data(), exponent.data(), width, acc);
    int k = 0;
    for (float f : {carry_high_reference(acc), carry_low_reference(acc)}) {
      s.push_back(m.id("CROSS." + std::to_string(floats - 2 + k++)));
      for (int64_t v : m.value_tokens(f)) s.push_back(v);
    }
    s.push_back(m.id(sum + std::to_string(seg + 1)));
  }
  return s;
}

// What WSUM of head h at (pos, layer) generates after WSUM(l).h.0, with segments of `width`
// positions, through WSUMX(l).h: per segment before POS's, while no lane is unsafe or below
// the crossing's float (0 < |xb| < 2^-56), the crossing of the fast path's lane states
// after it (c = xb 2^26, plus 2^33 for a pending lane, sent as c 2^-17: CROSS.k from the
// last head_size floats) and the next segment's WSUM token. `unsafe`: the head's bit (a
// lane unsafe, pending or below where the fast path stops). The lanes are the fast path's
// C model (npu::attn_wsum_lane_step) on run.c's probabilities and v.
struct WsumPath {
  std::vector<int64_t> tokens;
  bool unsafe = false;
  int crossings = 0, pending_lanes = 0;  // pending lanes among the crossings' lanes
  bool early = false;  // an unsafe lane ended the fast path before POS's segment
};
WsumPath expected_wsum_path(const QkvMachine& m, int pos, int layer, int h, int width) {
  const auto& cfg = stories260k().config();
  const int head_size = cfg.dim / cfg.n_heads, kv_mul = cfg.n_heads / cfg.n_kv_heads;
  const std::vector<float>& prob = golden().head(K::att_prob, pos, layer, h);
  const std::string wsum = "WSUM(" + std::to_string(layer) + ")." + std::to_string(h);
  std::vector<npu::WsumLane> lanes(static_cast<size_t>(head_size));
  WsumPath w;
  for (int seg = 0;; ++seg) {
    for (int t = seg * width; t < std::min(pos + 1, (seg + 1) * width); ++t) {
      const std::vector<float>& vt = golden().at(K::v, t, layer);
      for (int i = 0; i < head_size; ++i)
        npu::attn_wsum_lane_step(lanes[static_cast<size_t>(i)], prob[static_cast<size_t>(t)],
                                 vt[static_cast<size_t>((h / kv_mul) * head_size + i)]);
    }
    bool unsafe = false, pending = false;
    for (const npu::WsumLane& lane : lanes) {
      unsafe |= lane.unsafe || (lane.xb != 0.0f && std::fabs(lane.xb) < 0x1p-56f);
      pending |= lane.pending;
    }
    if ((seg + 1) * width > pos || unsafe) {
      w.unsafe = unsafe || pending;
      w.early = (seg + 1) * width <= pos;
      w.tokens.push_back(m.id("WSUMX" + wsum.substr(4)));
      return w;
    }
    int k = 3 * head_size;  // the routine holds SLOW's 4 head_size floats; WSUM's are the last
    for (const npu::WsumLane& lane : lanes) {
      const float c = lane.xb * npu::kWsumScale + (lane.pending ? 0x1p33f : 0.0f);
      w.pending_lanes += lane.pending;
      w.tokens.push_back(m.id("CROSS." + std::to_string(k++)));
      for (int64_t v : m.value_tokens(carry_high_reference(c))) w.tokens.push_back(v);
    }
    w.tokens.push_back(m.id(wsum + "." + std::to_string(seg + 1)));
    ++w.crossings;
  }
}

// What the slow path of head h at (pos, layer) generates from SLOW(l).h.0 on, with segments
// of `width` positions: per segment before POS's, the crossing of C's xb after it (every
// lane's hi and lo in two-tier form, each as its two crossing floats, CROSS.k and its value
// tokens) and the next segment's SLOW token; then `next`. C's xb is run.c's chain
// xb[i] += a * v[i] over the positions in order.
std::vector<int64_t> expected_slow_path(const QkvMachine& m, int pos, int layer, int h, int width, const std::string& next) {
  const auto& cfg = stories260k().config();
  const int head_size = cfg.dim / cfg.n_heads, kv_mul = cfg.n_heads / cfg.n_kv_heads;
  const std::vector<float>& prob = golden().head(K::att_prob, pos, layer, h);
  const std::string slow = "SLOW(" + std::to_string(layer) + ")." + std::to_string(h) + ".";
  std::vector<int64_t> s;
  std::vector<float> xb(static_cast<size_t>(head_size), 0.0f);
  for (int seg = 0; seg < pos / width; ++seg) {
    for (int t = seg * width; t < (seg + 1) * width; ++t) {
      const std::vector<float>& vt = golden().at(K::v, t, layer);
      for (int i = 0; i < head_size; ++i)
        xb[static_cast<size_t>(i)] += prob[static_cast<size_t>(t)] * vt[static_cast<size_t>((h / kv_mul) * head_size + i)];
    }
    int k = 0;
    for (float x : xb) {
      float tiers[3];
      npu::attn_two_tier_encode(x, &tiers[0], &tiers[1], &tiers[2]);
      for (int tier = 0; tier < 2; ++tier)
        for (float f : {carry_high_reference(tiers[tier]), carry_low_reference(tiers[tier])}) {
          s.push_back(m.id("CROSS." + std::to_string(k++)));
          for (int64_t v : m.value_tokens(f)) s.push_back(v);
        }
    }
    s.push_back(m.id(slow + std::to_string(seg + 1)));
  }
  s.push_back(m.id(next));
  return s;
}

// The exact slow path (SLOW(l).h.s) on the machine. The cache of layer 1 is filled by
// QKV(1) at positions 0..25 (golden x_in); at positions 25 and then 24 (QKV(1) at 24 run
// again for its q; row 25 is then a stale row inside the block) the greedy story's first
// heads whose fast weighted sum is unsafe occur (derived here from the fast path's C
// model, not assumed). At POS = pos, SCORE(1).0 runs the scores and MAX, EXP(1).0.0 the
// rest: WSUM(1).h branches on its own unsafe bit to SLOW(1).h.0 for exactly the unsafe
// heads (the generated control stream says which). SLOW runs in segments of one block
// here: segments 0 to 2 each send C's xb after them up through the crossing routine (every
// crossing float as C's chain gives it) and return to the next segment, which reads it
// back; segment 3 holds POS. SUM and WSUM run in segments of one block too: SUM's running
// sum crosses between them; WSUM's: its lanes' states
// lanes' states cross the same way until POS's segment or the first unsafe lane, and WSUMX(1).h branches
// on the head's bit. The cache holds 40 positions (5 blocks): block 3 has rows
// past POS, so the chain adds C's +-0 products of p = 0 rows, which must leave xb as it is. Then
// RXB sends every head's xb: run.c's att_out bit for bit (the slow path's for the unsafe
// heads, with the bit 1), and ATTO(1) (X loaded with x_in of pos) run.c's x_att_res.
// (The fast xb equals C's for these heads too: over the whole 256-step greedy story no
// head's fast xb differs from att_out, so no real case shows the slow path correcting it.)
// SLOW's segments are WSUM's here, so SLOW reads WSUM's heads (through WSUM's picks), its
// chain below WSUM's or, `beside`, beside it.
void slow_path_case(bool beside) {
  QkvMachineOptions o;
  o.attention = true;
  o.max_positions = 40;  // 5 blocks: the last one wholly past POS
  o.slow_segment_blocks = 1;
  o.wsum_segment_blocks = 1;
  o.sum_segment_blocks = 1;
  o.slow_beside_wsum = beside;
  const QkvMachine m = build_qkv_machine(stories260k(), o);
  for (const auto& op : m.program.ops()) ASSERT_EQ(op.label.find("slow prob RAM"), std::string::npos) << "a copy of a head";
  testing::print_shape("qkv machine with the attention stages and the slow path", m);
  EXPECT_LE(m.compiled.weights.config.intermediate_size, 1024);
  const auto& cfg = stories260k().config();
  const int heads = cfg.n_heads, l = 1, last = 25;
  const auto& gold = golden();
  auto hosts = testing::engine_hosts(m.model());
  const testing::Step host = hosts();
  Tally t;
  std::vector<int64_t> prompt = {m.id("HDR")};
  for (int p = 0; p <= last; ++p)
    for (int64_t tok : m.load_and_run(gold.at(K::x_in, p, l), p, l)) prompt.push_back(tok);
  bool first = true;
  int unsafe_total = 0, slow_cycles = 0, wsum_crossings = 0, early_exits = 0, pending_lanes = 0;
  for (const int pos : {last, 24}) {
    SCOPED_TRACE("position " + std::to_string(pos));
    if (!first) prompt.clear();
    first = false;
    // SCORE reads the q of the last QKV: QKV(1) at pos again (its cache row gets the same
    // k and v again).
    if (pos != last)
      for (int64_t tok : m.load_and_run(gold.at(K::x_in, pos, l), pos, l)) prompt.push_back(tok);
    for (int64_t tok : m.set_pos(pos)) prompt.push_back(tok);
    const std::vector<int64_t> scores = m.score_and_max(l, pos);
    prompt.push_back(scores[0]);
    std::vector<int64_t> loop(scores.begin() + 1, scores.end());
    for (int64_t tok : m.expected_max(per_head(K::att_max, pos, l, heads, 0))) loop.push_back(tok);
    expect_run(m, prompt, host, loop, t);
    // EXP(1).0.0 alone; SUM and WSUM in segments; WSUM(1).h reruns exactly the unsafe
    // heads on the slow path.
    std::vector<int64_t> stages = m.exps(l, pos);
    for (int h = 0; h < heads; ++h) {
      stages.push_back(m.sums(l)[static_cast<size_t>(h)]);
      const std::vector<int64_t> sum = expected_sum_path(m, pos, l, h, 8);
      stages.insert(stages.end(), sum.begin(), sum.end());
    }
    for (int64_t tok : m.probs(l, pos)) stages.push_back(tok);
    std::vector<bool> unsafe;
    for (int h = 0; h < heads; ++h) {
      const WsumPath w = expected_wsum_path(m, pos, l, h, 8);
      wsum_crossings += w.crossings;
      pending_lanes += w.pending_lanes;
      early_exits += w.early;
      unsafe.push_back(w.unsafe);
      EXPECT_EQ(w.unsafe, fast_path_unsafe(pos, l, h));
      stages.push_back(m.id("WSUM(" + std::to_string(l) + ")." + std::to_string(h) + ".0"));
      stages.insert(stages.end(), w.tokens.begin(), w.tokens.end());
      if (!unsafe.back()) continue;
      ++unsafe_total;
      stages.push_back(m.id("SLOW(" + std::to_string(l) + ")." + std::to_string(h) + ".0"));
      const std::string next = h + 1 < heads ? "WSUM(" + std::to_string(l) + ")." + std::to_string(h + 1) + ".0" : "DONE";
      const std::vector<int64_t> slow = expected_slow_path(m, pos, l, h, 8, next);
      stages.insert(stages.end(), slow.begin(), slow.end() - 1);  // the next token comes from the loop
      slow_cycles += pos / 8 + 1;
    }
    stages.push_back(m.done());
    const testing::Run r = testing::run_greedy(m, {stages[0]}, host, static_cast<int64_t>(stages.size()) + 4);
    EXPECT_EQ(r.ambiguous, 0);
    ASSERT_EQ(r.generated.size(), stages.size() - 1);
    for (size_t i = 1; i < stages.size(); ++i) ASSERT_EQ(r.generated[i - 1], stages[i]) << "generated token " << i - 1;
    t.cycles += r.generate_forwards;
    t.seconds += r.generate_seconds;
    EXPECT_GT(std::count(unsafe.begin(), unsafe.end(), true), 0);  // the case exercises the slow path
    // Every head's xb is run.c's att_out (the unsafe heads' through the slow path: bit 1).
    for (int h = 0; h < heads; ++h)
      expect_run(m, {m.id("RXB(" + std::to_string(h) + ").0")}, host,
                 m.expected_xb(h, gold.head(K::att_out, pos, l, h), unsafe[static_cast<size_t>(h)]), t);
    // ATTO: x + wo xb with X = x_in of pos: run.c's x_att_res.
    std::vector<int64_t> atto = m.load_x(gold.at(K::x_in, pos, l));
    atto.push_back(m.id("ATTO(" + std::to_string(l) + ").0"));
    expect_run(m, atto, host, m.expected_atto(l, gold.at(K::x_att_res, pos, l)), t);
  }
  std::printf("WSUM: %d crossings (%d pending lanes), %d heads ended early by an unsafe lane\n", wsum_crossings,
              pending_lanes, early_exits);
  EXPECT_GT(wsum_crossings, 0);
  std::printf("slow path: %d unsafe heads rerun exactly in %d SLOW cycles (segments of one block); %lld floats "
              "bit-exact over %lld generated cycles, %.3f ms per cycle\n",
              unsafe_total, slow_cycles, static_cast<long long>(t.floats), static_cast<long long>(t.cycles),
              t.cycles ? 1e3 * t.seconds / static_cast<double>(t.cycles) : 0.0);
}

TEST(QkvMachine, SlowPathOfUnsafeHeadsBitExactOnTheEngine) { slow_path_case(false); }
TEST(QkvMachine, SlowPathBesideWsumBitExactOnTheEngine) { slow_path_case(true); }

}  // namespace
}  // namespace qpu::machine
