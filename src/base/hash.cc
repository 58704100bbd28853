#include "base/hash.h"

#include <xxhash.h>

#include <cstring>

namespace kvc {

static Hash128 Canonical(XXH128_hash_t h) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  Hash128 out;
  std::memcpy(out.data(), c.digest, 16);
  return out;
}

Hash128 Xxh3_128(const void* data, size_t n) { return Canonical(XXH3_128bits(data, n)); }

Xxh3Hasher::Xxh3Hasher() : state_(XXH3_createState()) { XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_)); }
Xxh3Hasher::~Xxh3Hasher() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Xxh3Hasher::Update(const void* data, size_t n) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, n);
}
Hash128 Xxh3Hasher::Digest() const { return Canonical(XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_))); }

std::string HexString(const uint8_t* data, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[data[i] >> 4];
    s[2 * i + 1] = kDigits[data[i] & 15];
  }
  return s;
}

}  // namespace kvc
