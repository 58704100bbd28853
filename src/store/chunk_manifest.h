// The manifest of one stored chunk: which encoded variants (codec, level) of it the store holds
// and how many bytes each is. A request reads the manifests of all its chunks in one batched
// lookup: the longest run of present manifests is its reusable prefix, and the sizes let the
// level planner predict each variant's transfer time before fetching anything. The manifest is
// written after every variant it lists, so a listed variant was complete when it was written.
// Layout: docs/format.md ("Chunk manifest").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/container.h"

namespace kvc {

struct ChunkVariant {
  std::string codec;
  std::string level;
  uint64_t bytes = 0;  // size of the stored .kvc object
  bool operator==(const ChunkVariant&) const = default;
};

struct ChunkManifest {
  uint32_t chunk_tokens = 0;
  uint32_t chunk_index = 0;  // position of the chunk in its prefix
  std::vector<ChunkVariant> variants;
  bool operator==(const ChunkManifest&) const = default;
};

inline constexpr size_t kMaxManifestVariants = 64;
// The largest manifest ReadChunkManifest accepts (kMaxManifestVariants variants, each name of
// kMaxLevelNameBytes): the bound manifests are read from a store with. Magic, version,
// chunk_tokens, chunk_index, count; per variant two u32-prefixed names and a u64 size; the CRC32C.
inline constexpr uint64_t kMaxChunkManifestBytes =
    4 + 4 + 4 + 4 + 4 + kMaxManifestVariants * (4 + kMaxLevelNameBytes + 4 + kMaxLevelNameBytes + 8) + 4;

// A list of variants as a manifest holds it (a u32 count, then each variant), which the tails
// list (chunk_tails.h) holds too; the reader checks the count against kMaxManifestVariants and
// every name against the .kvc name charset (kCorrupt, `what` saying whose they are).
class ByteReader;
class ByteWriter;
void WriteChunkVariants(ByteWriter& w, const std::vector<ChunkVariant>& variants);
Status ReadChunkVariants(ByteReader& r, const char* what, std::vector<ChunkVariant>* variants);

// The bytes before a trailing CRC32C of them (what manifests and tails lists end with), once the
// CRC matches; kCorrupt naming `what` otherwise.
Result<std::span<const uint8_t>> BodyBeforeCrc32c(std::span<const uint8_t> bytes, const char* what);

std::vector<uint8_t> WriteChunkManifest(const ChunkManifest& manifest);
// `bytes` is hostile: kCorrupt on anything malformed, truncated or failing its CRC32C.
Result<ChunkManifest> ReadChunkManifest(std::span<const uint8_t> bytes);

}  // namespace kvc
