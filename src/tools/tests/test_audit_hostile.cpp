// Hostile input: the audit reads only what io validated, and a truncated, huge or
// lying file is a clear error naming the file -- never a crash (this test also
// runs under ASan/UBSan). Pickles are listed, never opened.
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "common/error.h"
#include "tools/audit.h"
#include "synthetic_models.h"

namespace qpu::tools {
namespace {

using namespace testing;

std::string small_valid_file(const ScratchDir& dir) {
  std::mt19937_64 rng(1);
  write_checkpoint(dir.path(), {{"model.layers.0.mlp.up_proj.weight", {16, 8}, gaussian(rng, 128, 0.1)},
                                {"model.layers.0.mlp.down_proj.weight", {8, 16}, gaussian(rng, 128, 0.1)}});
  return read_file(dir / "model.safetensors");
}

std::string audit_error(const std::filesystem::path& path) {
  try {
    audit_checkpoint(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void put_u64(std::string& bytes, size_t offset, uint64_t v) { std::memcpy(bytes.data() + offset, &v, 8); }

TEST(Hostile, TruncatedFile) {
  ScratchDir dir;
  std::string bytes = small_valid_file(dir);
  write_file(dir / "model.safetensors", bytes.substr(0, bytes.size() - 7));
  const std::string error = audit_error(dir.path());
  EXPECT_NE(error.find("model.safetensors"), std::string::npos) << error;
  EXPECT_NE(error.find("past the data section"), std::string::npos) << error;
}

TEST(Hostile, HugeHeaderLength) {
  ScratchDir dir;
  std::string bytes = small_valid_file(dir);
  put_u64(bytes, 0, uint64_t{1} << 60);
  write_file(dir / "model.safetensors", bytes);
  const std::string error = audit_error(dir.path());
  EXPECT_NE(error.find("model.safetensors"), std::string::npos) << error;
  EXPECT_NE(error.find("exceeds"), std::string::npos) << error;
}

TEST(Hostile, HeaderLongerThanTheFile) {
  ScratchDir dir;
  std::string bytes = small_valid_file(dir);
  put_u64(bytes, 0, bytes.size());
  write_file(dir / "model.safetensors", bytes);
  EXPECT_NE(audit_error(dir.path()).find("larger than"), std::string::npos);
}

// A header that claims a shape far larger than the data: rejected before any read.
TEST(Hostile, LyingShape) {
  ScratchDir dir;
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[1000000000,1000000000],"data_offsets":[0,16]}})";
  std::string bytes(8, '\0');
  put_u64(bytes, 0, header.size());
  bytes += header + std::string(16, '\0');
  write_file(dir / "x.safetensors", bytes);
  const std::string error = audit_error(dir / "x.safetensors");
  EXPECT_NE(error.find("'w'"), std::string::npos) << error;
}

TEST(Hostile, OverlappingTensors) {
  ScratchDir dir;
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  std::string bytes(8, '\0');
  put_u64(bytes, 0, header.size());
  bytes += header + std::string(12, '\0');
  write_file(dir / "model.safetensors", bytes);
  EXPECT_NE(audit_error(dir.path()).find("overlaps"), std::string::npos);
}

TEST(Hostile, NotJsonAndEmptyFile) {
  ScratchDir dir;
  std::string bytes(8, '\0');
  put_u64(bytes, 0, 5);
  write_file(dir / "model.safetensors", bytes + "{oops");
  EXPECT_NE(audit_error(dir.path()).find("model.safetensors"), std::string::npos);
  write_file(dir / "model.safetensors", "");
  EXPECT_NE(audit_error(dir.path()).find("too short"), std::string::npos);
}

TEST(Hostile, IndexPointingOutsideTheDirectory) {
  ScratchDir dir;
  write_file(dir / "model.safetensors.index.json", R"({"weight_map": {"w": "../evil.safetensors"}})");
  EXPECT_NE(audit_error(dir.path()).find("plain file name"), std::string::npos);
}

TEST(Hostile, MissingPath) {
  ScratchDir dir;
  EXPECT_NE(audit_error(dir / "nope").find("no such file"), std::string::npos);
  EXPECT_NE(audit_error(dir.path()).find("no .safetensors"), std::string::npos);
}

// A broken or oversized config.json is a warning: the weights are audited anyway.
TEST(Hostile, BadConfigIsAWarning) {
  ScratchDir dir;
  small_valid_file(dir);
  write_file(dir / "config.json", "{\"model_type\": \"qwen3_5_text\", \"hidden_size\": -3}");
  AuditReport r = audit_checkpoint(dir.path());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("config.json"), std::string::npos) << r.warnings[0];
  EXPECT_EQ(r.tensors.size(), 2u);

  write_file(dir / "config.json", "not json");
  r = audit_checkpoint(dir.path());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("not a JSON object"), std::string::npos);

  std::filesystem::resize_file(dir / "config.json", 17 << 20);  // sparse: cheap
  r = audit_checkpoint(dir.path());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("not read"), std::string::npos);
}

TEST(Hostile, PicklesAreListedNeverLoaded) {
  ScratchDir dir;
  small_valid_file(dir);
  write_file(dir / "pytorch_model.bin", "\x80\x04 this would run code if unpickled");
  write_file(dir / "training_args.pt", "junk");
  const AuditReport r = audit_checkpoint(dir.path());
  EXPECT_EQ(r.unread_files, (std::vector<std::string>{"pytorch_model.bin", "training_args.pt"}));
  EXPECT_NE(format_audit(r, false).find("not read (pickle"), std::string::npos);
}

TEST(Hostile, IntegerAndOddShapes) {
  ScratchDir dir;
  const std::string header =
      R"({"ids":{"dtype":"I64","shape":[3],"data_offsets":[0,24]},)"
      R"("empty":{"dtype":"F32","shape":[0,4],"data_offsets":[24,24]},)"
      R"("scalar":{"dtype":"BF16","shape":[],"data_offsets":[24,26]}})";
  std::string bytes(8, '\0');
  put_u64(bytes, 0, header.size());
  std::string data(26, '\0');
  const int64_t ids[3] = {0, 7, -2};
  std::memcpy(data.data(), ids, 24);
  data[25] = 0x3f;  // bf16 0x3f00 = 0.5
  write_file(dir / "model.safetensors", bytes + header + data);
  const AuditReport r = audit_checkpoint(dir.path());
  ASSERT_EQ(r.tensors.size(), 3u);
  for (const auto& t : r.tensors) {
    if (t.name == "ids") {
      EXPECT_EQ(t.verdict, Verdict::NotAnalysed);
      EXPECT_EQ(t.stats.min, -2.0);
      EXPECT_EQ(t.stats.max, 7.0);
    }
    if (t.name == "empty") {
      EXPECT_EQ(t.verdict, Verdict::Zero);
    }
    if (t.name == "scalar") {
      EXPECT_EQ(t.verdict, Verdict::Learned);
      EXPECT_EQ(t.stats.max, 0.5);
    }
  }
}

// Random corruption of a valid file: either a clean qpu::Error or a report, never
// a crash or a sanitizer finding.
TEST(Hostile, RandomMutations) {
  ScratchDir dir;
  const std::string original = small_valid_file(dir);
  std::mt19937_64 rng(2024);
  int errors = 0, reports = 0;
  for (int i = 0; i < 400; ++i) {
    std::string bytes = original;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % (i % 3 == 0 ? std::min<size_t>(bytes.size(), 200) : bytes.size());
      bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
    }
    if (i % 10 == 0) bytes.resize(rng() % bytes.size());
    write_file(dir / "model.safetensors", bytes);
    try {
      const AuditReport r = audit_checkpoint(dir.path());
      (void)format_audit(r, true);
      (void)audit_to_json(r).dump();
      ++reports;
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(reports, 0);
}

}  // namespace
}  // namespace qpu::tools
