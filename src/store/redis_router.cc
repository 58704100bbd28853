#include "store/redis_router.h"

#include <cstdint>
#include <string_view>
#include <utility>

namespace kvc::redis {
namespace {

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

}  // namespace

std::vector<Result<Answer>> SingleNodeRouter::Run(std::span<const KeyedCommand> commands) {
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

std::string UserPrefix(const RedisCredentials& credentials) {
  return credentials.user.empty() ? std::string() : PercentEncode(credentials.user) + "@";
}

}  // namespace kvc::redis
