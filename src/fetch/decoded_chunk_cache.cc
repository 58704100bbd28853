#include "fetch/decoded_chunk_cache.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace kvc {

size_t DecodedChunkCache::KeyHash::operator()(const ChunkKey& k) const {
  // Keys are hashes already: their first bytes are as good as any.
  size_t h = 0;
  std::memcpy(&h, k.data(), sizeof h);
  return h;
}

Status DecodedChunkCache::Put(const ChunkKey& key, const KvView& kv, const ChunkVariant& variant) {
  const uint64_t size = kv.shape().fp16_bytes();
  if (size == 0 || size > max_bytes_) return Status::Ok();
  // Copied before the lock is taken: the copy is the slow part (and may fault its pages in).
  auto entry = std::make_shared<Entry>();
  ASSIGN_OR_RETURN(entry->kv, kv.Copy());
  if (entry->kv.dtype() != DType::kF16) {
    ASSIGN_OR_RETURN(entry->kv, entry->kv.ConvertTo(DType::kF16));
  }
  entry->variant = variant;
  std::shared_ptr<const Entry> old;  // freed after the lock is let go
  std::vector<std::shared_ptr<const Entry>> evicted;
  std::lock_guard lock(mu_);
  if (auto it = held_.find(key); it != held_.end()) {
    bytes_ -= it->second.entry->kv.shape().fp16_bytes();
    old = std::move(it->second.entry);
    order_.erase(it->second.at);
    held_.erase(it);
  }
  while (!order_.empty() && bytes_ + size > max_bytes_) {
    auto it = held_.find(order_.back());
    bytes_ -= it->second.entry->kv.shape().fp16_bytes();
    evicted.push_back(std::move(it->second.entry));
    held_.erase(it);
    order_.pop_back();
  }
  order_.push_front(key);
  held_.emplace(key, Held{std::move(entry), order_.begin()});
  bytes_ += size;
  return Status::Ok();
}

std::shared_ptr<const DecodedChunkCache::Entry> DecodedChunkCache::Find(const ChunkKey& key) {
  std::lock_guard lock(mu_);
  auto it = held_.find(key);
  if (it == held_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second.at);
  return it->second.entry;
}

bool DecodedChunkCache::Contains(const ChunkKey& key) const {
  std::lock_guard lock(mu_);
  return held_.count(key) > 0;
}

uint64_t DecodedChunkCache::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

size_t DecodedChunkCache::entries() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

Status RememberHeldChunks(DecodedChunkCache& memory, const KvView& kv, std::span<const int32_t> held,
                          size_t prompt_reusable, uint32_t chunk_tokens, const ModelFingerprint& model) {
  if (chunk_tokens == 0 || kv.n_tokens() < held.size() || kv.pos_begin() != 0) {
    return InvalidArgument("the KV must hold the sequence's tokens from position 0");
  }
  const ChunkVariant computed{"raw", "fp16", 0};
  const std::vector<ChunkKey> keys = ChunkKeys(model, held, chunk_tokens);
  for (size_t i = 0; i < keys.size(); ++i) {
    // Held already as computed (a sequence that continued an earlier one): only made the most
    // recently used, not copied again.
    if (auto entry = memory.Find(keys[i]); entry != nullptr && entry->variant.codec == computed.codec) continue;
    ASSIGN_OR_RETURN(const KvView chunk, kv.View(static_cast<uint32_t>(i * chunk_tokens), chunk_tokens));
    RETURN_IF_ERROR(memory.Put(keys[i], chunk, computed));
  }
  // The sequence's tail, and the prompt's where it ends before the sequence's last whole chunk.
  auto tail = [&](size_t chunks, size_t end) -> Status {
    const size_t begin = chunks * chunk_tokens;
    if (end <= begin) return Status::Ok();
    ASSIGN_OR_RETURN(const KvView kv_tail, kv.View(static_cast<uint32_t>(begin), static_cast<uint32_t>(end - begin)));
    return memory.Put(ChunkTailKey(PreviousChunkKey(model, keys, chunks), held.subspan(begin, end - begin)), kv_tail,
                      computed);
  };
  RETURN_IF_ERROR(tail(keys.size(), held.size()));
  const size_t prompt_end = std::min(prompt_reusable, held.size());
  if (prompt_end / chunk_tokens < keys.size()) RETURN_IF_ERROR(tail(prompt_end / chunk_tokens, prompt_end));
  return Status::Ok();
}

}  // namespace kvc
