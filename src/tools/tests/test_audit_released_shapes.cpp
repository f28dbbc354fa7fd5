// Zero false positives at a released Qwen3.5 shape (QPU_RELEASED_SHAPE: "0.8b" or "4b"):
// python/make_qwen35_init.py builds the model with stock transformers' own
// initialisation at that configuration (hidden, layers, GDN and attention heads, the
// 248,320-token vocabulary) and stores it as the released checkpoints are (BF16, the GDN
// A_log and norm weights F32). Every layer must be learned, with the config's layer types.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/testing/scratch_files.h"
#include "python_run.h"
#include "tools/audit.h"
#include "tools_learned_check.h"

namespace qpu::tools {
namespace {

namespace fs = std::filesystem;
using testing::run_python;

TEST(ReleasedQwen35Shape, StockInitialisationIsLearnedEverywhere) {
  if (std::string(QPU_PYTHON).empty()) GTEST_SKIP() << "QPU_PYTHON is not set (configure with -DQPU_PYTHON=...)";
  const std::string shape = QPU_RELEASED_SHAPE;
  const qpu::testing::ScratchDir dir("qpu-tools-qwen35-" + shape);
  const fs::path out = dir.path() / "model";
  const auto run = run_python(std::string(QPU_SOURCE_DIR) + "/python/make_qwen35_init.py", {shape, out.string()},
                              dir.path());
  ASSERT_EQ(run.status, 0) << run.err;

  std::ifstream in(out / "layer_types.json");
  const auto written = nlohmann::json::parse(in);
  const auto types = written["layer_types"].get<std::vector<std::string>>();
  ASSERT_EQ(types.size(), shape == "4b" ? 32u : 24u);

  const AuditReport r = audit_checkpoint(out);
  expect_learned_everywhere(r, "Qwen3.5 " + shape, static_cast<int64_t>(types.size()), types);
  EXPECT_EQ(r.architecture, "Qwen3_5ForCausalLM");
  size_t f32 = 0, gdn_layers = 0;
  for (const std::string& t : types) gdn_layers += t == "linear_attention";
  for (const TensorAudit& t : r.tensors) f32 += t.stats.dtype == io::DType::F32;
  EXPECT_EQ(f32, 2 * gdn_layers);  // A_log and linear_attn.norm.weight of every GDN layer
  std::cout << "Qwen3.5 " << shape << ": " << written["parameters"] << " parameters, " << r.bytes_scanned
            << " bytes audited in " << r.seconds << " s\n";
}

}  // namespace
}  // namespace qpu::tools
