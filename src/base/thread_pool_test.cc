#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
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

namespace kvc {
namespace {

TEST(ThreadPool, SubmittedTasksRunOnWorkersAndAPoolOfOneRunsThemInline) {
  ThreadPool pool(3);
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::set<std::thread::id> threads;
  for (int i = 0; i < 16; ++i) {
    pool.Submit([&] {
      std::lock_guard lock(mu);
      threads.insert(std::this_thread::get_id());
      ++done;
      cv.notify_all();
    });
  }
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done == 16; });
    EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u) << "a submitted task ran on the caller";
  }
  ThreadPool inline_pool(1);
  bool ran = false;
  inline_pool.Submit([&] { ran = true; });
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace kvc
