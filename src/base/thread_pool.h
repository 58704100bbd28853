// A fixed pool of worker threads for data-parallel loops (codec encode/decode over layers).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace kvc {

class ThreadPool {
 public:
  // n_threads == 0 means one per hardware thread. The calling thread counts as one of them
  // (ParallelFor runs on it too): n_threads - 1 workers are started.
  explicit ThreadPool(size_t n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size(); }

  // Runs body(i) for i in [0, n) across the pool and the calling thread; returns when all ran.
  void ParallelFor(size_t n, const std::function<void(size_t)>& body);

  // Runs `task` on a worker once one is free (after the tasks queued before it); a pool with no
  // workers runs it on the calling thread before returning. The caller must keep what the task
  // uses alive until it has run.
  void Submit(std::function<void()> task);

 private:
  void WorkerLoop();

  std::vector<std::thread> workers_;
  std::queue<std::function<void()>> tasks_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
};

// body(i) for i in [0, n): across `pool` when there is one (codecs take an optional pool from
// their CodecContext), else in order on the calling thread.
void ParallelForOrSerial(ThreadPool* pool, size_t n, const std::function<void(size_t)>& body);

}  // namespace kvc
