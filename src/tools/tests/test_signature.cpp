// ed25519 signatures of manifests: RFC 8032's test vector for the key handling, an
// independent verification of what sign_manifest produces, and rejection of every
// kind of tampering (one bit of a tensor, of a header, of the signed manifest, of
// the signature, another key).
#include <sodium.h>
#include <sys/stat.h>

#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/safetensors.h"
#include "tools/sha256.h"
#include "tools/signature.h"
#include "synthetic_models.h"

namespace qpu::tools {
namespace {

using namespace testing;

std::array<uint8_t, 32> bytes32(const std::string& hex) {
  const auto v = from_hex(hex, 32);
  std::array<uint8_t, 32> out{};
  std::copy(v->begin(), v->end(), out.begin());
  return out;
}

// RFC 8032, 7.1, TEST 1 (empty message).
TEST(Ed25519, Rfc8032TestVector) {
  const KeyPair keys = key_pair_from_seed(bytes32("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"));
  EXPECT_EQ(to_hex(keys.public_key), "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
  unsigned char sk[crypto_sign_SECRETKEYBYTES];
  unsigned char pk[crypto_sign_PUBLICKEYBYTES];
  crypto_sign_seed_keypair(pk, sk, keys.seed.data());
  unsigned char sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, nullptr, nullptr, 0, sk);
  EXPECT_EQ(to_hex(std::span<const uint8_t>(sig, 64)),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595"
            "bbe24655141438e7a100b");
}

TEST(KeyFiles, RoundTripPermissionsAndRefusals) {
  ScratchDir dir;
  const KeyPair keys = generate_key_pair();
  write_secret_key(dir / "k.key", keys);
  write_public_key(dir / "k.pub", keys.public_key);
  struct stat st {};
  ASSERT_EQ(::stat((dir / "k.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const KeyPair back = read_secret_key(dir / "k.key");
  EXPECT_EQ(back.seed, keys.seed);
  EXPECT_EQ(back.public_key, keys.public_key);
  EXPECT_EQ(read_public_key(dir / "k.pub"), keys.public_key);
  const auto pub = nlohmann::json::parse(read_file(dir / "k.pub"));
  EXPECT_EQ(pub["format"], kPublicKeyFormat);
  EXPECT_EQ(pub["key_id"], key_id(keys.public_key));
  EXPECT_EQ(key_id(keys.public_key), to_hex(sha256(std::as_bytes(std::span<const uint8_t>(keys.public_key)))).substr(0, 16));

  EXPECT_THROW(write_secret_key(dir / "k.key", keys), Error);  // never overwritten
  EXPECT_THROW(write_public_key(dir / "k.pub", keys.public_key), Error);
  EXPECT_THROW(read_public_key(dir / "k.key"), Error);  // a secret key is not a public key
  EXPECT_THROW(read_secret_key(dir / "k.pub"), Error);

  // A secret key file whose public key does not belong to its seed.
  auto damaged = nlohmann::json::parse(read_file(dir / "k.key"));
  damaged["public_key"] = to_hex(generate_key_pair().public_key);
  write_file(dir / "bad.key", damaged.dump());
  EXPECT_THROW(read_secret_key(dir / "bad.key"), Error);
  auto bad_id = pub;
  bad_id["key_id"] = "0000000000000000";
  write_file(dir / "bad.pub", bad_id.dump());
  EXPECT_THROW(read_public_key(dir / "bad.pub"), Error);
  write_file(dir / "junk.pub", "junk");
  EXPECT_THROW(read_public_key(dir / "junk.pub"), Error);
}

std::vector<Tensor> model(uint64_t seed) {
  std::mt19937_64 rng(seed);
  return {{"model.embed_tokens.weight", {64, 16}, gaussian(rng, 1024, 0.02), io::DType::BF16},
          {"model.layers.0.mlp.up_proj.weight", {32, 16}, gaussian(rng, 512, 0.1), io::DType::F32},
          {"model.layers.0.mlp.down_proj.weight", {16, 32}, gaussian(rng, 512, 0.1), io::DType::F32},
          {"model.layers.1.mlp.up_proj.weight", {32, 16}, gaussian(rng, 512, 0.1), io::DType::F32},
          {"lm_head.weight", {64, 16}, gaussian(rng, 1024, 0.02), io::DType::BF16}};
}

class Signed : public ::testing::Test {
 protected:
  void SetUp() override {
    write_checkpoint(dir_.path(), model(1), nlohmann::json{{"model_type", "llama"}});
    signature_ = sign_manifest(compute_manifest(dir_.path()), keys_);
  }
  VerifyResult verify(const nlohmann::json& signature, const PublicKey& key) {
    return verify_signature(signature, key, compute_manifest(dir_.path()), "sig.json");
  }
  ScratchDir dir_;
  KeyPair keys_ = generate_key_pair();
  nlohmann::json signature_;
};

TEST_F(Signed, VerifiesUnchangedCheckpoint) {
  const VerifyResult r = verify(signature_, keys_.public_key);
  EXPECT_TRUE(r.ok()) << r.problem;
  EXPECT_EQ(r.signed_files, 2u);
  EXPECT_EQ(r.signed_tensors, 5u);
  EXPECT_EQ(r.signer_key_id, key_id(keys_.public_key));
  // The signature is a plain ed25519 signature of the documented message.
  const std::string message = std::string(kSignaturePrefix) + signature_["manifest"].dump();
  const auto sig = from_hex(signature_["signature"].get<std::string>(), 64);
  ASSERT_TRUE(sig);
  EXPECT_EQ(crypto_sign_verify_detached(sig->data(), reinterpret_cast<const unsigned char*>(message.data()),
                                        message.size(), keys_.public_key.data()),
            0);
  // The signature file survives being written and parsed back.
  EXPECT_TRUE(verify(nlohmann::json::parse(signature_.dump(2)), keys_.public_key).ok());
}

TEST_F(Signed, OneBitInEveryTensorIsNamed) {
  const auto path = dir_ / "model.safetensors";
  const std::string original = read_file(path);
  std::vector<io::TensorInfo> infos;
  uint64_t data_offset = 0;
  {
    const io::SafetensorsFile f(path);
    infos = f.tensors();
    data_offset = f.header().data_offset;
  }
  std::mt19937_64 rng(3);
  for (const auto& t : infos) {
    std::string bytes = original;
    const uint64_t at = data_offset + t.begin + rng() % t.nbytes();
    bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
    write_file(path, bytes);
    const VerifyResult r = verify(signature_, keys_.public_key);
    EXPECT_TRUE(r.signature_valid);
    EXPECT_FALSE(r.ok());
    std::vector<std::string> tensors;
    for (const auto& c : r.changes) {
      if (c.subject == "tensor") tensors.push_back(c.name);
    }
    EXPECT_EQ(tensors, std::vector<std::string>{t.name});
  }
  write_file(path, original);
  EXPECT_TRUE(verify(signature_, keys_.public_key).ok());
}

TEST_F(Signed, OneBitInTheHeaderNamesTheFile) {
  const auto path = dir_ / "model.safetensors";
  std::string bytes = read_file(path);
  bytes[20] = static_cast<char>(bytes[20] ^ 0x10);
  write_file(path, bytes);
  const VerifyResult r = verify(signature_, keys_.public_key);
  EXPECT_TRUE(r.signature_valid);
  ASSERT_FALSE(r.changes.empty());
  bool named = false;
  for (const auto& c : r.changes) named |= c.subject == "file" && c.file == "model.safetensors";
  EXPECT_TRUE(named);
}

TEST_F(Signed, RejectsTampering) {
  // Another key.
  EXPECT_FALSE(verify(signature_, generate_key_pair().public_key).signature_valid);
  // A hash in the signed manifest changed (e.g. to hide a modified tensor).
  nlohmann::json edited = signature_;
  std::string h = edited["manifest"]["tensors"][1]["sha256"];
  h[0] = h[0] == '0' ? '1' : '0';
  edited["manifest"]["tensors"][1]["sha256"] = h;
  VerifyResult r = verify(edited, keys_.public_key);
  EXPECT_FALSE(r.signature_valid);
  EXPECT_NE(r.problem.find("INVALID"), std::string::npos);
  // A tensor removed from the signed manifest.
  edited = signature_;
  edited["manifest"]["tensors"].erase(0);
  EXPECT_FALSE(verify(edited, keys_.public_key).signature_valid);
  // One bit of the signature.
  for (int bit = 0; bit < 4; ++bit) {
    edited = signature_;
    std::string s = edited["signature"];
    s[static_cast<size_t>(bit * 31)] = s[static_cast<size_t>(bit * 31)] == 'a' ? 'b' : 'a';
    edited["signature"] = s;
    EXPECT_FALSE(verify(edited, keys_.public_key).signature_valid) << bit;
  }
  // Malformed documents.
  for (const char* field : {"signature", "manifest", "format"}) {
    edited = signature_;
    edited.erase(field);
    EXPECT_FALSE(verify(edited, keys_.public_key).signature_valid) << field;
  }
  EXPECT_FALSE(verify(nlohmann::json::array(), keys_.public_key).signature_valid);
}

TEST_F(Signed, AFileAddedAfterSigningIsReported) {
  write_file(dir_ / "tokenizer.json", "{}");
  const VerifyResult r = verify(signature_, keys_.public_key);
  ASSERT_EQ(r.changes.size(), 1u);
  EXPECT_EQ(r.changes[0].file, "tokenizer.json");
  EXPECT_EQ(r.changes[0].change, "added");
  // The signature file itself, kept in the directory, is not part of the manifest.
  std::filesystem::remove(dir_ / "tokenizer.json");
  write_file(dir_ / kSignatureFileName, signature_.dump());
  EXPECT_TRUE(verify(signature_, keys_.public_key).ok());
}

}  // namespace
}  // namespace qpu::tools
