#include "store/redis_store.h"

#include <hiredis/hiredis.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/hex.h"

namespace kvc {
namespace {

// A timeout of 0 would mean blocking forever on a dead server; the store never does that.
constexpr uint32_t kDefaultTimeoutMs = 2000;
// Connections kept open per server between calls. More concurrent callers open more and close
// the surplus afterwards, so a burst does not leave many idle sockets on the server.
constexpr size_t kMaxIdleConnections = 4;
constexpr std::string_view kScanPageKeys = "1000";
// Replies are quoted in messages; a hostile or confused server must not make them huge.
constexpr size_t kMaxQuotedReply = 160;

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

Result<Endpoint> ParseEndpoint(std::string_view host_port) {
  const std::string quoted = "'" + std::string(host_port) + "'";
  const size_t colon = host_port.rfind(':');
  if (colon == std::string_view::npos) return InvalidArgument("redis address " + quoted + " is not host:port");
  std::string_view host = host_port.substr(0, colon);
  const std::string_view port_text = host_port.substr(colon + 1);
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) host = host.substr(1, host.size() - 2);
  if (host.empty()) return InvalidArgument("redis address " + quoted + " has no host");
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '-' || c == '_' || (bracketed && (c == ':' || c == '%'));
    if (!ok) return InvalidArgument("redis address " + quoted + " has a host with '" + std::string(1, c) + "' in it");
  }
  int port = 0;
  const char* end = port_text.data() + port_text.size();
  const auto [stop, ec] = std::from_chars(port_text.data(), end, port);
  if (port_text.empty() || ec != std::errc() || stop != end || port < 1 || port > 65535) {
    return InvalidArgument("redis address " + quoted + " needs a port in 1..65535");
  }
  return Endpoint{std::string(host), port};
}

// ---------------------------------------------------------------------------------------------
// Replies

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};

std::string_view ReplyText(const redisReply& r) {
  if (r.str == nullptr) return {};
  return {r.str, r.len};
}

bool IsString(const redisReply* r) { return r != nullptr && r->type == REDIS_REPLY_STRING; }
bool IsInteger(const redisReply* r) { return r != nullptr && r->type == REDIS_REPLY_INTEGER; }

std::string Quote(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, kMaxQuotedReply)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > kMaxQuotedReply) out += "...";
  return out + "'";
}

std::string DescribeReply(const redisReply* r) {
  if (r == nullptr) return "no reply";
  switch (r->type) {
    case REDIS_REPLY_STRING:
      return FormatMessage("a string of %zu bytes", r->len);
    case REDIS_REPLY_ARRAY:
      return FormatMessage("an array of %zu elements", r->elements);
    case REDIS_REPLY_INTEGER:
      return FormatMessage("the integer %lld", r->integer);
    case REDIS_REPLY_NIL:
      return "nil";
    case REDIS_REPLY_STATUS:
      return "status " + Quote(ReplyText(*r));
    case REDIS_REPLY_ERROR:
      return "error " + Quote(ReplyText(*r));
    default:
      return FormatMessage("a reply of unknown type %d", r->type);
  }
}

// A reply together with the server that gave it, so that errors can name it.
struct Answer {
  Reply reply;
  std::string server;
};

Status UnexpectedReply(const Answer& answer, std::string_view command) {
  const redisReply* r = answer.reply.get();
  if (r != nullptr && r->type == REDIS_REPLY_ERROR && ReplyText(*r).starts_with("NOAUTH")) {
    return IoError("redis " + answer.server + ": " + std::string(command) +
                   ": the server requires authentication (NOAUTH); put the credentials in the URL: "
                   "redis://[user]:password@host:port");
  }
  return IoError("redis " + answer.server + ": " + std::string(command) + " answered " +
                 DescribeReply(answer.reply.get()));
}

// ---------------------------------------------------------------------------------------------
// Commands, RESP-encoded by hand: every argument carries its length, so payloads are binary-safe,
// and a whole pipeline is one buffer sent in one write.

void AppendCommand(std::string& wire, std::initializer_list<std::string_view> args) {
  wire += '*';
  wire += std::to_string(args.size());
  wire += "\r\n";
  for (std::string_view a : args) {
    wire += '$';
    wire += std::to_string(a.size());
    wire += "\r\n";
    wire.append(a.data(), a.size());
    wire += "\r\n";
  }
}

std::string Command(std::initializer_list<std::string_view> args) {
  std::string wire;
  AppendCommand(wire, args);
  return wire;
}

std::string KeyOf(std::string_view name) { return std::string(kRedisKeyPrefix) + std::string(name); }

std::string_view AsText(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// ---------------------------------------------------------------------------------------------
// Credentials

// `what` names the part ("user", "password"); the text itself is never quoted.
Result<std::string> PercentDecode(std::string_view text, const char* what) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    const int high = i + 2 < text.size() ? HexDigitValue(text[i + 1]) : -1;
    const int low = i + 2 < text.size() ? HexDigitValue(text[i + 2]) : -1;
    if (high < 0 || low < 0) {
      return InvalidArgument(
          FormatMessage("redis URL: a '%%' in the %s is not followed by two hex digits "
                        "(write %%25 for '%%')",
                        what));
    }
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

// For url(): a user name that reads back as itself.
std::string PercentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                       c == '_' || c == '-' || c == '~';
    if (plain) {
      out += c;
    } else {
      const auto b = static_cast<uint8_t>(c);
      out += '%';
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
  }
  return out;
}

std::string UserPrefix(const RedisCredentials& credentials) {
  return credentials.user.empty() ? std::string() : PercentEncode(credentials.user) + "@";
}

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

// ---------------------------------------------------------------------------------------------
// Connections

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

// One server: a small pool of connections, so that concurrent callers do not queue behind one.
class Node {
 public:
  Node(Endpoint endpoint, uint32_t timeout_ms, std::shared_ptr<const RedisCredentials> credentials)
      : endpoint_(std::move(endpoint)),
        name_(endpoint_.ToString()),
        timeout_ms_(timeout_ms),
        credentials_(std::move(credentials)) {}

  const Endpoint& endpoint() const { return endpoint_; }
  const std::string& name() const { return name_; }

  Result<std::vector<Reply>> Roundtrip(std::string_view wire, size_t replies) {
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

  Result<Answer> RoundtripOne(std::string_view wire) {
    ASSIGN_OR_RETURN(std::vector<Reply> replies, Roundtrip(wire, 1));
    return Answer{std::move(replies[0]), name_};
  }

 private:
  std::unique_ptr<Connection> Acquire() {
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

  void Release(std::unique_ptr<Connection> connection) {
    if (!connection->connected()) return;
    std::lock_guard lock(mutex_);
    if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(connection));
  }

  const Endpoint endpoint_;
  const std::string name_;
  const uint32_t timeout_ms_;
  const std::shared_ptr<const RedisCredentials> credentials_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

// ---------------------------------------------------------------------------------------------
// Per-server statistics

struct NodeStats {
  uint64_t objects = 0;
  uint64_t bytes = 0;
  uint64_t maxmemory = 0;
};

Result<uint64_t> ParseUnsigned(std::string_view text) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || stop != end) return IoError("not a number: " + Quote(text));
  return v;
}

Result<NodeStats> ReadNodeStats(Node& node) {
  NodeStats stats;
  const std::string pattern = std::string(kRedisKeyPrefix) + "*";
  std::string cursor = "0";
  do {
    ASSIGN_OR_RETURN(Answer page,
                     node.RoundtripOne(Command({"SCAN", cursor, "MATCH", pattern, "COUNT", kScanPageKeys})));
    const redisReply* r = page.reply.get();
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !IsString(r->element[0]) || r->element[1] == nullptr ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
      return UnexpectedReply(page, "SCAN");
    }
    const std::string_view next = ReplyText(*r->element[0]);
    if (!ParseUnsigned(next).ok()) return UnexpectedReply(page, "SCAN (cursor " + Quote(next) + ")");
    cursor = std::string(next);
    const redisReply& keys = *r->element[1];
    std::string wire;
    for (size_t i = 0; i < keys.elements; ++i) {
      if (!IsString(keys.element[i])) return UnexpectedReply(page, "SCAN (a key that is not a string)");
      AppendCommand(wire, {"STRLEN", ReplyText(*keys.element[i])});
    }
    if (keys.elements == 0) continue;
    ASSIGN_OR_RETURN(std::vector<Reply> lengths, node.Roundtrip(wire, keys.elements));
    for (const Reply& length : lengths) {
      // A key of another type under our prefix is not an object of ours (and STRLEN says
      // WRONGTYPE); a key deleted since the SCAN page counts as an empty object.
      if (length->type == REDIS_REPLY_ERROR) continue;
      if (!IsInteger(length.get()) || length->integer < 0) {
        return IoError("redis " + node.name() + ": STRLEN answered " + DescribeReply(length.get()));
      }
      ++stats.objects;
      stats.bytes += static_cast<uint64_t>(length->integer);
    }
  } while (cursor != "0");

  ASSIGN_OR_RETURN(Answer config, node.RoundtripOne(Command({"CONFIG", "GET", "maxmemory"})));
  const redisReply* c = config.reply.get();
  // CONFIG is often renamed or forbidden on managed servers: then the bound is unknown (0).
  if (c->type == REDIS_REPLY_ARRAY && c->elements == 2 && IsString(c->element[1])) {
    ASSIGN_OR_RETURN(stats.maxmemory, ParseUnsigned(ReplyText(*c->element[1])));
  } else if (c->type != REDIS_REPLY_ERROR && !(c->type == REDIS_REPLY_ARRAY && c->elements == 0)) {
    return UnexpectedReply(config, "CONFIG GET maxmemory");
  }
  return stats;
}

// ---------------------------------------------------------------------------------------------
// Routing: where each command goes. The store's logic is the same for one server and a cluster.

struct KeyedCommand {
  std::string key;
  std::string wire;  // exactly one encoded command
};

class Router {
 public:
  virtual ~Router() = default;
  virtual std::string url() const = 0;
  // One answer per command, in order; a command whose server could not be reached holds the error.
  virtual std::vector<Result<Answer>> Run(std::span<const KeyedCommand> commands) = 0;
  // The servers that hold data: the server, or the cluster's masters.
  virtual Result<std::vector<std::shared_ptr<Node>>> DataNodes() = 0;
};

class SingleNodeRouter final : public Router {
 public:
  SingleNodeRouter(std::shared_ptr<Node> node, std::string user_prefix)
      : node_(std::move(node)), user_prefix_(std::move(user_prefix)) {}

  std::string url() const override { return "redis://" + user_prefix_ + node_->name(); }

  std::vector<Result<Answer>> Run(std::span<const KeyedCommand> commands) override {
    std::vector<Result<Answer>> out;
    out.reserve(commands.size());
    if (commands.empty()) return out;
    std::string batch;
    // A single command (a Put with its payload) goes out as it is, without another copy.
    if (commands.size() > 1) {
      for (const KeyedCommand& c : commands) batch += c.wire;
    }
    Result<std::vector<Reply>> replies =
        node_->Roundtrip(commands.size() > 1 ? std::string_view(batch) : commands[0].wire, commands.size());
    if (!replies.ok()) {
      for (size_t i = 0; i < commands.size(); ++i) out.push_back(replies.status());
      return out;
    }
    for (Reply& r : *replies) out.push_back(Answer{std::move(r), node_->name()});
    return out;
  }

  Result<std::vector<std::shared_ptr<Node>>> DataNodes() override { return std::vector{node_}; }

 private:
  std::shared_ptr<Node> node_;
  const std::string user_prefix_;  // "user@" or nothing: never the password
};

struct Redirect {
  bool ask = false;  // ASK: this command only; MOVED: the slot has a new owner
  int slot = 0;
  Endpoint target;
};

// "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381"; nothing for other replies, and
// nothing for a malformed redirect, which then surfaces as the error reply it is.
std::optional<Redirect> ParseRedirect(const redisReply* r, const Endpoint& asked) {
  if (r == nullptr || r->type != REDIS_REPLY_ERROR) return std::nullopt;
  const std::string_view text = ReplyText(*r);
  Redirect redirect;
  std::string_view rest;
  if (text.starts_with("MOVED ")) {
    rest = text.substr(6);
  } else if (text.starts_with("ASK ")) {
    redirect.ask = true;
    rest = text.substr(4);
  } else {
    return std::nullopt;
  }
  const size_t space = rest.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::string_view slot_text = rest.substr(0, space);
  const auto [stop, ec] = std::from_chars(slot_text.data(), slot_text.data() + slot_text.size(), redirect.slot);
  if (ec != std::errc() || stop != slot_text.data() + slot_text.size() || redirect.slot < 0 ||
      redirect.slot >= kRedisClusterSlots) {
    return std::nullopt;
  }
  std::string target(rest.substr(space + 1));
  // Redis 7 leaves the host out when the node does not know its own; it is the one we asked.
  if (target.starts_with(":")) target = asked.host + target;
  Result<Endpoint> endpoint = ParseEndpoint(target);
  if (!endpoint.ok()) return std::nullopt;
  redirect.target = std::move(*endpoint);
  return redirect;
}

class ClusterRouter final : public Router {
 public:
  ClusterRouter(std::vector<Endpoint> seeds, uint32_t timeout_ms, std::shared_ptr<const RedisCredentials> credentials)
      : seeds_(std::move(seeds)), timeout_ms_(timeout_ms), credentials_(std::move(credentials)) {
    slot_owner_.fill(-1);
  }

  Status Init() { return RefreshSlotMap(); }

  std::string url() const override {
    std::string url = "redis-cluster://" + UserPrefix(*credentials_);
    for (size_t i = 0; i < seeds_.size(); ++i) url += (i ? "," : "") + seeds_[i].ToString();
    return url;
  }

  std::vector<Result<Answer>> Run(std::span<const KeyedCommand> commands) override {
    RefreshIfStale();
    struct Pending {
      size_t index;
      std::shared_ptr<Node> node;
      bool asking;
    };
    std::vector<Pending> pending;
    pending.reserve(commands.size());
    for (size_t i = 0; i < commands.size(); ++i) {
      pending.push_back({i, NodeForSlot(RedisHashSlot(commands[i].key)), false});
    }
    std::vector<std::optional<Result<Answer>>> answers(commands.size());
    for (int round = 0; round <= kRedisMaxRedirects && !pending.empty(); ++round) {
      // One pipeline per (node, ASKING or not): one round trip per node per round.
      std::map<std::pair<Node*, bool>, std::vector<Pending>> groups;
      for (Pending& p : pending) groups[{p.node.get(), p.asking}].push_back(std::move(p));
      std::vector<Pending> redirected;
      for (auto& [group, members] : groups) {
        Node& node = *members.front().node;
        const bool asking = group.second;
        const size_t per_command = asking ? 2 : 1;
        std::string wire;
        for (const Pending& p : members) {
          if (asking) AppendCommand(wire, {"ASKING"});
          wire += commands[p.index].wire;
        }
        Result<std::vector<Reply>> replies = node.Roundtrip(wire, members.size() * per_command);
        if (!replies.ok()) {
          // The node may be gone for good (failover): read the map again on the next call.
          stale_ = true;
          for (const Pending& p : members) answers[p.index] = replies.status();
          continue;
        }
        for (size_t k = 0; k < members.size(); ++k) {
          // An ASKING that failed shows in the command's own reply (a MOVED), so only that counts.
          Reply& reply = (*replies)[k * per_command + per_command - 1];
          if (std::optional<Redirect> redirect = ParseRedirect(reply.get(), node.endpoint())) {
            std::shared_ptr<Node> target = NodeFor(redirect->target);
            if (!redirect->ask) MoveSlot(redirect->slot, target);
            redirected.push_back({members[k].index, std::move(target), redirect->ask});
            continue;
          }
          answers[members[k].index] = Answer{std::move(reply), node.name()};
        }
      }
      pending = std::move(redirected);
    }
    for (const Pending& p : pending) {
      answers[p.index] =
          IoError(FormatMessage("redis cluster: key '%s' still redirected after %d redirects (last to %s)",
                                commands[p.index].key.c_str(), kRedisMaxRedirects, p.node->name().c_str()));
    }
    std::vector<Result<Answer>> out;
    out.reserve(commands.size());
    for (auto& a : answers) {
      out.push_back(a ? std::move(*a) : Result<Answer>(Internal("cluster command got no answer")));
    }
    return out;
  }

  Result<std::vector<std::shared_ptr<Node>>> DataNodes() override {
    RefreshIfStale();
    std::lock_guard lock(mutex_);
    std::vector<bool> owns(nodes_.size(), false);
    for (int owner : slot_owner_) {
      if (owner >= 0) owns[static_cast<size_t>(owner)] = true;
    }
    std::vector<std::shared_ptr<Node>> out;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (owns[i]) out.push_back(nodes_[i]);
    }
    return out;
  }

 private:
  using SlotMap = std::array<int, kRedisClusterSlots>;  // index into nodes_, -1: unassigned

  std::shared_ptr<Node> NodeFor(const Endpoint& endpoint) {
    std::lock_guard lock(mutex_);
    return nodes_[IndexOfLocked(endpoint)];
  }

  int IndexOfLocked(const Endpoint& endpoint) {
    const std::string name = endpoint.ToString();
    if (auto it = node_index_.find(name); it != node_index_.end()) return it->second;
    nodes_.push_back(std::make_shared<Node>(endpoint, timeout_ms_, credentials_));
    const int index = static_cast<int>(nodes_.size() - 1);
    node_index_.emplace(name, index);
    return index;
  }

  std::shared_ptr<Node> NodeForSlot(uint16_t slot) {
    std::lock_guard lock(mutex_);
    const int owner = slot_owner_[slot];
    // An unassigned slot goes to any node, which answers CLUSTERDOWN (or MOVED, if it knows
    // better than our map).
    return nodes_[owner >= 0 ? static_cast<size_t>(owner) : 0];
  }

  void MoveSlot(int slot, const std::shared_ptr<Node>& target) {
    std::lock_guard lock(mutex_);
    slot_owner_[static_cast<size_t>(slot)] = IndexOfLocked(target->endpoint());
    // One MOVED usually means a resharding moved many slots: read the whole map next time.
    stale_ = true;
  }

  void RefreshIfStale() {
    // A failed refresh keeps the old map; the next failing command marks it stale again.
    if (stale_.exchange(false)) (void)RefreshSlotMap();
  }

  Status RefreshSlotMap() {
    std::vector<std::shared_ptr<Node>> candidates;
    {
      std::lock_guard lock(mutex_);
      std::vector<bool> owns(nodes_.size(), false);
      for (int owner : slot_owner_) {
        if (owner >= 0) owns[static_cast<size_t>(owner)] = true;
      }
      for (size_t i = 0; i < nodes_.size(); ++i) {
        if (owns[i]) candidates.push_back(nodes_[i]);
      }
      for (const Endpoint& seed : seeds_) candidates.push_back(nodes_[IndexOfLocked(seed)]);
    }
    std::string failures;
    std::map<std::string, bool> tried;
    for (const std::shared_ptr<Node>& node : candidates) {
      if (!tried.emplace(node->name(), true).second) continue;
      Status s = ReadSlotMapFrom(*node);
      if (s.ok()) return s;
      failures += (failures.empty() ? "" : "; ") + s.message();
    }
    return IoError("redis cluster: no node gave a slot map: " + failures);
  }

  Status ReadSlotMapFrom(Node& node) {
    ASSIGN_OR_RETURN(Answer answer, node.RoundtripOne(Command({"CLUSTER", "SLOTS"})));
    const redisReply* r = answer.reply.get();
    if (r->type != REDIS_REPLY_ARRAY) return UnexpectedReply(answer, "CLUSTER SLOTS");
    struct Range {
      long long first, last;
      Endpoint master;
    };
    std::vector<Range> ranges;
    for (size_t i = 0; i < r->elements; ++i) {
      // [first slot, last slot, [master host, master port, id...], replicas...]
      const redisReply* e = r->element[i];
      if (e == nullptr || e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !IsInteger(e->element[0]) ||
          !IsInteger(e->element[1]) || e->element[2] == nullptr || e->element[2]->type != REDIS_REPLY_ARRAY ||
          e->element[2]->elements < 2 || !IsInteger(e->element[2]->element[1])) {
        return UnexpectedReply(answer, FormatMessage("CLUSTER SLOTS (entry %zu malformed)", i));
      }
      const long long first = e->element[0]->integer;
      const long long last = e->element[1]->integer;
      const long long port = e->element[2]->element[1]->integer;
      if (first < 0 || last < first || last >= kRedisClusterSlots || port < 1 || port > 65535) {
        return UnexpectedReply(answer, FormatMessage("CLUSTER SLOTS (entry %zu out of range)", i));
      }
      // The host is a string, or nil / "" / "?" when the node does not know its own address:
      // then it is the address we reached it on.
      const redisReply* host = e->element[2]->element[0];
      std::string host_text = IsString(host) ? std::string(ReplyText(*host)) : std::string();
      if (host_text.empty() || host_text == "?") host_text = node.endpoint().host;
      ranges.push_back({first, last, Endpoint{std::move(host_text), static_cast<int>(port)}});
    }
    if (ranges.empty()) return IoError("redis " + node.name() + ": CLUSTER SLOTS lists no slots (cluster not set up?)");
    std::lock_guard lock(mutex_);
    SlotMap map;
    map.fill(-1);
    for (const Range& range : ranges) {
      const int owner = IndexOfLocked(range.master);
      for (long long s = range.first; s <= range.last; ++s) map[static_cast<size_t>(s)] = owner;
    }
    slot_owner_ = map;
    return Status::Ok();
  }

  const std::vector<Endpoint> seeds_;
  const uint32_t timeout_ms_;
  const std::shared_ptr<const RedisCredentials> credentials_;  // the same for every node
  std::atomic<bool> stale_{false};
  std::mutex mutex_;                          // guards everything below
  std::vector<std::shared_ptr<Node>> nodes_;  // every server ever seen; indices stay valid
  std::map<std::string, int> node_index_;
  SlotMap slot_owner_;
};

// ---------------------------------------------------------------------------------------------
// The store: commands and how to read their replies, whatever the routing.

class RedisStore final : public Store {
 public:
  explicit RedisStore(std::unique_ptr<Router> router) : router_(std::move(router)) {}

  std::string url() const override { return router_->url(); }

  Status Put(std::string_view name, std::span<const uint8_t> bytes) override {
    try {
      RETURN_IF_ERROR(CheckObjectName(name));
      const std::string key = KeyOf(name);
      ASSIGN_OR_RETURN(Answer answer, RunOne({key, Command({"SET", key, AsText(bytes)})}));
      const redisReply* r = answer.reply.get();
      if (r->type != REDIS_REPLY_STATUS || ReplyText(*r) != "OK") return UnexpectedReply(answer, "SET " + key);
      return Status::Ok();
    } catch (...) {
      return StatusOfCurrentException("storing '" + std::string(name) + "' in " + url());
    }
  }

  Result<std::vector<uint8_t>> Get(std::string_view name, uint64_t max_bytes) override {
    try {
      RETURN_IF_ERROR(CheckObjectName(name));
      std::vector<KeyedCommand> commands;
      AppendRead(commands, KeyOf(name), max_bytes);
      std::vector<Result<Answer>> answers = router_->Run(commands);
      if (answers.size() != commands.size()) return Internal("router did not answer every command");
      return BytesFrom(answers, commands[0].key, max_bytes);
    } catch (...) {
      return StatusOfCurrentException("reading '" + std::string(name) + "' from " + url());
    }
  }

  Result<bool> Exists(std::string_view name) override {
    try {
      RETURN_IF_ERROR(CheckObjectName(name));
      const std::string key = KeyOf(name);
      return ExistsFrom(RunOne({key, Command({"EXISTS", key})}), key);
    } catch (...) {
      return StatusOfCurrentException("looking up '" + std::string(name) + "' in " + url());
    }
  }

  Status Delete(std::string_view name) override {
    try {
      RETURN_IF_ERROR(CheckObjectName(name));
      const std::string key = KeyOf(name);
      ASSIGN_OR_RETURN(Answer answer, RunOne({key, Command({"DEL", key})}));
      if (!IsInteger(answer.reply.get())) return UnexpectedReply(answer, "DEL " + key);
      return Status::Ok();
    } catch (...) {
      return StatusOfCurrentException("deleting '" + std::string(name) + "' from " + url());
    }
  }

  std::vector<Result<std::vector<uint8_t>>> GetMany(std::span<const std::string> names, uint64_t max_bytes) override {
    try {
      std::vector<Result<std::vector<uint8_t>>> out;
      out.reserve(names.size());
      std::vector<KeyedCommand> commands;
      std::vector<size_t> slot_of_read;
      for (size_t i = 0; i < names.size(); ++i) {
        Status valid = CheckObjectName(names[i]);
        out.push_back(valid.ok() ? Internal("not fetched") : valid);
        if (!valid.ok()) continue;
        AppendRead(commands, KeyOf(names[i]), max_bytes);
        slot_of_read.push_back(i);
      }
      std::vector<Result<Answer>> answers = router_->Run(commands);
      if (answers.size() != commands.size()) {
        return std::vector<Result<std::vector<uint8_t>>>(names.size(), Internal("router did not answer every command"));
      }
      for (size_t c = 0; c < slot_of_read.size(); ++c) {
        out[slot_of_read[c]] = BytesFrom(std::span(answers).subspan(c * kReadCommands, kReadCommands),
                                         commands[c * kReadCommands].key, max_bytes);
      }
      return out;
    } catch (...) {
      return std::vector<Result<std::vector<uint8_t>>>(names.size(),
                                                       StatusOfCurrentException("reading a batch from " + url()));
    }
  }

  Result<std::vector<bool>> ExistsMany(std::span<const std::string> names) override {
    try {
      std::vector<KeyedCommand> commands;
      commands.reserve(names.size());
      for (const std::string& name : names) {
        RETURN_IF_ERROR(CheckObjectName(name));
        std::string key = KeyOf(name);
        std::string wire = Command({"EXISTS", key});
        commands.push_back({std::move(key), std::move(wire)});
      }
      std::vector<Result<Answer>> answers = router_->Run(commands);
      std::vector<bool> out;
      out.reserve(names.size());
      for (size_t c = 0; c < commands.size(); ++c) {
        ASSIGN_OR_RETURN(const bool exists, ExistsFrom(std::move(answers[c]), commands[c].key));
        out.push_back(exists);
      }
      return out;
    } catch (...) {
      return StatusOfCurrentException("looking up a batch in " + url());
    }
  }

  Result<StoreStats> Stats() override {
    try {
      ASSIGN_OR_RETURN(const std::vector<std::shared_ptr<Node>> nodes, router_->DataNodes());
      StoreStats stats;
      bool every_node_bounded = !nodes.empty();
      uint64_t capacity = 0;
      for (const std::shared_ptr<Node>& node : nodes) {
        ASSIGN_OR_RETURN(const NodeStats n, ReadNodeStats(*node));
        stats.objects += n.objects;
        stats.bytes += n.bytes;
        capacity += n.maxmemory;
        every_node_bounded = every_node_bounded && n.maxmemory > 0;
      }
      // One unbounded master makes the whole store unbounded.
      stats.capacity_bytes = every_node_bounded ? capacity : 0;
      return stats;
    } catch (...) {
      return StatusOfCurrentException("reading the statistics of " + url());
    }
  }

 private:
  // A bounded read of one key is these commands, pipelined to the key's node (one slot, so a
  // cluster redirects them alike): GETRANGE transfers at most max_bytes + 1 bytes however large
  // the value, one byte more than allowed telling a value that is too large; STRLEN says how
  // large it is, for the message; EXISTS tells a missing key from an empty value (GETRANGE
  // answers "" for both).
  static constexpr size_t kReadCommands = 3;

  static void AppendRead(std::vector<KeyedCommand>& commands, std::string key, uint64_t max_bytes) {
    // GETRANGE's end is inclusive and a signed 64-bit number.
    const uint64_t last = std::min<uint64_t>(max_bytes, std::numeric_limits<int64_t>::max() - 1);
    std::string range = Command({"GETRANGE", key, "0", std::to_string(last)});
    std::string length = Command({"STRLEN", key});
    std::string exists = Command({"EXISTS", key});
    commands.push_back({key, std::move(range)});
    commands.push_back({key, std::move(length)});
    commands.push_back({std::move(key), std::move(exists)});
  }

  Result<Answer> RunOne(KeyedCommand command) {
    std::vector<Result<Answer>> answers = router_->Run(std::span<const KeyedCommand>(&command, 1));
    if (answers.size() != 1) return Internal("router gave no answer");
    return std::move(answers[0]);
  }

  static bool IsWrongType(const redisReply* r) {
    return r != nullptr && r->type == REDIS_REPLY_ERROR && ReplyText(*r).starts_with("WRONGTYPE");
  }

  // The object from the answers to AppendRead's commands, in their order.
  static Result<std::vector<uint8_t>> BytesFrom(std::span<const Result<Answer>> answers, const std::string& key,
                                                uint64_t max_bytes) {
    const std::string name = key.substr(kRedisKeyPrefix.size());
    for (const Result<Answer>& a : answers) {
      if (!a.ok()) return a.status();
    }
    const Answer& range = *answers[0];
    const Answer& length = *answers[1];
    const Answer& exists = *answers[2];
    // Someone else's hash or list under our prefix: not an object, and never one of ours.
    if (IsWrongType(range.reply.get()) || IsWrongType(length.reply.get())) {
      return Corrupt("object '" + name + "': key " + key + " is not a string (GETRANGE answered " +
                     DescribeReply(range.reply.get()) + ")");
    }
    if (!IsString(range.reply.get())) return UnexpectedReply(range, "GETRANGE " + key);
    if (!IsInteger(length.reply.get()) || length.reply->integer < 0) return UnexpectedReply(length, "STRLEN " + key);
    const redisReply* e = exists.reply.get();
    if (!IsInteger(e) || e->integer < 0 || e->integer > 1) return UnexpectedReply(exists, "EXISTS " + key);
    const std::string_view text = ReplyText(*range.reply);
    if (text.size() > max_bytes) {
      // STRLEN came after GETRANGE: a value replaced in between may be shorter by now.
      return ObjectTooLarge(name, std::max<uint64_t>(text.size(), static_cast<uint64_t>(length.reply->integer)),
                            max_bytes);
    }
    // An empty GETRANGE is an empty object only if the key was there, empty, after it: else the
    // key was missing when GETRANGE ran (and may have been written since).
    if (text.empty() && (e->integer == 0 || length.reply->integer != 0)) return NotFound("no object '" + name + "'");
    return std::vector<uint8_t>(text.begin(), text.end());
  }

  static Result<bool> ExistsFrom(Result<Answer> answer, const std::string& key) {
    if (!answer.ok()) return answer.status();
    const redisReply* r = answer->reply.get();
    if (!IsInteger(r) || r->integer < 0 || r->integer > 1) return UnexpectedReply(*answer, "EXISTS " + key);
    return r->integer == 1;
  }

  std::unique_ptr<Router> router_;
};

uint32_t TimeoutOf(const StoreOptions& options) {
  return options.timeout_ms == 0 ? kDefaultTimeoutMs : options.timeout_ms;
}

uint16_t Crc16Xmodem(std::string_view bytes) {
  uint16_t crc = 0;
  for (const char c : bytes) {
    crc = static_cast<uint16_t>(crc ^ (static_cast<uint16_t>(static_cast<uint8_t>(c)) << 8));
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<uint16_t>((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
  }
  return crc;
}

}  // namespace

uint16_t RedisHashSlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return static_cast<uint16_t>(Crc16Xmodem(key) % kRedisClusterSlots);
}

Result<RedisCredentials> ParseRedisUserInfo(std::string_view userinfo) {
  const size_t colon = userinfo.find(':');
  if (colon == std::string_view::npos) {
    return InvalidArgument(
        "redis URL: credentials without ':' before the '@' (redis://user:password@host:port, or "
        "redis://:password@host:port for a password alone)");
  }
  RedisCredentials c;
  ASSIGN_OR_RETURN(c.user, PercentDecode(userinfo.substr(0, colon), "user"));
  ASSIGN_OR_RETURN(c.password, PercentDecode(userinfo.substr(colon + 1), "password"));
  if (c.empty()) return InvalidArgument("redis URL: empty credentials before the '@'");
  return c;
}

Result<std::unique_ptr<Store>> OpenRedisStore(const std::string& host_port, const StoreOptions& options,
                                              const RedisCredentials& credentials) {
  ASSIGN_OR_RETURN(Endpoint endpoint, ParseEndpoint(host_port));
  auto node = std::make_shared<Node>(std::move(endpoint), TimeoutOf(options),
                                     std::make_shared<const RedisCredentials>(credentials));
  // An unreachable server is reported now rather than at the first Put.
  ASSIGN_OR_RETURN(Answer pong, node->RoundtripOne(Command({"PING"})));
  if (pong.reply->type != REDIS_REPLY_STATUS || ReplyText(*pong.reply) != "PONG") return UnexpectedReply(pong, "PING");
  return std::unique_ptr<Store>(
      new RedisStore(std::make_unique<SingleNodeRouter>(std::move(node), UserPrefix(credentials))));
}

Result<std::unique_ptr<Store>> OpenRedisClusterStore(std::span<const std::string> seeds, const StoreOptions& options,
                                                     const RedisCredentials& credentials) {
  if (seeds.empty()) return InvalidArgument("redis-cluster:// needs host:port[,host:port...]");
  std::vector<Endpoint> endpoints;
  for (const std::string& seed : seeds) {
    ASSIGN_OR_RETURN(Endpoint e, ParseEndpoint(seed));
    endpoints.push_back(std::move(e));
  }
  auto router = std::make_unique<ClusterRouter>(std::move(endpoints), TimeoutOf(options),
                                                std::make_shared<const RedisCredentials>(credentials));
  RETURN_IF_ERROR(router->Init());
  return std::unique_ptr<Store>(new RedisStore(std::move(router)));
}

}  // namespace kvc
