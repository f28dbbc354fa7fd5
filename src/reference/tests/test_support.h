#pragma once
// Small helpers shared by the reference tests: the shared model files, scratch
// files, and a llama2.c checkpoint writer that is independent of the loader (it
// follows the layout in ../shared/docs/llama2c-numerics.md, not llama2_layout()).
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace qpu::reference::test {

inline std::filesystem::path model_dir() {
  return std::filesystem::path(QPU_SHARED_DIR) / "models" / "stories260K";
}
inline std::filesystem::path stories_bin() { return model_dir() / "stories260K.bin"; }
inline std::filesystem::path tok512_bin() { return model_dir() / "tok512.bin"; }
inline std::filesystem::path greedy_txt() { return model_dir() / "greedy-once-upon-a-time-256.txt"; }

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A fresh directory per test (tests may run in parallel under ctest -j).
inline std::filesystem::path scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                              ("qpu_reference_" + std::string(info->test_suite_name()) + "_" +
                               info->name() + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

template <typename T>
void append_raw(std::string& out, const T& value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// Deterministic floats in [-scale, scale) from a fixed-seed mt19937 (whose output
// sequence is fixed by the standard, unlike the distributions').
inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::vector<float> v(n);
  for (float& f : v) f = (static_cast<float>(gen() >> 8) / 16777216.0f * 2.0f - 1.0f) * scale;
  return v;
}

// Tensors of a llama2.c checkpoint, in file order, as the test builds them.
struct TestCheckpoint {
  int32_t dim = 32, hidden_dim = 48, n_layers = 2, n_heads = 4, n_kv_heads = 2, vocab = 40, seq_len = 16;
  bool shared = false;
  std::vector<float> token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final,
      freq_real, freq_imag, wcls;

  int32_t kv_dim() const { return dim / n_heads * n_kv_heads; }
  int32_t head_size() const { return dim / n_heads; }

  // Random weights with a fixed seed; norms near 1 so activations stay moderate.
  static TestCheckpoint random(uint32_t seed, bool shared_classifier) {
    TestCheckpoint c;
    c.shared = shared_classifier;
    const size_t d = c.dim, h = c.hidden_dim, l = c.n_layers, v = c.vocab, kv = c.kv_dim();
    c.token_embedding = random_floats(v * d, seed + 1, 1.0f);
    c.rms_att = random_floats(l * d, seed + 2, 0.5f);
    for (float& f : c.rms_att) f += 1.0f;
    c.wq = random_floats(l * d * d, seed + 3, 0.3f);
    c.wk = random_floats(l * kv * d, seed + 4, 0.3f);
    c.wv = random_floats(l * kv * d, seed + 5, 0.3f);
    c.wo = random_floats(l * d * d, seed + 6, 0.3f);
    c.rms_ffn = random_floats(l * d, seed + 7, 0.5f);
    for (float& f : c.rms_ffn) f += 1.0f;
    c.w1 = random_floats(l * h * d, seed + 8, 0.3f);
    c.w2 = random_floats(l * d * h, seed + 9, 0.3f);
    c.w3 = random_floats(l * h * d, seed + 10, 0.3f);
    c.rms_final = random_floats(d, seed + 11, 0.5f);
    for (float& f : c.rms_final) f += 1.0f;
    // Legacy tables: garbage on purpose, a loader that used them would show it.
    c.freq_real = random_floats(c.seq_len * c.head_size() / 2, seed + 12, 100.0f);
    c.freq_imag = random_floats(c.seq_len * c.head_size() / 2, seed + 13, 100.0f);
    if (!shared_classifier) c.wcls = random_floats(v * d, seed + 14, 1.0f);
    return c;
  }

  std::string bytes() const {
    std::string out;
    for (int32_t f : {dim, hidden_dim, n_layers, n_heads, n_kv_heads, shared ? vocab : -vocab, seq_len})
      append_raw(out, f);
    for (const auto* t : {&token_embedding, &rms_att, &wq, &wk, &wv, &wo, &rms_ffn, &w1, &w2, &w3,
                          &rms_final, &freq_real, &freq_imag}) {
      for (float f : *t) append_raw(out, f);
    }
    if (!shared) {
      for (float f : wcls) append_raw(out, f);
    }
    return out;
  }
};

}  // namespace qpu::reference::test
