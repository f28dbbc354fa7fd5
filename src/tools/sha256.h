#pragma once
// SHA-256 (libsodium) for manifests: whole files, and tensors with their dtype and
// shape. Hex is lowercase, as sha256sum prints it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qpu::tools {

using Sha256Digest = std::array<uint8_t, 32>;

// libsodium must be initialised once before use (thread-safe, idempotent).
void ensure_sodium();

class Sha256 {
 public:
  Sha256();
  void update(std::span<const std::byte> bytes);
  void update(std::string_view text);
  Sha256Digest finish();

 private:
  alignas(64) std::array<unsigned char, 128> state_{};  // crypto_hash_sha256_state, opaque here
};

Sha256Digest sha256(std::span<const std::byte> bytes);

std::string to_hex(std::span<const uint8_t> bytes);
// Lowercase or uppercase hex of exactly `size` bytes; nullopt otherwise.
std::optional<std::vector<uint8_t>> from_hex(std::string_view hex, size_t size);

}  // namespace qpu::tools
