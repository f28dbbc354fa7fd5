#pragma once
// ed25519 signatures (libsodium) over a checkpoint's manifest. The signed message
// is "qpu-manifest-signature-v1\n" followed by the manifest's canonical JSON (keys
// sorted, no whitespace, UTF-8: nlohmann's dump(), the same bytes as Python's
// json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False)).
// Key and signature files are small JSON documents (docs/audit.md).
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tools/manifest.h"

namespace qpu::tools {

inline constexpr const char* kSecretKeyFormat = "qpu-ed25519-secret-key-v1";
inline constexpr const char* kPublicKeyFormat = "qpu-ed25519-public-key-v1";
inline constexpr const char* kSignatureFormat = "qpu-signature-v1";
inline constexpr const char* kSignaturePrefix = "qpu-manifest-signature-v1\n";

using PublicKey = std::array<uint8_t, 32>;

// The 32-byte seed (libsodium derives the signing key from it) and its public key.
// The seed is wiped when the object dies.
struct KeyPair {
  std::array<uint8_t, 32> seed{};
  PublicKey public_key{};
  ~KeyPair();
};

KeyPair generate_key_pair();
KeyPair key_pair_from_seed(const std::array<uint8_t, 32>& seed);
std::string key_id(const PublicKey& key);  // first 16 hex digits of sha256(public key)

// Key files. Writing never overwrites an existing file; the secret key file is
// created with mode 0600. Reading validates the format and that the secret key's
// stored public key matches its seed.
void write_secret_key(const std::filesystem::path& path, const KeyPair& keys);
void write_public_key(const std::filesystem::path& path, const PublicKey& key);
KeyPair read_secret_key(const std::filesystem::path& path);
PublicKey read_public_key(const std::filesystem::path& path);

// The bytes that are signed.
std::string signed_message(const nlohmann::json& manifest);

// {"format", "algorithm": "ed25519", "key_id", "public_key", "manifest", "signature"}.
nlohmann::json sign_manifest(const Manifest& manifest, const KeyPair& keys);

struct VerifyResult {
  bool signature_valid = false;
  std::string problem;            // why the signature is not valid ("" when it is)
  std::string signer_key_id;      // as written in the signature file
  std::vector<ManifestChange> changes;  // signed manifest vs the checkpoint now
  size_t signed_files = 0, signed_tensors = 0;
  bool ok() const { return signature_valid && changes.empty(); }
};

// Checks the signature with the trusted key, then compares the signed manifest
// with `current` (only when the signature is valid: an unsigned manifest says
// nothing). `source` names the signature file in errors.
VerifyResult verify_signature(const nlohmann::json& signature, const PublicKey& trusted, const Manifest& current,
                              const std::string& source);

}  // namespace qpu::tools
