// The cluster router's pure logic, without a server: how a MOVED or ASK reply is read. What a
// live cluster does with it is redis_store_test's (RedisCluster.*).
#include "store/redis_cluster_router.h"

#include <gtest/gtest.h>

#include <string>

namespace kvc::redis {
namespace {

// A reply as hiredis would hand it over; only the fields ParseRedirect reads.
redisReply ReplyOf(int type, std::string& text) {
  redisReply r{};
  r.type = type;
  r.str = text.data();
  r.len = text.size();
  return r;
}

std::optional<Redirect> Parse(std::string text, const Endpoint& asked = {"10.0.0.1", 7000}) {
  const redisReply r = ReplyOf(REDIS_REPLY_ERROR, text);
  return ParseRedirect(&r, asked);
}

TEST(RedisClusterRouter, ReadsMovedAndAsk) {
  const std::optional<Redirect> moved = Parse("MOVED 3999 127.0.0.1:6381");
  ASSERT_TRUE(moved.has_value());
  EXPECT_FALSE(moved->ask);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->target.host, "127.0.0.1");
  EXPECT_EQ(moved->target.port, 6381);

  const std::optional<Redirect> ask = Parse("ASK 0 redis-2.example:6379");
  ASSERT_TRUE(ask.has_value());
  EXPECT_TRUE(ask->ask);
  EXPECT_EQ(ask->slot, 0);
  EXPECT_EQ(ask->target.ToString(), "redis-2.example:6379");

  const std::optional<Redirect> ipv6 = Parse("MOVED 16383 [::1]:7001");
  ASSERT_TRUE(ipv6.has_value());
  EXPECT_EQ(ipv6->slot, 16383);
  EXPECT_EQ(ipv6->target.host, "::1");
  EXPECT_EQ(ipv6->target.ToString(), "[::1]:7001");
}

// Redis 7 names only the port when the node does not know its own address.
TEST(RedisClusterRouter, AHostlessTargetIsTheNodeAsked) {
  const std::optional<Redirect> moved = Parse("MOVED 12 :7002", {"10.0.0.1", 7000});
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->target.ToString(), "10.0.0.1:7002");
}

// These surface as the error replies they are, not as redirects.
TEST(RedisClusterRouter, AnythingElseIsNotARedirect) {
  for (const char* text : {"ERR unknown command", "MOVED", "MOVED 3999", "MOVED  127.0.0.1:6381",
                           "MOVED -1 127.0.0.1:6381", "MOVED 16384 127.0.0.1:6381", "MOVED 39x9 127.0.0.1:6381",
                           "MOVED 3999 127.0.0.1", "MOVED 3999 127.0.0.1:0", "MOVED 3999 127.0.0.1:65536",
                           "ASK 3999 bad host:6379", "moved 3999 127.0.0.1:6381", "CLUSTERDOWN Hash slot not served"}) {
    EXPECT_FALSE(Parse(text).has_value()) << text;
  }
  std::string text = "MOVED 3999 127.0.0.1:6381";
  for (const int type : {REDIS_REPLY_STATUS, REDIS_REPLY_STRING}) {
    const redisReply r = ReplyOf(type, text);
    EXPECT_FALSE(ParseRedirect(&r, {"10.0.0.1", 7000}).has_value()) << type;
  }
  EXPECT_FALSE(ParseRedirect(nullptr, {"10.0.0.1", 7000}).has_value());
}

}  // namespace
}  // namespace kvc::redis
