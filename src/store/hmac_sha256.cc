#include "store/hmac_sha256.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <climits>

namespace kvc {

Result<HmacSha256Tag> HmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> message) {
  if (key.size() > static_cast<size_t>(INT_MAX)) return InvalidArgument("HMAC key over 2 GiB");
  // libcrypto reads a NULL key as "keep the previous key", which a one-shot call does not have;
  // an empty key is HMAC's all-zero key block, which any valid pointer with length 0 gives.
  static constexpr uint8_t kNoKey = 0;
  static constexpr uint8_t kNoMessage = 0;
  const uint8_t* key_data = key.empty() ? &kNoKey : key.data();
  const uint8_t* message_data = message.empty() ? &kNoMessage : message.data();
  HmacSha256Tag tag{};
  unsigned int tag_bytes = 0;
  if (HMAC(EVP_sha256(), key_data, static_cast<int>(key.size()), message_data, message.size(), tag.data(),
           &tag_bytes) == nullptr ||
      tag_bytes != tag.size()) {
    return Internal("libcrypto HMAC-SHA256 failed");
  }
  return tag;
}

bool EqualInConstantTime(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace kvc
