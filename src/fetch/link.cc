#include "fetch/link.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace kvc {

void LinkShaper::SetRate(double bytes_per_second) {
  std::lock_guard lock(mu_);
  rate_ = bytes_per_second;
}

double LinkShaper::rate() const {
  std::lock_guard lock(mu_);
  return rate_;
}

SteadyClock::time_point LinkShaper::Acquire(uint64_t bytes) {
  SteadyClock::time_point done;
  {
    std::lock_guard lock(mu_);
    const auto now = SteadyClock::now();
    if (rate_ <= 0) return now;
    const auto duration = std::chrono::duration_cast<SteadyClock::duration>(
        std::chrono::duration<double>(static_cast<double>(bytes) / rate_));
    busy_until_ = std::max(busy_until_, now) + duration;
    done = busy_until_;
  }
  std::this_thread::sleep_until(done);
  return done;
}

void BandwidthEstimator::Add(uint64_t bytes, SteadyClock::time_point start, SteadyClock::time_point end) {
  std::lock_guard lock(mu_);
  recent_.push_back({bytes, start, end});
  while (recent_.size() > window_) recent_.pop_front();
}

double BandwidthEstimator::BytesPerSecond() const {
  std::lock_guard lock(mu_);
  if (recent_.empty()) return prior_;
  std::vector<Transfer> sorted(recent_.begin(), recent_.end());
  std::sort(sorted.begin(), sorted.end(), [](const Transfer& a, const Transfer& b) { return a.start < b.start; });
  uint64_t bytes = 0;
  double busy_s = 0;
  auto run_start = sorted.front().start;
  auto run_end = sorted.front().end;
  for (const Transfer& t : sorted) {
    bytes += t.bytes;
    if (t.start > run_end) {
      busy_s += std::chrono::duration<double>(run_end - run_start).count();
      run_start = t.start;
    }
    run_end = std::max(run_end, t.end);
  }
  busy_s += std::chrono::duration<double>(run_end - run_start).count();
  // A transfer too fast to time is an uncapped link: report it as very fast, not infinite.
  return busy_s > 1e-6 ? static_cast<double>(bytes) / busy_s : static_cast<double>(bytes) * 1e6;
}

}  // namespace kvc
