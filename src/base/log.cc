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

void Log(LogLevel level, const char* fmt, ...) {
  if (level < Threshold().load()) return;
  static const char* kNames[] = {"debug", "info", "warn", "error"};
  char buf[2048];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  // Messages quote files, requests and models (paths, names, exception texts): one printable
  // line each, so none can forge a log line or send an escape sequence to a terminal.
  std::fprintf(stderr, "kvcodec %s: %s\n", kNames[static_cast<int>(level)], PrintableOneLine(buf).c_str());
}

}  // namespace kvc
