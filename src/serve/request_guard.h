// What a request must pass before the server spends anything on it: the API key its path needs
// and the request-body limit. These face hostile clients (a guessed key timed byte by byte, a
// body of gigabytes, a chunked one that never ends), so they live apart from serving, where
// they can be read and changed as the security checks they are; the server asks them yes or no
// and answers and counts what they refuse.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "serve/completion_server.h"

namespace kvc {

// Why a body was not read: the status and message of the error the server answers with.
struct BodyRefusal {
  int status = 0;
  std::string message;
};

class RequestGuard {
 public:
  RequestGuard() = default;
  explicit RequestGuard(const ServerOptions& options);

  // Before routing. True: the request lacks the key its path needs, and `res` holds its 401
  // (with the body unread, its connection closes after the answer).
  bool Unauthorized(const httplib::Request& req, httplib::Response& res) const;

  // A Content-Length over the body limit, known before any of the body is read.
  bool ContentLengthOverLimit(const httplib::Request& req) const;

  // Reads the body of a POST into `body`, rather than httplib, which bounds only a body with a
  // Content-Length: a chunked one is cut off at the limit too. nullopt: read whole. Else the 413,
  // 408 or 400 to answer, and the connection closes after it (the rest is never read).
  std::optional<BodyRefusal> ReadBody(const httplib::Request& req, const httplib::Response& res,
                                      const httplib::ContentReader& reader, std::string* body) const;

  // The messages of a 413 and a 408, which httplib's own refusals get too.
  std::string BodyTooLargeMessage() const;
  std::string TimeoutMessage() const;

 private:
  // The keys a path takes (any one of them; none: no key needed).
  const std::vector<std::string>& KeysFor(const std::string& path) const;

  std::vector<std::string> api_keys_;
  std::vector<std::string> metrics_keys_;
  size_t max_body_bytes_ = 0;
  double request_timeout_s_ = 0;
};

}  // namespace kvc
