#include "base/status.h"

#include <cstdarg>
#include <cstdio>
#include <exception>
#include <new>
#include <string_view>

#include "base/utf8.h"

namespace kvc {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kCorrupt:
      return "corrupt";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kIoError:
      return "i/o error";
    case StatusCode::kInternal:
      return "internal error";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  // Messages quote hostile input (a level name from a file, a request's text): escaped here, so
  // what reaches a log or a terminal is always one line of valid UTF-8.
  return std::string(StatusCodeName(code_)) + ": " + PrintableOneLine(message_);
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

Status InvalidArgument(std::string message) { return {StatusCode::kInvalidArgument, std::move(message)}; }
Status Corrupt(std::string message) { return {StatusCode::kCorrupt, std::move(message)}; }
Status Unsupported(std::string message) { return {StatusCode::kUnsupported, std::move(message)}; }
Status NotFound(std::string message) { return {StatusCode::kNotFound, std::move(message)}; }
Status IoError(std::string message) { return {StatusCode::kIoError, std::move(message)}; }
Status Internal(std::string message) { return {StatusCode::kInternal, std::move(message)}; }

std::string FormatMessage(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  va_end(args);
  return out;
}

std::string ExceptionText(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

Status StatusOfCurrentException(std::string_view what) {
  const std::exception_ptr e = std::current_exception();
  try {
    std::rethrow_exception(e);
  } catch (const std::bad_alloc&) {
    return IoError("out of memory " + std::string(what));
  } catch (...) {
  }
  return Internal(std::string(what) + ": " + ExceptionText(e));
}

}  // namespace kvc
