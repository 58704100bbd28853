#include "store/redis_protocol.h"

#include <charconv>
#include <string>
#include <system_error>

namespace kvc::redis {
namespace {

// Replies are quoted in messages; a hostile or confused server must not make them huge.
constexpr size_t kMaxQuotedReply = 160;

}  // namespace

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

}  // namespace kvc::redis
