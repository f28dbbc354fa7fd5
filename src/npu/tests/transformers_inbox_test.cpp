// Stock transformers cross-check of the INBOX (npu/inbox.h): the compiled checkpoint
// (a GDN layer holding the inbox, an idle full-attention layer) is exported and run in
// Qwen3_5ForCausalLM (transformers 5.24.0, fp32 CPU) one token per forward with the
// cache; logit 0 (= the out value) of every step must have the bits the engine gives
// and the float last sent to the register read.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <omp.h>
#include <unistd.h>

#include "common/float_bits.h"
#include "npu/engine_host.h"
#include "npu/export.h"
#include "npu/inbox.h"

namespace qpu::npu {
namespace {

std::vector<float> run_transformers(const std::filesystem::path& dir, const std::vector<int64_t>& tokens) {
  std::ofstream(dir / "tokens.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 8));
  const std::string script = std::string(QPU_SOURCE_DIR) + "/src/npu/tests/transformers_inbox_logits.py";
  const std::string cmd = std::string(QPU_PYTHON) + " " + script + " " + dir.string() + " " +
                          (dir / "tokens.bin").string() + " " + (dir / "logits.bin").string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<float> logits(tokens.size());
  std::ifstream in(dir / "logits.bin", std::ios::binary);
  in.read(reinterpret_cast<char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
  EXPECT_EQ(in.gcount(), static_cast<std::streamsize>(logits.size() * 4));
  return logits;
}

std::vector<float> run_engine(const InboxCheckpoint& c, const std::vector<int64_t>& tokens) {
  const Forward forward = engine_host()(c.compiled.weights);
  std::vector<float> hidden(static_cast<size_t>(c.compiled.weights.config.hidden_size)), out;
  for (int64_t t : tokens) {
    forward(t, hidden);
    out.push_back(hidden[static_cast<size_t>(c.out_dim)]);
  }
  return out;
}

int64_t mismatches(const char* host, const std::vector<float>& got, const std::vector<float>& want) {
  int64_t bad = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i)
    if (float_bits(got[i]) != float_bits(want[i]) && bad++ < 3)
      ADD_FAILURE() << host << " token " << i << ": expected " << describe_float(want[i]) << " got "
                    << describe_float(got[i]);
  return bad + (got.size() == want.size() ? 0 : 1);
}

TEST(TransformersInbox, OutValuesMatchTheEngineBitForBit) {
  const std::string python = QPU_PYTHON;
  if (python.empty()) GTEST_SKIP() << "QPU_PYTHON not set";
  omp_set_num_threads(1);  // the engine's parallel regions only add waiting on the loaded test machine
  const InboxCheckpoint c = build_inbox_checkpoint({});
  const auto dir = std::filesystem::temp_directory_path() / ("qpu_npu_tf_inbox_" + std::to_string(::getpid()));
  export_checkpoint(c.compiled.weights, dir);

  // 1. Value tokens at host positions 0..2 (tap 3 sees the zero history: no write),
  //    then a read of row 0, then a random stream (its own NOP header first).
  const float y = -0x1.234568p-3f;
  const std::vector<int64_t> send_y = c.send(y, 0);
  InboxStream s = random_inbox_stream(c, 500, 77);
  std::vector<int64_t> tokens(send_y.begin() + 1, send_y.end());
  std::vector<float> want = {0, 0, 0};
  tokens.push_back(c.read(0));
  want.push_back(0);
  tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
  want.insert(want.end(), s.expected.begin(), s.expected.end());
  ASSERT_GE(tokens.size(), 2000u);
  const std::vector<float> tf = run_transformers(dir, tokens);
  const std::vector<float> engine = run_engine(c, tokens);
  EXPECT_EQ(mismatches("transformers", tf, engine), 0);
  EXPECT_EQ(mismatches("engine", engine, want), 0);
  EXPECT_GT(s.reads_of_written, 100);
  EXPECT_GT(s.overwrites, 100);
  std::printf("transformers inbox: %zu tokens, %lld floats, %lld overwrites, %lld reads (%lld of written)\n",
              tokens.size(), static_cast<long long>(s.floats_sent), static_cast<long long>(s.overwrites),
              static_cast<long long>(s.reads), static_cast<long long>(s.reads_of_written));

  // 2. A write whose control token is at host position 0.
  std::vector<int64_t> first = c.send(y, 5);
  first.insert(first.end(), {c.read(5), c.read(0)});
  const std::vector<float> first_want = {0, 0, 0, 0, y, 0};
  EXPECT_EQ(mismatches("transformers", run_transformers(dir, first), first_want), 0);
  EXPECT_EQ(mismatches("engine", run_engine(c, first), first_want), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qpu::npu
