#include "engine/completion_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/model_files.h"
#include "engine/serve_bench.h"

namespace kvc {
namespace {

using Json = nlohmann::json;

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    store_ = std::filesystem::temp_directory_path() / ("kvc-server-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(store_);
    ServerOptions o;
    o.model_path = KVCODEC_TEST_MODEL;
    o.store_url = "dir://" + store_.string();
    o.codec = "raw";  // lossless: a reused prefix must give the same text
    o.port = 0;
    o.n_ctx = 2048;
    o.default_max_tokens = 8;
    auto server = CompletionServer::Create(o);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server).release();
    ASSERT_TRUE(server_->Start().ok());
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    std::filesystem::remove_all(store_);
  }
  static httplib::Client Client() {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(60, 0);
    return c;
  }
  static Json Post(const std::string& path, const Json& body, int expect_status = 200) {
    auto res = Client().Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(res) << path;
    if (!res) return {};
    EXPECT_EQ(res->status, expect_status) << res->body;
    return Json::parse(res->body, nullptr, false);
  }
  // Waits until the background storer has written every pending chunk.
  static void WaitForStores() {
    const Status drained = WaitForServerStores("http://127.0.0.1:" + std::to_string(server_->port()), 30);
    ASSERT_TRUE(drained.ok()) << drained.ToString();
  }

  static inline CompletionServer* server_ = nullptr;
  static inline std::filesystem::path store_;
};

TEST_F(ServerTest, HealthAndMetrics) {
  auto health = Client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(Json::parse(health->body)["status"], "ok");
  Post("/v1/completions", {{"prompt", "And it came to pass"}, {"max_tokens", 3}});
  auto metrics = Client().Get("/metrics");
  ASSERT_TRUE(metrics);
  for (const char* series : {"kvcodec_requests_total{endpoint=\"completions\",status=\"200\"}", "kvcodec_ttft_seconds_bucket",
                             "kvcodec_stage_seconds_count{stage=\"prefill\"}", "kvcodec_cached_prompt_tokens_total",
                             "kvcodec_fetched_bytes_total", "kvcodec_queue_length{queue=\"waiting\"}",
                             "kvcodec_queue_length{queue=\"store\"}", "kvcodec_store_bytes"}) {
    EXPECT_NE(metrics->body.find(series), std::string::npos) << series;
  }
}

TEST_F(ServerTest, CompletionAndChatShapes) {
  const Json c = Post("/v1/completions", {{"prompt", "And it came to pass"}, {"max_tokens", 5}});
  EXPECT_EQ(c["object"], "text_completion");
  ASSERT_EQ(c["choices"].size(), 1u);
  EXPECT_FALSE(c["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(c["usage"]["completion_tokens"], 5);
  EXPECT_EQ(c["usage"]["total_tokens"], c["usage"]["prompt_tokens"].get<int>() + 5);
  EXPECT_TRUE(c["usage"]["prompt_tokens_details"].contains("cached_tokens"));
  const Json chat = Post("/v1/chat/completions",
                         {{"messages", {{{"role", "user"}, {"content", "Who went up to Jerusalem?"}}}}, {"max_tokens", 4}});
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(chat["choices"][0]["message"]["content"].is_string());
}

// Events are `data: <json>` lines; the last one before [DONE] carries finish_reason and usage.
TEST_F(ServerTest, StreamingSendsEventsThenDone) {
  auto res = Client().Post("/v1/completions", Json{{"prompt", "In the beginning"}, {"max_tokens", 6}, {"stream", true}}.dump(),
                           "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  std::vector<Json> events;
  bool done = false;
  size_t at = 0;
  while ((at = res->body.find("data: ", at)) != std::string::npos) {
    const size_t end = res->body.find("\n\n", at);
    ASSERT_NE(end, std::string::npos);
    const std::string data = res->body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    events.push_back(Json::parse(data, nullptr, false));
    ASSERT_FALSE(events.back().is_discarded()) << data;
  }
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 7u);  // six tokens and the closing event
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 6);
}

TEST_F(ServerTest, MalformedRequestsAre4xxWithJsonErrors) {
  auto bad_json = Client().Post("/v1/completions", "{not json", "application/json");
  ASSERT_TRUE(bad_json);
  EXPECT_EQ(bad_json->status, 400);
  EXPECT_TRUE(Json::parse(bad_json->body)["error"]["message"].is_string());
  for (const Json& body : {Json{{"max_tokens", 3}}, Json{{"prompt", 7}}, Json{{"prompt", "x"}, {"max_tokens", 0}},
                           Json{{"prompt", "x"}, {"max_tokens", 100000}}, Json{{"prompt", "x"}, {"stream", "yes"}}}) {
    const Json err = Post("/v1/completions", body, 400);
    EXPECT_TRUE(err["error"]["message"].is_string()) << body.dump();
  }
  Post("/v1/chat/completions", {{"messages", Json::array()}}, 400);
  auto missing = Client().Get("/v1/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

// Concurrent streaming and non-streaming clients all get well-formed answers.
TEST_F(ServerTest, ConcurrentRequestsAreAllServed) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      const bool stream = i % 2 == 1;
      auto res = Client().Post("/v1/completions",
                               Json{{"prompt", "And the LORD spake unto Moses " + std::to_string(i)}, {"max_tokens", 4},
                                    {"stream", stream}}
                                   .dump(),
                               "application/json");
      if (!res || res->status != 200) return;
      if (stream) {
        if (res->body.find("data: [DONE]") != std::string::npos) ++ok;
      } else if (Json::parse(res->body, nullptr, false)["usage"]["completion_tokens"] == 4) {
        ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 6);
}

// Continuous batching: concurrent generations share llama.cpp batches (the server runs 4
// sequences), and each still gets its whole answer.
TEST_F(ServerTest, ConcurrentGenerationsShareBatches) {
  std::vector<std::thread> threads;
  std::atomic<int> complete{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      const Json r = Post("/v1/completions", {{"prompt", "Blessed are they " + std::to_string(i)}, {"max_tokens", 48}});
      if (r.contains("usage") && (r["usage"]["completion_tokens"] == 48 || r["choices"][0]["finish_reason"] == "stop")) {
        ++complete;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(complete.load(), 4);
  const std::string metrics = Client().Get("/metrics")->body;
  const size_t at = metrics.find("\nkvcodec_batch_sequences_peak ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GE(std::stoi(metrics.substr(at + std::strlen("\nkvcodec_batch_sequences_peak "))), 2) << metrics;
}

// A streaming client that goes away mid-answer frees its sequence: the generation stops long
// before its budget, the disconnect is counted, and nothing stays running.
TEST_F(ServerTest, ClientThatDisconnectsFreesItsSequence) {
  auto counter = [](const std::string& name) {
    const std::string metrics = Client().Get("/metrics")->body;
    const size_t at = metrics.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(metrics.substr(at + name.size() + 2));
  };
  const double tokens_before = counter("kvcodec_completion_tokens_total");
  const double disconnects_before = counter("kvcodec_client_disconnects_total");
  int events = 0;
  httplib::Client c("127.0.0.1", server_->port());
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = Json{{"prompt", "And God said"}, {"max_tokens", 1900}, {"stream", true}}.dump();
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++events < 3; };  // hang up
  auto res = c.send(req);
  EXPECT_FALSE(res);  // the client cancelled
  double disconnects = disconnects_before;
  for (int i = 0; i < 400 && disconnects == disconnects_before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    disconnects = counter("kvcodec_client_disconnects_total");
  }
  EXPECT_EQ(disconnects, disconnects_before + 1);
  EXPECT_LT(counter("kvcodec_completion_tokens_total") - tokens_before, 1900);
  EXPECT_NE(Client().Get("/metrics")->body.find("kvcodec_queue_length{queue=\"running\"} 0"), std::string::npos);
  // And the server carries on.
  EXPECT_EQ(Post("/v1/completions", {{"prompt", "And God saw"}, {"max_tokens", 2}})["usage"]["completion_tokens"], 2);
}

// The second request with a long shared prefix restores it from the store (cached_tokens) and,
// the codec being lossless, answers with the same text.
TEST_F(ServerTest, SecondRequestReusesTheStoredPrefix) {
  const std::string prompt =
      ReadTextFile(std::filesystem::path(KVCODEC_TEST_MODEL).parent_path() / "eval.txt").value().substr(0, 2500);
  const Json first = Post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 6}});
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  WaitForStores();
  const Json second = Post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 6}});
  EXPECT_GE(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 512);
  EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

// While one request's stored prefix crawls over a slow link, a request with nothing stored is
// served at once by the KV-fetch-aware scheduler, and waits behind the transfer with FIFO.
class ServerScheduling : public ::testing::TestWithParam<ServerOptions::Scheduler> {};

TEST_P(ServerScheduling, ARequestWithoutStoredKvAndAFetchInFlight) {
  const bool fifo = GetParam() == ServerOptions::Scheduler::kFifo;
  const auto store = std::filesystem::temp_directory_path() /
                     ("kvc-server-sched-" + std::string(SchedulerName(GetParam())) + std::to_string(::getpid()));
  std::filesystem::remove_all(store);
  ServerOptions o;
  o.model_path = KVCODEC_TEST_MODEL;
  o.store_url = "dir://" + store.string();
  o.codec = "raw";
  o.port = 0;
  o.n_ctx = 2048;
  o.link_gbps = 0.004;  // 0.5 MB/s: one 256-token raw chunk (786 KB) takes about 1.6 s
  o.plan_recompute = false;
  o.scheduler = GetParam();
  auto server = CompletionServer::Create(o).value();
  ASSERT_TRUE(server->Start().ok());
  auto post = [&](const std::string& prompt) {
    httplib::Client c("127.0.0.1", server->port());
    c.set_read_timeout(60, 0);
    return c.Post("/v1/completions", Json{{"prompt", prompt}, {"max_tokens", 2}}.dump(), "application/json");
  };
  const std::string prompt =
      ReadTextFile(std::filesystem::path(KVCODEC_TEST_MODEL).parent_path() / "eval.txt").value().substr(0, 1100);
  ASSERT_TRUE(post(prompt));  // stores the prompt's chunk
  ASSERT_TRUE(WaitForServerStores("http://127.0.0.1:" + std::to_string(server->port()), 30).ok());
  const auto start = std::chrono::steady_clock::now();
  std::atomic<double> long_done{0}, short_done{0};
  std::thread slow([&] {
    auto res = post(prompt);
    EXPECT_TRUE(res && res->status == 200);
    if (res) {
      EXPECT_GE(Json::parse(res->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 256);
    }
    long_done = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the slow fetch is under way
  auto res = post("In the beginning God created");
  short_done = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  slow.join();
  ASSERT_TRUE(res && res->status == 200);
  EXPECT_GE(long_done.load(), 1.0) << "the link cap did not slow the fetch";
  if (fifo) {
    EXPECT_GE(short_done.load(), 1.0) << "FIFO let the later request pass the one fetching";
  } else {
    EXPECT_LT(short_done.load(), 0.8 * long_done.load()) << "the request without stored KV waited for the fetch";
  }
  server->Stop();
  std::filesystem::remove_all(store);
}

INSTANTIATE_TEST_SUITE_P(Schedulers, ServerScheduling,
                         ::testing::Values(ServerOptions::Scheduler::kKvAware, ServerOptions::Scheduler::kFifo),
                         [](const auto& info) { return std::string(info.param == ServerOptions::Scheduler::kFifo ? "Fifo" : "KvAware"); });

}  // namespace
}  // namespace kvc
