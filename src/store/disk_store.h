// dir:///path: the embedded default store. One file per object under <root>/objects/, written
// to <root>/tmp/ first, fsynced, then renamed into place (and the directory fsynced), so a crash
// mid-write leaves the old object or none, never a partial one, and any number of processes can
// share the folder. Reads mark an object used (its mtime); past the byte bound the least recently
// used objects are evicted, under an exclusive flock on <root>/lock so that processes do not
// evict in parallel.
#pragma once

#include <memory>
#include <string>

#include "store/store.h"

namespace kvc {

inline constexpr uint64_t kDefaultDiskStoreBytes = uint64_t{10} << 30;

// Creates the folder if needed. kIoError when it cannot be created or written.
Result<std::unique_ptr<Store>> OpenDiskStore(const std::string& root, const StoreOptions& options);

}  // namespace kvc
