// config.json files written (or loaded) by transformers 5.24.0, with transformers'
// own reading of each as the expected values: defaults, legacy and nested rope,
// derived layer_types, wrapper tying and token-id precedence.
#include <cstdlib>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "config_expectations.h"
#include "io/qwen35_config.h"
#include "test_helpers.h"

namespace qpu::io {
namespace {

TEST(TransformersConfigs, ParsedLikeTransformers) {
  const std::string python = QPU_PYTHON;
  if (python.empty()) GTEST_SKIP() << "QPU_PYTHON is not set (configure with -DQPU_PYTHON=...)";
  testing::ScratchDir scratch;
  const std::string script = testing::test_data("make_qwen35_configs.py").string();
  const std::string log = (scratch / "python.log").string();
  const std::string command = "'" + python + "' '" + script + "' '" + scratch.path().string() + "' > '" + log + "' 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command << "\n" << testing::read_file(log);

  int cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(scratch.path())) {
    if (!entry.is_directory()) continue;
    const auto expected = nlohmann::json::parse(testing::read_file(entry.path() / "expected.json"));
    testing::expect_matches_transformers(load_qwen35_config(entry.path()), expected, entry.path().filename().string());
    ++cases;
  }
  EXPECT_EQ(cases, 10);
}

}  // namespace
}  // namespace qpu::io
