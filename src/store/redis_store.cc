#include "store/redis_store.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "base/hex.h"
#include "store/redis_cluster_router.h"
#include "store/redis_connection_pool.h"
#include "store/redis_protocol.h"
#include "store/redis_router.h"

namespace kvc {
namespace {

using redis::Answer;
using redis::AppendCommand;
using redis::ClusterRouter;
using redis::Command;
using redis::DescribeReply;
using redis::Endpoint;
using redis::IsInteger;
using redis::IsString;
using redis::KeyedCommand;
using redis::Node;
using redis::ParseEndpoint;
using redis::Quote;
using redis::Reply;
using redis::ReplyText;
using redis::Router;
using redis::SingleNodeRouter;
using redis::UnexpectedReply;
using redis::UserPrefix;

// A timeout of 0 would mean blocking forever on a dead server; the store never does that.
constexpr uint32_t kDefaultTimeoutMs = 2000;
constexpr std::string_view kScanPageKeys = "1000";

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

}  // namespace

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
