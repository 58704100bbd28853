// Where compressed KV chunks live between the request that computed them and the requests that
// reuse them. One interface, several backends chosen by URL:
//   mem://                         in-process, LRU bounded by compressed bytes
//   dir:///path                    local disk, the embedded default (atomic, crash-safe, shared
//                                  by processes, LRU bounded by bytes)
//   redis://[user[:password]@]host:port            one Redis server
//   redis-cluster://[user[:password]@]h:p,h:p,...  a Redis Cluster (slot routing, MOVED/ASK
//                                                  redirects; one credential for every node)
// Objects are opaque bytes under names made by chunk_key.h. OpenStore seals each in an envelope
// that binds it to its name (stored_object.h, bound_store.h). Every backend is safe to call from
// several threads at once.
//
// What a store holds is hostile (anyone who can write to it can put anything under any name), so
// every read is bounded: a reader says how many bytes the object may have (the chunk's manifest
// knows it), and a larger object is refused before it is read or anything is allocated for it.
// No Store method throws: an exception inside a backend (a failed allocation) becomes a Status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvc {

struct StoreOptions {
  // Bound on the stored (compressed) bytes; least recently used objects are evicted past it.
  // 0: the backend's default (mem: 1 GiB, dir: 10 GiB; Redis: the server's own maxmemory).
  uint64_t capacity_bytes = 0;
  // Per network operation (Redis); a slower reply is an kIoError, and the next call reconnects.
  uint32_t timeout_ms = 2000;
  // Objects are sealed with HMAC-SHA256 keyed with this secret, and only objects sealed with it
  // are read: for stores that others can write to (a shared Redis). Empty: a CRC32C seal, which
  // binds each object to its name and catches damage, but not a deliberate forgery.
  std::string secret;
};

struct StoreStats {
  uint64_t objects = 0;
  uint64_t bytes = 0;           // bytes stored (objects as stored: through OpenStore, with their envelopes)
  uint64_t capacity_bytes = 0;  // 0: unbounded by kvcodec (Redis: the server decides)
  uint64_t evictions = 0;       // objects this process evicted
};

// The bound of Get(name) and GetMany(names) without one: for tools that read an object by name.
// Chunk variants and manifests are read with their own bounds (fetcher.h), far below this.
inline constexpr uint64_t kDefaultMaxObjectBytes = uint64_t{1} << 30;

class Store {
 public:
  virtual ~Store() = default;
  // The URL the store was opened with, normalised.
  virtual std::string url() const = 0;

  // Stores `bytes` under `name`, replacing any previous object. Readers never see a partial
  // object: either the old bytes, the new bytes or (after eviction) nothing.
  virtual Status Put(std::string_view name, std::span<const uint8_t> bytes) = 0;
  // The object, if it has at most `max_bytes` bytes (through OpenStore: payload bytes, the
  // envelope aside). kNotFound when there is no such object; kCorrupt (ObjectTooLarge) for a
  // larger one, whose bytes are not read (Redis transfers at most max_bytes + 1 of them), and
  // for something under the name that cannot be an object (a FIFO in a dir:// store, a Redis key
  // that is not a string): the reader treats it as a damaged chunk. A read never blocks on
  // what it finds, and never allocates more than the bound (and an envelope) for the object.
  virtual Result<std::vector<uint8_t>> Get(std::string_view name, uint64_t max_bytes) = 0;
  Result<std::vector<uint8_t>> Get(std::string_view name) { return Get(name, kDefaultMaxObjectBytes); }
  // Get into `buffer`, whose storage is reused where it is large enough: a reader of many objects
  // in turn (the fetcher) hands the same few buffers back, so a read fills pages already mapped
  // (the first touch of a fresh page can cost more than copying it). The object is the span
  // returned, somewhere in `buffer` (an envelope's payload is not moved to its front). Errors as
  // Get's; `buffer`'s contents are then unspecified. By default Get, moved into `buffer`.
  virtual Result<std::span<const uint8_t>> GetInto(std::string_view name, uint64_t max_bytes,
                                                   std::vector<uint8_t>& buffer);
  virtual Result<bool> Exists(std::string_view name) = 0;
  // Deleting an absent object is not an error.
  virtual Status Delete(std::string_view name) = 0;

  // Batched forms: one round trip where the backend can (Redis pipelines / MGET per node). One
  // result per name, in order; a missing object is kNotFound in its slot. A failure of the
  // whole batch (connection lost) is every slot's error. `max_bytes` bounds each object, as in Get.
  virtual std::vector<Result<std::vector<uint8_t>>> GetMany(std::span<const std::string> names, uint64_t max_bytes);
  std::vector<Result<std::vector<uint8_t>>> GetMany(std::span<const std::string> names) {
    return GetMany(names, kDefaultMaxObjectBytes);
  }
  virtual Result<std::vector<bool>> ExistsMany(std::span<const std::string> names);

  virtual Result<StoreStats> Stats() = 0;
};

// Opens a store by URL (forms above), every object bound to its name and sealed with
// options.secret (bound_store.h). kInvalidArgument for a malformed or unknown URL; kIoError when
// the backend cannot be reached or created (or a Redis server refuses the credentials). Neither
// the store's url() nor any message repeats a password from the URL.
Result<std::unique_ptr<Store>> OpenStore(std::string_view url, const StoreOptions& options = {});

// The backend alone, objects stored as given (no envelope, options.secret unused): for tests and
// tools that look at the bytes a backend holds. Everything that reads chunks uses OpenStore.
Result<std::unique_ptr<Store>> OpenBackendStore(std::string_view url, const StoreOptions& options = {});

// `url` for reports and messages: what stands between "://" and the last '@' (user information,
// perhaps with a password) becomes "<credentials>".
std::string RedactedUrl(std::string_view url);

// The embedded default when no URL is given: dir://$KVCODEC_STORE, else
// dir://$XDG_CACHE_HOME/kvcodec/store, else dir://$HOME/.cache/kvcodec/store.
std::string DefaultStoreUrl();

inline constexpr size_t kMaxObjectNameBytes = 200;

// The kCorrupt of a read that found `name` holding `size` bytes, more than its `max_bytes`.
Status ObjectTooLarge(std::string_view name, uint64_t size, uint64_t max_bytes);

// Object names are what chunk_key.h makes: [A-Za-z0-9._-], 1..200 characters. Anything else is
// kInvalidArgument in every backend (names become file names and Redis keys).
Status CheckObjectName(std::string_view name);

}  // namespace kvc
