// The real thing: tiny random checkpoints made and run by transformers itself
// (python/make_tiny_checkpoints.py: one token per forward with the cache, fp32 CPU,
// eager attention), loaded from disk by io::load_qwen35 and run by the engine.
//
// Metric: for every forward, max_i |engine_i - torch_i| / max_i |torch_i| (the error
// relative to the vector's largest logit, so near-zero logits do not blow it up);
// the bar is 1e-5. The greedy continuation (64 steps, the engine feeding back its
// own argmax) must be the same token ids.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/float_bits.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "io/qwen35_weights.h"

namespace qpu::engine {
namespace {

namespace fs = std::filesystem;

std::vector<float> read_floats(const fs::path& path, size_t count) {
  std::vector<float> v(count);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(float)));
  EXPECT_TRUE(in.good()) << "cannot read " << count << " floats from " << path;
  return v;  // little endian on every machine this project targets (x86-64)
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "qpu-engine-conformance-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    if (!std::getenv("QPU_KEEP_CONFORMANCE")) fs::remove_all(path_);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(TransformersConformance, TinyCheckpointsMatchLogitsAndGreedyTokens) {
  const std::string python = QPU_PYTHON;
  if (python.empty()) GTEST_SKIP() << "QPU_PYTHON is empty: no transformers to compare with";
  TempDir dir;
  const std::string script = std::string(QPU_SOURCE_DIR) + "/python/make_tiny_checkpoints.py";
  const std::string command = "'" + python + "' '" + script + "' '" + dir.path().string() + "' 2>" +
                              (dir.path() / "python.log").string();
  ASSERT_EQ(std::system(command.c_str()), 0) << command << " (see its log in a kept dir: QPU_KEEP_CONFORMANCE=1)";

  std::ifstream manifest_file(dir.path() / "manifest.json");
  const nlohmann::json manifest = nlohmann::json::parse(manifest_file);
  ASSERT_GE(manifest["checkpoints"].size(), 3u);

  double worst_overall = 0;
  for (const nlohmann::json& ckpt : manifest["checkpoints"]) {
    const std::string name = ckpt["name"];
    SCOPED_TRACE(name);
    ASSERT_EQ(ckpt["attn_implementation"], "eager");
    const Model model(io::load_qwen35(dir.path() / ckpt["dir"].get<std::string>()));
    const int64_t vocab = ckpt["vocab_size"];
    ASSERT_EQ(model.config().vocab_size, vocab);
    const auto prompt = ckpt["prompt"].get<std::vector<int64_t>>();
    const auto expected_tokens = ckpt["generated"].get<std::vector<int64_t>>();
    const size_t forwards = ckpt["forwards"];
    ASSERT_EQ(forwards, prompt.size() + expected_tokens.size());
    const std::vector<float> torch_logits =
        read_floats(dir.path() / ckpt["logits"].get<std::string>(), forwards * static_cast<size_t>(vocab));

    State state = model.new_state();
    std::vector<float> logits(static_cast<size_t>(vocab));
    std::vector<int64_t> generated;
    double worst = 0;
    for (size_t i = 0; i < forwards; ++i) {
      const int64_t token = i < prompt.size() ? prompt[i] : generated.back();
      model.forward(token, state, logits);
      double max_diff = 0, max_ref = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        const double ref = torch_logits[i * static_cast<size_t>(vocab) + static_cast<size_t>(v)];
        max_diff = std::max(max_diff, std::fabs(static_cast<double>(logits[v]) - ref));
        max_ref = std::max(max_ref, std::fabs(ref));
      }
      const double rel = max_diff / max_ref;
      worst = std::max(worst, rel);
      EXPECT_LE(rel, 1e-5) << "forward " << i << " (position " << i << ")";
      if (i + 1 >= prompt.size() && generated.size() < expected_tokens.size()) generated.push_back(argmax(logits));
    }
    EXPECT_EQ(generated, expected_tokens);
    std::printf("[ conformance ] %-26s max relative logits error %.3e over %zu forwards, %zu greedy tokens %s\n",
                name.c_str(), worst, forwards, generated.size(),
                generated == expected_tokens ? "identical" : "DIFFER");
    worst_overall = std::max(worst_overall, worst);
  }
  std::printf("[ conformance ] overall max relative logits error %.3e (bar 1e-5)\n", worst_overall);
  RecordProperty("max_relative_error", std::to_string(worst_overall));
}

}  // namespace
}  // namespace qpu::engine
