// The router of a redis-cluster:// store: which node holds each key's hash slot, from the map
// CLUSTER SLOTS gives; MOVED (the slot has a new owner: update the map, re-read it on the next
// call) and ASK (ASKING, then the command, at the named node, this once) followed up to
// kRedisMaxRedirects times; batched calls pipelined per node. Apart from the store so that the
// store's commands read the same whatever routes them (redis_router.h), and the slot bookkeeping
// can be read and tested on its own. Internal to src/store.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "store/redis_connection_pool.h"
#include "store/redis_protocol.h"
#include "store/redis_router.h"
#include "store/redis_store.h"

namespace kvc::redis {

struct Redirect {
  bool ask = false;  // ASK: this command only; MOVED: the slot has a new owner
  int slot = 0;
  Endpoint target;
};

// "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381"; nothing for other replies, and
// nothing for a malformed redirect, which then surfaces as the error reply it is. `asked` is the
// node that answered: Redis 7 leaves the host out of the target when it is that node's.
std::optional<Redirect> ParseRedirect(const redisReply* r, const Endpoint& asked);

class ClusterRouter final : public Router {
 public:
  ClusterRouter(std::vector<Endpoint> seeds, uint32_t timeout_ms, std::shared_ptr<const RedisCredentials> credentials);

  // Reads the slot map: a cluster store that cannot is an error when opened, not at first use.
  Status Init() { return RefreshSlotMap(); }

  std::string url() const override;
  std::vector<Result<Answer>> Run(std::span<const KeyedCommand> commands) override;
  Result<std::vector<std::shared_ptr<Node>>> DataNodes() override;

 private:
  using SlotMap = std::array<int, kRedisClusterSlots>;  // index into nodes_, -1: unassigned

  std::shared_ptr<Node> NodeFor(const Endpoint& endpoint);
  int IndexOfLocked(const Endpoint& endpoint);
  std::shared_ptr<Node> NodeForSlot(uint16_t slot);
  void MoveSlot(int slot, const std::shared_ptr<Node>& target);
  void RefreshIfStale();
  Status RefreshSlotMap();
  Status ReadSlotMapFrom(Node& node);

  const std::vector<Endpoint> seeds_;
  const uint32_t timeout_ms_;
  const std::shared_ptr<const RedisCredentials> credentials_;  // the same for every node
  std::atomic<bool> stale_{false};
  std::mutex mutex_;                          // guards everything below
  std::vector<std::shared_ptr<Node>> nodes_;  // every server ever seen; indices stay valid
  std::map<std::string, int> node_index_;
  SlotMap slot_owner_;
};

}  // namespace kvc::redis
