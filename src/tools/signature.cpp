#include "tools/signature.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tools/sha256.h"

namespace qpu::tools {

namespace fs = std::filesystem;
using nlohmann::json;

static_assert(crypto_sign_SEEDBYTES == 32 && crypto_sign_PUBLICKEYBYTES == 32 && crypto_sign_BYTES == 64);

KeyPair::~KeyPair() { sodium_memzero(seed.data(), seed.size()); }

KeyPair key_pair_from_seed(const std::array<uint8_t, 32>& seed) {
  ensure_sodium();
  KeyPair keys;
  keys.seed = seed;
  std::array<unsigned char, crypto_sign_SECRETKEYBYTES> secret{};
  crypto_sign_seed_keypair(keys.public_key.data(), secret.data(), seed.data());
  sodium_memzero(secret.data(), secret.size());
  return keys;
}

KeyPair generate_key_pair() {
  ensure_sodium();
  std::array<uint8_t, 32> seed{};
  randombytes_buf(seed.data(), seed.size());
  KeyPair keys = key_pair_from_seed(seed);
  sodium_memzero(seed.data(), seed.size());
  return keys;
}

std::string key_id(const PublicKey& key) {
  return to_hex(sha256(std::as_bytes(std::span<const uint8_t>(key)))).substr(0, 16);
}

namespace {

// Creates the file (never replacing one) with `mode` and writes `text`.
void write_new_file(const fs::path& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == EEXIST) fail("{}: already exists (key files are never overwritten)", path.string());
    fail("{}: cannot create: {}", path.string(), std::strerror(errno));
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      fail("{}: write failed: {}", path.string(), std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) fail("{}: write failed: {}", path.string(), std::strerror(errno));
}

// Key files are tiny; anything large is not one.
json read_small_json(const fs::path& path, const char* what) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) fail("{}: cannot read the {}: {}", path.string(), what, ec.message());
  if (size > (1u << 20)) fail("{}: too large to be a {} ({} bytes)", path.string(), what, size);
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  const auto j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail("{}: not a {} (not a JSON object)", path.string(), what);
  return j;
}

std::string get_string(const json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) fail("{}: missing string field \"{}\"", where, key);
  return it->get<std::string>();
}

template <size_t N>
std::array<uint8_t, N> get_hex(const json& j, const char* key, const std::string& where) {
  const auto bytes = from_hex(get_string(j, key, where), N);
  if (!bytes) fail("{}: \"{}\" must be {} hex digits", where, key, 2 * N);
  std::array<uint8_t, N> out{};
  std::copy(bytes->begin(), bytes->end(), out.begin());
  return out;
}

}  // namespace

void write_secret_key(const fs::path& path, const KeyPair& keys) {
  const json j = {{"format", kSecretKeyFormat},
                  {"algorithm", "ed25519"},
                  {"seed", to_hex(keys.seed)},
                  {"public_key", to_hex(keys.public_key)},
                  {"key_id", key_id(keys.public_key)}};
  std::string text = j.dump(2) + "\n";
  write_new_file(path, text, 0600);
  sodium_memzero(text.data(), text.size());
}

void write_public_key(const fs::path& path, const PublicKey& key) {
  const json j = {{"format", kPublicKeyFormat},
                  {"algorithm", "ed25519"},
                  {"public_key", to_hex(key)},
                  {"key_id", key_id(key)}};
  write_new_file(path, j.dump(2) + "\n", 0644);
}

KeyPair read_secret_key(const fs::path& path) {
  const std::string where = path.string();
  const json j = read_small_json(path, "secret key file");
  if (get_string(j, "format", where) != kSecretKeyFormat)
    fail("{}: not a secret key file (format is not \"{}\")", where, kSecretKeyFormat);
  const auto seed = get_hex<32>(j, "seed", where);
  KeyPair keys = key_pair_from_seed(seed);
  if (get_hex<32>(j, "public_key", where) != keys.public_key)
    fail("{}: the public_key does not belong to the seed (damaged key file)", where);
  return keys;
}

PublicKey read_public_key(const fs::path& path) {
  const std::string where = path.string();
  const json j = read_small_json(path, "public key file");
  const std::string format = get_string(j, "format", where);
  if (format == kSecretKeyFormat) fail("{}: this is a secret key; give the .pub file", where);
  if (format != kPublicKeyFormat) fail("{}: not a public key file (format is not \"{}\")", where, kPublicKeyFormat);
  const PublicKey key = get_hex<32>(j, "public_key", where);
  if (j.contains("key_id") && get_string(j, "key_id", where) != key_id(key))
    fail("{}: key_id does not match the public key (damaged key file)", where);
  return key;
}

std::string signed_message(const json& manifest) { return kSignaturePrefix + manifest.dump(); }

json sign_manifest(const Manifest& manifest, const KeyPair& keys) {
  ensure_sodium();
  const json m = manifest_to_json(manifest);
  const std::string message = signed_message(m);
  std::array<unsigned char, crypto_sign_SECRETKEYBYTES> secret{};
  PublicKey pk{};
  crypto_sign_seed_keypair(pk.data(), secret.data(), keys.seed.data());
  std::array<uint8_t, crypto_sign_BYTES> sig{};
  crypto_sign_detached(sig.data(), nullptr, reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                       secret.data());
  sodium_memzero(secret.data(), secret.size());
  return {{"format", kSignatureFormat}, {"algorithm", "ed25519"},  {"key_id", key_id(pk)},
          {"public_key", to_hex(pk)},    {"manifest", m},             {"signature", to_hex(sig)}};
}

VerifyResult verify_signature(const json& doc, const PublicKey& trusted, const Manifest& current,
                              const std::string& source) {
  ensure_sodium();
  VerifyResult r;
  auto invalid = [&](std::string why) {
    r.problem = std::move(why);
    return r;
  };
  if (!doc.is_object()) return invalid(source + ": not a JSON object");
  const auto format = doc.find("format");
  if (format == doc.end() || *format != kSignatureFormat)
    return invalid(source + ": not a qpu signature file (format is not \"" + kSignatureFormat + "\")");
  if (doc.value("algorithm", std::string()) != "ed25519") return invalid(source + ": algorithm is not ed25519");
  if (const auto id = doc.find("key_id"); id != doc.end() && id->is_string()) r.signer_key_id = id->get<std::string>();
  const auto sig_field = doc.find("signature");
  const auto sig = sig_field != doc.end() && sig_field->is_string() ? from_hex(sig_field->get<std::string>(), 64)
                                                                    : std::nullopt;
  if (!sig) return invalid(source + ": \"signature\" must be 128 hex digits");
  const auto manifest = doc.find("manifest");
  if (manifest == doc.end() || !manifest->is_object()) return invalid(source + ": no manifest object");

  const std::string message = signed_message(*manifest);
  if (crypto_sign_verify_detached(sig->data(), reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                                  trusted.data()) != 0) {
    std::string why = source + ": signature INVALID for the trusted key " + key_id(trusted);
    if (!r.signer_key_id.empty() && r.signer_key_id != key_id(trusted))
      why += " (the file says it was signed by key " + r.signer_key_id + ")";
    else
      why += " (the manifest or signature in the file was altered)";
    return invalid(why);
  }
  r.signature_valid = true;
  const Manifest signed_manifest = manifest_from_json(*manifest, source);
  r.signed_files = signed_manifest.files.size();
  r.signed_tensors = signed_manifest.tensors.size();
  r.changes = diff_manifests(signed_manifest, current);
  return r;
}

}  // namespace qpu::tools
