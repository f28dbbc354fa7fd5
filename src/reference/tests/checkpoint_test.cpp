// Loading llama2.c checkpoints (stories260K and synthetic ones written by the test
// itself), rejecting bad ones, and exact properties of forward() on synthetic weights.
#include <math.h>

#include <cstring>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/float_bits.h"
#include "reference/llama2_checkpoint.h"
#include "reference/transformer.h"
#include "test_support.h"

namespace qpu::reference {
namespace {

using test::TestCheckpoint;

// Expects `f` to throw a qpu::Error whose message contains every `parts`.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no qpu::Error thrown";
  } catch (const Error& e) {
    for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

void expect_same_bits(std::span<const float> got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); i++) {
    ASSERT_EQ(float_bits(got[i]), float_bits(want[i])) << what << " [" << i << "]";
  }
}

float file_float(const std::string& bytes, size_t float_index) {
  float f = 0;
  std::memcpy(&f, bytes.data() + 28 + 4 * float_index, 4);
  return f;
}

TEST(Llama2Checkpoint, LoadsStories260K) {
  const Llama2Checkpoint ckpt = load_llama2_checkpoint(test::stories_bin());
  const Llama2Config& c = ckpt.config();
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.head_size(), 8);
  EXPECT_EQ(c.kv_dim(), 32);
  EXPECT_EQ(c.kv_mul(), 2);
  EXPECT_EQ(ckpt.layout().file_bytes(), 1056540u);

  // Tensor views against the file's bytes at offsets from the documented layout.
  const std::string bytes = test::read_file(test::stories_bin());
  const Llama2Weights w = ckpt.weights();
  const size_t emb = 512 * 64, rms = 5 * 64, wq = 5 * 64 * 64, wkv = 5 * 32 * 64, ffn = 5 * 172 * 64;
  const size_t w2_start = emb + rms + wq + 2 * wkv + wq + rms + ffn;
  EXPECT_EQ(float_bits(w.w2[3 * 64 * 172 + 17]), float_bits(file_float(bytes, w2_start + 3 * 64 * 172 + 17)));
  const size_t final_start = w2_start + 2 * ffn;
  EXPECT_EQ(float_bits(w.rms_final[63]), float_bits(file_float(bytes, final_start + 63)));
  EXPECT_EQ(float_bits(w.freq_cis_imag[2047]), float_bits(file_float(bytes, final_start + 64 + 2 * 2048 - 1)));
  EXPECT_EQ(w.wcls.data(), w.token_embedding.data());  // shared classifier
  EXPECT_EQ(w.wcls.size(), emb);
}

TEST(Llama2Checkpoint, UnsharedSyntheticLayoutReadsBack) {
  const auto dir = test::scratch_dir();
  const TestCheckpoint t = TestCheckpoint::random(1234, /*shared=*/false);
  test::write_file(dir / "tiny.bin", t.bytes());

  const Llama2Checkpoint ckpt = load_llama2_checkpoint(dir / "tiny.bin");
  EXPECT_FALSE(ckpt.config().shared_classifier);
  EXPECT_EQ(ckpt.config().vocab_size, 40);
  EXPECT_EQ(ckpt.config().header_vocab_size(), -40);
  const Llama2Weights w = ckpt.weights();
  expect_same_bits(w.token_embedding, t.token_embedding, "token_embedding");
  expect_same_bits(w.rms_att, t.rms_att, "rms_att");
  expect_same_bits(w.wq, t.wq, "wq");
  expect_same_bits(w.wk, t.wk, "wk");
  expect_same_bits(w.wv, t.wv, "wv");
  expect_same_bits(w.wo, t.wo, "wo");
  expect_same_bits(w.rms_ffn, t.rms_ffn, "rms_ffn");
  expect_same_bits(w.w1, t.w1, "w1");
  expect_same_bits(w.w2, t.w2, "w2");
  expect_same_bits(w.w3, t.w3, "w3");
  expect_same_bits(w.rms_final, t.rms_final, "rms_final");
  expect_same_bits(w.freq_cis_real, t.freq_real, "freq_cis_real");
  expect_same_bits(w.freq_cis_imag, t.freq_imag, "freq_cis_imag");
  expect_same_bits(w.wcls, t.wcls, "wcls");
}

// Runs a fixed token sequence through a checkpoint file and returns every logits vector.
std::vector<std::vector<float>> run_sequence(const std::filesystem::path& path, const std::vector<int>& tokens) {
  const Llama2Checkpoint ckpt = load_llama2_checkpoint(path);
  Transformer tf(ckpt);
  std::vector<std::vector<float>> out;
  for (size_t pos = 0; pos < tokens.size(); pos++) {
    const auto logits = tf.forward(tokens[pos], static_cast<int>(pos));
    out.emplace_back(logits.begin(), logits.end());
  }
  return out;
}

const std::vector<int> kSequence = {1, 7, 39, 0, 22, 22, 5, 13, 38, 2, 19, 30, 11, 4, 27, 9};  // 16 = seq_len

TEST(Llama2Transformer, UnsharedClassifierEqualToEmbeddingMatchesShared) {
  const auto dir = test::scratch_dir();
  for (uint32_t seed : {1u, 77u, 4242u}) {
    TestCheckpoint shared = TestCheckpoint::random(seed, true);
    TestCheckpoint unshared = shared;
    unshared.shared = false;
    unshared.wcls = shared.token_embedding;
    test::write_file(dir / "shared.bin", shared.bytes());
    test::write_file(dir / "unshared.bin", unshared.bytes());
    const auto a = run_sequence(dir / "shared.bin", kSequence);
    const auto b = run_sequence(dir / "unshared.bin", kSequence);
    for (size_t pos = 0; pos < a.size(); pos++) expect_same_bits(b[pos], a[pos], "logits");

    // And the unshared classifier is really used: another wcls changes the logits.
    unshared.wcls = test::random_floats(unshared.wcls.size(), seed + 100, 1.0f);
    test::write_file(dir / "other.bin", unshared.bytes());
    const auto c = run_sequence(dir / "other.bin", kSequence);
    EXPECT_NE(float_bits(c[0][0]), float_bits(a[0][0]));
  }
}

TEST(Llama2Transformer, QueryAndKeyWeightsDoNotMatterAtPositionZero) {
  // At pos 0 attention is a softmax over one score: expf(0) / 1 = 1 exactly, so the
  // head output is exactly 1 * v, whatever q and k are. From pos 1 on they matter.
  const auto dir = test::scratch_dir();
  TestCheckpoint t = TestCheckpoint::random(99, false);
  test::write_file(dir / "a.bin", t.bytes());
  t.wq = test::random_floats(t.wq.size(), 5, 0.3f);
  t.wk = test::random_floats(t.wk.size(), 6, 0.3f);
  test::write_file(dir / "b.bin", t.bytes());
  const auto a = run_sequence(dir / "a.bin", {3, 17});
  const auto b = run_sequence(dir / "b.bin", {3, 17});
  expect_same_bits(b[0], a[0], "pos 0 logits");
  size_t differing = 0;
  for (size_t i = 0; i < a[1].size(); i++) differing += float_bits(a[1][i]) != float_bits(b[1][i]);
  EXPECT_GT(differing, 0u);
}

TEST(Llama2Transformer, ZeroResidualBranchesLeaveOnlyFinalNormAndClassifier) {
  // With wo = 0 and w2 = 0 every layer adds exact zeros to the residual, so the logits
  // are wcls . rmsnorm(embedding[token]) at every position, computed here independently
  // in run.c's documented order.
  const auto dir = test::scratch_dir();
  TestCheckpoint t = TestCheckpoint::random(5, false);
  std::fill(t.wo.begin(), t.wo.end(), 0.0f);
  std::fill(t.w2.begin(), t.w2.end(), 0.0f);
  test::write_file(dir / "zero.bin", t.bytes());
  const auto got = run_sequence(dir / "zero.bin", kSequence);
  for (size_t pos = 0; pos < kSequence.size(); pos++) {
    const float* x = t.token_embedding.data() + kSequence[pos] * t.dim;
    float ss = 0.0f;
    for (int j = 0; j < t.dim; j++) ss += x[j] * x[j];
    ss /= static_cast<float>(t.dim);
    ss += 1e-5f;
    ss = 1.0f / sqrtf(ss);
    std::vector<float> xn(t.dim);
    for (int j = 0; j < t.dim; j++) xn[j] = t.rms_final[j] * (ss * x[j]);
    std::vector<float> want(t.vocab);
    for (int i = 0; i < t.vocab; i++) {
      float val = 0.0f;
      for (int j = 0; j < t.dim; j++) val += t.wcls[i * t.dim + j] * xn[j];
      want[i] = val;
    }
    expect_same_bits(got[pos], want, "logits");
  }
}

TEST(Llama2Transformer, RejectsTokenOrPositionOutOfRange) {
  const Llama2Checkpoint ckpt = load_llama2_checkpoint(test::stories_bin());
  Transformer tf(ckpt);
  expect_error([&] { tf.forward(512, 0); }, {"token 512"});
  expect_error([&] { tf.forward(-1, 0); }, {"token -1"});
  expect_error([&] { tf.forward(1, 512); }, {"position 512"});
}

TEST(Llama2Checkpoint, RejectsTruncatedOrPaddedFile) {
  const auto dir = test::scratch_dir();
  const std::string good = TestCheckpoint::random(3, false).bytes();
  const auto path = dir / "cut.bin";
  for (size_t cut : {size_t{4}, size_t{1}, size_t{4 * 40 * 32}}) {  // last float, a byte, the whole wcls
    test::write_file(path, good.substr(0, good.size() - cut));
    expect_error([&] { load_llama2_checkpoint(path); }, {path.string(), "bytes"});
  }
  test::write_file(path, good + std::string(4, '\0'));
  expect_error([&] { load_llama2_checkpoint(path); }, {path.string(), "bytes"});
  test::write_file(path, good.substr(0, 27));
  expect_error([&] { load_llama2_checkpoint(path); }, {path.string(), "header"});
  test::write_file(path, "");
  expect_error([&] { load_llama2_checkpoint(path); }, {path.string()});
  expect_error([&] { load_llama2_checkpoint(dir / "missing.bin"); }, {"missing.bin", "cannot open"});
  // The stories260K file read as if its classifier were unshared lacks 512*64 floats.
  std::string flipped = test::read_file(test::stories_bin());
  const int32_t neg = -512;
  std::memcpy(flipped.data() + 20, &neg, 4);
  test::write_file(path, flipped);
  expect_error([&] { load_llama2_checkpoint(path); }, {path.string(), "1056540 bytes", "unshared"});
}

TEST(Llama2Checkpoint, RejectsBadHeaderValues) {
  const auto dir = test::scratch_dir();
  const auto path = dir / "bad.bin";
  struct Case {
    int field;
    int32_t value;
    const char* message;
  };
  const Case cases[] = {
      {0, 0, "dim"},         {0, -32, "dim"},       {1, 0, "hidden_dim"}, {2, 0, "n_layers"},
      {3, 0, "n_heads"},     {3, 5, "n_heads"},     {4, 0, "n_kv_heads"}, {4, 3, "n_kv_heads"},
      {5, 0, "vocab_size"},  {5, INT32_MIN, "vocab_size"},             {6, 0, "seq_len"},
      {6, -1, "seq_len"},    {3, 32, "even"},  // with n_kv_heads 1 (set below): kv_dim 1
  };
  for (const Case& c : cases) {
    TestCheckpoint t = TestCheckpoint::random(8, false);
    std::string bytes = t.bytes();
    std::memcpy(bytes.data() + 4 * c.field, &c.value, 4);
    if (c.field == 3 && c.value == 32) {
      // n_heads 32, n_kv_heads 1: kv_dim = 32 * 1 / 32 = 1 is odd, RoPE would rotate past it.
      const int32_t one = 1;
      std::memcpy(bytes.data() + 16, &one, 4);
    }
    test::write_file(path, bytes);
    expect_error([&] { load_llama2_checkpoint(path); }, {path.string(), c.message});
  }
  // Sizes that overflow 64-bit arithmetic are an error, not a wrapped size.
  TestCheckpoint t = TestCheckpoint::random(8, false);
  std::string bytes = t.bytes();
  const int32_t big = INT32_MAX - 1;
  for (int field : {0, 1, 2}) std::memcpy(bytes.data() + 4 * field, &big, 4);
  const int32_t heads = 2;
  std::memcpy(bytes.data() + 12, &heads, 4);
  std::memcpy(bytes.data() + 16, &heads, 4);
  test::write_file(path, bytes);
  expect_error([&] { load_llama2_checkpoint(path); }, {path.string()});
}

}  // namespace
}  // namespace qpu::reference
