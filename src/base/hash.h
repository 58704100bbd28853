// xxh3-128: the one fixed, documented hash for model fingerprints and chunk keys. Seedless and
// identical across processes and machines.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvc {

using Hash128 = std::array<uint8_t, 16>;  // big-endian (high 64 bits first), as XXH128_canonical

Hash128 Xxh3_128(const void* data, size_t n);

// Incremental form for hashing several pieces as one stream.
class Xxh3Hasher {
 public:
  Xxh3Hasher();
  ~Xxh3Hasher();
  Xxh3Hasher(const Xxh3Hasher&) = delete;
  Xxh3Hasher& operator=(const Xxh3Hasher&) = delete;
  void Update(const void* data, size_t n);
  Hash128 Digest() const;

 private:
  void* state_;
};

std::string HexString(const uint8_t* data, size_t n);
template <size_t N>
std::string HexString(const std::array<uint8_t, N>& a) {
  return HexString(a.data(), N);
}

}  // namespace kvc
