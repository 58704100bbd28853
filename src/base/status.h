// Status and Result<T>: kvcodec's one error system. No exception leaves the library; every
// fallible call returns one of these and callers must look at it.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace kvc {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,  // the caller asked for something that cannot be done
  kCorrupt,          // input bytes are malformed, truncated or fail a checksum
  kUnsupported,      // well-formed, but a version/codec/feature this build does not handle
  kNotFound,
  kIoError,
  kInternal,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt: section 2 (payload): CRC32C mismatch" — one line, for logs and the CLI.
  std::string ToString() const;

  // Prefixes the message with where the error happened, keeping the code.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgument(std::string message);
Status Corrupt(std::string message);
Status Unsupported(std::string message);
Status NotFound(std::string message);
Status IoError(std::string message);
Status Internal(std::string message);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(data_).ok()) data_ = Status(StatusCode::kInternal, "Result built from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(data_); }

  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<Status, T> data_;
};

}  // namespace kvc

#define KVC_CONCAT_INNER(a, b) a##b
#define KVC_CONCAT(a, b) KVC_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::kvc::Status kvc_status_ = (expr);        \
    if (!kvc_status_.ok()) return kvc_status_; \
  } while (0)

#define KVC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) KVC_ASSIGN_OR_RETURN_IMPL(KVC_CONCAT(kvc_result_, __LINE__), lhs, expr)

// The one bounds check every decoder uses: fails with kCorrupt naming what was violated.
#define KVC_CHECK_CORRUPT(cond, ...)                                       \
  do {                                                                     \
    if (!(cond)) return ::kvc::Corrupt(::kvc::FormatMessage(__VA_ARGS__)); \
  } while (0)

namespace kvc {
// The message of a caught exception (from std::current_exception()), for the places that must
// turn any exception into a Status or a log line because nothing may escape them (threads, the
// C API, the server's handlers).
std::string ExceptionText(std::exception_ptr e);
// Inside `catch (...)`: the exception in flight as a Status, `what` saying what was being done.
// A failed allocation is kIoError ("out of memory <what>": the caller's input was too large for
// this process, as with a store object or a decode), anything else kInternal with its message.
Status StatusOfCurrentException(std::string_view what);

// printf-style formatting into std::string (used by the check macro).
std::string FormatMessage(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
}  // namespace kvc
