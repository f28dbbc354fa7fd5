#include "tools/sha256.h"

#include <sodium.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace qpu::tools {

static_assert(sizeof(crypto_hash_sha256_state) <= 128, "Sha256::state_ is too small for libsodium's state");

namespace {

crypto_hash_sha256_state* as_state(std::array<unsigned char, 128>& storage) {
  return reinterpret_cast<crypto_hash_sha256_state*>(storage.data());
}

}  // namespace

void ensure_sodium() {
  if (sodium_init() < 0) fail("libsodium failed to initialise");
}

Sha256::Sha256() {
  ensure_sodium();
  crypto_hash_sha256_init(as_state(state_));
}

void Sha256::update(std::span<const std::byte> bytes) {
  // Bounded pieces: the length parameter is unsigned long long, but keep it modest.
  constexpr size_t kPiece = size_t{1} << 26;
  for (size_t offset = 0; offset < bytes.size(); offset += kPiece) {
    const size_t n = std::min(kPiece, bytes.size() - offset);
    crypto_hash_sha256_update(as_state(state_), reinterpret_cast<const unsigned char*>(bytes.data() + offset), n);
  }
}

void Sha256::update(std::string_view text) { update(std::as_bytes(std::span<const char>(text.data(), text.size()))); }

Sha256Digest Sha256::finish() {
  Sha256Digest digest{};
  crypto_hash_sha256_final(as_state(state_), digest.data());
  return digest;
}

Sha256Digest sha256(std::span<const std::byte> bytes) {
  Sha256 h;
  h.update(bytes);
  return h.finish();
}

std::string to_hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

std::optional<std::vector<uint8_t>> from_hex(std::string_view hex, size_t size) {
  if (hex.size() != 2 * size) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<uint8_t> out(size);
  for (size_t i = 0; i < size; ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return out;
}

}  // namespace qpu::tools
