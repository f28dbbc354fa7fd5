// Golden traces (reference/trace*.h): every record checked against the model's
// dimensions, run.c's order and the weights; the file format round trip and its errors;
// the statistics on hand-made values; `qpu ref --trace` and `qpu trace-stats`.
#include <math.h>  // glibc's sqrtf/expf, as run.c
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/float_bits.h"
#include "common/testing/scratch_files.h"
#include "reference/generate.h"
#include "reference/run_c_ops.h"
#include "reference/trace_file.h"
#include "reference/trace_stats.h"
#include "test_support.h"

namespace qpu::reference {
namespace {

// stories260K's shape, from llama2.c's doc/stories260K.md (not from the loader).
constexpr int kDim = 64, kHidden = 172, kLayers = 5, kHeads = 8, kKvDim = 32, kHeadSize = 8, kVocab = 512;

struct Stories {
  Llama2Checkpoint checkpoint = load_llama2_checkpoint(test::stories_bin());
  Tokenizer tokenizer = Tokenizer::load(test::tok512_bin(), 512);
};
const Stories& stories() {
  static const Stories s;
  return s;
}

struct TracedRun {
  GenerateResult result;
  TraceFile trace;
};

// Runs generate with a TraceWriter into a file and reads the file back.
TracedRun traced_run(const std::string& prompt, int steps, float temperature, float topp, uint64_t seed) {
  const qpu::testing::ScratchDir dir("qpu-trace-run");  // its own: test::scratch_dir() is per test
  const auto path = dir / "trace.bin";
  Transformer tf(stories().checkpoint);
  Sampler sampler(512, temperature, topp, seed);
  TraceWriter writer(path.string(), {stories().checkpoint.config(), "test"});
  GenerateCallbacks callbacks;
  callbacks.trace = &writer;
  TracedRun run;
  run.result = generate(tf, stories().tokenizer, sampler, prompt, steps, /*keep_logits=*/true, callbacks);
  writer.close();
  EXPECT_EQ(tf.trace(), nullptr);  // generate hands the transformer back untraced
  run.trace = read_trace(path.string());
  return run;
}

const TracedRun& greedy_once() {
  static const TracedRun run = traced_run("Once upon a time", 256, 0.0f, 0.9f, 1);
  return run;
}

// The records of one kind, keyed by (pos, layer, head).
using Key = std::tuple<int, int, int>;
std::map<Key, const TraceRecord*> by_kind(const TraceFile& f, TraceKind kind) {
  std::map<Key, const TraceRecord*> m;
  for (const auto& r : f.records) {
    if (r.kind == kind) {
      EXPECT_TRUE(m.emplace(Key{r.pos, r.layer, r.head}, &r).second);
    }
  }
  return m;
}

void expect_bits(std::span<const float> got, std::span<const float> want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); i++)
    ASSERT_EQ(float_bits(got[i]), float_bits(want[i])) << what << " index " << i;
}

TEST(Trace, GreedyRunIsUnchangedAndLogitsRecordsAreForwardsOutputs) {
  const TracedRun& run = greedy_once();
  EXPECT_EQ(run.result.text, test::read_file(test::greedy_txt()));
  EXPECT_EQ(run.trace.header.info, "test");
  EXPECT_EQ(run.trace.header.config.dim, kDim);
  const auto logits = by_kind(run.trace, TraceKind::logits);
  ASSERT_EQ(logits.size(), static_cast<size_t>(run.result.positions));
  for (int pos = 0; pos < run.result.positions; pos++) {
    const auto* r = logits.at({pos, -1, -1});
    expect_bits(r->values, std::span<const float>(run.result.logits).subspan(pos * kVocab, kVocab),
                "logits pos " + std::to_string(pos));
  }
}

// The exact sequence of (kind, layer, head) run.c's order gives one position.
std::vector<Key> expected_order(int pos, bool sampled, bool topp) {
  using K = TraceKind;
  std::vector<Key> seq;
  const auto add = [&](K k, int layer, int head) { seq.emplace_back(static_cast<int>(k), layer, head); };
  add(K::token_in, -1, -1);
  for (int l = 0; l < kLayers; l++) {
    for (K k : {K::x_in, K::att_rms_sq, K::att_rms_sum, K::att_rms_mean, K::att_rms_eps, K::att_rms_sqrt,
                K::att_rms_inv, K::att_rms_scaled, K::att_rms_out, K::q, K::k, K::v, K::rope_freq, K::rope_angle,
                K::rope_cos, K::rope_sin, K::q_rope, K::k_rope})
      add(k, l, -1);
    for (int h = 0; h < kHeads; h++) {
      for (K k : {K::att_raw, K::att_scaled, K::att_max, K::att_shifted, K::att_exp, K::att_sum, K::att_prob,
                  K::att_out})
        add(k, l, h);
    }
    for (K k : {K::wo_out, K::x_att_res, K::ffn_rms_sq, K::ffn_rms_sum, K::ffn_rms_mean, K::ffn_rms_eps,
                K::ffn_rms_sqrt, K::ffn_rms_inv, K::ffn_rms_scaled, K::ffn_rms_out, K::hb, K::hb2, K::silu_exp,
                K::silu_denom, K::silu_recip, K::silu, K::ffn_prod, K::w2_out, K::x_ffn_res})
      add(k, l, -1);
  }
  for (K k : {K::final_rms_sq, K::final_rms_sum, K::final_rms_mean, K::final_rms_eps, K::final_rms_sqrt,
              K::final_rms_inv, K::final_rms_scaled, K::final_rms_out, K::logits})
    add(k, -1, -1);
  if (sampled) {
    for (K k : {K::sample_scaled, K::sample_max, K::sample_shifted, K::sample_exp, K::sample_sum, K::sample_prob,
                K::sample_coin})
      add(k, -1, -1);
    if (topp) {
      for (K k : {K::topp_cutoff, K::topp_cumulative, K::topp_r}) add(k, -1, -1);
    }
  }
  add(K::next_token, -1, -1);
  (void)pos;
  return seq;
}

// Values per record, written out for stories260K by hand.
size_t expected_count(TraceKind kind, int pos) {
  const std::string_view n = trace_kind_info(kind).name;
  if (n == "k" || n == "v" || n == "k_rope") return kKvDim;
  if (n.starts_with("rope_")) return kDim / 2;
  if (n == "hb" || n == "hb2" || n.starts_with("silu") || n == "ffn_prod") return kHidden;
  if (n == "att_out") return kHeadSize;
  if (n == "att_max" || n == "att_sum" || n.ends_with("_sum") || n.ends_with("_mean") || n.ends_with("_eps") ||
      n.ends_with("_sqrt") || n.ends_with("_inv") || n == "sample_max" || n == "sample_coin" ||
      n.starts_with("topp_") || n == "token_in")
    return 1;
  if (n == "next_token") return 2;
  if (n.starts_with("att_")) {
    if (n.starts_with("att_rms")) return kDim;
    return static_cast<size_t>(pos) + 1;
  }
  if (n == "logits" || n.starts_with("sample_")) return kVocab;
  return kDim;
}

void expect_order_and_counts(const TracedRun& run, bool sampled_run, bool topp) {
  size_t i = 0;
  const auto& recs = run.trace.records;
  for (int pos = 0; pos < run.result.positions; pos++) {
    const bool forced = pos < static_cast<int>(run.result.prompt_tokens.size()) - 1;
    for (const Key& want : expected_order(pos, sampled_run && !forced, topp)) {
      ASSERT_LT(i, recs.size());
      const TraceRecord& r = recs[i++];
      ASSERT_EQ(Key(static_cast<int>(r.kind), r.layer, r.head), want) << "record " << i - 1 << " pos " << pos;
      ASSERT_EQ(r.pos, pos);
      ASSERT_EQ(r.values.size(), expected_count(r.kind, pos)) << trace_kind_info(r.kind).name;
    }
  }
  EXPECT_EQ(i, recs.size());
}

TEST(Trace, RecordsFollowRunCsOrderWithTheModelsCounts) {
  expect_order_and_counts(greedy_once(), false, false);
}

// The pieces recomputed by trace.cpp lead to the outputs recorded from the
// transformer's own buffers, and the buffers are linked by run.c's formulas.
TEST(Trace, RecordsAreConsistentWithEachOtherAndTheWeights) {
  const TraceFile& f = greedy_once().trace;
  const Llama2Weights w = stories().checkpoint.weights();
  std::map<TraceKind, std::map<Key, const TraceRecord*>> k;
  for (const TraceKindInfo& info : trace_kinds()) k[info.kind] = by_kind(f, info.kind);
  using K = TraceKind;
  const auto get = [&](K kind, int pos, int layer, int head = -1) -> std::span<const float> {
    return k.at(kind).at({pos, layer, head})->values;
  };
  const size_t dim = kDim;
  for (int pos : {0, 1, 7, 100, 255}) {
    const int token = static_cast<int>(get(K::token_in, pos, -1)[0]);
    EXPECT_EQ(token, greedy_once().result.tokens[pos]);
    expect_bits(get(K::x_in, pos, 0), w.token_embedding.subspan(static_cast<size_t>(token) * dim, dim), "embedding");
    // Checks `norm`'s pieces: out[j] = weight[j] * (inv * x[j]) with inv from ss.
    const auto rms = [&](K sq, std::span<const float> x, std::span<const float> weight, std::span<const float> out,
                         int layer) {
      float ss = 0.0f;
      for (size_t j = 0; j < dim; j++) {
        ASSERT_EQ(float_bits(get(sq, pos, layer)[j]), float_bits(x[j] * x[j]));
        ss += x[j] * x[j];
      }
      const auto one = [&](int step) { return get(static_cast<K>(static_cast<uint32_t>(sq) + step), pos, layer)[0]; };
      ASSERT_EQ(float_bits(one(1)), float_bits(ss));
      ASSERT_EQ(float_bits(one(2)), float_bits(ss / 64.0f));
      ASSERT_EQ(float_bits(one(3)), float_bits(one(2) + 1e-5f));
      ASSERT_EQ(float_bits(one(4)), float_bits(sqrtf(one(3))));
      ASSERT_EQ(float_bits(one(5)), float_bits(1.0f / one(4)));
      for (size_t j = 0; j < dim; j++) {
        const float scaled = get(static_cast<K>(static_cast<uint32_t>(sq) + 6), pos, layer)[j];
        ASSERT_EQ(float_bits(scaled), float_bits(one(5) * x[j]));
        ASSERT_EQ(float_bits(out[j]), float_bits(weight[j] * scaled)) << "rmsnorm output " << j;
      }
    };
    for (int l = 0; l < kLayers; l++) {
      const size_t lu = static_cast<size_t>(l);
      if (l > 0) expect_bits(get(K::x_in, pos, l), get(K::x_ffn_res, pos, l - 1), "x_in = previous x_ffn_res");
      rms(K::att_rms_sq, get(K::x_in, pos, l), w.rms_att.subspan(lu * dim, dim), get(K::att_rms_out, pos, l), l);
      std::vector<float> v(kDim);
      matmul(v, get(K::att_rms_out, pos, l), w.wq.subspan(lu * dim * dim, dim * dim), kDim, kDim);
      expect_bits(get(K::q, pos, l), v, "q");
      v.resize(kKvDim);
      matmul(v, get(K::att_rms_out, pos, l), w.wv.subspan(lu * dim * kKvDim, dim * kKvDim), kDim, kKvDim);
      expect_bits(get(K::v, pos, l), v, "v");
      // RoPE on pair 0 of q: angle 0 * freq, so cos 1, sin 0 only at pos 0.
      const auto c = get(K::rope_cos, pos, l), s = get(K::rope_sin, pos, l);
      for (size_t i = 0; i < dim / 2; i++) {
        const float q0 = get(K::q, pos, l)[2 * i], q1 = get(K::q, pos, l)[2 * i + 1];
        ASSERT_EQ(float_bits(get(K::q_rope, pos, l)[2 * i]), float_bits(q0 * c[i] - q1 * s[i]));
        ASSERT_EQ(float_bits(get(K::q_rope, pos, l)[2 * i + 1]), float_bits(q0 * s[i] + q1 * c[i]));
      }
      for (int h = 0; h < kHeads; h++) {
        const auto raw = get(K::att_raw, pos, l, h), scaled = get(K::att_scaled, pos, l, h);
        const auto e = get(K::att_exp, pos, l, h), prob = get(K::att_prob, pos, l, h);
        // The raw score against this position's own key, from the q_rope / k_rope records.
        float self = 0.0f;
        for (int i = 0; i < kHeadSize; i++)
          self += get(K::q_rope, pos, l)[h * kHeadSize + i] * get(K::k_rope, pos, l)[(h / 2) * kHeadSize + i];
        ASSERT_EQ(float_bits(raw[pos]), float_bits(self));
        float sum = 0.0f;
        for (size_t t = 0; t < raw.size(); t++) {
          ASSERT_EQ(float_bits(scaled[t]), float_bits(raw[t] / sqrtf(8.0f)));
          ASSERT_EQ(float_bits(e[t]), float_bits(expf(scaled[t] - get(K::att_max, pos, l, h)[0])));
          sum += e[t];
        }
        ASSERT_EQ(float_bits(get(K::att_sum, pos, l, h)[0]), float_bits(sum));
        for (size_t t = 0; t < raw.size(); t++) ASSERT_EQ(float_bits(prob[t]), float_bits(e[t] / sum)) << t;
      }
      std::vector<float> xb(dim);
      for (int h = 0; h < kHeads; h++) {
        const auto o = get(K::att_out, pos, l, h);
        std::copy(o.begin(), o.end(), xb.begin() + h * kHeadSize);
      }
      v.assign(dim, 0.0f);
      matmul(v, xb, w.wo.subspan(lu * dim * dim, dim * dim), kDim, kDim);
      expect_bits(get(K::wo_out, pos, l), v, "wo_out");
      for (size_t j = 0; j < dim; j++) {
        ASSERT_EQ(float_bits(get(K::x_att_res, pos, l)[j]), float_bits(get(K::x_in, pos, l)[j] + v[j]));
      }
      rms(K::ffn_rms_sq, get(K::x_att_res, pos, l), w.rms_ffn.subspan(lu * dim, dim), get(K::ffn_rms_out, pos, l), l);
      for (size_t i = 0; i < static_cast<size_t>(kHidden); i++) {
        const float hb = get(K::hb, pos, l)[i];
        const float recip = get(K::silu_recip, pos, l)[i];
        ASSERT_EQ(float_bits(get(K::silu_exp, pos, l)[i]), float_bits(expf(-hb)));
        ASSERT_EQ(float_bits(recip), float_bits(1.0f / (1.0f + expf(-hb))));
        ASSERT_EQ(float_bits(get(K::silu, pos, l)[i]), float_bits(hb * recip));
        ASSERT_EQ(float_bits(get(K::ffn_prod, pos, l)[i]), float_bits(hb * recip * get(K::hb2, pos, l)[i]));
      }
      v.assign(dim, 0.0f);
      matmul(v, get(K::ffn_prod, pos, l), w.w2.subspan(lu * dim * kHidden, dim * kHidden), kHidden, kDim);
      expect_bits(get(K::w2_out, pos, l), v, "w2_out");
    }
    rms(K::final_rms_sq, get(K::x_ffn_res, pos, kLayers - 1), w.rms_final, get(K::final_rms_out, pos, -1), -1);
    std::vector<float> logits(kVocab);
    matmul(logits, get(K::final_rms_out, pos, -1), w.wcls, kDim, kVocab);
    expect_bits(get(K::logits, pos, -1), logits, "logits");
    const auto next = get(K::next_token, pos, -1);
    EXPECT_EQ(next[0], static_cast<float>(greedy_once().result.tokens[pos + 1]));
    EXPECT_EQ(next[1], pos < 4 ? 1.0f : 0.0f);
  }
}

TEST(Trace, SampledRunsTraceTheSamplerAndDoNotChange) {
  struct Case {
    const char* prompt;
    float t, p;
    uint64_t seed;
  };
  for (const Case c : {Case{"Lily", 0.8f, 0.9f, 7}, Case{"", 1.0f, 0.0f, 42}, Case{"Tom ran", 1.5f, 1.0f, 3}}) {
    SCOPED_TRACE(c.prompt);
    const TracedRun run = traced_run(c.prompt, 40, c.t, c.p, c.seed);
    // Tracing changes nothing: the same tokens and logits as an untraced run.
    Transformer tf(stories().checkpoint);
    Sampler sampler(512, c.t, c.p, c.seed);
    const GenerateResult plain = generate(tf, stories().tokenizer, sampler, c.prompt, 40, true);
    EXPECT_EQ(run.result.tokens, plain.tokens);
    expect_bits(run.result.logits, plain.logits, "logits");
    const bool topp = c.p > 0 && c.p < 1;
    expect_order_and_counts(run, true, topp);

    uint64_t rng = c.seed;
    std::map<TraceKind, std::map<Key, const TraceRecord*>> k;
    for (const TraceKindInfo& info : trace_kinds()) k[info.kind] = by_kind(run.trace, info.kind);
    const auto& coins = k.at(TraceKind::sample_coin);
    for (int pos = static_cast<int>(run.result.prompt_tokens.size()) - 1; pos < run.result.positions; pos++) {
      const auto get = [&](TraceKind kind) -> std::span<const float> { return k.at(kind).at({pos, -1, -1})->values; };
      const auto logits = get(TraceKind::logits), scaled = get(TraceKind::sample_scaled);
      const auto e = get(TraceKind::sample_exp), prob = get(TraceKind::sample_prob);
      float sum = 0.0f;
      for (size_t i = 0; i < kVocab; i++) {
        ASSERT_EQ(float_bits(scaled[i]), float_bits(logits[i] / c.t));
        ASSERT_EQ(float_bits(e[i]), float_bits(expf(scaled[i] - get(TraceKind::sample_max)[0])));
        sum += e[i];
      }
      ASSERT_EQ(float_bits(get(TraceKind::sample_sum)[0]), float_bits(sum));
      for (size_t i = 0; i < kVocab; i++) ASSERT_EQ(float_bits(prob[i]), float_bits(e[i] / sum));
      const float coin = random_f32(rng);  // one coin per sampled position, in order
      ASSERT_EQ(float_bits(coins.at({pos, -1, -1})->values[0]), float_bits(coin));
      std::vector<ProbIndex> scratch;
      const int want = topp ? sample_topp(prob, c.p, coin, scratch) : sample_mult(prob, coin);
      ASSERT_EQ(get(TraceKind::next_token)[0], static_cast<float>(want));
      if (topp) {
        EXPECT_EQ(float_bits(get(TraceKind::topp_cutoff)[0]), float_bits((1.0f - c.p) / 511.0f));
        EXPECT_EQ(float_bits(get(TraceKind::topp_r)[0]), float_bits(coin * get(TraceKind::topp_cumulative)[0]));
        EXPECT_GT(get(TraceKind::topp_cumulative)[0], c.p);
      }
    }
  }
}

// ---- the file format's errors -------------------------------------------------

std::string small_trace_bytes() {
  const qpu::testing::ScratchDir dir("qpu-trace-small");
  const auto path = dir / "small.bin";
  Transformer tf(stories().checkpoint);
  Sampler sampler(512, 0.0f, 0.9f, 1);
  TraceWriter writer(path.string(), {stories().checkpoint.config(), "small"});
  GenerateCallbacks callbacks;
  callbacks.trace = &writer;
  generate(tf, stories().tokenizer, sampler, "Hi", 2, false, callbacks);
  writer.close();
  return test::read_file(path);
}

std::string read_error(const std::string& bytes) {
  const auto path = test::scratch_dir() / "bad.bin";
  test::write_file(path, bytes);
  try {
    read_trace(path.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Header size: magic 8 + version 4 + config 28 + kind count 4 + the kind table + info.
size_t header_bytes(const std::string& info) {
  size_t n = 8 + 4 + 28 + 4;
  for (const auto& k : trace_kinds()) n += 8 + k.name.size();
  return n + 4 + info.size();
}

std::string with_u32(std::string bytes, size_t offset, uint32_t value) {
  std::memcpy(bytes.data() + offset, &value, 4);
  return bytes;
}

TEST(TraceFileErrors, TruncatedCorruptAndForeignFilesGiveClearErrors) {
  const std::string good = small_trace_bytes();
  {
    const auto path = test::scratch_dir() / "good.bin";
    test::write_file(path, good);
    const TraceFile f = read_trace(path.string());
    EXPECT_EQ(f.header.info, "small");
    // Per position: token_in, 5 layers x (18 + 8 heads x 8 + 19), 9 final, next_token.
    EXPECT_EQ(f.records.size(), 2u * (1 + 5 * (18 + 8 * 8 + 19) + 9 + 1));
  }
  const size_t h = header_bytes("small");
  // The first record: token_in at pos 0 (layer -1, head -1), one value; then x_in.
  uint32_t first[5];
  std::memcpy(first, good.data() + h, sizeof first);
  EXPECT_EQ(first[0], static_cast<uint32_t>(TraceKind::token_in));
  EXPECT_EQ(first[4], 1u);
  const size_t second = h + 24;  // header 20 + one float
  std::memcpy(first, good.data() + second, sizeof first);
  EXPECT_EQ(first[0], static_cast<uint32_t>(TraceKind::x_in));
  EXPECT_EQ(first[4], 64u);

  const auto has = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    EXPECT_NE(message.find("bad.bin"), std::string::npos) << message;
  };
  has(read_error(""), "truncated at byte 0: magic needs 8 bytes, 0 left");
  has(read_error(good.substr(0, 20)), "truncated at byte 20: model config needs 28 bytes, 8 left");
  has(read_error(good.substr(0, h - 2)), "info needs 5 bytes, 3 left");
  has(read_error(good.substr(0, second + 10)), "record header needs 20 bytes, 10 left (record 1)");
  has(read_error(good.substr(0, second + 20 + 100)), "record values needs 256 bytes, 100 left (record 1)");
  has(read_error(good.substr(0, good.size() - 1)), "truncated");
  std::string bad = good;
  bad[0] = 'X';
  has(read_error(bad), "not a qpu trace file");
  has(read_error(with_u32(good, 8, 2)), "trace version 2, this qpu reads version 1");
  has(read_error(with_u32(good, 12, 0)), "dim = 0 must be positive");
  bad = good;
  bad[44 + 8] = 'X';  // first letter of the first kind's name, x_in
  has(read_error(bad), "differs from this qpu's 1 'x_in': written by another version");
  has(read_error(with_u32(good, 40, 67)), "the trace has 67 record kinds, this qpu knows 66");
  has(read_error(with_u32(good, h, 999)), "record 0 at byte " + std::to_string(h) + ": unknown trace kind id 999");
  has(read_error(with_u32(good, h + 4, 512)), "token_in at pos 512 outside [0, seq_len = 512)");
  has(read_error(with_u32(good, h + 8, 3)), "token_in at pos 0 has layer 3 (expected -1)");
  has(read_error(with_u32(good, second + 8, 5)), "x_in at pos 0 has layer 5 (expected 0..4)");
  has(read_error(with_u32(good, second + 12, 0)), "x_in at pos 0 layer 0 has head 0 (expected -1)");
  has(read_error(with_u32(good, h + 16, 2)), "token_in at pos 0 layer -1 head -1 has 2 values, the model gives 1");
  has(read_error(with_u32(good, second + 16, 0xffffffffu)), "has 4294967295 values, the model gives 64");
  try {
    read_trace("/nonexistent/bad.bin");
    ADD_FAILURE();
  } catch (const Error& e) {
    has(e.what(), "cannot open trace file");
  }
}

TEST(TraceFileErrors, FirstDifferenceNamesPosLayerHeadKindAndIndex) {
  const std::string good = small_trace_bytes();
  const auto dir = test::scratch_dir();
  const auto a = dir / "a.bin", b = dir / "b.bin";
  test::write_file(a, good);
  test::write_file(b, good);
  EXPECT_EQ(first_trace_difference(a.string(), b.string()), std::nullopt);

  // Find pos 1, layer 2, head 5's att_prob record in the file and flip a bit of value 1.
  const TraceFile f = read_trace(a.string());
  size_t offset = header_bytes("small"), record = 0;
  for (; record < f.records.size(); record++) {
    const TraceRecord& r = f.records[record];
    if (r.kind == TraceKind::att_prob && r.pos == 1 && r.layer == 2 && r.head == 5) break;
    offset += 20 + 4 * r.values.size();
  }
  ASSERT_LT(record, f.records.size());
  std::string bad = good;
  bad[offset + 20 + 4] ^= 1;  // lowest mantissa bit of value 1
  test::write_file(b, bad);
  const auto d = first_trace_difference(a.string(), b.string());
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->record, record);
  EXPECT_EQ(d->kind, TraceKind::att_prob);
  EXPECT_EQ(d->pos, 1);
  EXPECT_EQ(d->layer, 2);
  EXPECT_EQ(d->head, 5);
  EXPECT_EQ(d->index, 1u);
  const float want = f.records[record].values[1];
  const float got = float_from_bits(float_bits(want) ^ 1u);
  EXPECT_EQ(d->message, "record " + std::to_string(record) + ": pos 1, layer 2, head 5, att_prob index 1: expected " +
                            describe_float(want) + ", got " + describe_float(got));

  // A shorter trace: the first missing record is the difference.
  test::write_file(b, good.substr(0, offset));
  const auto cut = first_trace_difference(a.string(), b.string());
  ASSERT_TRUE(cut.has_value());
  EXPECT_EQ(cut->record, record);
  EXPECT_EQ(cut->index, SIZE_MAX);
  EXPECT_NE(cut->message.find("b.bin ends here, the other has pos 1, layer 2, head 5, att_prob"), std::string::npos)
      << cut->message;
}

TEST(TraceFileErrors, WriterRejectsRecordsThatDoNotFitTheModel) {
  const auto path = test::scratch_dir() / "w.bin";
  TraceWriter writer(path.string(), {stories().checkpoint.config(), ""});
  const std::vector<float> v(63);
  EXPECT_THROW(writer.record(TraceKind::x_in, 0, 0, -1, v), Error);
  EXPECT_THROW(writer.record(TraceKind::x_in, 0, -1, -1, std::vector<float>(64)), Error);
  writer.record(TraceKind::x_in, 0, 0, -1, std::vector<float>(64));
  EXPECT_EQ(writer.records(), 1u);
  EXPECT_THROW(TraceWriter("/nonexistent/dir/t.bin", {stories().checkpoint.config(), ""}), Error);
}

// ---- statistics -----------------------------------------------------------

TEST(TraceStats, BinadesOfKnownFloats) {
  EXPECT_EQ(float_binade(1.0f), 0);
  EXPECT_EQ(float_binade(-1.0f), 0);
  EXPECT_EQ(float_binade(0.75f), -1);
  EXPECT_EQ(float_binade(1.9999999f), 0);
  EXPECT_EQ(float_binade(2.0f), 1);
  EXPECT_EQ(float_binade(18.0f), 4);
  EXPECT_EQ(float_binade(0x1p-126f), -126);
  EXPECT_EQ(float_binade(0x1.fffffcp-127f), -127);  // largest subnormal
  EXPECT_EQ(float_binade(0x1p-149f), -149);         // smallest subnormal
  EXPECT_EQ(float_binade(0x3p-149f), -148);
  EXPECT_EQ(float_binade(0x1.fffffep127f), 127);
}

TEST(TraceStats, CountsWindowsAndBands) {
  TraceStats stats({parse_trace_window("npu=[2^-78,2^36]"), parse_trace_window("gdn=[18,2^50)")});
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> a = {0.0f, -0.0f, 1.0f, -0x1p-149f, 0x1p36f, 0x1.000002p36f, 18.0f, 17.999998f, -inf};
  stats.add(TraceKind::q, a);
  stats.add(TraceKind::q, std::vector<float>{0x1p-78f, 0x1.fffffep-79f, 0x1p50f, std::nanf("")});
  const TraceKindStats& s = stats.kind(TraceKind::q);
  EXPECT_EQ(s.records, 2u);
  EXPECT_EQ(s.values, 13u);
  EXPECT_EQ(s.zeros, 2u);
  EXPECT_EQ(s.subnormals, 1u);
  EXPECT_EQ(s.infs, 1u);
  EXPECT_EQ(s.nans, 1u);
  EXPECT_EQ(s.nonzero_finite(), 9u);
  EXPECT_EQ(float_bits(s.min_abs), float_bits(0x1p-149f));
  EXPECT_EQ(float_bits(s.max_abs), float_bits(0x1p50f));
  EXPECT_EQ(s.min_binade(), -149);
  EXPECT_EQ(s.max_binade(), 50);
  // binades: -149, -79, -78, 0, 4 (18 and 17.99..), 36 (2^36 and just above), 50
  EXPECT_EQ(s.distinct_binades(), 7);
  // npu: outside are 2^-149, 0x1.000002p36, 0x1.fffffep-79, 2^50, inf, nan
  EXPECT_EQ(s.outside[0], 6u);
  // gdn [18, 2^50): inside are 18, 2^36, 0x1.000002p36; 2^50 is outside
  EXPECT_EQ(s.outside[1], 11u - 3u);
  EXPECT_EQ(s.bands_needed(45), 4);   // {-149}, {-79, -78}, {0, 4, 36}, {50}
  EXPECT_EQ(s.bands_needed(130), 2);  // {-149 .. -20}, {-79 .. 50}
  EXPECT_EQ(s.bands_needed(200), 1);
  EXPECT_EQ(s.best_band(45), (std::pair<int, uint64_t>{-8, 9u - 5u}));  // -8..36 holds 1, 17.99.., 18, 2^36 x2
  const TraceKindStats all = stats.all_floats();
  EXPECT_EQ(all.values, 13u);
  stats.add(TraceKind::token_in, std::vector<float>{5.0f});
  EXPECT_EQ(stats.all_floats().values, 13u);  // token ids are not computed floats
}

TEST(TraceStats, WindowSyntax) {
  const TraceWindow w = parse_trace_window("gdn=[18,2^50)");
  EXPECT_EQ(w.name, "gdn");
  EXPECT_EQ(w.lo, 18.0);
  EXPECT_EQ(w.hi, 0x1p50);
  EXPECT_TRUE(w.lo_closed);
  EXPECT_FALSE(w.hi_closed);
  EXPECT_TRUE(parse_trace_window("a=(2^-3,0.5]").contains(0.5));
  EXPECT_FALSE(parse_trace_window("a=(2^-3,0.5]").contains(0.125));
  for (const char* bad : {"[1,2]", "a=1,2", "a=[1,2", "a=[2,1]", "a=[x,2]", "a=[2^1.5,4]", "a=[-1,2]", "=[1,2]",
                          "a=[1;2]"})
    EXPECT_THROW(parse_trace_window(bad), Error) << bad;
}

// ---- the commands ---------------------------------------------------------------

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int run_qpu(const std::string& args, const std::filesystem::path& out) {
#ifdef QPU_EXE
  const int status = std::system((quote(QPU_EXE) + " " + args + " >" + quote(out.string()) + " 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
#else
  (void)args, (void)out;
  return -1;
#endif
}

TEST(TraceCli, GreedyTraceLogitsEqualDumpLogits) {
#ifndef QPU_EXE
  GTEST_SKIP() << "the qpu executable is not built";
#endif
  const auto dir = test::scratch_dir();
  const auto trace = dir / "t.bin", logits = dir / "l.f32", out = dir / "out";
  ASSERT_EQ(run_qpu("ref " + quote(test::stories_bin().string()) + " -z " + quote(test::tok512_bin().string()) +
                        " -t 0 -n 256 -i 'Once upon a time' --trace " + quote(trace.string()) + " --dump-logits " +
                        quote(logits.string()),
                    out),
            0)
      << test::read_file(out);
  const TraceFile f = read_trace(trace.string());
  EXPECT_EQ(f.header.info.rfind("qpu ref ", 0), 0u) << f.header.info;
  EXPECT_NE(f.header.info.find("-t 0 -p 0.9 -s "), std::string::npos) << f.header.info;
  EXPECT_NE(f.header.info.find("-n 256 -i \"Once upon a time\""), std::string::npos) << f.header.info;
  const std::string dump = test::read_file(logits);
  size_t offset = 0;
  int pos = 0;
  for (const auto& r : f.records) {
    if (r.kind != TraceKind::logits) continue;
    ASSERT_EQ(r.pos, pos++);
    ASSERT_LE(offset + r.values.size() * 4, dump.size());
    ASSERT_EQ(std::memcmp(r.values.data(), dump.data() + offset, r.values.size() * 4), 0) << "pos " << r.pos;
    offset += r.values.size() * 4;
  }
  EXPECT_EQ(offset, dump.size());
  EXPECT_GT(pos, 4);
  EXPECT_EQ(test::read_file(out).rfind(test::read_file(test::greedy_txt()), 0), 0u);  // stdout, then stderr

  // trace-stats on it: the text table and the JSON agree with the library.
  TraceStats want;
  want.add_file(trace.string());
  ASSERT_EQ(run_qpu("trace-stats " + quote(trace.string()), out), 0) << test::read_file(out);
  EXPECT_EQ(test::read_file(out), want.text(45));
  ASSERT_EQ(run_qpu("trace-stats --json --band 40 --window 'w=[2^-20,2^5)' " + quote(trace.string()), out), 0)
      << test::read_file(out);
  const auto j = nlohmann::json::parse(test::read_file(out));
  EXPECT_EQ(j["files"], 1);
  EXPECT_EQ(j["band"], 40);
  EXPECT_EQ(j["windows"][0]["interval"], "[2^-20,2^5)");
  for (const auto& k : j["kinds"]) {
    if (k["kind"] != "logits") continue;
    EXPECT_EQ(k["values"], 512u * static_cast<unsigned>(pos));
    EXPECT_EQ(k["records"], static_cast<unsigned>(pos));
  }
  ASSERT_NE(run_qpu("trace-stats " + quote(logits.string()), out), 0);
  EXPECT_NE(test::read_file(out).find("not a qpu trace file"), std::string::npos) << test::read_file(out);
}

}  // namespace
}  // namespace qpu::reference
