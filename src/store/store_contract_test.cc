#include "store/store_contract.h"

#include <atomic>
#include <random>
#include <thread>

namespace kvc {
namespace {

std::unique_ptr<Store> Open(uint64_t capacity = 0) {
  auto s = StoreContract::GetParam().open(capacity);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST_P(StoreContract, PutGetExistsDelete) {
  auto store = Open();
  ASSERT_TRUE(store);
  const auto a = Bytes(1000, 1);
  EXPECT_EQ(store->Get("a1").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(store->Exists("a1").value());
  ASSERT_TRUE(store->Put("a1", a).ok());
  EXPECT_TRUE(store->Exists("a1").value());
  EXPECT_EQ(store->Get("a1").value(), a);
  // Replacing.
  const auto b = Bytes(10, 2);
  ASSERT_TRUE(store->Put("a1", b).ok());
  EXPECT_EQ(store->Get("a1").value(), b);
  // Empty objects are objects.
  ASSERT_TRUE(store->Put("empty", {}).ok());
  EXPECT_TRUE(store->Exists("empty").value());
  EXPECT_TRUE(store->Get("empty").value().empty());
  ASSERT_TRUE(store->Delete("a1").ok());
  EXPECT_FALSE(store->Exists("a1").value());
  EXPECT_EQ(store->Get("a1").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store->Delete("a1").ok()) << "deleting an absent object";
}

TEST_P(StoreContract, BatchedCallsKeepOrderAndReportMissingPerSlot) {
  auto store = Open();
  ASSERT_TRUE(store);
  std::vector<std::string> names;
  for (int i = 0; i < 20; ++i) {
    names.push_back("obj-" + std::to_string(i));
    if (i % 3 != 1) {
      ASSERT_TRUE(store->Put(names.back(), Bytes(100 + i, i)).ok());
    }
  }
  const auto got = store->GetMany(names);
  ASSERT_EQ(got.size(), names.size());
  const auto exists = store->ExistsMany(names).value();
  ASSERT_EQ(exists.size(), names.size());
  for (int i = 0; i < 20; ++i) {
    if (i % 3 == 1) {
      EXPECT_EQ(got[i].status().code(), StatusCode::kNotFound) << i;
      EXPECT_FALSE(exists[i]) << i;
    } else {
      ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
      EXPECT_EQ(*got[i], Bytes(100 + i, i)) << i;
      EXPECT_TRUE(exists[i]) << i;
    }
  }
  EXPECT_TRUE(store->GetMany({}).empty());
}

// Every read is bounded: an object larger than the bound is refused as corrupt, naming it and
// its size, without being read; one within it (the bound itself included) is read whole. Through
// OpenStore the bound is on the payload, the envelope aside.
TEST_P(StoreContract, AnObjectLargerThanTheReadsBoundIsCorrupt) {
  auto store = Open();
  ASSERT_TRUE(store);
  const auto a = Bytes(1000, 7);
  ASSERT_TRUE(store->Put("bounded", a).ok());
  EXPECT_EQ(store->Get("bounded", 1000).value(), a);
  EXPECT_EQ(store->Get("bounded", 1 << 20).value(), a);
  for (uint64_t bound : {uint64_t{999}, uint64_t{1}, uint64_t{0}}) {
    const Status over = store->Get("bounded", bound).status();
    EXPECT_EQ(over.code(), StatusCode::kCorrupt) << bound << ": " << over.ToString();
    EXPECT_NE(over.message().find("'bounded'"), std::string::npos) << over.ToString();
    EXPECT_NE(over.message().find("bytes, more than the"), std::string::npos) << over.ToString();
  }
  EXPECT_EQ(store->Get("absent", 0).status().code(), StatusCode::kNotFound) << "a missing object is missing";
  ASSERT_TRUE(store->Put("empty", {}).ok());
  EXPECT_TRUE(store->Get("empty", 0).value().empty()) << "an empty object fits any bound";

  ASSERT_TRUE(store->Put("small", Bytes(10, 8)).ok());
  const std::vector<std::string> names = {"bounded", "absent", "empty", "small"};
  const auto got = store->GetMany(names, 999);
  ASSERT_EQ(got.size(), names.size());
  EXPECT_EQ(got[0].status().code(), StatusCode::kCorrupt) << got[0].status().ToString();
  EXPECT_EQ(got[1].status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(got[2].value().empty());
  EXPECT_EQ(got[3].value(), Bytes(10, 8));
  EXPECT_EQ(store->GetMany(names, 1000)[0].value(), a);
  // A refused read leaves the object as it was.
  EXPECT_EQ(store->Get("bounded").value(), a);
  EXPECT_EQ(store->GetMany(names)[0].value(), a);
}

// GetInto reads what Get reads, into the caller's buffer; a dir:// store writes into the
// buffer's own storage when it is large enough (what the fetcher's reused buffers rely on).
TEST_P(StoreContract, GetIntoReadsWhatGetReadsIntoTheBuffer) {
  auto store = Open();
  ASSERT_TRUE(store);
  const auto a = Bytes(1000, 9);
  ASSERT_TRUE(store->Put("into", a).ok());
  std::vector<uint8_t> buffer(8192, 0xee);
  const uint8_t* storage = buffer.data();
  for (int read = 0; read < 2; ++read) {
    const auto got = store->GetInto("into", 1000, buffer);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(std::vector<uint8_t>(got->begin(), got->end()), a);
    EXPECT_TRUE(got->data() >= buffer.data() && got->data() + got->size() <= buffer.data() + buffer.size())
        << "the object lies in the buffer";
    if (GetParam().name.rfind("disk", 0) == 0) {
      EXPECT_EQ(buffer.data(), storage) << "its storage reused";
    }
  }
  EXPECT_EQ(store->GetInto("absent", 1000, buffer).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->GetInto("into", 999, buffer).status().code(), StatusCode::kCorrupt);
  ASSERT_TRUE(store->Put("empty", {}).ok());
  const auto empty = store->GetInto("empty", 0, buffer);
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->empty());
}

TEST_P(StoreContract, RejectsBadNames) {
  auto store = Open();
  ASSERT_TRUE(store);
  for (const char* bad : {"", "a/b", "../x", ".hidden", "sp ace", "a:b"}) {
    EXPECT_EQ(store->Put(bad, Bytes(3, 3)).code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(store->Get(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(store->Put(std::string(201, 'a'), Bytes(3, 3)).code(), StatusCode::kInvalidArgument);
}

TEST_P(StoreContract, CountsCompressedBytes) {
  auto store = Open();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->Put("x", Bytes(3000, 4)).ok());
  ASSERT_TRUE(store->Put("y", Bytes(500, 5)).ok());
  const StoreStats s = store->Stats().value();
  EXPECT_EQ(s.objects, 2u);
  const auto& stored = GetParam().stored_bytes;
  EXPECT_EQ(s.bytes, stored ? stored("x", 3000) + stored("y", 500) : 3500u);
}

// Past the bound the least recently used objects go; a read makes an object recent.
TEST_P(StoreContract, EvictsLeastRecentlyUsedPastTheBound) {
  if (!GetParam().bounded) GTEST_SKIP() << GetParam().name << " leaves eviction to the server";
  auto store = Open(10'000);
  ASSERT_TRUE(store);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(store->Put("e" + std::to_string(i), Bytes(2000, i)).ok());
    // Distinct use times even on file systems with coarse timestamps.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(store->Get("e0").ok());  // e0 is now the most recent
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(store->Put("e4", Bytes(4000, 9)).ok());  // 12,000 bytes > 10,000
  const StoreStats s = store->Stats().value();
  EXPECT_LE(s.bytes, 10'000u);
  EXPECT_GE(s.evictions, 1u);
  EXPECT_TRUE(store->Exists("e0").value()) << "recently read object evicted";
  EXPECT_TRUE(store->Exists("e4").value()) << "newest object evicted";
  EXPECT_FALSE(store->Exists("e1").value()) << "least recently used object kept";
  EXPECT_EQ(store->Put("huge", Bytes(20'000, 1)).code(), StatusCode::kInvalidArgument);
}

TEST_P(StoreContract, ConcurrentWritersAndReadersSeeWholeObjects) {
  auto store = Open();
  ASSERT_TRUE(store);
  // Each name is only ever written with one of two complete payloads.
  auto payload = [](int name, int version) { return Bytes(4096 + name, static_cast<uint32_t>(name * 2 + version)); };
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const int name = i % 5;
        const std::string n = "c" + std::to_string(name);
        if ((i + t) % 2 == 0) {
          if (!store->Put(n, payload(name, (i / 5 + t) % 2)).ok()) {
            ++bad;
          }
        } else if (auto got = store->Get(n); got.ok()) {
          if (*got != payload(name, 0) && *got != payload(name, 1)) ++bad;
        } else if (got.status().code() != StatusCode::kNotFound) {
          ++bad;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace kvc
