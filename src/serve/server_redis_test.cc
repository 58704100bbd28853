// End to end: the completion server on loopback over a real redis-server, under concurrent
// streaming and non-streaming clients, with Redis stopped mid-run and started again, stopped
// before the server starts, and refusing the server's password.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/clock.h"
#include "llama/model_files.h"
#include "serve/completion_client.h"
#include "serve/completion_server.h"
#include "store/redis_test_server.h"

namespace kvc {
namespace {

using Json = nlohmann::json;

// Why a response is not a well-formed answer ("" when it is): a 200 with an OpenAI completion
// body, or a stream of parseable events that ends with a usage event (no choices, as
// stream_options.include_usage asks) and [DONE].
std::string Malformed(const httplib::Result& res, bool stream, uint32_t max_tokens) {
  if (!res) return "no response: " + httplib::to_string(res.error());
  if (res->status != 200) return "status " + std::to_string(res->status) + ": " + res->body;
  if (!stream) {
    const Json j = Json::parse(res->body, nullptr, false);
    if (j.is_discarded() || !j.contains("choices") || !j["choices"][0]["text"].is_string())
      return "bad body: " + res->body;
    if (j["usage"]["completion_tokens"].get<uint32_t>() > max_tokens) return "too many tokens: " + res->body;
    return "";
  }
  size_t at = 0;
  bool usage = false, done = false;
  while ((at = res->body.find("data: ", at)) != std::string::npos) {
    const size_t end = res->body.find("\n\n", at);
    if (end == std::string::npos) return "unterminated event";
    const std::string data = res->body.substr(at + 6, end - at - 6);
    at = end;
    if (done) return "an event after [DONE]";
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const Json j = Json::parse(data, nullptr, false);
    if (j.is_discarded() || j.contains("error") || !j.contains("choices") || !j["choices"].is_array())
      return "bad event: " + data;
    if (usage) return "an event after the usage: " + data;
    if (j["choices"].empty()) {
      usage = j.contains("usage") && j["usage"]["completion_tokens"].is_number_unsigned();
      if (!usage) return "a chunk without choices or usage: " + data;
    } else if (!j["choices"][0]["text"].is_string()) {
      return "bad event: " + data;
    }
  }
  if (!usage || !done) return "the stream did not end with usage and [DONE]: " + res->body;
  return "";
}

// GET /health's JSON (null when it did not answer 200).
Json Health(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(10, 0);
  auto res = c.Get("/health");
  if (!res || res->status != 200) return nullptr;
  return Json::parse(res->body, nullptr, false);
}

// Waits (up to 40 s: the retries back off, and the machine may be busy) until /health says
// the store is up.
bool WaitForStoreUp(int port) {
  const auto start = SteadyClock::now();
  while (SecondsSince(start) < 40) {
    const Json h = Health(port);
    if (h.is_object() && h["store"]["up"] == true) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

uint64_t Counter(int port, const std::string& name) {
  httplib::Client c("127.0.0.1", port);
  auto res = c.Get("/metrics");
  if (!res) return 0;
  const size_t at = res->body.find("\n" + name + " ");
  return at == std::string::npos ? 0 : std::stoull(res->body.substr(at + name.size() + 2));
}

TEST(ServerWithRedis, KeepsServingWellFormedAnswersWhenRedisStopsMidRun) {
  auto redis = RedisTestServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  ServerOptions o;
  o.model_path = KVCODEC_TEST_MODEL;
  o.store_url = "redis://" + (*redis)->address();
  o.codec = "quant";
  o.port = 0;
  o.cache_ram_mib = 0;  // Redis, not host memory, serves stored chunks
  o.n_ctx = 2048;
  o.plan_recompute = false;  // fetch whatever is stored, so Redis is on every shared request's path
  o.store_retry_max_s = 1;   // the test waits for the reconnect
  auto server = CompletionServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE((*server)->Start().ok());
  const int port = (*server)->port();
  const std::string text = ReadTextFile(std::filesystem::path(KVCODEC_TEST_MODEL).parent_path() / "eval.txt").value();
  const std::string shared = text.substr(0, 2000);  // about two chunks

  auto post = [&](const std::string& prompt, bool stream, uint32_t max_tokens) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    return c.Post("/v1/completions",
                  Json{{"prompt", prompt},
                       {"max_tokens", max_tokens},
                       {"stream", stream},
                       {"stream_options", {{"include_usage", true}}}}
                      .dump(),
                  "application/json");
  };
  auto wait_for_stores = [&] {
    const Status drained = WaitForServerStores("http://127.0.0.1:" + std::to_string(port), 30);
    EXPECT_TRUE(drained.ok()) << drained.ToString();
  };
  // The shared prefix's chunks are in Redis, and a second request reuses them from there.
  ASSERT_EQ(Malformed(post(shared, false, 2), false, 2), "");
  wait_for_stores();
  EXPECT_GT(std::stoull((*redis)->Command({"DBSIZE"}).value()), 0u);
  const uint64_t cached_before = Counter(port, "kvcodec_cached_prompt_tokens_total");
  ASSERT_EQ(Malformed(post(shared, false, 2), false, 2), "");
  EXPECT_GE(Counter(port, "kvcodec_cached_prompt_tokens_total") - cached_before, 256u);

  // Eight clients, half streaming, alternating the shared prompt and unique ones, five requests
  // each; Redis is killed while they run.
  constexpr int kClients = 8, kRequests = 5;
  std::atomic<int> sent{0};
  std::vector<std::string> problems(kClients * kRequests);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int r = 0; r < kRequests; ++r) {
        const bool stream = (c + r) % 2 == 0;
        const uint32_t max_tokens = 4 + static_cast<uint32_t>(c);
        const std::string prompt = (c + r) % 3 == 0
                                       ? shared + " " + std::to_string(c * 10 + r)
                                       : text.substr(static_cast<size_t>(3000 + 1300 * (c * kRequests + r)), 1200);
        ++sent;
        problems[static_cast<size_t>(c * kRequests + r)] =
            Malformed(post(prompt, stream, max_tokens), stream, max_tokens);
      }
    });
  }
  while (sent.load() < kClients * 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  (*redis)->Stop();
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < problems.size(); ++i) EXPECT_EQ(problems[i], "") << "request " << i;
  // The store's absence was noticed (lookups or stores failed) and answered by recomputing.
  EXPECT_GT(Counter(port, "kvcodec_reuse_failures_total") + Counter(port, "kvcodec_store_failures_total"), 0u);

  // With Redis back (empty: nothing was persisted) the server stores and reuses again, once its
  // next retry has found it.
  ASSERT_TRUE((*redis)->Restart().ok());
  ASSERT_TRUE(WaitForStoreUp(port)) << Health(port).dump();
  ASSERT_EQ(Malformed(post(shared, true, 3), true, 3), "");
  wait_for_stores();
  const uint64_t cached_again = Counter(port, "kvcodec_cached_prompt_tokens_total");
  const auto again = post(shared, false, 3);
  ASSERT_EQ(Malformed(again, false, 3), "");
  EXPECT_GE(Counter(port, "kvcodec_cached_prompt_tokens_total") - cached_again, 256u);
  (*server)->Stop();
}

// A store is a cache: `serve` starts with Redis down (it refused to, "cannot connect", exit 1),
// answers by recomputing, says so on /health and /metrics, and once Redis is back on its port
// stores new chunks and reuses them, giving the text the recompute gave.
TEST(ServerWithRedis, StartsWhileRedisIsDownAndReusesOnceItIsBack) {
  auto redis = RedisTestServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  (*redis)->Stop();  // nothing listens on its port now
  ServerOptions o;
  o.model_path = KVCODEC_TEST_MODEL;
  o.store_url = "redis://" + (*redis)->address();
  o.codec = "raw";  // lossless: a reused prefix gives the text a recompute gives
  o.port = 0;
  o.cache_ram_mib = 0;  // Redis, not host memory, serves stored chunks
  o.n_ctx = 2048;
  o.plan_recompute = false;
  o.store_retry_max_s = 1;
  auto server = CompletionServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE((*server)->Start().ok());
  const int port = (*server)->port();

  const Json down = Health(port);
  ASSERT_TRUE(down.is_object());
  EXPECT_EQ(down["status"], "ok");
  EXPECT_EQ(down["store"]["up"], false) << down.dump();
  EXPECT_NE(down["store"]["error"].get<std::string>(), "") << down.dump();
  EXPECT_EQ(down["store"]["url"], "redis://" + (*redis)->address());
  EXPECT_EQ(Counter(port, "kvcodec_store_up"), 0u);

  auto post = [&](const std::string& prompt) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    auto res = c.Post("/v1/completions", Json{{"prompt", prompt}, {"max_tokens", 4}}.dump(), "application/json");
    EXPECT_EQ(Malformed(res, false, 4), "");
    return res && res->status == 200 ? Json::parse(res->body) : Json();
  };
  const std::string prompt =
      ReadTextFile(std::filesystem::path(KVCODEC_TEST_MODEL).parent_path() / "eval.txt").value().substr(0, 2000);
  const Json recomputed = post(prompt);
  ASSERT_TRUE(recomputed.is_object());
  EXPECT_EQ(recomputed["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  ASSERT_TRUE((*redis)->Restart().ok());  // the same port
  ASSERT_TRUE(WaitForStoreUp(port)) << Health(port).dump();
  EXPECT_EQ(Counter(port, "kvcodec_store_up"), 1u);
  EXPECT_GE(Counter(port, "kvcodec_store_reconnects_total"), 1u);
  EXPECT_GE(Counter(port, "kvcodec_store_errors_total"), 1u);

  ASSERT_TRUE(post(prompt).is_object());  // its chunks are stored now
  const Status drained = WaitForServerStores("http://127.0.0.1:" + std::to_string(port), 30);
  ASSERT_TRUE(drained.ok()) << drained.ToString();
  EXPECT_GT(std::stoull((*redis)->Command({"DBSIZE"}).value()), 0u);
  const Json reused = post(prompt);
  ASSERT_TRUE(reused.is_object());
  EXPECT_GE(reused["usage"]["prompt_tokens_details"]["cached_tokens"].get<uint32_t>(), 256u);
  EXPECT_EQ(reused["choices"][0]["text"], recomputed["choices"][0]["text"]);
  (*server)->Stop();
}

// A Redis that refuses the password is a store that is down, not a server that does not start;
// the password shows nowhere.
TEST(ServerWithRedis, StartsWhenRedisRefusesThePassword) {
  RedisTestServerOptions ro;
  ro.password = "the-right-one";
  auto redis = RedisTestServer::Start(ro);
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  ServerOptions o;
  o.model_path = KVCODEC_TEST_MODEL;
  o.store_url = "redis://:a-wrong-one@" + (*redis)->address();
  o.codec = "raw";
  o.port = 0;
  o.cache_ram_mib = 0;  // Redis, not host memory, serves stored chunks
  o.n_ctx = 2048;
  auto server = CompletionServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE((*server)->Start().ok());
  const int port = (*server)->port();
  const Json health = Health(port);
  ASSERT_TRUE(health.is_object());
  EXPECT_EQ(health["store"]["up"], false) << health.dump();
  EXPECT_EQ(health.dump().find("a-wrong-one"), std::string::npos) << health.dump();
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  auto res =
      c.Post("/v1/completions", Json{{"prompt", "And it came to pass"}, {"max_tokens", 3}}.dump(), "application/json");
  EXPECT_EQ(Malformed(res, false, 3), "");
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->body.find("a-wrong-one"), std::string::npos);
  (*server)->Stop();
}

}  // namespace
}  // namespace kvc
