// Zero false positives on checkpoints written by transformers 5.24.0 itself
// (make_ordinary_transformers.py): Qwen3_5ForCausalLM and LlamaForCausalLM, stock
// initialisation and re-randomised weights, F32 and BF16. Every layer must be
// "learned" and no tensor may carry compiled or unusual evidence.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tools/audit.h"

namespace qpu::tools {
namespace {

namespace fs = std::filesystem;

class TransformersCheckpoints : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string python = QPU_PYTHON;
    if (python.empty()) return;
    std::string pattern = (fs::temp_directory_path() / "qpu-tools-transformers-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) return;
    dir_ = pattern;
    const std::string script = std::string(QPU_SOURCE_DIR) + "/src/tools/tests/make_ordinary_transformers.py";
    const std::string log = (dir_ / "python.log").string();
    const std::string command = "'" + python + "' '" + script + "' '" + dir_.string() + "' > '" + log + "' 2>&1";
    status_ = std::system(command.c_str());
    if (status_ != 0) {
      std::ifstream in(log);
      log_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    if (!dir_.empty()) fs::remove_all(dir_, ignored);
  }
  void SetUp() override {
    if (std::string(QPU_PYTHON).empty()) GTEST_SKIP() << "QPU_PYTHON is not set (configure with -DQPU_PYTHON=...)";
    ASSERT_EQ(status_, 0) << log_;
  }
  static fs::path dir_;
  static int status_;
  static std::string log_;
};

fs::path TransformersCheckpoints::dir_;
int TransformersCheckpoints::status_ = -1;
std::string TransformersCheckpoints::log_;

TEST_F(TransformersCheckpoints, AllLearned) {
  std::ifstream in(dir_ / "index.json");
  const auto index = nlohmann::json::parse(in);
  ASSERT_EQ(index["checkpoints"].size(), 6u);
  for (const auto& c : index["checkpoints"]) {
    const std::string name = c["name"];
    const AuditReport r = audit_checkpoint(dir_ / name);
    EXPECT_EQ(r.summary.verdict, "learned") << name << "\n" << format_audit(r, true);
    ASSERT_EQ(static_cast<int64_t>(r.layers.size()), c["layers"].get<int64_t>()) << name;
    const auto types = c["layer_types"];
    for (size_t i = 0; i < r.layers.size(); ++i) {
      EXPECT_EQ(r.layers[i].verdict, Verdict::Learned) << name << " " << r.layers[i].id;
      if (!types.empty()) {
        EXPECT_EQ(r.layers[i].type, types[i].get<std::string>()) << name;
      }
    }
    for (const TensorAudit& t : r.tensors) {
      EXPECT_TRUE(t.verdict == Verdict::Learned || t.verdict == Verdict::Zero) << name << " " << t.name;
      for (const Evidence& e : t.evidence) EXPECT_EQ(e.strength, Strength::Note) << name << " " << e.message;
    }
    EXPECT_TRUE(r.warnings.empty()) << name << ": " << r.warnings.front();
  }
}

}  // namespace
}  // namespace qpu::tools
