#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <string_view>

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

// Where a dir:// store keeps `name` (found, not computed: the layout is the store's business).
std::filesystem::path ObjectFile(const std::filesystem::path& root, const std::string& name) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(root / "objects")) {
    if (e.path().filename() == name) return e.path();
  }
  return {};
}

// "" when `got` is a kCorrupt whose message holds every one of `says`, else what it is.
template <class T>
std::string ExpectCorrupt(const Result<T>& got, std::initializer_list<std::string_view> says) {
  if (got.ok()) return "read as an object; ";
  if (got.status().code() != StatusCode::kCorrupt) return got.status().ToString() + " (expected kCorrupt); ";
  for (std::string_view s : says) {
    if (got.status().message().find(s) == std::string::npos) {
      return got.status().ToString() + " (does not say '" + std::string(s) + "'); ";
    }
  }
  return "";
}

// A chunk object made 20 GiB long (sparse: no disk used) is refused on its size, before anything
// is allocated: under an address-space limit far below 20 GiB the read is a clean kCorrupt, and
// with a bound above its size the failed allocation is a clean error too, never an exception.
// Before, Get allocated the whole file: std::bad_alloc escaped (and took `run` down).
TEST(DiskStore, AHugeObjectIsRefusedOnItsSizeUnderAMemoryLimit) {
  const auto dir = FreshDir("huge");
  const std::string name = "00000000000000000000000000000001.raw.fp16";
  {
    auto store = OpenStore("dir://" + dir.string()).value();
    ASSERT_TRUE(store->Put(name, Bytes(1000, 1)).ok());
  }
  const auto file = ObjectFile(dir, name);
  ASSERT_FALSE(file.empty());
  std::filesystem::resize_file(file, uint64_t{20} << 30);
  const std::string said = RunInChild(
      [&] {
        std::string failures;
        auto store = OpenStore("dir://" + dir.string());
        if (!store.ok()) return "open: " + store.status().ToString();
        // The default bound, a manifest's bound, and a batch.
        failures += ExpectCorrupt((*store)->Get(name), {name, "21474836480 bytes, more than"});
        failures += ExpectCorrupt((*store)->Get(name, 1000), {name, "more than"});
        const std::vector<std::string> names = {name};
        failures += ExpectCorrupt((*store)->GetMany(names, 1000)[0], {name, "more than"});
        if (kAllocationsCanFail) {
          // Allowed, but more than the process may map: an error, not an exception.
          const Result<std::vector<uint8_t>> big = (*store)->Get(name, uint64_t{21} << 30);
          if (big.ok() || big.status().message().find("out of memory") == std::string::npos) {
            failures += "a 20 GiB read under a 1 GiB limit: " + (big.ok() ? "ok" : big.status().ToString()) + "; ";
          }
        }
        // The store still works, and counts the object at its size.
        if (!(*store)->Put("next", Bytes(10, 2)).ok()) failures += "put after; ";
        return failures;
      },
      {.alarm_s = 60, .address_space_headroom = uint64_t{1} << 30});
  EXPECT_EQ(said, "");
  std::filesystem::remove_all(dir);
}

// A FIFO where an object or a manifest should be (anyone with write access to the folder can
// make one) is refused at once: before, the open blocked until a writer came, for ever. Every
// other call on the name returns too, and a Put replaces it. In a child under alarm(), so that a
// regression fails instead of hanging the suite.
TEST(DiskStore, AFifoOrADirectoryUnderAnObjectsNameIsRefusedAtOnce) {
  const auto dir = FreshDir("fifo");
  const std::vector<std::string> names = {"00000000000000000000000000000002.quant.8",
                                          "00000000000000000000000000000002.manifest"};
  for (const bool bound : {false, true}) {
    SCOPED_TRACE(bound ? "through OpenStore" : "the bare backend");
    std::filesystem::remove_all(dir);
    auto store = (bound ? OpenStore("dir://" + dir.string()) : OpenBackendStore("dir://" + dir.string())).value();
    for (const std::string& name : names) {
      ASSERT_TRUE(store->Put(name, Bytes(100, 3)).ok());
      const auto file = ObjectFile(dir, name);
      ASSERT_FALSE(file.empty());
      std::filesystem::remove(file);
      ASSERT_EQ(::mkfifo(file.c_str(), 0644), 0) << std::strerror(errno);
    }
    ASSERT_TRUE(store->Put("00000000000000000000000000000003.quant.8", Bytes(100, 4)).ok());
    const auto dir_object = ObjectFile(dir, "00000000000000000000000000000003.quant.8");
    std::filesystem::remove(dir_object);
    std::filesystem::create_directory(dir_object);
    const std::string said = RunInChild(
        [&] {
          std::string failures;
          for (const std::string& name : names) {
            failures += ExpectCorrupt(store->Get(name), {name, "a FIFO, not a regular file"});
            failures += ExpectCorrupt(store->Get(name, 200), {name, "a FIFO"});
          }
          // A batch, as the lookup of a prompt's manifests reads them.
          for (const auto& got : store->GetMany(names, 10'000)) failures += ExpectCorrupt(got, {"a FIFO"});
          failures += ExpectCorrupt(store->Get("00000000000000000000000000000003.quant.8"), {"a directory"});
          // Looking and counting open nothing.
          const Result<bool> exists = store->Exists(names[0]);
          if (!exists.ok() || !*exists) failures += "exists; ";
          if (!store->Stats().ok()) failures += "stats: " + store->Stats().status().ToString() + "; ";
          // A new object replaces the FIFO, and deleting one removes it.
          if (!store->Put(names[0], Bytes(50, 5)).ok()) failures += "put over the FIFO; ";
          const Result<std::vector<uint8_t>> replaced = store->Get(names[0]);
          if (!replaced.ok() || *replaced != Bytes(50, 5)) failures += "get after put; ";
          const Result<bool> deleted = store->Delete(names[1]).ok() ? store->Exists(names[1]) : Result<bool>(true);
          if (!deleted.ok() || *deleted) failures += "delete; ";
          return failures;
        },
        {.alarm_s = 20});
    EXPECT_EQ(said, "");
  }
  std::filesystem::remove_all(dir);
}

// Neither opening a store nor evicting from it opens what lies in its folder: a FIFO in place of
// an object, or of the lock file, blocks neither.
TEST(DiskStore, FifosInTheFolderBlockNeitherOpeningNorEvicting) {
  const auto dir = FreshDir("fifo-evict");
  {
    auto store = OpenDiskStore(dir.string(), {.capacity_bytes = 10'000}).value();
    ASSERT_TRUE(store->Put("victim", Bytes(100, 1)).ok());
    const auto file = ObjectFile(dir, "victim");
    std::filesystem::remove(file);
    ASSERT_EQ(::mkfifo(file.c_str(), 0644), 0) << std::strerror(errno);
  }
  std::filesystem::remove(dir / "lock");
  ASSERT_EQ(::mkfifo((dir / "lock").c_str(), 0644), 0) << std::strerror(errno);
  const std::string said = RunInChild(
      [&] {
        auto store = OpenDiskStore(dir.string(), {.capacity_bytes = 10'000});
        if (!store.ok()) return "open: " + store.status().ToString();
        std::string failures;
        // Past the capacity: eviction runs, under the lock.
        for (int i = 0; i < 8; ++i) {
          const Status put = (*store)->Put("obj-" + std::to_string(i), Bytes(2000, i));
          if (!put.ok()) failures += "put: " + put.ToString() + "; ";
        }
        if (!(*store)->Stats().ok()) failures += "stats; ";
        return failures;
      },
      {.alarm_s = 20});
  EXPECT_EQ(said, "");
  std::filesystem::remove_all(dir);
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
