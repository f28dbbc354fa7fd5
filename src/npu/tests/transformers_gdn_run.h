#pragma once
// Stock transformers on a compiled all-GDN checkpoint (test helper): exports `weights`,
// runs src/npu/tests/transformers_gdn_logits.py (Qwen3_5ForCausalLM, fp32 CPU, tokens 0 ..
// tokens-1 one per forward with the cache) and compares its first `outputs` logits of
// every token with `expected` (tokens x outputs) bit for bit: ADD_FAILUREs for the first
// three differences; returns how many logits differ. Needs QPU_PYTHON and
// QPU_SOURCE_DIR; the caller skips when QPU_PYTHON is empty.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/float_bits.h"
#include "io/qwen35_weights.h"
#include "npu/export.h"

namespace qpu::npu::testing {

inline int64_t transformers_gdn_mismatches(const io::Qwen35Weights& weights, int64_t tokens, int64_t outputs,
                                           const std::vector<float>& expected, const std::string& tag) {
  const auto dir = std::filesystem::temp_directory_path() / ("qpu_npu_tf_" + tag + "_" + std::to_string(::getpid()));
  export_checkpoint(weights, dir);
  std::vector<int64_t> ids(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) ids[static_cast<size_t>(t)] = t;
  std::ofstream(dir / "tokens.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 8));
  const std::string cmd = std::string(QPU_PYTHON) + " " + QPU_SOURCE_DIR + "/src/npu/tests/transformers_gdn_logits.py " +
                          dir.string() + " " + (dir / "tokens.bin").string() + " " + std::to_string(outputs) + " " +
                          (dir / "logits.bin").string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<float> logits(static_cast<size_t>(tokens * outputs));
  std::ifstream in(dir / "logits.bin", std::ios::binary);
  in.read(reinterpret_cast<char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
  EXPECT_EQ(in.gcount(), static_cast<std::streamsize>(logits.size() * 4));
  EXPECT_EQ(expected.size(), logits.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < logits.size() && i < expected.size(); ++i)
    if (float_bits(logits[i]) != float_bits(expected[i]) && mismatches++ < 3)
      ADD_FAILURE() << "token " << i / static_cast<size_t>(outputs) << " out " << i % static_cast<size_t>(outputs)
                    << ": expected " << describe_float(expected[i]) << " got " << describe_float(logits[i]);
  std::filesystem::remove_all(dir);
  return in.gcount() == static_cast<std::streamsize>(logits.size() * 4) ? mismatches : static_cast<int64_t>(logits.size());
}

}  // namespace qpu::npu::testing
