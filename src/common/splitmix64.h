#pragma once
// splitmix64's step (Steele, Lea, Flood; as in Vigna's xorshift seeding): every input bit
// reaches every output bit. The engine's sampler seeds its xorshift64* with it; the
// prompt-lookup draft hashes n-grams of host tokens with it.
#include <cstdint>

namespace qpu {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace qpu
