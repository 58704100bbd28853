// The benchmarks' one timing loop: a round of work repeated until min_seconds of wall time have
// passed (at least once), as rounds per second of wall time and per second of this process's CPU
// time (all its threads): on a machine other work shares, the CPU figure says what the work costs,
// which wall time cannot tell.
#pragma once

#include <cstdint>
#include <ctime>

#include "base/clock.h"
#include "base/status.h"

namespace kvc {

struct RoundRate {
  double per_s = 0;
  double per_cpu_s = 0;
};

template <typename Round>
Result<RoundRate> MeasureRounds(double min_seconds, Round&& round) {
  const auto start = SteadyClock::now();
  const std::clock_t cpu_start = std::clock();
  uint64_t rounds = 0;
  double elapsed = 0;
  do {
    RETURN_IF_ERROR(round());
    ++rounds;
    elapsed = SecondsSince(start);
  } while (elapsed < min_seconds);
  const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  RoundRate rate;
  rate.per_s = elapsed > 0 ? static_cast<double>(rounds) / elapsed : 0;
  rate.per_cpu_s = cpu > 0 ? static_cast<double>(rounds) / cpu : 0;
  return rate;
}

}  // namespace kvc
