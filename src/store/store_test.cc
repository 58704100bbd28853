#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "store/disk_store.h"
#include "store/memory_store.h"
#include "store/store_contract.h"
#include "store/stored_object.h"

namespace kvc {
namespace {

std::filesystem::path FreshDir(const std::string& tag) {
  static int n = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvc-store-test-" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(n++));
  std::filesystem::remove_all(dir);
  return dir;
}

uint64_t CrcSealed(std::string_view name, uint64_t payload) {
  return payload + StoredObjectOverhead(name, ObjectSeal::kCrc32c);
}
uint64_t HmacSealed(std::string_view name, uint64_t payload) {
  return payload + StoredObjectOverhead(name, ObjectSeal::kHmacSha256);
}

// The bare backends, and each as OpenStore gives it (bound, with and without a secret).
INSTANTIATE_TEST_SUITE_P(
    Local, StoreContract,
    ::testing::Values(StoreFactory{"memory",
                                   [](uint64_t capacity) -> Result<std::unique_ptr<Store>> {
                                     return MakeMemoryStore({.capacity_bytes = capacity});
                                   }},
                      StoreFactory{"disk",
                                   [](uint64_t capacity) {
                                     return OpenDiskStore(FreshDir("contract").string(), {.capacity_bytes = capacity});
                                   }},
                      StoreFactory{"memory_bound",
                                   [](uint64_t capacity) { return OpenStore("mem://", {.capacity_bytes = capacity}); },
                                   true, CrcSealed},
                      StoreFactory{"disk_bound",
                                   [](uint64_t capacity) {
                                     return OpenStore("dir://" + FreshDir("contract").string(),
                                                      {.capacity_bytes = capacity});
                                   },
                                   true, CrcSealed},
                      StoreFactory{"memory_bound_secret",
                                   [](uint64_t capacity) {
                                     return OpenStore("mem://", {.capacity_bytes = capacity, .secret = "s3cret"});
                                   },
                                   true, HmacSealed},
                      StoreFactory{"disk_bound_secret",
                                   [](uint64_t capacity) {
                                     return OpenStore("dir://" + FreshDir("contract").string(),
                                                      {.capacity_bytes = capacity, .secret = "s3cret"});
                                   },
                                   true, HmacSealed}),
    StoreFactoryName);

TEST(OpenStore, UrlsPickBackends) {
  EXPECT_EQ(OpenStore("mem://").value()->url(), "mem://");
  const auto dir = FreshDir("url");
  EXPECT_EQ(OpenStore("dir://" + dir.string()).value()->url(), "dir://" + dir.string());
  for (const char* bad : {"", "mem://x", "dir://relative/path", "dir://", "ftp://host", "redis://", "redis-cluster://",
                          "redis-cluster://a:1,", "redis-cluster://,a:1"}) {
    EXPECT_EQ(OpenStore(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(OpenStore, DefaultUrlFollowsEnvironment) {
  ::setenv("KVCODEC_STORE", "/tmp/somewhere", 1);
  EXPECT_EQ(DefaultStoreUrl(), "dir:///tmp/somewhere");
  ::unsetenv("KVCODEC_STORE");
  EXPECT_EQ(DefaultStoreUrl().rfind("dir:///", 0), 0u);
}

TEST(DiskStore, ObjectsSurviveReopenAndSecondInstancesShareThem) {
  const auto dir = FreshDir("reopen");
  {
    auto a = OpenDiskStore(dir.string(), {}).value();
    ASSERT_TRUE(a->Put("k", std::vector<uint8_t>{1, 2, 3}).ok());
  }
  auto b = OpenDiskStore(dir.string(), {}).value();
  auto c = OpenDiskStore(dir.string(), {}).value();
  EXPECT_EQ(b->Get("k").value(), (std::vector<uint8_t>{1, 2, 3}));
  ASSERT_TRUE(c->Put("k2", std::vector<uint8_t>{4}).ok());
  EXPECT_TRUE(b->Exists("k2").value());
}

TEST(DiskStore, UnwritableFolderIsAnIoError) {
  EXPECT_EQ(OpenDiskStore("/proc/kvc-cannot-exist", {}).status().code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

// Payload i of the crash test: its length and bytes derive from its name, so a reader can tell
// a whole object from a torn one.
std::vector<uint8_t> CrashPayload(int i) {
  std::vector<uint8_t> b(200'000 + 7919 * (i % 13));
  for (size_t k = 0; k < b.size(); ++k) b[k] = static_cast<uint8_t>((k * 31 + i) & 0xff);
  return b;
}

// A writer process killed at random moments (SIGKILL, no chance to clean up) leaves only whole
// objects behind: every object a later reader can see has exactly the bytes that were put.
TEST(DiskStore, KillDuringWritesLeavesNoPartialObject) {
  const auto dir = FreshDir("crash");
  for (int round = 0; round < 6; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto store = OpenDiskStore(dir.string(), {});
      if (!store.ok()) ::_exit(2);
      for (int i = 0;; ++i) (void)(*store)->Put("obj-" + std::to_string(i % 40), CrashPayload(i % 40));
    }
    ::usleep(static_cast<useconds_t>(20'000 + 13'000 * round));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer must have been killed mid-run";
  }
  auto store = OpenDiskStore(dir.string(), {}).value();
  int seen = 0;
  for (int i = 0; i < 40; ++i) {
    auto got = store->Get("obj-" + std::to_string(i));
    if (!got.ok()) {
      EXPECT_EQ(got.status().code(), StatusCode::kNotFound) << got.status().ToString();
      continue;
    }
    ++seen;
    EXPECT_EQ(*got, CrashPayload(i)) << "obj-" << i << " is torn";
  }
  EXPECT_GT(seen, 0);
  // Stats count objects only, never the killed writer's temp files.
  EXPECT_EQ(store->Stats().value().objects, static_cast<uint64_t>(seen));
}

}  // namespace
}  // namespace kvc
