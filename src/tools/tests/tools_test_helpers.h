#pragma once
// Shared by the tools tests: scratch directories, value generators that look like
// learned weights, and writing small checkpoints with the real safetensors writer.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/testing/scratch_files.h"
#include <nlohmann/json.hpp>

#include "io/dtype.h"
#include "io/safetensors_writer.h"

namespace qpu::tools::testing {

// Scratch directories and file helpers are shared by all tests (common/testing).
using qpu::testing::read_file;
using qpu::testing::write_file;
struct ScratchDir : qpu::testing::ScratchDir {
  ScratchDir() : qpu::testing::ScratchDir("qpu-tools-test") {}
};

// Round to the nearest bf16 (ties to even), as torch's .to(bfloat16) does.
inline float round_to_bf16(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  if ((b & 0x7f800000u) == 0x7f800000u) return x;
  b += 0x7fffu + ((b >> 16) & 1u);
  b &= 0xffff0000u;
  float y;
  std::memcpy(&y, &b, 4);
  return y;
}

inline std::vector<float> gaussian(std::mt19937_64& rng, size_t n, double std) {
  std::normal_distribution<double> d(0.0, std);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(d(rng));
  return v;
}

inline std::vector<float> student_t(std::mt19937_64& rng, size_t n, double df, double scale) {
  std::student_t_distribution<double> d(df);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(scale * d(rng));
  return v;
}

inline std::vector<float> laplace(std::mt19937_64& rng, size_t n, double b) {
  std::exponential_distribution<double> e(1.0 / b);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(sign(rng) ? e(rng) : -e(rng));
  return v;
}

inline std::vector<float> uniform(std::mt19937_64& rng, size_t n, double bound) {
  std::uniform_real_distribution<double> d(-bound, bound);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(d(rng));
  return v;
}

inline std::vector<float> quantized_bf16(std::vector<float> v) {
  for (auto& x : v) x = round_to_bf16(x);
  return v;
}

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
  io::DType dtype = io::DType::F32;
};

inline size_t numel(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

// model.safetensors (+ config.json when given) in dir. BF16/F16 tensors are
// rounded here (the writer insists on exact narrowing).
inline void write_checkpoint(const std::filesystem::path& dir, std::vector<Tensor> tensors,
                             const nlohmann::json& config = nullptr) {
  std::filesystem::create_directories(dir);
  std::vector<io::TensorToWrite> out;
  for (Tensor& t : tensors) {
    if (t.dtype == io::DType::BF16) t.values = quantized_bf16(std::move(t.values));
    if (t.dtype == io::DType::F16) {
      for (auto& x : t.values) x = static_cast<float>(static_cast<_Float16>(x));
    }
    out.push_back({t.name, t.dtype, t.shape, t.values});
  }
  io::write_safetensors(dir / "model.safetensors", out);
  if (!config.is_null()) write_file(dir / "config.json", config.dump(2));
}

}  // namespace qpu::tools::testing
