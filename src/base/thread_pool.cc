#include "base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>

namespace kvc {

ThreadPool::ThreadPool(size_t n_threads) {
  if (n_threads == 0) n_threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  // The caller also works in ParallelFor, so n - 1 workers give n-way parallelism.
  for (size_t i = 1; i < n_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (stopping_ && tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop();
    }
    task();
  }
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t)>& body) {
  if (n == 0) return;
  // Shared, not on this stack: a helper may wake up after every index is done and this call
  // has returned; it then only touches the state it co-owns.
  struct State {
    std::atomic<size_t> next{0};
    std::atomic<size_t> done{0};
    std::mutex mu;
    std::condition_variable cv;
  };
  auto state = std::make_shared<State>();
  const std::function<void(size_t)>* body_ptr = &body;
  auto drain = [state, body_ptr, n] {
    size_t i;
    while ((i = state->next.fetch_add(1)) < n) {
      (*body_ptr)(i);
      if (state->done.fetch_add(1) + 1 == n) {
        std::lock_guard<std::mutex> lock(state->mu);
        state->cv.notify_all();
      }
    }
  };
  const size_t helpers = std::min(workers_.size(), n - 1);
  if (helpers > 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t h = 0; h < helpers; ++h) tasks_.push(drain);
    }
    cv_.notify_all();
  }
  drain();
  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait(lock, [&] { return state->done.load() == n; });
}

void ThreadPool::Submit(std::function<void()> task) {
  if (workers_.empty()) {
    task();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push(std::move(task));
  }
  cv_.notify_one();
}

void ParallelForOrSerial(ThreadPool* pool, size_t n, const std::function<void(size_t)>& body) {
  if (pool != nullptr && n > 1) {
    pool->ParallelFor(n, body);
  } else {
    for (size_t i = 0; i < n; ++i) body(i);
  }
}

}  // namespace kvc
