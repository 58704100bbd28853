#include "serve/request_guard.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "base/status.h"
#include "serve/http_server.h"
#include "serve/openai_response.h"

namespace kvc {

namespace {

// "a,b" -> {"a", "b"}: llama-server's --api-key takes several keys so.
std::vector<std::string> SplitKeys(const std::string& keys) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= keys.size()) {
    const size_t end = std::min(keys.find(',', begin), keys.size());
    if (end > begin) out.push_back(keys.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

// Compared in time that does not depend on where they differ.
bool SameKey(const std::string& given, const std::string& key) {
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < std::min(given.size(), key.size()); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ key[i]);
  }
  return diff == 0;
}

}  // namespace

RequestGuard::RequestGuard(const ServerOptions& options)
    : api_keys_(SplitKeys(options.api_key)),
      metrics_keys_(SplitKeys(options.metrics_key)),
      max_body_bytes_(options.max_body_bytes),
      request_timeout_s_(options.request_timeout_s) {}

// /health is never guarded: a load balancer's probe carries no key.
const std::vector<std::string>& RequestGuard::KeysFor(const std::string& path) const {
  static const std::vector<std::string> kNone;
  if (path == "/health") return kNone;
  if (path == "/metrics") return metrics_keys_;
  return api_keys_;
}

bool RequestGuard::Unauthorized(const httplib::Request& req, httplib::Response& res) const {
  const std::vector<std::string>& keys = KeysFor(req.path);
  if (keys.empty()) return false;
  // "Authorization: Bearer KEY" (OpenAI's), or "X-Api-Key: KEY" (llama-server takes both).
  std::string header = req.get_header_value("Authorization");
  std::string given;
  if (header.starts_with("Bearer ")) {
    given = header.substr(7);
  } else if (header.empty()) {
    given = req.get_header_value("X-Api-Key");
  }
  bool valid = false;
  if (!given.empty()) {
    for (const std::string& key : keys) valid = SameKey(given, key) || valid;  // every key compared
  }
  if (valid) return false;
  header = header.empty() ? req.get_header_value("X-Api-Key") : header;
  if (HttpConnection* c = CurrentHttpConnection(); c != nullptr) c->close = true;
  res.status = 401;
  res.set_header("WWW-Authenticate", "Bearer");
  const char* message = header.empty() ? "this server needs an API key: send \"Authorization: Bearer <key>\""
                                       : "the API key is not valid";
  res.set_content(ErrorJson({message, "invalid_request_error", "", "invalid_api_key"}), "application/json");
  return true;
}

// (A Content-Length that is not a number never gets here: HttpServer refuses it.)
bool RequestGuard::ContentLengthOverLimit(const httplib::Request& req) const {
  const std::string length = req.get_header_value("Content-Length");
  const bool digits =
      !length.empty() && std::all_of(length.begin(), length.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  return digits && (length.size() > 19 || std::strtoull(length.c_str(), nullptr, 10) > max_body_bytes_);
}

std::optional<BodyRefusal> RequestGuard::ReadBody(const httplib::Request& req, const httplib::Response& res,
                                                  const httplib::ContentReader& reader, std::string* body) const {
  HttpConnection* c = CurrentHttpConnection();
  bool too_large = ContentLengthOverLimit(req);
  bool read = false;
  if (too_large) {
    // A client sends its whole body before it reads the answer, so one that is not read gets a
    // reset connection instead of the 413. A body up to 16 times the limit is read (httplib
    // drops it, holding none of it), a larger one is not.
    const uint64_t length = std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
    if (c != nullptr && length / 16 <= max_body_bytes_) {
      c->budget = c->read + length;
      (void)reader([](const char*, size_t) { return true; });
    }
  } else {
    // The body's bytes, with room for a chunked body's framing (a client that sends one in
    // tiny chunks is refused).
    if (c != nullptr) c->budget = c->read + 2 * uint64_t{max_body_bytes_} + 4096;
    read = reader([&](const char* data, size_t n) {
      if (n > max_body_bytes_ - body->size()) {
        too_large = true;
        return false;
      }
      body->append(data, n);
      return true;
    });
  }
  if (read) return std::nullopt;
  if (c != nullptr) c->close = true;
  // A chunked body whose framing outgrew its budget (tiny chunks) is too large as sent.
  if (too_large || res.status == 413 || (c != nullptr && c->budget_spent)) {
    return BodyRefusal{413, BodyTooLargeMessage()};
  }
  if (c != nullptr && c->deadline_passed) return BodyRefusal{408, TimeoutMessage()};
  return BodyRefusal{400, "the request body could not be read"};
}

std::string RequestGuard::BodyTooLargeMessage() const {
  return FormatMessage("the request body is larger than the server's limit of %zu bytes", max_body_bytes_);
}

std::string RequestGuard::TimeoutMessage() const {
  return FormatMessage("the request did not arrive within %g s", request_timeout_s_);
}

}  // namespace kvc
