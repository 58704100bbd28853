#include "store/redis_cluster_router.h"

#include <charconv>
#include <string_view>
#include <system_error>
#include <utility>

namespace kvc {
namespace {

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

namespace redis {

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

ClusterRouter::ClusterRouter(std::vector<Endpoint> seeds, uint32_t timeout_ms,
                             std::shared_ptr<const RedisCredentials> credentials)
    : seeds_(std::move(seeds)), timeout_ms_(timeout_ms), credentials_(std::move(credentials)) {
  slot_owner_.fill(-1);
}

std::string ClusterRouter::url() const {
  std::string url = "redis-cluster://" + UserPrefix(*credentials_);
  for (size_t i = 0; i < seeds_.size(); ++i) url += (i ? "," : "") + seeds_[i].ToString();
  return url;
}

std::vector<Result<Answer>> ClusterRouter::Run(std::span<const KeyedCommand> commands) {
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

Result<std::vector<std::shared_ptr<Node>>> ClusterRouter::DataNodes() {
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

std::shared_ptr<Node> ClusterRouter::NodeFor(const Endpoint& endpoint) {
  std::lock_guard lock(mutex_);
  return nodes_[IndexOfLocked(endpoint)];
}

int ClusterRouter::IndexOfLocked(const Endpoint& endpoint) {
  const std::string name = endpoint.ToString();
  if (auto it = node_index_.find(name); it != node_index_.end()) return it->second;
  nodes_.push_back(std::make_shared<Node>(endpoint, timeout_ms_, credentials_));
  const int index = static_cast<int>(nodes_.size() - 1);
  node_index_.emplace(name, index);
  return index;
}

std::shared_ptr<Node> ClusterRouter::NodeForSlot(uint16_t slot) {
  std::lock_guard lock(mutex_);
  const int owner = slot_owner_[slot];
  // An unassigned slot goes to any node, which answers CLUSTERDOWN (or MOVED, if it knows
  // better than our map).
  return nodes_[owner >= 0 ? static_cast<size_t>(owner) : 0];
}

void ClusterRouter::MoveSlot(int slot, const std::shared_ptr<Node>& target) {
  std::lock_guard lock(mutex_);
  slot_owner_[static_cast<size_t>(slot)] = IndexOfLocked(target->endpoint());
  // One MOVED usually means a resharding moved many slots: read the whole map next time.
  stale_ = true;
}

void ClusterRouter::RefreshIfStale() {
  // A failed refresh keeps the old map; the next failing command marks it stale again.
  if (stale_.exchange(false)) (void)RefreshSlotMap();
}

Status ClusterRouter::RefreshSlotMap() {
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

Status ClusterRouter::ReadSlotMapFrom(Node& node) {
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

}  // namespace redis
}  // namespace kvc
