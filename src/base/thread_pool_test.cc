#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace kvc {
namespace {

TEST(ThreadPool, EveryIndexRunsOnce) {
  ThreadPool pool(3);
  for (size_t n : {0u, 1u, 2u, 7u, 1000u}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, [&](size_t i) { hits[i].fetch_add(1); });
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, ManyShortLoopsInARow) {
  ThreadPool pool(2);
  std::atomic<long> sum{0};
  for (int round = 0; round < 500; ++round) pool.ParallelFor(3, [&](size_t i) { sum += static_cast<long>(i); });
  EXPECT_EQ(sum.load(), 500 * 3);
}

}  // namespace
}  // namespace kvc
