// The connections to one Redis server (a Node): a small pool, so that concurrent callers do not
// queue behind one socket. It exists apart from the routers and the store so that how a
// connection is opened, authenticated, timed out, dropped after a failure and retried once after
// an idle close (redis_store.h) lives in one place, whether one server or a whole cluster's
// worth of nodes is behind the store. Internal to src/store.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "store/redis_protocol.h"
#include "store/redis_store.h"

namespace kvc::redis {

// One TCP connection, defined in the .cc: only Node uses it.
class Connection;

// One server: a small pool of connections, so that concurrent callers do not queue behind one.
class Node {
 public:
  Node(Endpoint endpoint, uint32_t timeout_ms, std::shared_ptr<const RedisCredentials> credentials);
  ~Node();

  const Endpoint& endpoint() const { return endpoint_; }
  const std::string& name() const { return name_; }

  // Sends `wire`, which holds `replies` commands, and reads that many replies: one round trip,
  // retried once on a fresh connection if the server had closed an idle one.
  Result<std::vector<Reply>> Roundtrip(std::string_view wire, size_t replies);

  Result<Answer> RoundtripOne(std::string_view wire);

 private:
  std::unique_ptr<Connection> Acquire();
  void Release(std::unique_ptr<Connection> connection);

  const Endpoint endpoint_;
  const std::string name_;
  const uint32_t timeout_ms_;
  const std::shared_ptr<const RedisCredentials> credentials_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

}  // namespace kvc::redis
