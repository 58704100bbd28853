// The tails stored after one chunk: the tokens of a prompt (and of what was generated after it)
// past its last whole chunk, each with the variants its KV is stored as. Without them a repeated
// prompt, or a conversation's next turn, would prefill everything after the last whole chunk
// again. A tail is found without guessing: the list sits under a name made from the key of the
// chunk before it (ChunkTailsName(PreviousChunkKey)), read in the same batched lookup as the
// manifests, and it holds each tail's tokens, so a request uses the longest part of a tail its
// own tokens agree with (its KV for a shorter prefix is the same, attention being causal).
// A tail's KV is stored as objects named ChunkObjectName(ChunkTailKey(previous, tail tokens),
// codec, level), written before the list that names them. Layout: docs/format.md ("Chunk tails").
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "store/chunk_manifest.h"

namespace kvc {

// Tails kept per chunk: the most recent ones (a prompt's several continuations).
inline constexpr size_t kMaxChunkTails = 8;

struct ChunkTail {
  std::vector<int32_t> tokens;  // 1 .. chunk_tokens - 1 tokens, right after the whole chunks
  std::vector<ChunkVariant> variants;
  bool operator==(const ChunkTail&) const = default;
};

struct ChunkTails {
  uint32_t chunk_tokens = 0;
  uint32_t chunk_index = 0;      // whole chunks before the tails: they start at token chunk_index * chunk_tokens
  std::vector<ChunkTail> tails;  // newest first, at most kMaxChunkTails
  bool operator==(const ChunkTails&) const = default;
};

// The largest list ReadChunkTails accepts for chunks of `chunk_tokens`: the bound it is read
// from a store with. Saturates instead of overflowing.
uint64_t MaxChunkTailsBytes(uint32_t chunk_tokens);

std::vector<uint8_t> WriteChunkTails(const ChunkTails& tails);
// `bytes` is hostile: kCorrupt on anything malformed, truncated, failing its CRC32C, or holding
// a tail that is empty, a whole chunk or longer, or has a negative token.
Result<ChunkTails> ReadChunkTails(std::span<const uint8_t> bytes);

// Puts `tail` first. A tail it extends (an earlier turn of the same conversation) is dropped, as
// are the oldest past kMaxChunkTails; a tail that already holds all of it (the same tokens or
// more) leaves the list as it was, and false is returned (nothing to write).
bool AddChunkTail(ChunkTails& list, ChunkTail tail);

// The tail that agrees with the most of `tokens` (the request's tokens after the whole chunks,
// all it may reuse), and how many of its tokens do; nullopt when none agrees on its first token.
struct ChunkTailMatch {
  size_t index = 0;
  uint32_t tokens = 0;
};
std::optional<ChunkTailMatch> BestChunkTail(const ChunkTails& list, std::span<const int32_t> tokens);

}  // namespace kvc
