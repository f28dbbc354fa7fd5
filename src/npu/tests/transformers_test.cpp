// Cross-check with stock transformers: the mul, dot_var, argmax, xorshift, divide, sqrt and expf
// checkpoints of the suite are exported as Hugging Face checkpoints, run in
// Qwen3_5ForCausalLM (fp32, batched, MKL's summation order), and their logits must
// equal C's results bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include <unistd.h>

#include "common/float_bits.h"
#include "npu/export.h"
#include "npu/suite.h"
#include "npu/uplink.h"
#include "npu/host_vocab.h"
#include "reference/generate.h"
#include "reference/sampler.h"
#include "reference/tokenizer.h"
#include "reference/transformer.h"
#include <nlohmann/json.hpp>
#include "engine/model.h"

namespace qpu::npu {
namespace {

class Transformers : public ::testing::TestWithParam<std::string> {};

TEST_P(Transformers, LogitsMatchC) {
  const std::string python = QPU_PYTHON;
  if (python.empty()) GTEST_SKIP() << "QPU_PYTHON not set";
  for (const PrimitiveSpec& spec : all_primitives()) {
    if (spec.name != GetParam()) continue;
    const int64_t lanes = lanes_for(spec, 256), rows = 512;
    std::mt19937_64 rng(99);
    std::vector<float> inputs;
    for (const auto& e : spec.edge_cases) inputs.insert(inputs.end(), e.begin(), e.end());
    std::vector<float> one(static_cast<size_t>(spec.inputs));
    while (inputs.size() < static_cast<size_t>(lanes * rows * spec.inputs)) {
      spec.random_case(rng, one.data());
      inputs.insert(inputs.end(), one.begin(), one.end());
    }
    const Batch b = build_batch(spec, lanes, rows, inputs);
    const auto dir = std::filesystem::temp_directory_path() / ("qpu_npu_tf_" + spec.name + "_" + std::to_string(::getpid()));
    export_checkpoint(b.compiled.weights, dir);
    std::vector<int64_t> tokens(static_cast<size_t>(rows));
    for (int64_t t = 0; t < rows; ++t) tokens[static_cast<size_t>(t)] = t;
    std::ofstream(dir / "tokens.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 8));
    const int64_t n_out = lanes * spec.outputs;
    const std::string cmd = python + " " + QPU_SOURCE_DIR + "/src/npu/tests/transformers_logits.py " + dir.string() +
                            " " + (dir / "tokens.bin").string() + " " + std::to_string(n_out) + " " +
                            (dir / "logits.bin").string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::vector<float> logits(static_cast<size_t>(rows * n_out));
    std::ifstream(dir / "logits.bin", std::ios::binary)
        .read(reinterpret_cast<char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
    int64_t mismatches = 0, cases = 0;
    std::vector<float> expect(static_cast<size_t>(spec.outputs));
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t l = 0; l < lanes; ++l) {
        spec.reference(&inputs[static_cast<size_t>((t * lanes + l) * spec.inputs)], expect.data());
        ++cases;
        for (int o = 0; o < spec.outputs; ++o) {
          const float got = logits[static_cast<size_t>(t * n_out + l * spec.outputs + o)];
          if (float_bits(got) != float_bits(0.0f + expect[static_cast<size_t>(o)])) {
            if (mismatches++ < 3)
              ADD_FAILURE() << spec.name << " row " << t << " lane " << l << ": expected "
                            << describe_float(0.0f + expect[static_cast<size_t>(o)]) << " got " << describe_float(got);
          }
        }
      }
    EXPECT_EQ(cases, lanes * rows);
    EXPECT_EQ(mismatches, 0);
    std::filesystem::remove_all(dir);
    return;
  }
  FAIL() << "no primitive " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(All, Transformers,
                         ::testing::Values("mul", "dot_var", "dot_fused_var", "argmax", "xorshift", "divide", "sqrt", "expf"));

// The uplink in stock transformers: every logit of every emitting row (the value-token
// scores are integer sums, so any summation order gives them exactly) equals the
// engine's, and the argmax is the token of the part C's split produces.
TEST(TransformersUplink, ValueTokenLogitsMatchEngineAndC) {
  const std::string python = QPU_PYTHON;
  if (python.empty()) GTEST_SKIP() << "QPU_PYTHON not set";
  std::mt19937_64 rng(21);
  std::vector<float> xs = {0.0f, 1.0f, -0x1p-47f, 0x1.fffffep19f, -0x1.ffdf7cp+19f};
  while (xs.size() < 200) {
    const float v = std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffff) * 0x1p-23f, -47 + static_cast<int>(rng() % 67));
    xs.push_back((rng() & 1) ? -v : v);
  }
  const UplinkCheckpoint u = build_uplink_checkpoint(xs);
  const auto dir = std::filesystem::temp_directory_path() / ("qpu_npu_tf_uplink_" + std::to_string(::getpid()));
  export_checkpoint(u.compiled.weights, dir);
  const int64_t rows = 3 * static_cast<int64_t>(xs.size()), V = u.compiled.weights.config.vocab_size;
  std::vector<int64_t> tokens;
  for (int64_t t = 0; t < rows; ++t) tokens.push_back(u.first_row + t);
  std::ofstream(dir / "tokens.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 8));
  const std::string cmd = python + " " + QPU_SOURCE_DIR + "/src/npu/tests/transformers_logits.py " + dir.string() + " " +
                          (dir / "tokens.bin").string() + " " + std::to_string(V) + " " + (dir / "logits.bin").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<float> tf(static_cast<size_t>(rows * V));
  std::ifstream(dir / "logits.bin", std::ios::binary)
      .read(reinterpret_cast<char*>(tf.data()), static_cast<std::streamsize>(tf.size() * 4));
  engine::Model model(u.compiled.weights);
  std::vector<float> logits(static_cast<size_t>(V)), hidden(static_cast<size_t>(u.compiled.weights.config.hidden_size));
  int64_t mismatches = 0;
  for (int64_t t = 0; t < rows; ++t) {
    engine::State state = model.new_state();
    model.forward(tokens[static_cast<size_t>(t)], state, logits, hidden);
    const float* row = &tf[static_cast<size_t>(t * V)];
    for (int64_t v = 0; v < V; ++v)
      if (float_bits(row[v]) != float_bits(logits[static_cast<size_t>(v)]) && mismatches++ < 3)
        ADD_FAILURE() << "row " << t << " logit " << v << ": engine " << describe_float(logits[static_cast<size_t>(v)])
                      << " transformers " << describe_float(row[v]);
    const int64_t best = std::max_element(row, row + V) - row;
    const float part = split_parts_reference(xs[static_cast<size_t>(t / 3)])[static_cast<size_t>(t % 3)];
    EXPECT_EQ(best, u.vocab.token(part)) << "row " << t;
  }
  EXPECT_EQ(mismatches, 0);
  std::filesystem::remove_all(dir);
}

// The compiled host's tokenizer.json in stock tokenizers: every nested token prints what
// run.c prints (after BOS and elsewhere), and the greedy story decodes to the published
// run.c output.
TEST(TransformersHostTokenizer, StockTokenizersPrintWhatRunCPrints) {
  const std::string python = QPU_PYTHON;
  if (python.empty()) GTEST_SKIP() << "QPU_PYTHON not set";
  const std::string models = QPU_SHARED_DIR "/models/stories260K/";
  const auto nested = reference::Tokenizer::load(models + "tok512.bin", 512);
  const HostVocab v = make_host_vocab(nested);
  std::vector<std::vector<int64_t>> seqs;
  std::vector<std::string> expect;
  for (int t = 0; t < v.nested_vocab; ++t) {
    if (t == 1) continue;
    for (int prev : {1, 5}) {
      seqs.push_back({prev == 1 ? v.after_bos[static_cast<size_t>(t)] : t});
      expect.emplace_back(reference::printable_piece(nested.decode(prev, t)));
    }
  }
  // The greedy story (run.c's loop, -n 256, prompt "Once upon a time").
  const auto ckpt = reference::load_llama2_checkpoint(models + "stories260K.bin");
  reference::Transformer tf(ckpt);
  reference::Sampler greedy(512, 0.0f, 0.9f, 1);
  const std::vector<int> tokens = reference::generate(tf, nested, greedy, "Once upon a time", 256).tokens;
  std::vector<int64_t> story = host_ids_for(v, tokens);
  story.insert(story.begin() + 3, v.values.first + 1234);  // a value token in the stream prints nothing
  seqs.push_back(story);
  std::string published;
  {
    std::ifstream f(models + "greedy-once-upon-a-time-256.txt", std::ios::binary);
    published.assign(std::istreambuf_iterator<char>(f), {});
  }
  expect.push_back(published.substr(0, published.size() - 1));  // run.c's final newline is not a token
  const auto dir = std::filesystem::temp_directory_path() / ("qpu_npu_tf_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << host_tokenizer_json(v);
  std::ofstream(dir / "ids.json") << nlohmann::json(seqs).dump();
  const std::string cmd = python + " " + QPU_SOURCE_DIR + "/src/npu/tests/host_tokenizer_decode.py " +
                          (dir / "tokenizer.json").string() + " " + (dir / "ids.json").string() + " " +
                          (dir / "out.json").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(dir / "out.json");
  const auto got = nlohmann::json::parse(in).get<std::vector<std::string>>();
  ASSERT_EQ(got.size(), expect.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expect[i]) << "sequence " << i;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qpu::npu
