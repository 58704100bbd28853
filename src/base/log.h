// Minimal leveled logging to stderr, one line per message (control characters escaped as by
// PrintableOneLine, base/utf8.h). KVCODEC_LOG=debug|info|warn|error sets the threshold.
#pragma once

#include <cstdint>
#include <mutex>

#include "base/clock.h"

namespace kvc {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// One call site's messages at most once per interval. What fails on every request while a
// condition lasts (a store that is down: serve logs that once itself) would otherwise fill the
// log with one line per request; the line that is logged says how many were left out.
class LogThrottle {
 public:
  explicit LogThrottle(double interval_s) : interval_(std::chrono::duration<double>(interval_s)) {}
  // True when a message at `now` is to be logged; then `*left_out` is how many were not, since
  // the last one logged.
  bool Admit(SteadyClock::time_point now, uint64_t* left_out);

 private:
  std::mutex mu_;
  const std::chrono::duration<double> interval_;
  bool logged_any_ = false;
  SteadyClock::time_point last_{};
  uint64_t left_out_ = 0;
};
void LogThrottled(LogThrottle& throttle, LogLevel level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

}  // namespace kvc

#define KVC_LOG_DEBUG(...) ::kvc::Log(::kvc::LogLevel::kDebug, __VA_ARGS__)
#define KVC_LOG_INFO(...) ::kvc::Log(::kvc::LogLevel::kInfo, __VA_ARGS__)
#define KVC_LOG_WARN(...) ::kvc::Log(::kvc::LogLevel::kWarn, __VA_ARGS__)
#define KVC_LOG_ERROR(...) ::kvc::Log(::kvc::LogLevel::kError, __VA_ARGS__)
// A warning logged at most once per `seconds` from this call site (LogThrottle).
#define KVC_LOG_WARN_EVERY(seconds, ...)                                         \
  do {                                                                           \
    static ::kvc::LogThrottle kvc_log_throttle_{seconds};                        \
    ::kvc::LogThrottled(kvc_log_throttle_, ::kvc::LogLevel::kWarn, __VA_ARGS__); \
  } while (0)
