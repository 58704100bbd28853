// redis:// and redis-cluster:// stores through hiredis.
//
// Objects live under the key kRedisKeyPrefix + name as plain strings, so that the database may
// hold other data too and Stats counts only ours. Eviction is the server's business (its
// maxmemory policy); kvcodec never evicts from Redis itself. Objects are written with SET and
// read with GETRANGE key 0 max_bytes (with STRLEN and EXISTS in the same pipeline), so a read
// transfers at most one byte more than its bound, whatever value someone put under the key; a
// key of another type under our prefix reads as kCorrupt.
//
// Credentials (redis://user:password@host:port) are sent with AUTH on every new connection, to
// every node of a cluster, before anything else; a refused AUTH fails that call with an
// kIoError "authentication failed" that never repeats the password, and url() leaves it out.
//
// Every call has the StoreOptions timeout on connect and on each read and write; a connection
// that failed or timed out is dropped and the next call opens a new one, so a store outlives a
// server restart. A connection the server closed while it sat idle is retried once on a fresh
// one (every command the stores send is idempotent).
//
// The cluster store routes each key by its hash slot from the map CLUSTER SLOTS gives, follows
// MOVED (updating the map, re-reading it on the next call) and ASK (ASKING, then the command, at
// the named node) up to kRedisMaxRedirects times, and pipelines batched calls per node.
//
// Stats walks the keyspace (SCAN MATCH kvc:* plus one STRLEN per key, pipelined per SCAN page) on
// the server or on every master: O(keys in the database) and meant for tools and tests, not for a
// hot path. Keys written or deleted during the walk may be counted twice or not at all.
//
// Behind these stores, internal to src/store: redis_protocol.h (addresses, replies, RESP
// commands), redis_connection_pool.h (the connections to one server), redis_router.h (where a
// command goes, and the one-server case) and redis_cluster_router.h (a cluster's slot map and
// redirects). redis_store.cc holds the store itself: its commands and how to read their replies.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "store/store.h"

namespace kvc {

inline constexpr std::string_view kRedisKeyPrefix = "kvc:";
inline constexpr int kRedisClusterSlots = 16384;
// A longer chain of redirects means the cluster is misconfigured (or mid-failover), not busy.
inline constexpr int kRedisMaxRedirects = 5;

// Who a store authenticates as.
struct RedisCredentials {
  std::string user;      // empty: the password alone (AUTH password: the default user)
  std::string password;  // with an empty user too: no AUTH at all
  bool empty() const { return user.empty() && password.empty(); }
};

// The user information of a Redis URL, what comes before the '@': "user:password", ":password"
// or "user:" (an ACL user with an empty password), each part percent-decoded (%40 for '@', %3A for
// ':', %25 for '%'). kInvalidArgument for a user without ':' (ambiguous: "pass@host" would be
// taken for a user name), nothing at all, or a bad '%' escape; messages never quote the password.
Result<RedisCredentials> ParseRedisUserInfo(std::string_view userinfo);

// host:port of one Redis server.
Result<std::unique_ptr<Store>> OpenRedisStore(const std::string& host_port, const StoreOptions& options,
                                              const RedisCredentials& credentials = {});

// Seed nodes of a Redis Cluster (host:port each); the slot map is read from any that answers.
Result<std::unique_ptr<Store>> OpenRedisClusterStore(std::span<const std::string> seeds, const StoreOptions& options,
                                                     const RedisCredentials& credentials = {});

// The cluster hash slot of a key: CRC16-XMODEM of the key, or of the first non-empty {...} hash
// tag in it, mod 16384 (Redis Cluster specification).
uint16_t RedisHashSlot(std::string_view key);

}  // namespace kvc
