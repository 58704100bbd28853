#include "store/chunk_key.h"

namespace kvc {
namespace {

constexpr char kDomain[] = "kvcodec-chunk-v1";
constexpr char kTailDomain[] = "kvcodec-tail-v1";

void PutU32(Xxh3Hasher& h, uint32_t v) {
  const uint8_t b[4] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v >> 16),
                        static_cast<uint8_t>(v >> 24)};
  h.Update(b, 4);
}

}  // namespace

std::vector<ChunkKey> ChunkKeys(const ModelFingerprint& model, std::span<const int32_t> tokens, uint32_t chunk_tokens) {
  std::vector<ChunkKey> keys;
  if (chunk_tokens == 0) return keys;
  const size_t n = tokens.size() / chunk_tokens;
  keys.reserve(n);
  ChunkKey previous = model;
  for (size_t i = 0; i < n; ++i) {
    Xxh3Hasher h;
    h.Update(kDomain, sizeof(kDomain) - 1);
    h.Update(previous.data(), previous.size());
    PutU32(h, chunk_tokens);
    for (uint32_t t = 0; t < chunk_tokens; ++t) PutU32(h, static_cast<uint32_t>(tokens[i * chunk_tokens + t]));
    previous = h.Digest();
    keys.push_back(previous);
  }
  return keys;
}

ChunkKey ChunkTailKey(const ChunkKey& previous, std::span<const int32_t> tokens) {
  Xxh3Hasher h;
  h.Update(kTailDomain, sizeof(kTailDomain) - 1);
  h.Update(previous.data(), previous.size());
  PutU32(h, static_cast<uint32_t>(tokens.size()));
  for (const int32_t t : tokens) PutU32(h, static_cast<uint32_t>(t));
  return h.Digest();
}

std::string ChunkObjectName(const ChunkKey& key, std::string_view codec, std::string_view level) {
  return HexString(key) + "." + std::string(codec) + "." + std::string(level);
}

std::string ChunkManifestName(const ChunkKey& key) { return HexString(key) + ".manifest"; }

std::string ChunkTailsName(const ChunkKey& previous) { return HexString(previous) + ".tails"; }

}  // namespace kvc
