// The network as the fetcher sees it: a link-rate cap that emulates a slower network inside the
// process (a token bucket every transfer passes through, so concurrent transfers share the rate
// as they would share a link), and an estimate of the bandwidth recent transfers achieved.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>

#include "base/clock.h"

namespace kvc {

// Transfers are served first come, first served at `bytes_per_second`: Acquire(n) returns when
// the link would have delivered n more bytes after everything acquired before. Rate 0 is an
// uncapped link. Thread-safe; the rate may change at any time (it applies to later Acquires).
class LinkShaper {
 public:
  explicit LinkShaper(double bytes_per_second = 0) : rate_(bytes_per_second) {}
  static double GbpsToBytesPerSecond(double gbps) { return gbps * 1e9 / 8; }

  void SetRate(double bytes_per_second);
  double rate() const;
  // Blocks until `bytes` have crossed the link; returns when they did.
  SteadyClock::time_point Acquire(uint64_t bytes);

 private:
  mutable std::mutex mu_;
  double rate_;
  SteadyClock::time_point busy_until_{};
};

// Bandwidth over the last few completed transfers: their bytes over the time the link was busy
// with them (the union of their intervals), so transfers that overlapped count as one stream
// (what the link delivered, not each one's share) and idle time between transfers (a fetcher
// waiting for its decoders) does not count as a slow link.
class BandwidthEstimator {
 public:
  explicit BandwidthEstimator(double prior_bytes_per_second, size_t window = 2)
      : prior_(prior_bytes_per_second), window_(window) {}
  void Add(uint64_t bytes, SteadyClock::time_point start, SteadyClock::time_point end);
  // The prior until a transfer completes.
  double BytesPerSecond() const;

 private:
  struct Transfer {
    uint64_t bytes;
    SteadyClock::time_point start, end;
  };
  mutable std::mutex mu_;
  double prior_;
  size_t window_;
  std::deque<Transfer> recent_;
};

}  // namespace kvc
