#include "entropy/deflate.h"

#include <gtest/gtest.h>

#include <thread>

#include "entropy/entropy_test_data.h"

namespace kvc {
namespace {

TEST(Deflate, RoundTripsAtEveryLevel) {
  const std::vector<uint8_t> data = testing::LaplacianBytes(200000, 1.5, 1);
  for (int level = kMinDeflateLevel; level <= kMaxDeflateLevel; ++level) {
    auto c = DeflateCompress(data, level);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    if (level > 0) {
      EXPECT_LT(c->size(), data.size() / 2) << level;
    }
    std::vector<uint8_t> back(data.size());
    ASSERT_TRUE(DeflateDecompress(*c, back).ok()) << level;
    EXPECT_EQ(back, data);
  }
}

TEST(Deflate, EmptyInput) {
  auto c = DeflateCompress({}, 6);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(DeflateDecompress(*c, {}).ok());
}

TEST(Deflate, RejectsBadLevels) {
  const uint8_t b[] = {1};
  EXPECT_EQ(DeflateCompress(b, -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DeflateCompress(b, 13).status().code(), StatusCode::kInvalidArgument);
}

TEST(Deflate, SizeMismatchAndGarbageAreCorrupt) {
  const std::vector<uint8_t> data = testing::LaplacianBytes(5000, 1.5, 2);
  const std::vector<uint8_t> c = DeflateCompress(data, 6).value();
  std::vector<uint8_t> shorter(data.size() - 1);
  EXPECT_EQ(DeflateDecompress(c, shorter).code(), StatusCode::kCorrupt);
  std::vector<uint8_t> longer(data.size() + 1);
  EXPECT_EQ(DeflateDecompress(c, longer).code(), StatusCode::kCorrupt);

  std::vector<uint8_t> trailing = c;
  trailing.push_back(0);
  std::vector<uint8_t> out(data.size());
  EXPECT_EQ(DeflateDecompress(trailing, out).code(), StatusCode::kCorrupt);

  for (size_t n = 0; n < c.size(); n += 7) {
    const std::vector<uint8_t> cut(c.begin(), c.begin() + n);
    EXPECT_EQ(DeflateDecompress(cut, out).code(), StatusCode::kCorrupt) << n;
  }
  const std::vector<uint8_t> garbage = testing::UniformBytes(300, 3);
  EXPECT_EQ(DeflateDecompress(garbage, out).code(), StatusCode::kCorrupt);
}

TEST(Deflate, ThreadsUseTheirOwnState) {
  const std::vector<uint8_t> data = testing::PackedNibbles(100000, 1.0, 4);
  const std::vector<uint8_t> expected = DeflateCompress(data, 6).value();
  std::vector<std::thread> threads;
  threads.reserve(4);
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      bool good = true;
      for (int i = 0; i < 5; ++i) {
        auto c = DeflateCompress(data, 6);
        std::vector<uint8_t> back(data.size());
        good = good && c.ok() && *c == expected && DeflateDecompress(*c, back).ok() && back == data;
      }
      ok[t] = good;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(ok[t]) << t;
}

}  // namespace
}  // namespace kvc
