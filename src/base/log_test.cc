#include "base/log.h"

#include <gtest/gtest.h>

#include <string>

namespace kvc {
namespace {

// A throttled call site logs its first message, then at most one per interval, saying how many
// it left out; a message that is not logged costs no line.
TEST(Log, AThrottledCallSiteLogsOncePerIntervalAndCountsTheRest) {
  LogThrottle throttle(10);
  const SteadyClock::time_point t0{};
  uint64_t left_out = 99;
  EXPECT_TRUE(throttle.Admit(t0 + std::chrono::seconds(100), &left_out));
  EXPECT_EQ(left_out, 0u);
  EXPECT_FALSE(throttle.Admit(t0 + std::chrono::seconds(101), &left_out));
  EXPECT_FALSE(throttle.Admit(t0 + std::chrono::seconds(109), &left_out));
  EXPECT_TRUE(throttle.Admit(t0 + std::chrono::seconds(110), &left_out));
  EXPECT_EQ(left_out, 2u);
  EXPECT_TRUE(throttle.Admit(t0 + std::chrono::seconds(200), &left_out));
  EXPECT_EQ(left_out, 0u);

  const LogLevel was = GetLogLevel();
  SetLogLevel(LogLevel::kWarn);
  testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) KVC_LOG_WARN_EVERY(3600, "store down: %d", i);
  const std::string err = testing::internal::GetCapturedStderr();
  SetLogLevel(was);
  EXPECT_EQ(err, "kvcodec warn: store down: 0\n");
}

}  // namespace
}  // namespace kvc
