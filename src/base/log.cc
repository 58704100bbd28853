#include "base/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/utf8.h"

namespace kvc {

static LogLevel LevelFromEnv() {
  const char* env = std::getenv("KVCODEC_LOG");
  if (env == nullptr) return LogLevel::kWarn;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "info") == 0) return LogLevel::kInfo;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kWarn;
}

static std::atomic<LogLevel>& Threshold() {
  static std::atomic<LogLevel> level{LevelFromEnv()};
  return level;
}

void SetLogLevel(LogLevel level) { Threshold().store(level); }
LogLevel GetLogLevel() { return Threshold().load(); }

static void LogV(LogLevel level, const char* suffix, const char* fmt, va_list args) {
  static const char* kNames[] = {"debug", "info", "warn", "error"};
  char buf[2048];
  std::vsnprintf(buf, sizeof buf, fmt, args);
  // Messages quote files, requests and models (paths, names, exception texts): one printable
  // line each, so none can forge a log line or send an escape sequence to a terminal.
  std::fprintf(stderr, "kvcodec %s: %s%s\n", kNames[static_cast<int>(level)], PrintableOneLine(buf).c_str(), suffix);
}

void Log(LogLevel level, const char* fmt, ...) {
  if (level < Threshold().load()) return;
  va_list args;
  va_start(args, fmt);
  LogV(level, "", fmt, args);
  va_end(args);
}

bool LogThrottle::Admit(SteadyClock::time_point now, uint64_t* left_out) {
  std::lock_guard lock(mu_);
  if (logged_any_ && now - last_ < interval_) {
    ++left_out_;
    return false;
  }
  logged_any_ = true;
  last_ = now;
  *left_out = left_out_;
  left_out_ = 0;
  return true;
}

void LogThrottled(LogThrottle& throttle, LogLevel level, const char* fmt, ...) {
  if (level < Threshold().load()) return;
  uint64_t left_out = 0;
  if (!throttle.Admit(SteadyClock::now(), &left_out)) return;
  char suffix[96] = "";
  if (left_out > 0) {
    std::snprintf(suffix, sizeof suffix, " (and %llu more like it since the last one logged)",
                  static_cast<unsigned long long>(left_out));
  }
  va_list args;
  va_start(args, fmt);
  LogV(level, suffix, fmt, args);
  va_end(args);
}

}  // namespace kvc
