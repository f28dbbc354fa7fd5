// The safetensors reader and writer: the committed corpus of malformed and valid
// files, writer -> reader round trips that must be bit-exact for every dtype, the
// writer's refusals, and sharded checkpoints with their index.
#include <bit>
#include <cmath>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/float_bits.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "test_helpers.h"

namespace qpu::io {
namespace {

using testing::ScratchDir;

// Runs `action`, expects qpu::Error containing every fragment.
template <typename F>
void expect_error(F&& action, const std::vector<std::string>& fragments) {
  try {
    action();
    ADD_FAILURE() << "no error; expected one containing '" << (fragments.empty() ? "" : fragments[0]) << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

// ---------------------------------------------------------------- corpus

TEST(SafetensorsCorpus, EveryFileBehavesAsRecorded) {
  const auto dir = testing::test_data("corpus");
  const auto expected = nlohmann::json::parse(testing::read_file(dir / "expected.json"));
  int valid = 0, invalid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".safetensors") continue;
    ASSERT_TRUE(expected.contains(name)) << name << " is not described in corpus/expected.json";
    const auto& e = expected[name];
    SCOPED_TRACE(name);
    if (e["valid"].get<bool>()) {
      SafetensorsFile file(entry.path());
      for (const auto& tensor : file.tensors()) {
        if (is_float_weight_dtype(tensor.dtype)) {
          EXPECT_EQ(file.read_f32(tensor).size(), tensor.numel());
        }
      }
      ++valid;
    } else {
      auto fragments = e["error"].get<std::vector<std::string>>();
      fragments.push_back(entry.path().string());  // the message names the file
      expect_error([&] { SafetensorsFile file(entry.path()); }, fragments);
      // The in-memory parser used by the fuzzer gives the same verdict.
      const std::string bytes = testing::read_file(entry.path());
      expect_error([&] { parse_safetensors_header(std::as_bytes(std::span(bytes)), "buffer"); }, {"buffer"});
      ++invalid;
    }
  }
  EXPECT_EQ(static_cast<size_t>(valid + invalid), expected.size());  // every recorded file exists
  EXPECT_GE(valid, 5);
  EXPECT_GE(invalid, 39);
}

TEST(SafetensorsCorpus, ValidFilesHoldTheWrittenValues) {
  SafetensorsFile mixed(testing::test_data("corpus/good_mixed.safetensors"));
  EXPECT_EQ(mixed.header().metadata.at("note"), "mixed");
  EXPECT_EQ(mixed.get("a").shape, std::vector<int64_t>{});
  EXPECT_EQ(mixed.read_f32("a"), std::vector<float>{2.5f});
  const auto b = mixed.read_f32("b");  // BF16 0x3f80 0x8000 0x7fc0
  EXPECT_EQ(float_bits(b[0]), 0x3f800000u);
  EXPECT_EQ(float_bits(b[1]), 0x80000000u);
  EXPECT_EQ(float_bits(b[2]), 0x7fc00000u);
  const auto c = mixed.read_f32("c");  // F16 0x0001 0x7c00 0xfc00
  EXPECT_EQ(c[0], 0x1p-24f);
  EXPECT_EQ(c[1], INFINITY);
  EXPECT_EQ(c[2], -INFINITY);
  EXPECT_TRUE(mixed.read_f32("empty").empty());

  SafetensorsFile unpadded(testing::test_data("corpus/good_unpadded.safetensors"));
  EXPECT_NE(unpadded.header().data_offset % 4, 0u);  // misaligned data still reads
  EXPECT_EQ(unpadded.read_f32("x"), std::vector<float>{3.0f});

  SafetensorsFile others(testing::test_data("corpus/good_other_dtypes.safetensors"));
  EXPECT_EQ(others.get("i").dtype, DType::I32);
  EXPECT_EQ(others.raw(others.get("u")).size(), 3u);
  expect_error([&] { others.read_f32("i"); }, {"good_other_dtypes.safetensors", "'i'", "I32"});
  expect_error([&] { others.read_f32("d"); }, {"'d'", "F64"});
  expect_error([&] { others.read_f32("nope"); }, {"good_other_dtypes.safetensors", "'nope'"});
}

TEST(Safetensors, MissingFileAndDirectoryAreErrors) {
  ScratchDir dir;
  expect_error([&] { SafetensorsFile f(dir / "absent.safetensors"); }, {"absent.safetensors", "cannot open"});
  expect_error([&] { SafetensorsFile f(dir.path()); }, {"not a regular file"});
}

// ---------------------------------------------------------------- round trip

struct Owned {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<float> values;
  TensorToWrite view() const { return {name, dtype, shape, values}; }
};

std::vector<TensorToWrite> views(const std::vector<Owned>& owned) {
  std::vector<TensorToWrite> out;
  for (const auto& o : owned) out.push_back(o.view());
  return out;
}

// Every F16 pattern, random BF16 and raw F32 patterns (NaN payloads included),
// plus a scalar and an empty tensor: whatever goes in must come back bit for bit.
std::vector<Owned> special_tensors() {
  std::mt19937 rng(2024);
  Owned half{"h.all_halves", DType::F16, {256, 256}, {}};
  for (uint32_t b = 0; b < 65536; ++b) half.values.push_back(f16_to_f32(static_cast<uint16_t>(b)));
  Owned bf{"b.random_bf16", DType::BF16, {3, 1000}, {}};
  for (int i = 0; i < 3000; ++i) bf.values.push_back(bf16_to_f32(static_cast<uint16_t>(rng())));
  bf.values[0] = -0.0f;
  bf.values[1] = float_from_bits(0x00010000u);  // bf16 subnormal
  bf.values[2] = INFINITY;
  Owned f{"a.raw_f32", DType::F32, {7, 11, 13}, {}};
  for (int i = 0; i < 7 * 11 * 13; ++i) f.values.push_back(float_from_bits(static_cast<uint32_t>(rng())));
  f.values[0] = float_from_bits(0x7fa00001u);  // signalling NaN with payload
  f.values[1] = float_from_bits(0x00000001u);
  f.values[2] = -0.0f;
  Owned scalar{"scalar", DType::F32, {}, {42.0f}};
  Owned empty{"z.empty", DType::BF16, {0, 4}, {}};
  Owned odd{"odd_half", DType::F16, {3}, {1.0f, -0x1p-24f, 65504.0f}};
  return {half, bf, f, scalar, empty, odd};
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& name) {
  ASSERT_EQ(got.size(), want.size()) << name;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(float_bits(got[i]), float_bits(want[i])) << name << "[" << i << "]";
}

TEST(SafetensorsRoundTrip, AllFloatDTypesBitExact) {
  ScratchDir dir;
  const auto tensors = special_tensors();
  const auto path = dir / "t.safetensors";
  write_safetensors(path, views(tensors), {{"format", "pt"}, {"by", "qpu"}});

  SafetensorsFile file(path);
  EXPECT_EQ(file.header().metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"by", "qpu"}}));
  EXPECT_EQ(file.tensors().size(), tensors.size());
  // Official layout: header length a multiple of 8, every tensor aligned to its element size.
  EXPECT_EQ(file.header().header_size % 8, 0u);
  for (const auto& t : file.tensors()) EXPECT_EQ(t.begin % dtype_size(t.dtype), 0u) << t.name;
  for (const auto& t : tensors) {
    const TensorInfo& info = file.get(t.name);
    EXPECT_EQ(info.dtype, t.dtype) << t.name;
    EXPECT_EQ(info.shape, t.shape) << t.name;
    expect_same_bits(file.read_f32(info), t.values, t.name);
  }
  // No temporary file left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(SafetensorsRoundTrip, LargeTensorsUpcastInParallelIdentically) {
  ScratchDir dir;
  std::mt19937 rng(7);
  Owned big{"big", DType::BF16, {1 << 20}, {}};
  Owned big_half{"big_half", DType::F16, {1 << 20}, {}};
  for (int i = 0; i < (1 << 20); ++i) {
    big.values.push_back(bf16_to_f32(static_cast<uint16_t>(rng())));
    big_half.values.push_back(f16_to_f32(static_cast<uint16_t>(rng())));
  }
  write_safetensors(dir / "big.safetensors", views({big, big_half}));
  SafetensorsFile file(dir / "big.safetensors");
  expect_same_bits(file.read_f32("big"), big.values, "big");
  expect_same_bits(file.read_f32("big_half"), big_half.values, "big_half");
}

TEST(SafetensorsWriter, RefusesInexactNarrowingAndBadInput) {
  ScratchDir dir;
  const auto path = dir / "x.safetensors";
  std::vector<float> values{1.0f, 1.0f + 0x1p-10f};
  expect_error([&] { write_safetensors(path, std::vector<TensorToWrite>{{"w", DType::BF16, {2}, values}}); },
               {"x.safetensors", "'w'", "element 1", "BF16"});
  expect_error([&] { write_safetensors(path, std::vector<TensorToWrite>{{"w", DType::F16, {2}, std::vector<float>{1, 1e6f}}}); },
               {"'w'", "element 1", "F16"});
  expect_error([&] { write_safetensors(path, std::vector<TensorToWrite>{{"w", DType::F32, {3}, values}}); },
               {"'w'", "needs 3 values, got 2"});
  expect_error([&] { write_safetensors(path, std::vector<TensorToWrite>{{"w", DType::I32, {2}, values}}); },
               {"'w'", "I32"});
  expect_error([&] { write_safetensors(path, std::vector<TensorToWrite>{{"w", DType::F32, {-2}, values}}); },
               {"'w'", "negative"});
  expect_error(
      [&] {
        write_safetensors(path, std::vector<TensorToWrite>{{"w", DType::F32, {2}, values}, {"w", DType::F32, {2}, values}});
      },
      {"'w'", "twice"});
  expect_error([&] { write_safetensors(path, std::vector<TensorToWrite>{{"__metadata__", DType::F32, {2}, values}}); },
               {"__metadata__"});
  expect_error([&] { write_safetensors(dir / "no/such/dir/x.safetensors", std::vector<TensorToWrite>{}); },
               {"no/such/dir"});
  // Nothing was created by the failed writes, not even temporaries.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 0);
}

TEST(SafetensorsWriter, ReplacesAnExistingFileWhole) {
  ScratchDir dir;
  const auto path = dir / "x.safetensors";
  std::vector<float> a(100, 1.0f), b{2.0f};
  write_safetensors(path, std::vector<TensorToWrite>{{"a", DType::F32, {100}, a}});
  write_safetensors(path, std::vector<TensorToWrite>{{"b", DType::F32, {1}, b}});
  SafetensorsFile file(path);
  ASSERT_EQ(file.tensors().size(), 1u);
  EXPECT_EQ(file.read_f32("b"), b);
}

// ---------------------------------------------------------------- shards

TEST(ShardedCheckpoint, WriterShardsAndReaderReassembles) {
  ScratchDir dir;
  const auto tensors = special_tensors();  // 131072 + 6000 + 4004 + 4 + 0 + 6 bytes
  const auto written = write_sharded_safetensors(dir.path(), views(tensors), 10000);
  // Greedy in order: the halves alone (131072 > limit), the bf16 (6000), then the
  // f32 (4004) with the three small ones; then the index.
  ASSERT_EQ(written.size(), 4u);
  EXPECT_EQ(written.back(), "model.safetensors.index.json");
  EXPECT_EQ(written.front(), "model-00001-of-00003.safetensors");

  const auto index = nlohmann::json::parse(testing::read_file(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), 131072u + 6000u + 4004u + 4u + 6u);
  EXPECT_EQ(index["metadata"]["total_parameters"].get<uint64_t>(), 65536u + 3000u + 1001u + 1u + 3u);

  Checkpoint checkpoint(dir.path());
  EXPECT_TRUE(checkpoint.sharded());
  EXPECT_EQ(checkpoint.files().size(), 3u);
  EXPECT_EQ(checkpoint.tensors().size(), tensors.size());
  for (const auto& t : tensors) {
    const auto& entry = checkpoint.get(t.name);
    expect_same_bits(entry.file->read_f32(*entry.tensor), t.values, t.name);
  }
  expect_error([&] { checkpoint.get("nope"); }, {"model.safetensors.index.json", "'nope'"});
}

TEST(ShardedCheckpoint, OneShardIsWrittenAsASingleFile) {
  ScratchDir dir;
  const auto tensors = special_tensors();
  const auto written = write_sharded_safetensors(dir.path(), views(tensors), uint64_t{1} << 30);
  EXPECT_EQ(written, std::vector<std::string>{"model.safetensors"});
  Checkpoint checkpoint(dir.path());
  EXPECT_FALSE(checkpoint.sharded());
  EXPECT_EQ(checkpoint.tensors().size(), tensors.size());
}

class BrokenIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<float> one{1.0f}, two{2.0f, 3.0f};
    write_safetensors(dir_ / "s1.safetensors", std::vector<TensorToWrite>{{"a", DType::F32, {1}, one}});
    write_safetensors(dir_ / "s2.safetensors", std::vector<TensorToWrite>{{"b", DType::BF16, {2}, two}});
  }
  void index(const std::string& text) { testing::write_file(dir_ / "model.safetensors.index.json", text); }
  void expect(const std::vector<std::string>& fragments) {
    auto all = fragments;
    all.push_back("model.safetensors.index.json");
    expect_error([&] { Checkpoint c(dir_.path()); }, all);
  }
  ScratchDir dir_;
};

TEST_F(BrokenIndex, ValidIndexLoads) {
  index(R"({"metadata": {}, "weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  Checkpoint c(dir_.path());
  EXPECT_EQ(c.get("b").file->read_f32(*c.get("b").tensor), (std::vector<float>{2.0f, 3.0f}));
}

TEST_F(BrokenIndex, EachProblemIsNamed) {
  index("{");
  expect({"not valid JSON"});
  index("[]");
  expect({"not a JSON object"});
  index(R"({"metadata": {}})");
  expect({"no weight_map"});
  index(R"({"weight_map": []})");
  expect({"weight_map is not an object"});
  index(R"({"weight_map": {}})");
  expect({"empty"});
  index(R"({"weight_map": {"a": 1}})");
  expect({"'a'", "not a string"});
  index(R"({"weight_map": {"a": "s1.safetensors", "b": "s3.safetensors"}})");
  expect({"'b'", "s3.safetensors", "does not exist"});
  for (const char* escape : {"../s1.safetensors", "/etc/passwd", "sub/s1.safetensors", "..", ".", ""}) {
    index(nlohmann::json{{"weight_map", {{"a", "s1.safetensors"}, {"b", escape}}}}.dump());
    expect({"'b'", "not a plain file name"});
  }
  index(R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
  expect({"'b'", "s1.safetensors", "does not contain"});
}

TEST_F(BrokenIndex, TensorInTwoShardsOrUnlisted) {
  std::vector<float> one{1.0f};
  write_safetensors(dir_ / "s3.safetensors",
                    std::vector<TensorToWrite>{{"a", DType::F32, {1}, one}, {"c", DType::F32, {1}, one}});
  index(R"({"weight_map": {"a": "s1.safetensors", "c": "s3.safetensors"}})");
  expect({"'a'", "s3.safetensors", "places it in s1.safetensors"});
  write_safetensors(dir_ / "s3.safetensors",
                    std::vector<TensorToWrite>{{"c", DType::F32, {1}, one}, {"d", DType::F32, {1}, one}});
  expect({"'d'", "s3.safetensors", "not listed"});
}

TEST_F(BrokenIndex, BrokenShardNamesTheShard) {
  testing::write_file(dir_ / "s2.safetensors", "garbage!!");
  index(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  expect_error([&] { Checkpoint c(dir_.path()); }, {"s2.safetensors", "exceeds"});
}

TEST(Checkpoint, DirectoryProblems) {
  ScratchDir dir;
  expect_error([&] { Checkpoint c(dir / "absent"); }, {"absent", "not a directory"});
  expect_error([&] { Checkpoint c(dir.path()); }, {"neither model.safetensors nor model.safetensors.index.json"});
}

}  // namespace
}  // namespace qpu::io
