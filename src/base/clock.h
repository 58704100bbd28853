// Elapsed time in seconds on the steady clock, the clock every latency in kvcodec is timed with.
#pragma once

#include <chrono>

namespace kvc {

using SteadyClock = std::chrono::steady_clock;

inline double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace kvc
