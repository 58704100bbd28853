#include "store/reconnecting_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "base/clock.h"
#include "store/memory_store.h"

namespace kvc {
namespace {

using namespace std::chrono_literals;

// A backend in memory whose reads or writes fail with an I/O error on demand (a Redis that is
// killed, or full), counting the calls that reach it.
class FlakyStore final : public Store {
 public:
  std::atomic<bool> reads_fail{false}, writes_fail{false};
  std::atomic<int> calls{0};

  std::string url() const override { return "flaky://"; }
  Status Put(std::string_view name, std::span<const uint8_t> bytes) override {
    ++calls;
    return writes_fail ? IoError("flaky: write refused") : inner_->Put(name, bytes);
  }
  using Store::Get;
  Result<std::vector<uint8_t>> Get(std::string_view name, uint64_t max_bytes) override {
    ++calls;
    if (reads_fail) return IoError("flaky: connection refused");
    return inner_->Get(name, max_bytes);
  }
  Result<bool> Exists(std::string_view name) override {
    ++calls;
    if (reads_fail) return IoError("flaky: connection refused");
    return inner_->Exists(name);
  }
  Status Delete(std::string_view name) override { return inner_->Delete(name); }
  Result<StoreStats> Stats() override {
    ++calls;
    if (reads_fail) return IoError("flaky: connection refused");
    return inner_->Stats();
  }

 private:
  std::unique_ptr<Store> inner_ = MakeMemoryStore({});
};

// Short waits, so that the tests see several retries in well under a second of waiting.
ReconnectOptions Fast() {
  ReconnectOptions o;
  o.first_retry = 20ms;
  o.max_retry = 80ms;
  return o;
}

// Waits (up to 20 s: the machine may be busy) until the store's state is `up`.
bool WaitUntil(const ReconnectingStore& store, bool up) {
  const auto start = SteadyClock::now();
  while (store.health().up != up) {
    if (SecondsSince(start) > 20) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

const std::vector<uint8_t> kBytes = {1, 2, 3};

TEST(ReconnectingStore, AMalformedUrlIsStillAnError) {
  auto store = ReconnectingStore::Open("nope://x", {});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
}

// A backend that cannot be opened leaves the store down, not the caller without one: calls fail
// at once with kIoError, and it is opened in the background when it can be.
TEST(ReconnectingStore, OpensWhenTheBackendComesUp) {
  std::atomic<int> attempts{0};
  std::atomic<bool> reachable{false};
  ReconnectOptions o = Fast();
  o.open = [&]() -> Result<std::unique_ptr<Store>> {
    ++attempts;
    if (!reachable) return IoError("redis 127.0.0.1:1: cannot connect: Connection refused");
    return MakeMemoryStore({});
  };
  auto opened = ReconnectingStore::Open("redis://127.0.0.1:1", {}, o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ReconnectingStore& store = **opened;
  StoreHealth h = store.health();
  EXPECT_FALSE(h.up);
  EXPECT_NE(h.last_error.find("Connection refused"), std::string::npos) << h.last_error;
  EXPECT_GE(h.consecutive_failures, 1u);
  EXPECT_EQ(h.url, "redis://127.0.0.1:1");
  const Status put = store.Put("a", kBytes);
  EXPECT_EQ(put.code(), StatusCode::kIoError);
  EXPECT_NE(put.message().find("down"), std::string::npos) << put.ToString();
  EXPECT_EQ(store.Get("a").status().code(), StatusCode::kIoError);
  const std::string names[] = {"a", "b"};
  for (const auto& r : store.GetMany(names)) EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  // It keeps trying, waiting longer each time.
  while (attempts < 3) std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(store.health().up);
  reachable = true;
  ASSERT_TRUE(WaitUntil(store, true));
  h = store.health();
  EXPECT_EQ(h.reconnects, 1u);
  EXPECT_EQ(h.consecutive_failures, 0u);
  EXPECT_GE(h.errors, 3u);
  ASSERT_TRUE(store.Put("a", kBytes).ok());
  EXPECT_EQ(store.Get("a").value(), kBytes);
}

// An opened backend whose reads fail takes the store down: calls no longer reach it (each would
// wait for its own timeout) until a background probe finds it answering again.
TEST(ReconnectingStore, ReadErrorsTakeItDownUntilItAnswers) {
  auto* flaky = new FlakyStore;
  ReconnectOptions o = Fast();
  o.open = [flaky, taken = false]() mutable -> Result<std::unique_ptr<Store>> {
    if (taken) return Internal("opened twice");
    taken = true;
    return std::unique_ptr<Store>(flaky);
  };
  auto opened = ReconnectingStore::Open("flaky://", {}, o);
  ASSERT_TRUE(opened.ok());
  ReconnectingStore& store = **opened;
  ASSERT_TRUE(store.health().up);
  ASSERT_TRUE(store.Put("a", kBytes).ok());

  flaky->reads_fail = true;
  EXPECT_EQ(store.Get("a").status().code(), StatusCode::kIoError);
  StoreHealth h = store.health();
  EXPECT_FALSE(h.up);
  EXPECT_NE(h.last_error.find("connection refused"), std::string::npos) << h.last_error;
  const int calls = flaky->calls;
  for (int i = 0; i < 100; ++i) EXPECT_EQ(store.Exists("a").status().code(), StatusCode::kIoError);
  // Only the background probes reach the backend meanwhile, a few at most.
  EXPECT_LT(flaky->calls - calls, 50);

  flaky->reads_fail = false;
  ASSERT_TRUE(WaitUntil(store, true));
  EXPECT_EQ(store.Get("a").value(), kBytes);
  EXPECT_EQ(store.health().reconnects, 1u);
}

// A write refused alone (a full disk, a Redis at maxmemory) is that write's error: reads go on.
TEST(ReconnectingStore, WriteErrorsAloneKeepItUp) {
  auto* flaky = new FlakyStore;
  ReconnectOptions o = Fast();
  o.open = [flaky]() -> Result<std::unique_ptr<Store>> { return std::unique_ptr<Store>(flaky); };
  auto opened = ReconnectingStore::Open("flaky://", {}, o);
  ASSERT_TRUE(opened.ok());
  ReconnectingStore& store = **opened;
  ASSERT_TRUE(store.Put("a", kBytes).ok());
  flaky->writes_fail = true;
  EXPECT_EQ(store.Put("b", kBytes).code(), StatusCode::kIoError);
  const StoreHealth h = store.health();
  EXPECT_TRUE(h.up);
  EXPECT_EQ(h.errors, 1u);
  EXPECT_EQ(store.Get("a").value(), kBytes);
  EXPECT_EQ(store.Get("b").status().code(), StatusCode::kNotFound);
}

// The real thing: nothing listens on port 1. The password never shows.
TEST(ReconnectingStore, RedisThatIsDownStartsDownWithoutThePassword) {
  auto opened = ReconnectingStore::Open("redis://kvc:hunter2@127.0.0.1:1", {}, Fast());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const StoreHealth h = (*opened)->health();
  EXPECT_FALSE(h.up);
  EXPECT_FALSE(h.last_error.empty());
  EXPECT_EQ(h.url.find("hunter2"), std::string::npos) << h.url;
  EXPECT_EQ(h.last_error.find("hunter2"), std::string::npos) << h.last_error;
  const Status put = (*opened)->Put("a", kBytes);
  EXPECT_EQ(put.code(), StatusCode::kIoError);
  EXPECT_EQ(put.message().find("hunter2"), std::string::npos) << put.ToString();
}

}  // namespace
}  // namespace kvc
