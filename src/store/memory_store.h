// mem://: objects in this process's memory, least recently used evicted past the byte bound.
#pragma once

#include <memory>

#include "store/store.h"

namespace kvc {

inline constexpr uint64_t kDefaultMemoryStoreBytes = uint64_t{1} << 30;

std::unique_ptr<Store> MakeMemoryStore(const StoreOptions& options);

}  // namespace kvc
