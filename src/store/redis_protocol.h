// What the Redis stores say to a server and how they read its answers: server addresses,
// hiredis replies and the messages that quote them, and RESP commands encoded by hand. Shared by
// the connection pool, the routers and the store (redis_store.h), which would otherwise each need
// their own copy; internal to src/store, like hiredis itself.
#pragma once

#include <hiredis/hiredis.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kvc::redis {

// ---------------------------------------------------------------------------------------------
// Addresses

struct Endpoint {
  std::string host;
  int port = 0;

  std::string ToString() const {
    const bool ipv6 = host.find(':') != std::string::npos;
    return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  }
};

Result<Endpoint> ParseEndpoint(std::string_view host_port);

// ---------------------------------------------------------------------------------------------
// Replies

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

inline std::string_view ReplyText(const redisReply& r) {
  if (r.str == nullptr) return {};
  return {r.str, r.len};
}

inline bool IsString(const redisReply* r) { return r != nullptr && r->type == REDIS_REPLY_STRING; }
inline bool IsInteger(const redisReply* r) { return r != nullptr && r->type == REDIS_REPLY_INTEGER; }

// Cut short and printable only: what a server says ends up in messages and logs.
std::string Quote(std::string_view text);

std::string DescribeReply(const redisReply* r);

// A reply together with the server that gave it, so that errors can name it.
struct Answer {
  Reply reply;
  std::string server;
};

Status UnexpectedReply(const Answer& answer, std::string_view command);

// ---------------------------------------------------------------------------------------------
// Commands, RESP-encoded by hand: every argument carries its length, so payloads are binary-safe,
// and a whole pipeline is one buffer sent in one write.

void AppendCommand(std::string& wire, std::initializer_list<std::string_view> args);

std::string Command(std::initializer_list<std::string_view> args);

}  // namespace kvc::redis
