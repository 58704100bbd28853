#include "store/redis_store.h"

namespace kvc {

Result<std::unique_ptr<Store>> OpenRedisStore(const std::string& host_port, const StoreOptions&) {
  return Unsupported("redis store not built yet (" + host_port + ")");
}

Result<std::unique_ptr<Store>> OpenRedisClusterStore(std::span<const std::string>, const StoreOptions&) {
  return Unsupported("redis-cluster store not built yet");
}

}  // namespace kvc
