// The host-memory tier: decoded chunks a server fetched or stored lately, held in RAM up to a
// byte limit and let go least recently used first, so that a later request finds them with no
// store read, transfer or decode: a copy into its prefix buffer. What llama-server's --cache-ram
// keeps, for chunks: it sits behind the hot tier (whole sequences left in llama.cpp's memory,
// as many as the server has) and in front of the store.
//
// A chunk is named by its key, which hashes every token up to its end (store/chunk_key.h; a tail
// by its tail key), so an entry is the KV of exactly those tokens at those positions, decoded
// from the variant it records. Safe to use from any thread; entries are shared, immutable, and
// copied out without the lock held.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>

#include "store/chunk_key.h"
#include "store/chunk_manifest.h"
#include "tensor/kv_cache.h"

namespace kvc {

class DecodedChunkCache {
 public:
  struct Entry {
    KvCache kv;            // fp16, at the chunk's positions
    ChunkVariant variant;  // what it was decoded from (raw fp16 for a chunk computed here)
  };

  explicit DecodedChunkCache(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // Keeps a copy of `kv` (converted to fp16) under `key`, replacing what the key held, and lets
  // the least recently used entries go until the rest fit. A chunk larger than the whole limit
  // is not kept. Fails only where the copy cannot be made (memory).
  Status Put(const ChunkKey& key, const KvView& kv, const ChunkVariant& variant);
  // The entry under `key` (now the most recently used), or null.
  std::shared_ptr<const Entry> Find(const ChunkKey& key);
  bool Contains(const ChunkKey& key) const;

  uint64_t bytes() const;
  size_t entries() const;
  uint64_t max_bytes() const { return max_bytes_; }

 private:
  struct KeyHash {
    size_t operator()(const ChunkKey& k) const;
  };
  using Order = std::list<ChunkKey>;  // most recently used first
  struct Held {
    std::shared_ptr<const Entry> entry;
    Order::iterator at;
  };

  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  Order order_;
  std::unordered_map<ChunkKey, Held, KeyHash> held_;
  uint64_t bytes_ = 0;
};

// Puts what StoreHeldChunks (store_chunks.h) stores of a sequence into `memory`, from `kv` (the
// sequence's KV from position 0, computed here: raw fp16): its whole chunks and its tail, and
// the prompt's own tail where that differs, each under the key a lookup asks for (a whole chunk
// held already as computed is not copied again).
Status RememberHeldChunks(DecodedChunkCache& memory, const KvView& kv, std::span<const int32_t> held,
                          size_t prompt_reusable, uint32_t chunk_tokens, const ModelFingerprint& model);

}  // namespace kvc
