#include "store/store.h"

#include <cstdlib>
#include <optional>
#include <utility>

#include "base/utf8.h"
#include "store/bound_store.h"
#include "store/disk_store.h"
#include "store/memory_store.h"
#include "store/redis_store.h"

namespace kvc {

Result<std::span<const uint8_t>> Store::GetInto(std::string_view name, uint64_t max_bytes,
                                                std::vector<uint8_t>& buffer) {
  ASSIGN_OR_RETURN(buffer, Get(name, max_bytes));
  return std::span<const uint8_t>(buffer);
}

std::vector<Result<std::vector<uint8_t>>> Store::GetMany(std::span<const std::string> names, uint64_t max_bytes) {
  std::vector<Result<std::vector<uint8_t>>> out;
  try {
    out.reserve(names.size());
    for (const std::string& n : names) out.push_back(Get(n, max_bytes));
  } catch (...) {
    const Status failed = StatusOfCurrentException("reading a batch of objects");
    out.clear();
    out.resize(names.size(), failed);
  }
  return out;
}

Status ObjectTooLarge(std::string_view name, uint64_t size, uint64_t max_bytes) {
  return Corrupt(FormatMessage("object '%s' is %llu bytes, more than the %llu this read allows (not read)",
                               PrintableOneLine(name).c_str(), static_cast<unsigned long long>(size),
                               static_cast<unsigned long long>(max_bytes)));
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
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
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

std::string RedactedUrl(std::string_view url) {
  // Only Redis URLs carry credentials; a dir:// path may hold an '@' of its own.
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos || !url.starts_with("redis")) return std::string(url);
  const size_t at = url.rfind('@');
  if (at == std::string_view::npos || at < scheme_end + 3) return std::string(url);
  return std::string(url.substr(0, scheme_end + 3)) + "<credentials>" + std::string(url.substr(at));
}

namespace {

// "[user[:password]@]rest" of a Redis URL: the credentials (none without an '@') and the rest.
// The last '@' ends them, so an unescaped '@' in a password still works.
Result<std::pair<RedisCredentials, std::string_view>> SplitRedisCredentials(std::string_view rest) {
  const size_t at = rest.rfind('@');
  if (at == std::string_view::npos) return std::pair<RedisCredentials, std::string_view>{RedisCredentials{}, rest};
  ASSIGN_OR_RETURN(RedisCredentials credentials, ParseRedisUserInfo(rest.substr(0, at)));
  return std::pair<RedisCredentials, std::string_view>{std::move(credentials), rest.substr(at + 1)};
}

}  // namespace

Result<std::unique_ptr<Store>> OpenBackendStore(std::string_view url, const StoreOptions& options) {
  auto strip = [&](std::string_view scheme) -> std::optional<std::string_view> {
    if (url.substr(0, scheme.size()) == scheme) return url.substr(scheme.size());
    return std::nullopt;
  };
  const std::string shown = RedactedUrl(url);
  if (auto rest = strip("mem://")) {
    if (!rest->empty()) return InvalidArgument("mem:// takes nothing after the scheme: '" + shown + "'");
    return MakeMemoryStore(options);
  }
  if (auto rest = strip("dir://")) {
    if (rest->empty() || (*rest)[0] != '/') {
      return InvalidArgument("dir:// needs an absolute path (dir:///path/to/store): '" + shown + "'");
    }
    return OpenDiskStore(std::string(*rest), options);
  }
  if (auto rest = strip("redis-cluster://")) {
    ASSIGN_OR_RETURN(auto split, SplitRedisCredentials(*rest));
    std::vector<std::string> seeds;
    std::string_view r = split.second;
    for (;;) {
      const size_t comma = r.find(',');
      const std::string_view seed = r.substr(0, comma);
      if (seed.empty()) return InvalidArgument("redis-cluster:// has an empty host:port in '" + shown + "'");
      seeds.emplace_back(seed);
      if (comma == std::string_view::npos) break;
      r = r.substr(comma + 1);
    }
    if (seeds.empty()) return InvalidArgument("redis-cluster:// needs host:port[,host:port...]");
    return OpenRedisClusterStore(seeds, options, split.first);
  }
  if (auto rest = strip("redis://")) {
    ASSIGN_OR_RETURN(auto split, SplitRedisCredentials(*rest));
    if (split.second.empty()) return InvalidArgument("redis:// needs host:port");
    return OpenRedisStore(std::string(split.second), options, split.first);
  }
  return InvalidArgument("unknown store URL '" + shown +
                         "' (mem://, dir:///path, redis://[user:password@]host:port, "
                         "redis-cluster://[user:password@]host:port,...)");
}

Result<std::unique_ptr<Store>> OpenStore(std::string_view url, const StoreOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Store> backend, OpenBackendStore(url, options));
  return MakeBoundStore(std::move(backend), options.secret);
}

}  // namespace kvc
