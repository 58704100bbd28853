// The Redis backends against real redis-server processes: the shared store contract on a
// standalone server and on a 3-master cluster, then what only Redis has (key layout, slot
// routing, MOVED/ASK redirects, timeouts, reconnecting after a restart, AUTH).
#include "store/redis_store.h"

#include <chrono>
#include <random>

#include "store/redis_test_server.h"
#include "store/store_contract.h"
#include "store/stored_object.h"

namespace kvc {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
  return b;
}

std::string KeyOf(const std::string& name) { return std::string(kRedisKeyPrefix) + name; }

// Started on first use, once per test binary, and destroyed (servers killed, folders removed)
// with the other statics at exit; the helper's atexit handler and death signal cover the rest.
Result<RedisTestServer*> SharedServer() {
  static Result<std::unique_ptr<RedisTestServer>> server = RedisTestServer::Start();
  if (!server.ok()) return server.status();
  return server->get();
}

Result<RedisTestCluster*> SharedCluster() {
  static Result<std::unique_ptr<RedisTestCluster>> cluster = RedisTestCluster::Start(3);
  if (!cluster.ok()) return cluster.status();
  return cluster->get();
}

Result<std::unique_ptr<Store>> OpenEmptyServerStore(const StoreOptions& options = {}) {
  ASSIGN_OR_RETURN(RedisTestServer * server, SharedServer());
  RETURN_IF_ERROR(server->Command({"FLUSHALL"}).status());
  return OpenStore("redis://" + server->address(), options);
}

Result<std::unique_ptr<Store>> OpenEmptyClusterStore(const StoreOptions& options = {}) {
  ASSIGN_OR_RETURN(RedisTestCluster * cluster, SharedCluster());
  RETURN_IF_ERROR(cluster->FlushAll());
  return OpenStore("redis-cluster://" + cluster->SeedList(), options);
}

uint64_t CrcSealed(std::string_view name, uint64_t payload) {
  return payload + StoredObjectOverhead(name, ObjectSeal::kCrc32c);
}
uint64_t HmacSealed(std::string_view name, uint64_t payload) {
  return payload + StoredObjectOverhead(name, ObjectSeal::kHmacSha256);
}

// As OpenStore gives them: objects bound to their names, with and without a secret.
INSTANTIATE_TEST_SUITE_P(
    Redis, StoreContract,
    ::testing::Values(StoreFactory{"redis", [](uint64_t) { return OpenEmptyServerStore(); }, /*bounded=*/false,
                                   CrcSealed},
                      StoreFactory{"redis_secret", [](uint64_t) { return OpenEmptyServerStore({.secret = "s3cret"}); },
                                   /*bounded=*/false, HmacSealed},
                      StoreFactory{"redis_cluster", [](uint64_t) { return OpenEmptyClusterStore(); },
                                   /*bounded=*/false, CrcSealed}),
    StoreFactoryName);

// Unwraps a Result in a test, failing it with the status when there is none.
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                                                           \
  auto KVC_CONCAT(test_result_, __LINE__) = (expr);                                                               \
  ASSERT_TRUE(KVC_CONCAT(test_result_, __LINE__).ok()) << KVC_CONCAT(test_result_, __LINE__).status().ToString(); \
  lhs = std::move(KVC_CONCAT(test_result_, __LINE__)).value()

#define ASSERT_OK(expr)                                        \
  do {                                                         \
    const ::kvc::Status test_status_ = (expr);                 \
    ASSERT_TRUE(test_status_.ok()) << test_status_.ToString(); \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Hash slots

TEST(RedisHashSlot, MatchesTheClusterSpecification) {
  // The CRC16 check value the Redis Cluster specification gives.
  EXPECT_EQ(RedisHashSlot("123456789"), 0x31C3);
  // Hash tags: only the first {...}, and only when it is not empty.
  EXPECT_EQ(RedisHashSlot("{user1000}.following"), RedisHashSlot("user1000"));
  EXPECT_EQ(RedisHashSlot("{user1000}.followers"), RedisHashSlot("user1000"));
  EXPECT_EQ(RedisHashSlot("foo{bar}{zap}"), RedisHashSlot("bar"));
  EXPECT_EQ(RedisHashSlot("foo{{bar}}zap"), RedisHashSlot("{bar"));
  EXPECT_NE(RedisHashSlot("foo{}{bar}"), RedisHashSlot("bar"));
  for (int i = 0; i < 1000; ++i) EXPECT_LT(RedisHashSlot("kvc:obj-" + std::to_string(i)), kRedisClusterSlots);
}

TEST(RedisHashSlot, AgreesWithTheServer) {
  ASSERT_OK_AND_ASSIGN(RedisTestCluster * cluster, SharedCluster());
  std::vector<std::string> keys = {"123456789", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "", "{}", "}{"};
  for (int i = 0; i < 50; ++i) keys.push_back(KeyOf("chunk-" + std::to_string(i * 7919)));
  for (const std::string& key : keys) {
    ASSERT_OK_AND_ASSIGN(const std::string slot, cluster->node(0).Command({"CLUSTER", "KEYSLOT", key}));
    EXPECT_EQ(std::to_string(RedisHashSlot(key)), slot) << "key '" << key << "'";
  }
}

// ---------------------------------------------------------------------------------------------
// One server

TEST(RedisStore, ObjectsAreKvcPrefixedStringsAndStatsCountOnlyThose) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenEmptyServerStore());
  ASSERT_OK_AND_ASSIGN(RedisTestServer * server, SharedServer());
  EXPECT_EQ(store->url(), "redis://" + server->address());
  ASSERT_OK(store->Put("a", Bytes(100, 1)));
  // The value is the object in its envelope (stored_object.h), and the bare backend stores bytes
  // as given.
  ASSERT_OK_AND_ASSIGN(const std::string raw, server->Command({"GET", KeyOf("a")}));
  const std::vector<uint8_t> sealed = SealStoredObject("a", Bytes(100, 1), "").value();
  EXPECT_EQ(raw, std::string(sealed.begin(), sealed.end()));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> bare, OpenBackendStore("redis://" + server->address()));
  ASSERT_OK(bare->Put("bare", Bytes(100, 1)));
  ASSERT_OK_AND_ASSIGN(const std::string raw_bare, server->Command({"GET", KeyOf("bare")}));
  const std::vector<uint8_t> expected = Bytes(100, 1);
  EXPECT_EQ(raw_bare, std::string(expected.begin(), expected.end()));
  ASSERT_OK(bare->Delete("bare"));
  // Someone else's data in the same database, and a non-string under our prefix.
  ASSERT_OK(server->Command({"SET", "other:key", "12345"}).status());
  ASSERT_OK(server->Command({"HSET", KeyOf("not-ours"), "field", "value"}).status());
  ASSERT_OK_AND_ASSIGN(const StoreStats stats, store->Stats());
  EXPECT_EQ(stats.objects, 1u);
  EXPECT_EQ(stats.bytes, sealed.size());
  EXPECT_EQ(stats.evictions, 0u);
  // A key of another type under an object's name is a damaged object that says what it is, not a
  // crash or garbage bytes.
  const Result<std::vector<uint8_t>> wrong = store->Get("not-ours");
  EXPECT_EQ(wrong.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(wrong.status().message().find("WRONGTYPE"), std::string::npos) << wrong.status().ToString();
  EXPECT_NE(wrong.status().message().find("not a string"), std::string::npos) << wrong.status().ToString();
  EXPECT_EQ(store->GetMany(std::vector<std::string>{"not-ours"})[0].status().code(), StatusCode::kCorrupt);
  EXPECT_TRUE(store->Exists("not-ours").value());
}

TEST(RedisStore, StatsReportsTheServersMaxmemory) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenEmptyServerStore());
  ASSERT_OK_AND_ASSIGN(RedisTestServer * server, SharedServer());
  EXPECT_EQ(store->Stats().value().capacity_bytes, 0u) << "no maxmemory: unbounded";
  ASSERT_OK(server->Command({"CONFIG", "SET", "maxmemory", "104857600"}).status());
  const Result<StoreStats> stats = store->Stats();
  ASSERT_OK(server->Command({"CONFIG", "SET", "maxmemory", "0"}).status());
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->capacity_bytes, 104857600u);
}

TEST(RedisStore, LargeObjectsAndBatchesWithBadNames) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenEmptyServerStore());
  const std::vector<uint8_t> big = Bytes(8 << 20, 7);
  ASSERT_OK(store->Put("big", big));
  EXPECT_EQ(store->Get("big").value(), big);
  const std::vector<std::string> names = {"big", "bad/name", "missing"};
  const auto got = store->GetMany(names);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].value(), big);
  EXPECT_EQ(got[1].status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(got[2].status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->ExistsMany(names).status().code(), StatusCode::kInvalidArgument);
}

// A value far larger than the read's bound under an object's key (junk, or a chunk a larger
// model wrote) is refused after at most bound + 1 of its bytes crossed the wire: checked in a
// child whose address space could not hold the value and whose resident set grows by far less
// than it. Before, the whole value was read first and then found not to be an object.
TEST(RedisStore, AValueLargerThanTheBoundIsRefusedWithoutBeingRead) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenEmptyServerStore());
  ASSERT_OK_AND_ASSIGN(RedisTestServer * server, SharedServer());
  const std::string name = "00000000000000000000000000000004.quant.8";
  constexpr uint64_t kJunk = uint64_t{128} << 20;
  // Made on the server (SETRANGE pads with zero bytes): none of it passes through this process.
  ASSERT_OK(server->Command({"SETRANGE", KeyOf(name), std::to_string(kJunk - 1), "x"}).status());
  const std::string url = "redis://" + server->address();
  const std::string said = RunInChild(
      [&] {
        // Stores of the child's own, so that no connection is shared with the parent.
        Result<std::unique_ptr<Store>> bound = OpenStore(url);
        Result<std::unique_ptr<Store>> bare = OpenBackendStore(url);
        if (!bound.ok() || !bare.ok()) return std::string("cannot open the stores");
        const uint64_t rss0 = MaxRssBytes();
        std::string failures;
        auto expect_too_large = [&](const Result<std::vector<uint8_t>>& got, const char* what) {
          if (got.ok()) {
            failures += std::string(what) + ": read " + std::to_string(got->size()) + " bytes; ";
          } else if (got.status().code() != StatusCode::kCorrupt ||
                     got.status().message().find(name + "' is 134217728 bytes, more than") == std::string::npos) {
            failures += std::string(what) + ": " + got.status().ToString() + "; ";
          }
        };
        expect_too_large((*bound)->Get(name, 64 << 10), "get");
        expect_too_large((*bare)->Get(name, 1000), "bare get");
        const auto batch = (*bound)->GetMany(std::vector<std::string>{"absent", name}, 64 << 10);
        if (batch.size() != 2 || batch[0].status().code() != StatusCode::kNotFound) failures += "batch: absent; ";
        if (batch.size() == 2) expect_too_large(batch[1], "batch");
        const uint64_t grew = MaxRssBytes() - rss0;
        if (grew > (uint64_t{32} << 20)) failures += "the resident set grew by " + std::to_string(grew) + " bytes; ";
        return failures;
      },
      {.alarm_s = 30, .address_space_headroom = uint64_t{96} << 20});
  EXPECT_EQ(said, "");
  // Within the bound, the value is read whole (then found not to be an object in an envelope).
  ASSERT_OK(server->Command({"SET", KeyOf(name), std::string(5000, 'j')}).status());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> bare, OpenBackendStore(url));
  EXPECT_EQ(bare->Get(name, 5000).value(), std::vector<uint8_t>(5000, 'j'));
  EXPECT_EQ(bare->Get(name, 4999).status().code(), StatusCode::kCorrupt);
  const Status junk = store->Get(name).status();
  EXPECT_EQ(junk.code(), StatusCode::kCorrupt);
  EXPECT_NE(junk.message().find("bad magic"), std::string::npos) << junk.ToString();
  ASSERT_OK(server->Command({"DEL", KeyOf(name)}).status());
}

TEST(RedisStore, MalformedAddressesAreInvalidArgument) {
  for (const char* bad :
       {"redis://localhost", "redis://localhost:", "redis://:6379", "redis://host:port", "redis://host:0",
        "redis://host:65536", "redis://host:12x", "redis://host:-1", "redis://a b:1", "redis://[::1]",
        "redis://host:1/0", "redis-cluster://,127.0.0.1:1", "redis-cluster://127.0.0.1:1,nohost"}) {
    const auto store = OpenStore(bad, {.timeout_ms = 300});
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << bad << ": " << store.status().ToString();
  }
}

TEST(RedisStore, HostNamesResolve) {
  ASSERT_OK_AND_ASSIGN(RedisTestServer * server, SharedServer());
  const std::string url = "redis://localhost:" + std::to_string(server->port());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url));
  EXPECT_EQ(store->url(), url);
  ASSERT_OK(store->Put("resolved", Bytes(3, 1)));
  EXPECT_EQ(store->Get("resolved").value(), Bytes(3, 1));
}

TEST(RedisStore, ClosedPortIsAnIoErrorNamingTheAddress) {
  ASSERT_OK_AND_ASSIGN(const int port, PickFreeLoopbackPort());
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const auto t0 = Clock::now();
  for (const std::string& url : {"redis://" + address, "redis-cluster://" + address}) {
    const auto store = OpenStore(url, {.timeout_ms = 300});
    EXPECT_EQ(store.status().code(), StatusCode::kIoError) << url;
    EXPECT_NE(store.status().message().find(address), std::string::npos) << store.status().ToString();
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
}

TEST(RedisStore, StoppedServerFailsFastAndTheSameStoreWorksAfterARestart) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RedisTestServer> server, RedisTestServer::Start());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore("redis://" + server->address(), {.timeout_ms = 300}));
  ASSERT_OK(store->Put("x", Bytes(10, 1)));
  server->Stop();
  const auto t0 = Clock::now();
  const Status get = store->Get("x").status();
  EXPECT_EQ(get.code(), StatusCode::kIoError);
  EXPECT_NE(get.message().find(server->address()), std::string::npos) << get.ToString();
  EXPECT_EQ(store->Put("x", Bytes(10, 2)).code(), StatusCode::kIoError);
  EXPECT_EQ(store->Exists("x").status().code(), StatusCode::kIoError);
  EXPECT_EQ(store->Delete("x").code(), StatusCode::kIoError);
  EXPECT_EQ(store->ExistsMany(std::vector<std::string>{"x", "y"}).status().code(), StatusCode::kIoError);
  for (const auto& r : store->GetMany(std::vector<std::string>{"x", "y"})) {
    EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  }
  EXPECT_EQ(store->Stats().status().code(), StatusCode::kIoError);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));

  ASSERT_OK(server->Restart());
  // Nothing was saved, so the object is gone, but the store talks to the new server.
  EXPECT_EQ(store->Get("x").status().code(), StatusCode::kNotFound);
  ASSERT_OK(store->Put("x", Bytes(10, 3)));
  EXPECT_EQ(store->Get("x").value(), Bytes(10, 3));
}

TEST(RedisStore, ARestartWhileIdleIsInvisible) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RedisTestServer> server, RedisTestServer::Start());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore("redis://" + server->address(), {.timeout_ms = 300}));
  ASSERT_OK(store->Put("x", Bytes(10, 1)));
  ASSERT_OK(server->Restart());
  // The pooled connection is dead; the store retries once on a fresh one instead of failing.
  EXPECT_EQ(store->Get("x").status().code(), StatusCode::kNotFound);
  ASSERT_OK(server->Restart());
  ASSERT_OK(store->Put("y", Bytes(1 << 20, 2)));
  EXPECT_EQ(store->Get("y").value(), Bytes(1 << 20, 2));
}

TEST(RedisStore, AServerThatDoesNotAnswerTimesOut) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RedisTestServer> server, RedisTestServer::Start());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore("redis://" + server->address(), {.timeout_ms = 300}));
  ASSERT_OK(store->Put("x", Bytes(10, 1)));
  server->Pause();
  auto t0 = Clock::now();
  const Status get = store->Get("x").status();
  const auto get_took = Clock::now() - t0;
  t0 = Clock::now();
  const auto batch = store->GetMany(std::vector<std::string>{"x", "y"});
  const auto batch_took = Clock::now() - t0;
  server->Resume();
  EXPECT_EQ(get.code(), StatusCode::kIoError);
  EXPECT_NE(get.message().find("no reply within 300 ms"), std::string::npos) << get.ToString();
  EXPECT_GE(get_took, std::chrono::milliseconds(250));
  EXPECT_LT(get_took, std::chrono::milliseconds(1500));
  ASSERT_EQ(batch.size(), 2u);
  for (const auto& r : batch) EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_LT(batch_took, std::chrono::milliseconds(1500));
  // The connection that timed out was dropped, so no late reply can be taken for a new one.
  EXPECT_EQ(store->Get("x").value(), Bytes(10, 1));
  EXPECT_EQ(store->Get("missing").status().code(), StatusCode::kNotFound);
}

// ---------------------------------------------------------------------------------------------
// Cluster

// A name whose key is in `slot` (names cannot carry {hash tags}, so search).
std::string NameInSlot(int slot, const std::string& stem) {
  for (int i = 0;; ++i) {
    std::string name = stem + "-" + std::to_string(i);
    if (RedisHashSlot(KeyOf(name)) == slot) return name;
  }
}

TEST(RedisCluster, KeysSpreadOverEveryMasterAndEachSitsWhereItsSlotSays) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenEmptyClusterStore());
  ASSERT_OK_AND_ASSIGN(RedisTestCluster * cluster, SharedCluster());
  std::vector<std::string> names;
  for (int i = 0; i < 60; ++i) {
    names.push_back("spread-" + std::to_string(i));
    ASSERT_OK(store->Put(names.back(), Bytes(50, static_cast<uint32_t>(i))));
  }
  uint64_t total = 0;
  for (size_t n = 0; n < cluster->size(); ++n) {
    ASSERT_OK_AND_ASSIGN(const std::string dbsize, cluster->node(n).Command({"DBSIZE"}));
    EXPECT_GT(std::stoull(dbsize), 0u) << "node " << n << " holds no keys";
    total += std::stoull(dbsize);
  }
  EXPECT_EQ(total, names.size());
  for (const std::string& name : names) {
    const size_t owner = cluster->OwnerOf(RedisHashSlot(KeyOf(name)));
    ASSERT_OK_AND_ASSIGN(const std::string exists, cluster->node(owner).Command({"EXISTS", KeyOf(name)}));
    EXPECT_EQ(exists, "1") << name << " is not on node " << owner;
  }
  const auto got = store->GetMany(names);
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(got[i].value(), Bytes(50, static_cast<uint32_t>(i))) << i;
  ASSERT_OK_AND_ASSIGN(const StoreStats stats, store->Stats());
  EXPECT_EQ(stats.objects, names.size());
  uint64_t stored = 0;
  for (const std::string& name : names) stored += CrcSealed(name, 50);
  EXPECT_EQ(stats.bytes, stored);
}

TEST(RedisCluster, FollowsMovedWhenASlotChangesOwner) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenEmptyClusterStore());
  ASSERT_OK_AND_ASSIGN(RedisTestCluster * cluster, SharedCluster());
  const std::string name = "moving";
  const int slot = RedisHashSlot(KeyOf(name));
  const size_t from = cluster->OwnerOf(slot);
  const size_t to = (from + 1) % cluster->size();
  ASSERT_OK(store->Put(name, Bytes(300, 1)));
  // The store read the slot map before this.
  ASSERT_OK(cluster->MoveSlot(slot, to));
  const Result<std::string> old_owner = cluster->node(from).Command({"GET", KeyOf(name)});
  ASSERT_FALSE(old_owner.ok());
  EXPECT_NE(old_owner.status().message().find("MOVED " + std::to_string(slot) + " " + cluster->node(to).address()),
            std::string::npos)
      << old_owner.status().ToString();

  EXPECT_EQ(store->Get(name).value(), Bytes(300, 1));
  ASSERT_OK(store->Put(name, Bytes(300, 2)));
  EXPECT_EQ(cluster->node(to).Command({"EXISTS", KeyOf(name)}).value(), "1");
  const std::vector<std::string> names = {name, "elsewhere"};
  ASSERT_OK(store->Put("elsewhere", Bytes(5, 5)));
  const auto got = store->GetMany(names);
  EXPECT_EQ(got[0].value(), Bytes(300, 2));
  EXPECT_EQ(got[1].value(), Bytes(5, 5));

  // Also with a store that has taken the redirect only in a batch.
  ASSERT_OK(cluster->MoveSlot(slot, from));
  EXPECT_EQ(store->ExistsMany(names).value(), (std::vector<bool>{true, true}));
  EXPECT_EQ(store->GetMany(names)[0].value(), Bytes(300, 2));
}

TEST(RedisCluster, FollowsAskWhileASlotMigrates) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenEmptyClusterStore());
  ASSERT_OK_AND_ASSIGN(RedisTestCluster * cluster, SharedCluster());
  const std::string moved = "ask-moved";
  const int slot = RedisHashSlot(KeyOf(moved));
  const std::string stayed = NameInSlot(slot, "ask-stayed");
  const std::string created = NameInSlot(slot, "ask-created");
  const size_t from = cluster->OwnerOf(slot);
  const size_t to = (from + 1) % cluster->size();
  ASSERT_OK(store->Put(moved, Bytes(200, 1)));
  ASSERT_OK(store->Put(stayed, Bytes(200, 2)));

  ASSERT_OK(cluster->BeginMigration(slot, to));
  struct Finish {
    RedisTestCluster* cluster;
    int slot;
    size_t to;
    ~Finish() {
      if (!cluster->FinishMigration(slot, to).ok()) (void)cluster->MakeSlotStable(slot);
    }
  } finish{cluster, slot, to};
  ASSERT_OK(cluster->MigrateKey(slot, KeyOf(moved), to));
  const Result<std::string> old_owner = cluster->node(from).Command({"GET", KeyOf(moved)});
  ASSERT_FALSE(old_owner.ok());
  EXPECT_NE(old_owner.status().message().find("ASK " + std::to_string(slot)), std::string::npos)
      << old_owner.status().ToString();

  EXPECT_EQ(store->Get(moved).value(), Bytes(200, 1));
  EXPECT_EQ(store->Get(stayed).value(), Bytes(200, 2));
  EXPECT_TRUE(store->Exists(moved).value());
  const std::vector<std::string> names = {moved, stayed, created};
  const auto got = store->GetMany(names);
  EXPECT_EQ(got[0].value(), Bytes(200, 1));
  EXPECT_EQ(got[1].value(), Bytes(200, 2));
  EXPECT_EQ(got[2].status().code(), StatusCode::kNotFound);
  // A new key in a migrating slot goes to the importing node.
  ASSERT_OK(store->Put(created, Bytes(20, 3)));
  // COUNTKEYSINSLOT counts a node's own keys, whoever owns the slot (EXISTS would redirect).
  const std::string slot_text = std::to_string(slot);
  EXPECT_EQ(cluster->node(to).Command({"CLUSTER", "COUNTKEYSINSLOT", slot_text}).value(), "2");
  EXPECT_EQ(cluster->node(from).Command({"CLUSTER", "COUNTKEYSINSLOT", slot_text}).value(), "1");
  EXPECT_EQ(store->ExistsMany(names).value(), (std::vector<bool>{true, true, true}));
}

TEST(RedisCluster, ARedirectLoopEndsInAnIoError) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenEmptyClusterStore());
  ASSERT_OK_AND_ASSIGN(RedisTestCluster * cluster, SharedCluster());
  const std::string name = "looping";
  const int slot = RedisHashSlot(KeyOf(name));
  const size_t from = cluster->OwnerOf(slot);
  const size_t to = (from + 1) % cluster->size();
  // MIGRATING without IMPORTING on the other side: the owner answers ASK, the other node MOVED
  // back, for ever.
  ASSERT_OK(cluster->node(from)
                .Command({"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", cluster->NodeId(to)})
                .status());
  const auto t0 = Clock::now();
  const Status get = store->Get(name).status();
  const auto took = Clock::now() - t0;
  ASSERT_OK(cluster->MakeSlotStable(slot));
  EXPECT_EQ(get.code(), StatusCode::kIoError);
  EXPECT_NE(get.message().find("redirect"), std::string::npos) << get.ToString();
  EXPECT_LT(took, std::chrono::seconds(2));
  EXPECT_EQ(store->Get(name).status().code(), StatusCode::kNotFound) << "the store recovers once the slot is stable";
}

TEST(RedisCluster, AnUnreachableSeedIsSkipped) {
  ASSERT_OK_AND_ASSIGN(RedisTestCluster * cluster, SharedCluster());
  ASSERT_OK(cluster->FlushAll());
  ASSERT_OK_AND_ASSIGN(const int closed, PickFreeLoopbackPort());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore("redis-cluster://127.0.0.1:" + std::to_string(closed) +
                                                                   "," + cluster->node(1).address(),
                                                               {.timeout_ms = 300}));
  ASSERT_OK(store->Put("seeded", Bytes(10, 1)));
  EXPECT_EQ(store->Get("seeded").value(), Bytes(10, 1));
}

TEST(RedisCluster, AStandaloneServerIsNotACluster) {
  ASSERT_OK_AND_ASSIGN(RedisTestServer * server, SharedServer());
  const auto store = OpenStore("redis-cluster://" + server->address(), {.timeout_ms = 300});
  EXPECT_EQ(store.status().code(), StatusCode::kIoError);
  EXPECT_NE(store.status().message().find("cluster support disabled"), std::string::npos) << store.status().ToString();
}

// ---------------------------------------------------------------------------------------------
// Objects bound to their names on a shared server

// Anyone who can write to the server can copy one prompt's chunk over another's: without a
// secret the copy is caught by its name, with one so is any object the writer makes itself.
TEST(RedisStore, AWriterOnTheSameServerCannotPoisonAChunk) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenEmptyServerStore({.secret = "shared"}));
  ASSERT_OK_AND_ASSIGN(RedisTestServer * server, SharedServer());
  const std::string victim = "00000000000000000000000000000001.kvtc.16";
  const std::string source = "00000000000000000000000000000002.kvtc.16";
  ASSERT_OK(store->Put(victim, Bytes(300, 1)));
  ASSERT_OK(store->Put(source, Bytes(300, 2)));
  // A raw copy on the server (what any client can do), then objects made without the secret.
  ASSERT_OK_AND_ASSIGN(const std::string copied, server->Command({"GET", KeyOf(source)}));
  ASSERT_OK(server->Command({"SET", KeyOf(victim), copied}).status());
  Status s = store->Get(victim).status();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.message(), "stored object holds chunk '" + source + "', read as '" + victim + "'");
  for (const std::string secret : {"", "a guess"}) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> writer, OpenStore("redis://" + server->address(), {.secret = secret}));
    ASSERT_OK(writer->Put(victim, Bytes(300, 3)));
    s = store->Get(victim).status();
    EXPECT_EQ(s.code(), StatusCode::kCorrupt) << secret;
    EXPECT_NE(s.message().find("not authenticated by this store's secret"), std::string::npos) << s.ToString();
  }
  const auto got = store->GetMany(std::vector<std::string>{victim, source});
  EXPECT_EQ(got[0].status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(got[1].value(), Bytes(300, 2));
}

// ---------------------------------------------------------------------------------------------
// AUTH

// The default user's password (requirepass, so no spaces) and an ACL user's, with the characters
// a URL must escape.
const std::string kDefaultPassword = "req@pass:1%";
const std::string kDefaultPasswordInUrl = "req%40pass%3A1%25";
const std::string kAlicePassword = "s p@ce:%pw";
const std::string kAlicePasswordInUrl = "s%20p%40ce%3A%25pw";

Result<RedisTestServer*> SharedAuthServer() {
  static Result<std::unique_ptr<RedisTestServer>> server = RedisTestServer::Start(RedisTestServerOptions{
      .password = kDefaultPassword, .acl_users = {{"alice", "on", ">" + kAlicePassword, "~*", "+@all"}}});
  if (!server.ok()) return server.status();
  return server->get();
}

void ExpectWorks(Store& store) {
  ASSERT_OK(store.Put("authed", Bytes(100, 4)));
  EXPECT_EQ(store.Get("authed").value(), Bytes(100, 4));
  EXPECT_TRUE(store.Exists("authed").value());
  EXPECT_EQ(store.GetMany(std::vector<std::string>{"authed", "nope"})[1].status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store.Stats().ok()) << store.Stats().status().ToString();
  ASSERT_OK(store.Delete("authed"));
}

TEST(RedisAuth, APasswordAloneOrAnAclUserAndPassword) {
  ASSERT_OK_AND_ASSIGN(RedisTestServer * server, SharedAuthServer());
  const std::string address = server->address();
  for (const std::string& password : {kDefaultPasswordInUrl, std::string("req@pass:1%25")}) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore("redis://:" + password + "@" + address));
    ExpectWorks(*store);
    EXPECT_EQ(store->url(), "redis://" + address) << "no password in the URL";
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> alice,
                       OpenStore("redis://alice:" + kAlicePasswordInUrl + "@" + address, {.secret = "x"}));
  ExpectWorks(*alice);
  EXPECT_EQ(alice->url(), "redis://alice@" + address);
}

TEST(RedisAuth, WrongOrMissingCredentialsAreClearErrorsThatNeverShowThePassword) {
  ASSERT_OK_AND_ASSIGN(RedisTestServer * server, SharedAuthServer());
  const std::string address = server->address();
  struct Case {
    std::string url, says, secret;
  };
  const Case cases[] = {
      {"redis://:wrong-pw-123@" + address, "authentication failed with the password alone", "wrong-pw-123"},
      {"redis://alice:also-wrong-456@" + address, "authentication failed as user 'alice'", "also-wrong-456"},
      {"redis://alice:" + kDefaultPasswordInUrl + "@" + address, "authentication failed as user 'alice'",
       kDefaultPassword},
      {"redis://" + address, "requires authentication (NOAUTH)", ""},
  };
  for (const Case& c : cases) {
    const auto store = OpenStore(c.url, {.timeout_ms = 1000});
    ASSERT_FALSE(store.ok()) << c.url;
    EXPECT_EQ(store.status().code(), StatusCode::kIoError) << store.status().ToString();
    EXPECT_NE(store.status().message().find(c.says), std::string::npos) << store.status().ToString();
    EXPECT_NE(store.status().message().find(address), std::string::npos) << store.status().ToString();
    if (!c.secret.empty()) {
      EXPECT_EQ(store.status().message().find(c.secret), std::string::npos) << store.status().ToString();
    }
  }
  // Malformed credentials, and URLs that fail for other reasons, never quote the password.
  for (const std::string& url :
       {"redis://alice@" + address, "redis://:@" + address, "redis://@" + address, "redis://:bad%zzsecret@" + address,
        "redis://:badsecret%4@" + address, "rediss://:badsecret@" + address,
        std::string("redis-cluster://:badsecret@a:1,,b:2"), "redis://:badsecret@" + address + "/0"}) {
    const auto store = OpenStore(url, {.timeout_ms = 300});
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << url << ": " << store.status().ToString();
    EXPECT_EQ(store.status().message().find("badsecret"), std::string::npos) << store.status().ToString();
  }
}

TEST(RedisAuth, CredentialsAreSentAgainOnEveryNewConnection) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RedisTestServer> server,
                       RedisTestServer::Start(RedisTestServerOptions{.password = "restart-pw"}));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store,
                       OpenStore("redis://:restart-pw@" + server->address(), {.timeout_ms = 1000}));
  ASSERT_OK(store->Put("x", Bytes(10, 1)));
  ASSERT_OK(server->Restart());
  // A new connection that skipped AUTH would get NOAUTH here, not "not found".
  EXPECT_EQ(store->Get("x").status().code(), StatusCode::kNotFound) << store->Get("x").status().ToString();
  ASSERT_OK(store->Put("x", Bytes(10, 2)));
  EXPECT_EQ(store->Get("x").value(), Bytes(10, 2));
  // The password changes under a running store: connections already open keep working, a new one
  // fails with the authentication error.
  ASSERT_OK(server->Command({"CONFIG", "SET", "requirepass", "changed-pw"}).status());
  ASSERT_OK(RunRedisCommand(server->port(), {"CLIENT", "KILL", "TYPE", "normal"}, "changed-pw").status());
  const Status s = store->Get("x").status();
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("authentication failed"), std::string::npos) << s.ToString();
}

TEST(RedisAuth, AClusterWithAPassword) {
  const std::string password = "cluster:p@ss";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RedisTestCluster> cluster, RedisTestCluster::Start(3, password));
  const std::string url = "redis-cluster://:cluster%3Ap%40ss@" + cluster->SeedList();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url));
  EXPECT_EQ(store->url(), "redis-cluster://" + cluster->SeedList());
  std::vector<std::string> names;
  for (int i = 0; i < 30; ++i) {
    names.push_back("auth-spread-" + std::to_string(i));
    ASSERT_OK(store->Put(names.back(), Bytes(40, static_cast<uint32_t>(i))));
  }
  for (size_t n = 0; n < cluster->size(); ++n) {
    ASSERT_OK_AND_ASSIGN(const std::string dbsize, cluster->node(n).Command({"DBSIZE"}));
    EXPECT_GT(std::stoull(dbsize), 0u) << "node " << n << " holds no keys";
  }
  const auto got = store->GetMany(names);
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(got[i].value(), Bytes(40, static_cast<uint32_t>(i))) << i;
  EXPECT_EQ(store->Stats().value().objects, names.size());
  // A slot moved to another node: the redirect's connection authenticates too.
  const int slot = RedisHashSlot(KeyOf(names[0]));
  ASSERT_OK(cluster->MoveSlot(slot, (cluster->OwnerOf(slot) + 1) % cluster->size()));
  EXPECT_EQ(store->Get(names[0]).value(), Bytes(40, 0));

  for (const std::string bad : {"redis-cluster://:wrong-cluster-pw@", "redis-cluster://"}) {
    const auto refused = OpenStore(bad + cluster->SeedList(), {.timeout_ms = 1000});
    EXPECT_EQ(refused.status().code(), StatusCode::kIoError) << bad;
    const std::string m = refused.status().message();
    EXPECT_TRUE(m.find("authentication failed") != std::string::npos ||
                m.find("requires authentication") != std::string::npos)
        << m;
    EXPECT_EQ(m.find("wrong-cluster-pw"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace kvc
