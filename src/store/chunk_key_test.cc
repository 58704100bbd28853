#include "store/chunk_key.h"

#include <gtest/gtest.h>

#include "store/store.h"

namespace kvc {
namespace {

constexpr ModelFingerprint kModelA{1, 2, 3};
constexpr ModelFingerprint kModelB{1, 2, 4};

std::vector<int32_t> Tokens(size_t n, int32_t seed) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7919 + seed) % 32000);
  return t;
}

TEST(ChunkKeys, OnlyWholeChunksHaveKeys) {
  EXPECT_EQ(ChunkKeys(kModelA, Tokens(255, 0)).size(), 0u);
  EXPECT_EQ(ChunkKeys(kModelA, Tokens(256, 0)).size(), 1u);
  EXPECT_EQ(ChunkKeys(kModelA, Tokens(1000, 0)).size(), 3u);
  EXPECT_EQ(ChunkKeys(kModelA, Tokens(100, 0), 10).size(), 10u);
  EXPECT_TRUE(ChunkKeys(kModelA, Tokens(100, 0), 0).empty());
}

// A key names the whole prefix: equal prefixes give equal keys, and a change anywhere earlier
// changes every later key.
TEST(ChunkKeys, ChainedOverThePrefix) {
  const auto a = Tokens(1024, 0);
  auto b = a;
  b[700] += 1;  // in chunk 2
  const auto ka = ChunkKeys(kModelA, a);
  const auto kb = ChunkKeys(kModelA, b);
  EXPECT_EQ(ka[0], kb[0]);
  EXPECT_EQ(ka[1], kb[1]);
  EXPECT_NE(ka[2], kb[2]);
  EXPECT_NE(ka[3], kb[3]);
  // A longer prompt with the same start shares the start's keys.
  auto longer = a;
  longer.resize(1300, 5);
  const auto kl = ChunkKeys(kModelA, longer);
  ASSERT_EQ(kl.size(), 5u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(kl[i], ka[i]);
  // Another model, another chunk size: other keys.
  EXPECT_NE(ChunkKeys(kModelB, a)[0], ka[0]);
  EXPECT_NE(ChunkKeys(kModelA, a, 128)[1], ka[0]);
}

// Fixed bytes in, fixed key out: the same on every machine and in every process (a change here
// orphans every stored chunk, so it must be deliberate). The value is xxh128sum (Debian's xxhash
// CLI) of the bytes docs/format.md lays out: "kvcodec-chunk-v1", the 16 fingerprint bytes,
// u32 4, then int32 -1, 0, 1, 2, all little-endian.
TEST(ChunkKeys, PinnedValue) {
  std::vector<int32_t> t(4);
  for (int32_t i = 0; i < 4; ++i) t[i] = i - 1;  // includes a negative id
  const auto keys = ChunkKeys(kModelA, t, 4);
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(HexString(keys[0]), "af6fed72bf2b2853eb554e55c7763fe6");
}

TEST(ChunkKeys, ObjectNamesAreValidStoreNames) {
  const auto key = ChunkKeys(kModelA, Tokens(256, 1))[0];
  const std::string name = ChunkObjectName(key, "kvtc", "16");
  EXPECT_EQ(name, HexString(key) + ".kvtc.16");
  EXPECT_TRUE(CheckObjectName(name).ok());
  EXPECT_TRUE(CheckObjectName(ChunkManifestName(key)).ok());
  EXPECT_EQ(ChunkManifestName(key), HexString(key) + ".manifest");
}

}  // namespace
}  // namespace kvc

#include <sys/wait.h>
#include <unistd.h>

namespace kvc {
namespace {

// Another process (fresh address space, no shared state) computes the same keys.
TEST(ChunkKeys, SameInAnotherProcess) {
  const auto tokens = Tokens(1024, 7);
  const auto here = ChunkKeys(kModelA, tokens);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    const auto there = ChunkKeys(kModelA, tokens);
    for (const ChunkKey& k : there) {
      if (::write(fds[1], k.data(), k.size()) != static_cast<ssize_t>(k.size())) ::_exit(2);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::vector<ChunkKey> there(here.size());
  size_t got = 0;
  for (ChunkKey& k : there) {
    ssize_t n = 0;
    size_t at = 0;
    while (at < k.size() && (n = ::read(fds[0], k.data() + at, k.size() - at)) > 0) at += static_cast<size_t>(n);
    got += at == k.size();
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(got, here.size());
  EXPECT_EQ(there, here);
}

}  // namespace
}  // namespace kvc
