// Minimal leveled logging to stderr, one line per message (control characters escaped as by
// PrintableOneLine, base/utf8.h). KVCODEC_LOG=debug|info|warn|error sets the threshold.
#pragma once

namespace kvc {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace kvc

#define KVC_LOG_DEBUG(...) ::kvc::Log(::kvc::LogLevel::kDebug, __VA_ARGS__)
#define KVC_LOG_INFO(...) ::kvc::Log(::kvc::LogLevel::kInfo, __VA_ARGS__)
#define KVC_LOG_WARN(...) ::kvc::Log(::kvc::LogLevel::kWarn, __VA_ARGS__)
#define KVC_LOG_ERROR(...) ::kvc::Log(::kvc::LogLevel::kError, __VA_ARGS__)
