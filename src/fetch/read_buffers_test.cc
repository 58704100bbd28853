#include "fetch/read_buffers.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace kvc {
namespace {

TEST(ReadBuffers, WarmFillsTheSetWithMappedBuffersOfTheSizeAsked) {
  ReadBuffers buffers(3, 1 << 20);
  buffers.Warm(5, 4096);
  EXPECT_EQ(buffers.kept(), 3u);
  EXPECT_GE(buffers.kept_bytes(), 3u * 4096);
  const std::vector<uint8_t> b = buffers.Take();
  EXPECT_EQ(b.size(), 4096u);
  EXPECT_EQ(buffers.kept(), 2u);
}

TEST(ReadBuffers, WarmNeverExceedsTheLargestKeptSize) {
  ReadBuffers buffers(2, 1000);
  buffers.Warm(1, 1 << 20);
  EXPECT_EQ(buffers.Take().size(), 1000u);
  EXPECT_EQ(buffers.kept(), 0u) << "one was asked for";
}

TEST(ReadBuffers, AGivenBufferComesBackWithItsStorage) {
  ReadBuffers buffers(1, 1 << 20);
  std::vector<uint8_t> b(5000, 7);
  const uint8_t* storage = b.data();
  buffers.Give(std::move(b));
  std::vector<uint8_t> again = buffers.Take();
  EXPECT_EQ(again.data(), storage);
  EXPECT_TRUE(buffers.Take().empty()) << "one buffer was kept and it is taken";
}

TEST(ReadBuffers, KeepsNoMoreThanItsCountNorATooLargeBuffer) {
  ReadBuffers buffers(2, 100);
  buffers.Give(std::vector<uint8_t>(101));
  EXPECT_EQ(buffers.kept(), 0u);
  buffers.Give(std::vector<uint8_t>(10));
  buffers.Give(std::vector<uint8_t>(20));
  buffers.Give(std::vector<uint8_t>(30));
  EXPECT_EQ(buffers.kept(), 2u);
  buffers.Give(std::vector<uint8_t>());
  EXPECT_EQ(buffers.kept(), 2u);
}

TEST(ReadBuffers, TakesTheLargestFirst) {
  ReadBuffers buffers(3, 1 << 20);
  buffers.Give(std::vector<uint8_t>(10));
  buffers.Give(std::vector<uint8_t>(300));
  buffers.Give(std::vector<uint8_t>(20));
  EXPECT_GE(buffers.Take().capacity(), 300u);
  EXPECT_EQ(buffers.kept(), 2u);
}

// Fetch threads take, decoders give back, at once (run under TSan by scripts/test.sh).
TEST(ReadBuffers, ManyThreadsTakeAndGive) {
  ReadBuffers buffers(4, 1 << 16);
  buffers.Warm(2, 1024);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        std::vector<uint8_t> b = buffers.Take();
        b.resize(512 + i);
        b[0] = static_cast<uint8_t>(i);
        buffers.Give(std::move(b));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(buffers.kept(), 4u);
  EXPECT_GE(buffers.kept(), 1u);
}

}  // namespace
}  // namespace kvc
