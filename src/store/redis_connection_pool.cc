#include "store/redis_connection_pool.h"

#include <hiredis/hiredis.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kvc::redis {
namespace {

// Connections kept open per server between calls. More concurrent callers open more and close
// the surplus afterwards, so a burst does not leave many idle sockets on the server.
constexpr size_t kMaxIdleConnections = 4;

struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};

// A server's reply quoted in an error, with any occurrence of the password blanked out: no
// server should echo it, but a message must not depend on that.
std::string QuoteWithout(std::string_view text, const std::string& password) {
  std::string scrubbed(text);
  if (!password.empty()) {
    for (size_t at = scrubbed.find(password); at != std::string::npos; at = scrubbed.find(password, at + 3)) {
      scrubbed.replace(at, password.size(), "***");
    }
  }
  return Quote(scrubbed);
}

}  // namespace

// One TCP connection; not thread-safe (a Node hands each to one caller at a time).
class Connection {
 public:
  Connection(const Endpoint& endpoint, std::string name, uint32_t timeout_ms,
             std::shared_ptr<const RedisCredentials> credentials)
      : endpoint_(endpoint), name_(std::move(name)), timeout_ms_(timeout_ms), credentials_(std::move(credentials)) {}

  bool connected() const { return context_ != nullptr; }

  // Sends `wire`, which holds `replies` commands, and reads that many replies: one round trip.
  // On failure the connection is dropped. `retry_on_fresh` says the server had closed this
  // connection while it was idle (restart, idle timeout): worth one more try on a new one.
  Result<std::vector<Reply>> Roundtrip(std::string_view wire, size_t replies, bool& retry_on_fresh) {
    retry_on_fresh = false;
    const bool reused = connected();
    if (!reused) RETURN_IF_ERROR(Connect());
    size_t sent = 0;
    while (sent < wire.size()) {
      // MSG_NOSIGNAL: a write to a connection the server reset must be an error, not SIGPIPE.
      const ssize_t n = ::send(context_->fd, wire.data() + sent, wire.size() - sent, MSG_NOSIGNAL);
      if (n < 0) {
        const int e = errno;
        if (e == EINTR) continue;
        retry_on_fresh = reused && (e == EPIPE || e == ECONNRESET);
        if (e == EAGAIN || e == EWOULDBLOCK) return Fail(FormatMessage("send timed out after %u ms", timeout_ms_));
        return Fail(std::string("send: ") + std::strerror(e));
      }
      sent += static_cast<size_t>(n);
    }
    std::vector<Reply> out;
    out.reserve(replies);
    while (out.size() < replies) {
      void* raw = nullptr;
      errno = 0;
      const int rc = redisGetReply(context_.get(), &raw);
      const int e = errno;
      if (rc != REDIS_OK || raw == nullptr) {
        if (raw != nullptr) freeReplyObject(raw);
        const int kind = context_->err;
        const std::string why = context_->errstr;
        retry_on_fresh = reused && out.empty() &&
                         (kind == REDIS_ERR_EOF || (kind == REDIS_ERR_IO && (e == ECONNRESET || e == EPIPE)));
        if (kind == REDIS_ERR_IO && (e == EAGAIN || e == EWOULDBLOCK)) {
          return Fail(FormatMessage("no reply within %u ms", timeout_ms_));
        }
        return Fail("connection lost: " + (why.empty() ? std::string("no reply") : why));
      }
      out.emplace_back(static_cast<redisReply*>(raw));
    }
    return out;
  }

 private:
  Status Connect() {
    const timeval tv{.tv_sec = static_cast<time_t>(timeout_ms_ / 1000),
                     .tv_usec = static_cast<suseconds_t>((timeout_ms_ % 1000) * 1000)};
    context_.reset(redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, tv));
    if (context_ == nullptr) return IoError("redis " + name_ + ": cannot allocate a connection");
    if (context_->err != 0) return Fail(std::string("cannot connect: ") + context_->errstr);
    // The connect timeout covers only connecting; this one covers every later read and write.
    if (redisSetTimeout(context_.get(), tv) != REDIS_OK) {
      return Fail(std::string("cannot set timeouts: ") + context_->errstr);
    }
    if (credentials_ != nullptr && !credentials_->empty()) return Authenticate();
    return Status::Ok();
  }

  // AUTH [user] password, as the first command of every connection (a restarted server, or one
  // that closed an idle connection, has forgotten the last one). hiredis's argv form sends each
  // argument with its length, so a password may hold any byte.
  Status Authenticate() {
    const RedisCredentials& c = *credentials_;
    std::vector<const char*> argv = {"AUTH"};
    std::vector<size_t> lengths = {4};
    if (!c.user.empty()) {
      argv.push_back(c.user.data());
      lengths.push_back(c.user.size());
    }
    argv.push_back(c.password.data());
    lengths.push_back(c.password.size());
    const std::string as = c.user.empty() ? std::string("with the password alone (the default user)")
                                          : "as user " + QuoteWithout(c.user, c.password);
    Reply reply(static_cast<redisReply*>(
        redisCommandArgv(context_.get(), static_cast<int>(argv.size()), argv.data(), lengths.data())));
    if (reply == nullptr) {
      return Fail("authentication " + as + " got no answer: " +
                  (context_->errstr[0] != '\0' ? std::string(context_->errstr) : std::string("connection lost")));
    }
    if (reply->type == REDIS_REPLY_STATUS && ReplyText(*reply) == "OK") return Status::Ok();
    const std::string answer = reply->type == REDIS_REPLY_ERROR || reply->type == REDIS_REPLY_STATUS
                                   ? QuoteWithout(ReplyText(*reply), c.password)
                                   : DescribeReply(reply.get());
    return Fail("authentication failed " + as + ": the server answered " + answer);
  }

  // A connection that failed may have half a reply in flight; it can never be used again.
  Status Fail(const std::string& what) {
    context_.reset();
    return IoError("redis " + name_ + ": " + what);
  }

  const Endpoint endpoint_;
  const std::string name_;
  const uint32_t timeout_ms_;
  const std::shared_ptr<const RedisCredentials> credentials_;
  std::unique_ptr<redisContext, ContextFree> context_;
};

Node::Node(Endpoint endpoint, uint32_t timeout_ms, std::shared_ptr<const RedisCredentials> credentials)
    : endpoint_(std::move(endpoint)),
      name_(endpoint_.ToString()),
      timeout_ms_(timeout_ms),
      credentials_(std::move(credentials)) {}

// Here, where Connection is complete, for the unique_ptrs in idle_.
Node::~Node() = default;

Result<std::vector<Reply>> Node::Roundtrip(std::string_view wire, size_t replies) {
  std::unique_ptr<Connection> connection = Acquire();
  bool retry_on_fresh = false;
  Result<std::vector<Reply>> result = connection->Roundtrip(wire, replies, retry_on_fresh);
  // Every command the stores send is idempotent, so sending it again is safe.
  if (!result.ok() && retry_on_fresh) result = connection->Roundtrip(wire, replies, retry_on_fresh);
  if (result.ok()) {
    Release(std::move(connection));
  } else {
    // Whatever broke this connection (a restart, a dead server) broke the idle ones too.
    std::lock_guard lock(mutex_);
    idle_.clear();
  }
  return result;
}

Result<Answer> Node::RoundtripOne(std::string_view wire) {
  ASSIGN_OR_RETURN(std::vector<Reply> replies, Roundtrip(wire, 1));
  return Answer{std::move(replies[0]), name_};
}

std::unique_ptr<Connection> Node::Acquire() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      std::unique_ptr<Connection> c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return std::make_unique<Connection>(endpoint_, name_, timeout_ms_, credentials_);
}

void Node::Release(std::unique_ptr<Connection> connection) {
  if (!connection->connected()) return;
  std::lock_guard lock(mutex_);
  if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(connection));
}

}  // namespace kvc::redis
