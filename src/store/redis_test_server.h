// Real redis-server processes for the Redis store tests (no mocks): a standalone server, or a
// cluster of masters, on free loopback ports, each server in its own temporary folder with
// persistence off. Destroying the object kills and reaps the processes and removes the folders.
//
// Nothing outlives the test binary: the servers are also killed by an atexit handler, and by
// the kernel (PR_SET_PDEATHSIG) if the binary crashes. The death signal follows the thread that
// started a server, so start servers from the main thread (or one that outlives them).
//
// redis-server is looked up on PATH (or $KVCODEC_REDIS_SERVER); when it is missing, Start fails
// with a message saying so, and the tests fail rather than skip: CI installs it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace kvc {

// A loopback port nothing listens on right now (with its cluster bus port, +10000, free too).
Result<int> PickFreeLoopbackPort();

// Runs one command on 127.0.0.1:port, after AUTH `password` (the default user) when it is not
// empty. Strings, status replies and integers come back as text, nil as "", arrays as their
// elements joined by '\n'; an error reply is kIoError with its text.
Result<std::string> RunRedisCommand(int port, const std::vector<std::string>& args, const std::string& password = "");

struct RedisTestServerOptions {
  bool cluster_node = false;
  // requirepass (and masterauth): clients must AUTH; the helper's own commands do.
  std::string password;
  // ACL SETUSER arguments, one user each (e.g. {"alice", "on", ">pw", "~kvc:*", "+@all"}),
  // applied at every (re)start.
  std::vector<std::vector<std::string>> acl_users;
};

class RedisTestServer {
 public:
  // A standalone server, or a cluster-enabled node that serves no slots yet.
  static Result<std::unique_ptr<RedisTestServer>> Start(bool cluster_node = false);
  static Result<std::unique_ptr<RedisTestServer>> Start(const RedisTestServerOptions& options);
  ~RedisTestServer();
  RedisTestServer(const RedisTestServer&) = delete;
  RedisTestServer& operator=(const RedisTestServer&) = delete;

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // Kills the server; nothing was saved, so a restarted one starts empty on the same port.
  void Stop();
  Status Restart();
  // SIGSTOP / SIGCONT: while paused the kernel still accepts connections, but nothing answers.
  void Pause();
  void Resume();

  Result<std::string> Command(const std::vector<std::string>& args) const {
    return RunRedisCommand(port_, args, options_.password);
  }

 private:
  RedisTestServer(std::string folder, RedisTestServerOptions options)
      : folder_(std::move(folder)), options_(std::move(options)) {}
  Status Launch(int port);

  const std::string folder_;
  const RedisTestServerOptions options_;
  int port_ = 0;
  pid_t pid_ = -1;
};

class RedisTestCluster {
 public:
  // `masters` nodes without replicas, the slots split evenly in order, and every node reporting
  // cluster_state:ok (which Redis delays about two seconds after a master starts). With a
  // `password`, every node requires it (requirepass and masterauth).
  static Result<std::unique_ptr<RedisTestCluster>> Start(int masters = 3, const std::string& password = "");

  size_t size() const { return nodes_.size(); }
  RedisTestServer& node(size_t i) { return *nodes_[i]; }
  std::string SeedList() const;  // "127.0.0.1:p1,127.0.0.1:p2,..."
  const std::string& NodeId(size_t i) const { return ids_[i]; }
  // The node that owns `slot`, as this helper assigned and moved slots.
  size_t OwnerOf(int slot) const { return slot_owner_[static_cast<size_t>(slot)]; }

  Status FlushAll();

  // A slot migration in the steps of the cluster specification (what redis-cli --cluster
  // reshard does): Begin marks the slot IMPORTING on `to` and MIGRATING on its owner; keys are
  // then moved one by one; Finish moves the remaining keys and gives the slot to `to` on every
  // node. MoveSlot does all of it.
  Status BeginMigration(int slot, size_t to);
  Status MigrateKey(int slot, const std::string& key, size_t to);
  Status FinishMigration(int slot, size_t to);
  Status MoveSlot(int slot, size_t to);
  // Drops any IMPORTING / MIGRATING state of `slot` on every node.
  Status MakeSlotStable(int slot);

 private:
  RedisTestCluster() = default;

  std::vector<std::unique_ptr<RedisTestServer>> nodes_;
  std::vector<std::string> ids_;
  std::string password_;
  std::vector<size_t> slot_owner_;
};

}  // namespace kvc
