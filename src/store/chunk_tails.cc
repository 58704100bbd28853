#include "store/chunk_tails.h"

#include <algorithm>
#include <limits>

#include "base/byte_io.h"
#include "base/crc32c.h"
#include "format/container.h"

namespace kvc {
namespace {

constexpr uint8_t kMagic[4] = {'K', 'V', 'C', 'T'};
constexpr uint32_t kVersion = 1;

bool StartsWith(std::span<const int32_t> whole, std::span<const int32_t> start) {
  return start.size() <= whole.size() && std::equal(start.begin(), start.end(), whole.begin());
}

}  // namespace

uint64_t MaxChunkTailsBytes(uint32_t chunk_tokens) {
  // Magic, version, chunk_tokens, chunk_index, count; per tail its token count and tokens, and
  // a variant list at its largest; the CRC32C. chunk_tokens is a u32: no overflow in 64 bits.
  const uint64_t variants = 4 + kMaxManifestVariants * (4 + kMaxLevelNameBytes + 4 + kMaxLevelNameBytes + 8);
  const uint64_t tail = 4 + 4 * uint64_t{chunk_tokens > 0 ? chunk_tokens - 1 : 0} + variants;
  return 4 + 4 + 4 + 4 + 4 + kMaxChunkTails * tail + 4;
}

std::vector<uint8_t> WriteChunkTails(const ChunkTails& list) {
  ByteWriter w;
  w.Bytes(kMagic, sizeof(kMagic));
  w.U32(kVersion);
  w.U32(list.chunk_tokens);
  w.U32(list.chunk_index);
  w.U32(static_cast<uint32_t>(list.tails.size()));
  for (const ChunkTail& t : list.tails) {
    w.U32(static_cast<uint32_t>(t.tokens.size()));
    for (const int32_t token : t.tokens) w.I32(token);
    WriteChunkVariants(w, t.variants);
  }
  w.U32(Crc32c(w.bytes().data(), w.size()));
  return w.Take();
}

Result<ChunkTails> ReadChunkTails(std::span<const uint8_t> bytes) {
  ASSIGN_OR_RETURN(const std::span<const uint8_t> body, BodyBeforeCrc32c(bytes, "tails list"));
  ByteReader r(body);
  RETURN_IF_ERROR(ExpectMagicAndVersion(r, kMagic, kVersion, "chunk tails list"));
  ChunkTails list;
  uint32_t n;
  RETURN_IF_ERROR(r.U32(&list.chunk_tokens, "chunk_tokens"));
  RETURN_IF_ERROR(r.U32(&list.chunk_index, "chunk_index"));
  RETURN_IF_ERROR(r.U32(&n, "tail count"));
  KVC_CHECK_CORRUPT(list.chunk_tokens > 1, "tails list: chunk_tokens %u leaves no room for a tail", list.chunk_tokens);
  KVC_CHECK_CORRUPT(n <= kMaxChunkTails, "tails list: %u tails (at most %zu)", n, kMaxChunkTails);
  list.tails.resize(n);
  for (ChunkTail& t : list.tails) {
    uint32_t tokens;
    RETURN_IF_ERROR(r.U32(&tokens, "tail tokens"));
    KVC_CHECK_CORRUPT(tokens > 0 && tokens < list.chunk_tokens, "tails list: a tail of %u tokens (chunks of %u)",
                      tokens, list.chunk_tokens);
    // Checked against what is left before anything is allocated for them.
    KVC_CHECK_CORRUPT(uint64_t{tokens} * 4 <= r.remaining(), "tails list: truncated tokens");
    t.tokens.resize(tokens);
    for (int32_t& token : t.tokens) {
      RETURN_IF_ERROR(r.I32(&token, "tail token"));
      KVC_CHECK_CORRUPT(token >= 0, "tails list: token %d", token);
    }
    RETURN_IF_ERROR(ReadChunkVariants(r, "tails list", &t.variants));
  }
  KVC_CHECK_CORRUPT(r.empty(), "tails list: %zu bytes after the tails", r.remaining());
  return list;
}

bool AddChunkTail(ChunkTails& list, ChunkTail tail) {
  for (const ChunkTail& t : list.tails) {
    if (StartsWith(t.tokens, tail.tokens)) return false;
  }
  std::erase_if(list.tails, [&](const ChunkTail& t) { return StartsWith(tail.tokens, t.tokens); });
  list.tails.insert(list.tails.begin(), std::move(tail));
  if (list.tails.size() > kMaxChunkTails) list.tails.resize(kMaxChunkTails);
  return true;
}

std::optional<ChunkTailMatch> BestChunkTail(const ChunkTails& list, std::span<const int32_t> tokens) {
  std::optional<ChunkTailMatch> best;
  for (size_t i = 0; i < list.tails.size(); ++i) {
    const std::vector<int32_t>& t = list.tails[i].tokens;
    const auto [it, unused] = std::mismatch(t.begin(), t.end(), tokens.begin(), tokens.end());
    const auto agreed = static_cast<uint32_t>(it - t.begin());
    if (agreed > 0 && (!best || agreed > best->tokens)) best = ChunkTailMatch{i, agreed};
  }
  return best;
}

}  // namespace kvc
