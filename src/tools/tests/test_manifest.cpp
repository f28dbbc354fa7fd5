// Manifests: file hashes equal sha256sum's, tensor hashes equal SHA-256 of the
// documented byte string (built here by hand and hashed by sha256sum), and one
// flipped bit anywhere is named: the tensor whose data holds it, or the file.
#include <sodium.h>

#include <cstdio>
#include <cstring>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/safetensors.h"
#include "tools/manifest.h"
#include "tools/sha256.h"
#include "synthetic_models.h"

namespace qpu::tools {
namespace {

using namespace testing;

// sha256sum, an implementation independent of ours.
std::string sha256sum(const std::filesystem::path& path) {
  const std::string command = "sha256sum '" + path.string() + "'";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  char buffer[65] = {};
  const size_t n = std::fread(buffer, 1, 64, pipe);
  ::pclose(pipe);
  return std::string(buffer, n);
}

TEST(Sha256, KnownAnswers) {
  // FIPS 180-2 examples.
  const std::string abc = "abc";
  EXPECT_EQ(to_hex(sha256(std::as_bytes(std::span<const char>(abc)))),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(sha256({})), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 h;  // incremental = one shot
  h.update("ab");
  h.update("c");
  EXPECT_EQ(to_hex(h.finish()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(from_hex("0aFf", 2), (std::vector<uint8_t>{0x0a, 0xff}));
  EXPECT_FALSE(from_hex("0aF", 2));
  EXPECT_FALSE(from_hex("0g", 1));
}

std::vector<Tensor> sample_tensors(uint64_t seed) {
  std::mt19937_64 rng(seed);
  return {{"model.embed_tokens.weight", {32, 16}, gaussian(rng, 512, 0.02), io::DType::BF16},
          {"model.layers.0.mlp.up_proj.weight", {24, 16}, gaussian(rng, 384, 0.1), io::DType::F32},
          {"model.layers.0.mlp.down_proj.weight", {16, 24}, gaussian(rng, 384, 0.1), io::DType::F16},
          {"model.layers.0.input_layernorm.weight", {16}, gaussian(rng, 16, 1.0), io::DType::F32},
          {"model.norm.weight", {16}, std::vector<float>(16, 0.0f), io::DType::BF16},
          {"scalar", {}, {3.0f}, io::DType::F32}};
}

TEST(Manifest, FileHashesMatchSha256sum) {
  ScratchDir dir;
  write_checkpoint(dir.path(), sample_tensors(1), nlohmann::json{{"model_type", "llama"}});
  std::filesystem::create_directories(dir / "sub");
  write_file(dir / "sub" / "tokenizer.json", "{\"x\": 1}");
  write_file(dir / "empty.txt", "");
  std::filesystem::create_directories(dir / ".git");
  write_file(dir / ".git" / "HEAD", "ref");
  write_file(dir / kSignatureFileName, "{}");
  const Manifest m = compute_manifest(dir.path());
  std::vector<std::string> paths;
  for (const auto& f : m.files) {
    paths.push_back(f.path);
    EXPECT_EQ(f.sha256, sha256sum(dir / f.path)) << f.path;
    EXPECT_EQ(f.bytes, std::filesystem::file_size(dir / f.path));
  }
  // Sorted, recursive, without .git/ and the signature file.
  EXPECT_EQ(paths, (std::vector<std::string>{"config.json", "empty.txt", "model.safetensors", "sub/tokenizer.json"}));
  EXPECT_TRUE(m.errors.empty());
}

// The documented tensor hash: sha256("qpu-tensor-v1\0" dtype "\0" "[d0,d1]" "\0" raw).
TEST(Manifest, TensorHashIsTheDocumentedByteString) {
  ScratchDir dir;
  const auto tensors = sample_tensors(2);
  write_checkpoint(dir.path(), tensors);
  const Manifest m = compute_manifest(dir.path());
  ASSERT_EQ(m.tensors.size(), tensors.size());
  const io::SafetensorsFile file(dir / "model.safetensors");
  for (const ManifestTensor& mt : m.tensors) {
    EXPECT_EQ(mt.file, "model.safetensors");
    const io::TensorInfo& info = file.get(mt.name);
    std::string shape = "[";
    for (size_t i = 0; i < info.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(info.shape[i]);
    shape += "]";
    std::string blob = std::string("qpu-tensor-v1") + '\0' + io::dtype_name(info.dtype) + '\0' + shape + '\0';
    const auto raw = file.raw(info);
    blob.append(reinterpret_cast<const char*>(raw.data()), raw.size());
    write_file(dir / "blob", blob);
    EXPECT_EQ(mt.sha256, sha256sum(dir / "blob")) << mt.name;
    EXPECT_EQ(mt.dtype, io::dtype_name(info.dtype));
    EXPECT_EQ(mt.shape, info.shape);
    EXPECT_EQ(mt.bytes, info.nbytes());
  }
}

TEST(Manifest, JsonRoundTripAndValidation) {
  ScratchDir dir;
  write_checkpoint(dir.path(), sample_tensors(3));
  const Manifest m = compute_manifest(dir.path());
  const nlohmann::json j = manifest_to_json(m);
  EXPECT_EQ(j["format"], kManifestFormat);
  const Manifest back = manifest_from_json(nlohmann::json::parse(j.dump()), "test");
  EXPECT_TRUE(diff_manifests(m, back).empty());
  EXPECT_EQ(manifest_to_json(back), j);
  nlohmann::json bad = j;
  bad["tensors"][0]["sha256"] = "xyz";
  EXPECT_THROW(manifest_from_json(bad, "test"), Error);
  bad = j;
  bad["format"] = "other";
  EXPECT_THROW(manifest_from_json(bad, "test"), Error);
  bad = j;
  bad["files"][0].erase("bytes");
  EXPECT_THROW(manifest_from_json(bad, "test"), Error);
}

void flip_bit(const std::filesystem::path& path, uint64_t offset, int bit) {
  std::string bytes = read_file(path);
  bytes[offset] = static_cast<char>(bytes[offset] ^ (1 << bit));
  write_file(path, bytes);
}

// Every tensor, a random bit of its data: exactly that tensor is named (and its file).
TEST(Manifest, OneFlippedDataBitNamesTheTensor) {
  ScratchDir dir;
  write_checkpoint(dir.path(), sample_tensors(4));
  const Manifest before = compute_manifest(dir.path());
  const std::filesystem::path path = dir / "model.safetensors";
  const std::string original = read_file(path);
  std::mt19937_64 rng(9);
  std::vector<io::TensorInfo> infos;
  uint64_t data_offset = 0;
  {
    const io::SafetensorsFile file(path);
    infos = file.tensors();
    data_offset = file.header().data_offset;
  }
  for (int round = 0; round < 5; ++round) {
    for (const io::TensorInfo& t : infos) {
      const uint64_t at = data_offset + t.begin + rng() % t.nbytes();
      flip_bit(path, at, static_cast<int>(rng() % 8));
      const auto changes = diff_manifests(before, compute_manifest(dir.path()));
      ASSERT_EQ(changes.size(), 2u) << t.name;
      EXPECT_EQ(changes[0].subject, "file");
      EXPECT_EQ(changes[0].file, "model.safetensors");
      EXPECT_EQ(changes[0].change, "modified");
      EXPECT_EQ(changes[1].subject, "tensor");
      EXPECT_EQ(changes[1].name, t.name);
      EXPECT_EQ(changes[1].change, "modified");
      EXPECT_NE(changes[1].message.find(t.name), std::string::npos);
      write_file(path, original);
    }
  }
  EXPECT_TRUE(diff_manifests(before, compute_manifest(dir.path())).empty());
}

// A bit in the header: the file is named, whatever the header then says.
TEST(Manifest, OneFlippedHeaderBitNamesTheFile) {
  ScratchDir dir;
  write_checkpoint(dir.path(), sample_tensors(5));
  const Manifest before = compute_manifest(dir.path());
  const std::filesystem::path path = dir / "model.safetensors";
  const std::string original = read_file(path);
  uint64_t header_end = 0;
  {
    const io::SafetensorsFile file(path);
    header_end = file.header().data_offset;
  }
  std::mt19937_64 rng(10);
  int unreadable = 0;
  for (int i = 0; i < 60; ++i) {
    flip_bit(path, rng() % header_end, static_cast<int>(rng() % 8));
    const auto changes = diff_manifests(before, compute_manifest(dir.path()));
    bool file_named = false;
    for (const auto& c : changes) {
      file_named |= c.subject == "file" && c.file == "model.safetensors" && c.change == "modified";
      unreadable += c.change == "unreadable";
      // A header flip never passes for a change of tensor data.
      if (c.subject == "tensor") {
        EXPECT_TRUE(c.change == "added" || c.change == "removed" || c.change == "dtype" || c.change == "shape")
            << c.message;
      }
      if (c.subject == "file" && c.change == "modified") {
        EXPECT_EQ(c.file, "model.safetensors");
      }
    }
    EXPECT_TRUE(file_named);
    write_file(path, original);
  }
  EXPECT_GT(unreadable, 0);
}

TEST(Manifest, AddedRemovedAndOtherFiles) {
  ScratchDir dir;
  write_checkpoint(dir.path(), sample_tensors(6), nlohmann::json{{"model_type", "llama"}});
  const Manifest before = compute_manifest(dir.path());
  write_file(dir / "extra.txt", "new");
  flip_bit(dir / "config.json", 3, 1);
  auto changes = diff_manifests(before, compute_manifest(dir.path()));
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].file, "config.json");
  EXPECT_EQ(changes[0].change, "modified");
  EXPECT_EQ(changes[1].file, "extra.txt");
  EXPECT_EQ(changes[1].change, "added");
  std::filesystem::remove(dir / "model.safetensors");
  changes = diff_manifests(before, compute_manifest(dir.path()));
  size_t removed_tensors = 0;
  for (const auto& c : changes) removed_tensors += c.subject == "tensor" && c.change == "removed";
  EXPECT_EQ(removed_tensors, before.tensors.size());
}

// A Hugging Face cache snapshot is made of symlinks: they are followed.
TEST(Manifest, FollowsFileSymlinksAndHashesASingleFile) {
  ScratchDir dir;
  write_checkpoint(dir / "blobs", sample_tensors(7));
  std::filesystem::create_directories(dir / "snapshot");
  std::filesystem::create_symlink(dir / "blobs" / "model.safetensors", dir / "snapshot" / "model.safetensors");
  const Manifest linked = compute_manifest(dir / "snapshot");
  const Manifest direct = compute_manifest(dir / "blobs" / "model.safetensors");
  for (const auto& c : diff_manifests(linked, direct)) ADD_FAILURE() << c.message;
  ASSERT_EQ(linked.files.size(), 1u);
  EXPECT_EQ(linked.files[0].sha256, sha256sum(dir / "blobs" / "model.safetensors"));
}

TEST(Manifest, InvalidSafetensorsIsRecordedNotFatal) {
  ScratchDir dir;
  write_file(dir / "model.safetensors", "garbage!");
  write_file(dir / "config.json", "{}");
  const Manifest m = compute_manifest(dir.path());
  EXPECT_EQ(m.files.size(), 2u);
  ASSERT_EQ(m.errors.size(), 1u);
  EXPECT_EQ(m.errors[0].file, "model.safetensors");
  EXPECT_THROW(compute_manifest(dir / "missing"), Error);
}

}  // namespace
}  // namespace qpu::tools
