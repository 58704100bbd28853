// redis:// and redis-cluster:// stores through hiredis (design brief §3).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "store/store.h"

namespace kvc {

// host:port of one Redis server.
Result<std::unique_ptr<Store>> OpenRedisStore(const std::string& host_port, const StoreOptions& options);

// Seed nodes of a Redis Cluster (host:port each); the slot map is read from any that answers.
Result<std::unique_ptr<Store>> OpenRedisClusterStore(std::span<const std::string> seeds, const StoreOptions& options);

}  // namespace kvc
