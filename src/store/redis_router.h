// Where each command of a Redis store goes: the Router interface between the store, which knows
// the commands and how to read their replies, and the servers, so that the store's logic is the
// same for one server and a cluster; and the router for one server. The cluster's router is in
// redis_cluster_router.h. Internal to src/store.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "store/redis_connection_pool.h"
#include "store/redis_protocol.h"
#include "store/redis_store.h"

namespace kvc::redis {

struct KeyedCommand {
  std::string key;
  std::string wire;  // exactly one encoded command
};

class Router {
 public:
  virtual ~Router() = default;
  virtual std::string url() const = 0;
  // One answer per command, in order; a command whose server could not be reached holds the error.
  virtual std::vector<Result<Answer>> Run(std::span<const KeyedCommand> commands) = 0;
  // The servers that hold data: the server, or the cluster's masters.
  virtual Result<std::vector<std::shared_ptr<Node>>> DataNodes() = 0;
};

class SingleNodeRouter final : public Router {
 public:
  SingleNodeRouter(std::shared_ptr<Node> node, std::string user_prefix)
      : node_(std::move(node)), user_prefix_(std::move(user_prefix)) {}

  std::string url() const override { return "redis://" + user_prefix_ + node_->name(); }

  std::vector<Result<Answer>> Run(std::span<const KeyedCommand> commands) override;

  Result<std::vector<std::shared_ptr<Node>>> DataNodes() override { return std::vector{node_}; }

 private:
  std::shared_ptr<Node> node_;
  const std::string user_prefix_;  // "user@" or nothing: never the password
};

// "user@" for a url() (percent-encoded, so that it reads back as itself), or nothing: never the
// password.
std::string UserPrefix(const RedisCredentials& credentials);

}  // namespace kvc::redis
