#include "store/store.h"

#include <cstdlib>
#include <optional>

#include "store/bound_store.h"
#include "store/disk_store.h"
#include "store/memory_store.h"
#include "store/redis_store.h"

namespace kvc {

std::vector<Result<std::vector<uint8_t>>> Store::GetMany(std::span<const std::string> names) {
  std::vector<Result<std::vector<uint8_t>>> out;
  out.reserve(names.size());
  for (const std::string& n : names) out.push_back(Get(n));
  return out;
}

Result<std::vector<bool>> Store::ExistsMany(std::span<const std::string> names) {
  std::vector<bool> out;
  out.reserve(names.size());
  for (const std::string& n : names) {
    ASSIGN_OR_RETURN(bool e, Exists(n));
    out.push_back(e);
  }
  return out;
}

Status CheckObjectName(std::string_view name) {
  if (name.empty() || name.size() > kMaxObjectNameBytes) {
    return InvalidArgument(FormatMessage("object name of %zu characters (1..%zu)", name.size(), kMaxObjectNameBytes));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return InvalidArgument("object name '" + std::string(name) + "' has a character outside [A-Za-z0-9._-]");
  }
  if (name[0] == '.') return InvalidArgument("object name '" + std::string(name) + "' starts with '.'");
  return Status::Ok();
}

std::string DefaultStoreUrl() {
  if (const char* s = std::getenv("KVCODEC_STORE"); s != nullptr && *s != '\0') return std::string("dir://") + s;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return std::string("dir://") + x + "/kvcodec/store";
  }
  const char* home = std::getenv("HOME");
  return std::string("dir://") + (home != nullptr && *home != '\0' ? home : "/tmp") + "/.cache/kvcodec/store";
}

Result<std::unique_ptr<Store>> OpenBackendStore(std::string_view url, const StoreOptions& options) {
  auto strip = [&](std::string_view scheme) -> std::optional<std::string_view> {
    if (url.substr(0, scheme.size()) == scheme) return url.substr(scheme.size());
    return std::nullopt;
  };
  if (auto rest = strip("mem://")) {
    if (!rest->empty()) return InvalidArgument("mem:// takes nothing after the scheme: '" + std::string(url) + "'");
    return MakeMemoryStore(options);
  }
  if (auto rest = strip("dir://")) {
    if (rest->empty() || (*rest)[0] != '/') {
      return InvalidArgument("dir:// needs an absolute path (dir:///path/to/store): '" + std::string(url) + "'");
    }
    return OpenDiskStore(std::string(*rest), options);
  }
  if (auto rest = strip("redis-cluster://")) {
    std::vector<std::string> seeds;
    std::string_view r = *rest;
    for (;;) {
      const size_t comma = r.find(',');
      const std::string_view seed = r.substr(0, comma);
      if (seed.empty()) return InvalidArgument("redis-cluster:// has an empty host:port in '" + std::string(url) + "'");
      seeds.emplace_back(seed);
      if (comma == std::string_view::npos) break;
      r = r.substr(comma + 1);
    }
    if (seeds.empty()) return InvalidArgument("redis-cluster:// needs host:port[,host:port...]");
    return OpenRedisClusterStore(seeds, options);
  }
  if (auto rest = strip("redis://")) {
    if (rest->empty()) return InvalidArgument("redis:// needs host:port");
    return OpenRedisStore(std::string(*rest), options);
  }
  return InvalidArgument("unknown store URL '" + std::string(url) +
                         "' (mem://, dir:///path, redis://host:port, redis-cluster://host:port,...)");
}

Result<std::unique_ptr<Store>> OpenStore(std::string_view url, const StoreOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Store> backend, OpenBackendStore(url, options));
  return MakeBoundStore(std::move(backend), options.secret);
}

}  // namespace kvc
