#include <filesystem>

#include "store/disk_store.h"
#include "store/memory_store.h"
#include "store/store_contract.h"

namespace kvc {
namespace {

std::filesystem::path FreshDir(const std::string& tag) {
  static int n = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvc-store-test-" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(n++));
  std::filesystem::remove_all(dir);
  return dir;
}

INSTANTIATE_TEST_SUITE_P(
    Local, StoreContract,
    ::testing::Values(StoreFactory{"memory",
                                   [](uint64_t capacity) -> Result<std::unique_ptr<Store>> {
                                     return MakeMemoryStore({.capacity_bytes = capacity});
                                   }},
                      StoreFactory{"disk",
                                   [](uint64_t capacity) {
                                     return OpenDiskStore(FreshDir("contract").string(), {.capacity_bytes = capacity});
                                   }}),
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
