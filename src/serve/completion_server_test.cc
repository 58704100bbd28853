#include "serve/completion_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/utf8.h"
#include "llama/archs_fixtures.h"
#include "llama/byte_fallback_model.h"
#include "llama/llama_model.h"
#include "llama/llama_session.h"
#include "llama/model_files.h"
#include "serve/completion_client.h"
#include "serve/completion_request.h"

namespace kvc {
namespace {

using Json = nlohmann::json;

// A server-sent-event body: the JSON events, and whether [DONE] ended it. Every event must be
// valid UTF-8 and parse as JSON.
struct Events {
  std::vector<Json> events;
  bool done = false;
  std::string text;           // the concatenated text deltas of choice 0
  std::optional<Json> usage;  // from the last chunk, which has no choices (stream_options.include_usage)
};

Events ParseEvents(const std::string& body, bool chat = false) {
  Events out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string data = body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      out.done = true;
      continue;
    }
    EXPECT_TRUE(IsValidUtf8(data)) << PrintableOneLine(data);
    Json j = Json::parse(data, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << PrintableOneLine(data);
    if (j.is_discarded()) continue;
    EXPECT_TRUE(j.contains("choices") && j["choices"].is_array()) << data;
    if (j["choices"].empty()) {
      EXPECT_FALSE(out.usage.has_value()) << "a second usage chunk";
      out.usage = j["usage"];
    } else {
      EXPECT_FALSE(out.usage.has_value()) << "a chunk after the usage chunk";
      const Json& choice = j["choices"][0];
      EXPECT_FALSE(j.contains("usage")) << "usage on a choice chunk: " << data;
      if (choice["index"] == 0) {
        if (chat && choice["delta"].contains("content")) out.text += choice["delta"]["content"].get<std::string>();
        if (!chat && choice.contains("text")) out.text += choice["text"].get<std::string>();
      }
    }
    out.events.push_back(std::move(j));
  }
  return out;
}

// The value of a counter or gauge series in /metrics text (-1: absent).
double Series(const std::string& metrics, const std::string& series) {
  const size_t at = metrics.find("\n" + series + " ");
  return at == std::string::npos ? -1.0 : std::stod(metrics.substr(at + series.size() + 2));
}

// A plain TCP connection to the server, for clients httplib will not play (slow, rude ones).
int Connect(int port) {
  const int sock = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (sock >= 0 && ::connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(sock);
    return -1;
  }
  return sock;
}

bool SendAll(int sock, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(sock, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Waits up to `timeout_s` for the server to close the connection; what it sent meanwhile, and
// whether it closed.
std::pair<std::string, bool> ReadUntilClosed(int sock, double timeout_s) {
  std::string got;
  const auto start = SteadyClock::now();
  while (SecondsSince(start) < timeout_s) {
    pollfd p{sock, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(sock, buf, sizeof buf, 0);
    if (n <= 0) return {got, true};
    got.append(buf, static_cast<size_t>(n));
  }
  return {got, false};
}

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
    o.hot_tier = false;   // these tests reuse through the store (the hot tier: ReuseTiers below)
    o.cache_ram_mib = 0;  // and neither through the memory tier
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
  // One series of /metrics (-1 when it is missing).
  static double Metric(const std::string& series) { return Series(Client().Get("/metrics")->body, series); }
  // The series once it differs from `before` (or `before` after 10 s).
  static double MetricAfterChange(const std::string& series, double before) {
    double now = before;
    for (int i = 0; i < 400 && now == before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
      now = Metric(series);
    }
    return now;
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
  const Json h = Json::parse(health->body);
  EXPECT_EQ(h["status"], "ok");
  EXPECT_EQ(h["store"]["up"], true) << health->body;
  EXPECT_EQ(h["store"]["url"], "dir://" + store_.string()) << health->body;
  Post("/v1/completions", {{"prompt", "And it came to pass"}, {"max_tokens", 3}});
  auto metrics = Client().Get("/metrics");
  ASSERT_TRUE(metrics);
  for (const char* series :
       {"kvcodec_requests_total{endpoint=\"completions\",status=\"200\"}", "kvcodec_ttft_seconds_bucket",
        "kvcodec_stage_seconds_count{stage=\"prefill\"}", "kvcodec_cached_prompt_tokens_total",
        "kvcodec_fetched_bytes_total", "kvcodec_queue_length{queue=\"waiting\"}",
        "kvcodec_queue_length{queue=\"store\"}", "kvcodec_store_bytes", "kvcodec_store_up 1",
        "kvcodec_store_errors_total 0", "kvcodec_store_reconnects_total 0"}) {
    EXPECT_NE(metrics->body.find(series), std::string::npos) << series;
  }
  // Every family has its # HELP then its # TYPE line, and every series belongs to a family
  // declared before it (histogram series carry _bucket, _sum or _count).
  std::set<std::string> helped, typed;
  std::istringstream lines(metrics->body);
  for (std::string line; std::getline(lines, line);) {
    ASSERT_FALSE(line.empty());
    std::istringstream words(line);
    std::string first, name;
    words >> first;
    if (first == "#") {
      std::string kind;
      words >> kind >> name;
      if (kind == "HELP") helped.insert(name);
      if (kind == "TYPE") {
        EXPECT_TRUE(helped.count(name)) << "no # HELP before # TYPE " << name;
        typed.insert(name);
      }
      continue;
    }
    name = first.substr(0, first.find('{'));
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (!typed.count(name) && name.size() > s.size() && name.ends_with(s)) name.resize(name.size() - s.size());
    }
    EXPECT_TRUE(typed.count(name)) << "series without a family: " << line;
  }
  EXPECT_GE(typed.size(), 17u);
}

TEST_F(ServerTest, ListsTheServedModel) {
  auto res = Client().Get("/v1/models");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const Json list = Json::parse(res->body);
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 1u);
  const Json& model = list["data"][0];
  EXPECT_EQ(model["object"], "model");
  EXPECT_FALSE(model["id"].get<std::string>().empty());
  EXPECT_GT(model["created"].get<int64_t>(), 1700000000);
  // Every response names the same model.
  EXPECT_EQ(Post("/v1/completions", {{"prompt", "And it came to pass"}, {"max_tokens", 1}})["model"], model["id"]);
}

TEST_F(ServerTest, CompletionAndChatShapes) {
  const Json c = Post("/v1/completions", {{"prompt", "And it came to pass"}, {"max_tokens", 5}});
  EXPECT_EQ(c["object"], "text_completion");
  ASSERT_EQ(c["choices"].size(), 1u);
  EXPECT_FALSE(c["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(c["usage"]["completion_tokens"], 5);
  EXPECT_EQ(c["usage"]["total_tokens"], c["usage"]["prompt_tokens"].get<int>() + 5);
  EXPECT_TRUE(c["usage"]["prompt_tokens_details"].contains("cached_tokens"));
  const Json chat =
      Post("/v1/chat/completions",
           {{"messages", {{{"role", "user"}, {"content", "Who went up to Jerusalem?"}}}}, {"max_tokens", 4}});
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(chat["choices"][0]["message"]["content"].is_string());
}

// Events are `data: <json>` lines: a chunk per token, one with finish_reason, then (asked for
// with stream_options.include_usage, as OpenAI has it) one with usage and no choices, then [DONE].
TEST_F(ServerTest, StreamingSendsEventsThenDone) {
  auto res = Client().Post("/v1/completions",
                           Json{{"prompt", "In the beginning"},
                                {"max_tokens", 6},
                                {"stream", true},
                                {"stream_options", {{"include_usage", true}}}}
                               .dump(),
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
  ASSERT_EQ(events.size(), 8u);  // six tokens, the closing event, the usage
  EXPECT_EQ(events[6]["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(events[6].contains("usage"));
  EXPECT_TRUE(events.back()["choices"].empty());
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 6);
  // Without include_usage no chunk carries usage.
  auto plain =
      Client().Post("/v1/completions", Json{{"prompt", "In the beginning"}, {"max_tokens", 3}, {"stream", true}}.dump(),
                    "application/json");
  ASSERT_TRUE(plain);
  const Events e = ParseEvents(plain->body);
  EXPECT_TRUE(e.done);
  EXPECT_FALSE(e.usage.has_value());
  EXPECT_EQ(plain->body.find("\"usage\""), std::string::npos);
}

// A chat stream as OpenAI's: the first delta carries the role (and the first text), no other
// does, and the deltas add up to the non-streaming answer.
TEST_F(ServerTest, ChatStreamNamesTheRoleFirst) {
  const Json body = {{"messages", Json::array({{{"role", "user"}, {"content", "Who is the LORD?"}}})},
                     {"max_tokens", 5}};
  const Json whole = Post("/v1/chat/completions", body);
  Json streaming = body;
  streaming["stream"] = true;
  auto res = Client().Post("/v1/chat/completions", streaming.dump(), "application/json");
  ASSERT_TRUE(res);
  const Events e = ParseEvents(res->body, /*chat=*/true);
  ASSERT_TRUE(e.done);
  ASSERT_GE(e.events.size(), 2u);
  EXPECT_EQ(e.events.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(e.events.front()["choices"][0]["delta"]["content"].is_string());
  for (size_t i = 1; i < e.events.size(); ++i) EXPECT_FALSE(e.events[i]["choices"][0]["delta"].contains("role")) << i;
  EXPECT_EQ(e.text, whole["choices"][0]["message"]["content"]);
}

// Sampling through llama.cpp's chain: the same seed and request give the same text, other
// seeds other texts; temperature 0 (or nothing sent) is greedy.
TEST_F(ServerTest, SamplingIsSeededAndGreedyByDefault) {
  const Json base = {{"prompt", "And the earth was without form"}, {"max_tokens", 12}};
  const std::string greedy = Post("/v1/completions", base)["choices"][0]["text"];
  Json cold = base;
  cold["temperature"] = 0;
  cold["seed"] = 5;
  EXPECT_EQ(Post("/v1/completions", cold)["choices"][0]["text"], greedy);
  auto sampled = [&](int seed) {
    Json body = base;
    body["temperature"] = 1.0;
    body["top_p"] = 0.95;
    body["top_k"] = 50;
    body["presence_penalty"] = 0.3;
    body["seed"] = seed;
    return Post("/v1/completions", body)["choices"][0]["text"].get<std::string>();
  };
  EXPECT_EQ(sampled(1234), sampled(1234));
  std::set<std::string> texts;
  for (int seed = 1; seed <= 5; ++seed) texts.insert(sampled(seed));
  texts.insert(greedy);
  EXPECT_GE(texts.size(), 3u) << "sampling never departs from greedy";
}

// The greedy text of a prompt with a stop string cut from its middle: the answer ends just
// before the stop string with finish_reason "stop", streamed or not, and no event carries any
// part of it.
TEST_F(ServerTest, StopStringsEndTheTextBeforeThem) {
  const Json base = {{"prompt", "And God called the light Day"}, {"max_tokens", 24}};
  const std::string full = Post("/v1/completions", base)["choices"][0]["text"];
  ASSERT_GE(full.size(), 12u) << full;
  // A stop string whose first occurrence is at `cut` (at least a few characters in).
  size_t cut = 0;
  std::string stop;
  for (size_t i = 4; i + 3 <= full.size() && stop.empty(); ++i) {
    const std::string candidate = full.substr(i, 3);
    if (full.find(candidate) == i && IsValidUtf8(candidate)) {
      cut = i;
      stop = candidate;
    }
  }
  ASSERT_FALSE(stop.empty()) << full;
  Json body = base;
  body["stop"] = Json::array({"never appears \x01", stop});
  const Json answer = Post("/v1/completions", body);
  EXPECT_EQ(answer["choices"][0]["text"], full.substr(0, cut));
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(answer["usage"]["completion_tokens"].get<int>(), 24);
  body["stream"] = true;
  auto res = Client().Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  const Events e = ParseEvents(res->body);
  EXPECT_TRUE(e.done);
  // The events add up to exactly the text before the stop: none carried a part of it.
  EXPECT_EQ(e.text, full.substr(0, cut));
  EXPECT_EQ(e.events.back()["choices"][0]["finish_reason"], "stop");
}

// n choices share the prompt's prefill (copied within llama.cpp); each has its index, text and
// finish reason, the usage counts all their tokens, and a long prompt's stored prefix is still
// reused with sampling on.
TEST_F(ServerTest, NChoicesShareTheRestoredPrefix) {
  const std::string prompt =
      ReadTextFile(std::filesystem::path(KVCODEC_TEST_MODEL).parent_path() / "eval.txt").value().substr(3000, 2500);
  const Json body = {{"prompt", prompt}, {"max_tokens", 6}, {"n", 3}, {"temperature", 1.0}, {"seed", 11}};
  const Json first = Post("/v1/completions", body);
  ASSERT_EQ(first["choices"].size(), 3u) << first.dump();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(first["choices"][i]["index"], i);
    EXPECT_TRUE(first["choices"][i]["text"].is_string());
    EXPECT_TRUE(first["choices"][i]["finish_reason"] == "length" || first["choices"][i]["finish_reason"] == "stop");
  }
  EXPECT_GE(first["usage"]["completion_tokens"].get<int>(), 3);
  WaitForStores();
  const Json second = Post("/v1/completions", body);
  EXPECT_GE(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 256) << second.dump();
  // Same seed, lossless reuse: the same three answers.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(second["choices"][i]["text"], first["choices"][i]["text"]) << i;
  // n = 1 with the same seed is the first choice of n = 3.
  Json one = body;
  one["n"] = 1;
  EXPECT_EQ(Post("/v1/completions", one)["choices"][0]["text"], first["choices"][0]["text"]);
  // Streamed: events for every index, then a finish per choice.
  Json streaming = body;
  streaming["stream"] = true;
  streaming["stream_options"] = {{"include_usage", true}};
  auto res = Client().Post("/v1/completions", streaming.dump(), "application/json");
  ASSERT_TRUE(res);
  const Events e = ParseEvents(res->body);
  EXPECT_TRUE(e.done);
  std::vector<std::string> texts(3);
  std::set<int> finished;
  for (const Json& event : e.events) {
    if (event["choices"].empty()) continue;
    const int index = event["choices"][0]["index"];
    ASSERT_TRUE(index >= 0 && index < 3);
    texts[static_cast<size_t>(index)] += event["choices"][0]["text"].get<std::string>();
    if (!event["choices"][0]["finish_reason"].is_null()) finished.insert(index);
  }
  EXPECT_EQ(finished.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(texts[static_cast<size_t>(i)], first["choices"][i]["text"]) << i;
  ASSERT_TRUE(e.usage.has_value());
  EXPECT_EQ((*e.usage)["completion_tokens"], first["usage"]["completion_tokens"]);
  // More choices than sequences is a 400 that says so.
  Json wide = body;
  wide["n"] = 5;
  EXPECT_NE(Post("/v1/completions", wide, 400)["error"]["message"].get<std::string>().find("'n'"), std::string::npos);
}

// Log-probabilities in both of OpenAI's forms: each generated token's, at most 0, with its
// alternatives most likely first; under greedy decoding the token is the first alternative.
TEST_F(ServerTest, LogprobsInTheCompletionsAndChatForms) {
  const Json c = Post("/v1/completions", {{"prompt", "In the beginning"}, {"max_tokens", 5}, {"logprobs", 3}});
  const Json& lp = c["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object()) << c.dump();
  const size_t n = c["usage"]["completion_tokens"];
  ASSERT_EQ(lp["tokens"].size(), n);
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  ASSERT_EQ(lp["text_offset"].size(), n);
  std::string joined;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_EQ(lp["top_logprobs"][i].size(), 3u);
    double best = -1e9;
    for (const auto& [token, value] : lp["top_logprobs"][i].items()) best = std::max(best, value.get<double>());
    EXPECT_DOUBLE_EQ(lp["token_logprobs"][i].get<double>(), best) << "greedy picks the most likely token";
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), joined.size());
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, c["choices"][0]["text"]);  // the tokens spell the text (no byte-fallback pieces here)
  const Json chat = Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Who?"}}}},
                                                  {"max_tokens", 4},
                                                  {"logprobs", true},
                                                  {"top_logprobs", 2}});
  const Json& content = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), chat["usage"]["completion_tokens"].get<size_t>()) << chat.dump();
  for (const Json& t : content) {
    EXPECT_TRUE(t["token"].is_string());
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    EXPECT_EQ(t["bytes"].size(), t["token"].get<std::string>().size());
    ASSERT_EQ(t["top_logprobs"].size(), 2u);
    EXPECT_GE(t["top_logprobs"][0]["logprob"].get<double>(), t["top_logprobs"][1]["logprob"].get<double>());
  }
  // Without logprobs asked for, the field is null.
  EXPECT_TRUE(Post("/v1/completions", {{"prompt", "x y"}, {"max_tokens", 1}})["choices"][0]["logprobs"].is_null());
}

// echo starts the text with the prompt; a prompt of token ids is used as it is (here: the same
// tokens the text prompt makes, so the same answer); /tokenize and /detokenize as llama.cpp's.
TEST_F(ServerTest, EchoTokenPromptsAndTokenize) {
  const std::string prompt = "And the evening and the morning";
  const Json plain = Post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 4}});
  const std::string text = plain["choices"][0]["text"];
  EXPECT_EQ(Post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 4}, {"echo", true}})["choices"][0]["text"],
            prompt + text);
  const Json tokens = Post("/tokenize", {{"content", prompt}, {"add_special", true}});
  ASSERT_TRUE(tokens["tokens"].is_array());
  EXPECT_EQ(tokens["tokens"].size(), plain["usage"]["prompt_tokens"].get<size_t>());
  const Json by_ids = Post("/v1/completions", {{"prompt", tokens["tokens"]}, {"max_tokens", 4}});
  EXPECT_EQ(by_ids["choices"][0]["text"], text);
  EXPECT_EQ(by_ids["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"]);
  const Json without_bos = Post("/tokenize", {{"content", prompt}});
  EXPECT_EQ(Post("/detokenize", {{"tokens", without_bos["tokens"]}})["content"], prompt);
  const Json pieces = Post("/tokenize", {{"content", prompt}, {"with_pieces", true}});
  std::string spelled;
  for (const Json& p : pieces["tokens"]) spelled += p["piece"].get<std::string>();
  EXPECT_EQ(spelled, " " + prompt);  // the pieces keep the tokenizer's space prefix; detokenizing drops it
  // Ids outside the vocabulary are refused, never looked up.
  Post("/v1/completions", {{"prompt", {1, 1 << 30}}, {"max_tokens", 1}}, 400);
  Post("/detokenize", {{"tokens", {1 << 30}}}, 400);
  Post("/tokenize", {{"text", prompt}}, 400);
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
  EXPECT_TRUE(Json::parse(missing->body)["error"]["message"].is_string());
}

// A body over the limit (1 MiB by default) is a 413 with a JSON error, whether it says its
// length or comes in chunks, and is never read whole, let alone tokenized (an 8 MB prompt
// took 12 s of CPU to be told it did not fit).
TEST_F(ServerTest, OversizedBodyIs413WithAJsonError) {
  const std::string huge = Json{{"prompt", std::string(8 << 20, 'a')}, {"max_tokens", 1}}.dump();
  auto sized = Client().Post("/v1/completions", huge, "application/json");
  ASSERT_TRUE(sized);
  EXPECT_EQ(sized->status, 413);
  const Json error = Json::parse(sized->body, nullptr, false);
  ASSERT_TRUE(error.contains("error")) << sized->body.substr(0, 200);
  EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  EXPECT_NE(error["error"]["message"].get<std::string>().find("1048576 bytes"), std::string::npos);

  size_t sent = 0;
  auto chunked = Client().Post(
      "/v1/chat/completions",
      [&](size_t, httplib::DataSink& sink) {
        const std::string piece =
            sent == 0 ? R"({"messages": [{"role": "user", "content": ")" : std::string(64 << 10, 'b');
        sent += piece.size();
        if (sent > (4u << 20)) {
          sink.done();
          return true;
        }
        return sink.write(piece.data(), piece.size());
      },
      "application/json");
  if (chunked) {  // the server may close before the client has sent it all
    EXPECT_EQ(chunked->status, 413);
    EXPECT_TRUE(Json::parse(chunked->body, nullptr, false).contains("error")) << chunked->body.substr(0, 200);
  }
  EXPECT_EQ(Client().Get("/health")->status, 200);
  const std::string metrics = Client().Get("/metrics")->body;
  EXPECT_GE(Series(metrics, "kvcodec_requests_total{endpoint=\"completions\",status=\"413\"}"), 1) << metrics;
}

// A prompt that cannot fit the context is refused by its length, before tokenizing: the bound
// is the model's longest token, so it never refuses a prompt that fits.
TEST_F(ServerTest, PromptThatCannotFitIsRejectedBeforeTokenizing) {
  const Json err = Post("/v1/completions", {{"prompt", std::string(900 << 10, 'a')}, {"max_tokens", 1}}, 400);
  EXPECT_NE(err["error"]["message"].get<std::string>().find("at least"), std::string::npos) << err.dump();
  // The bound holds on real text: never more bytes per token than the longest piece.
  auto model = LlamaModel::Load(KVCODEC_TEST_MODEL);
  ASSERT_TRUE(model.ok());
  const size_t longest = (*model)->max_token_bytes();
  ASSERT_GT(longest, 0u);
  const std::string text =
      ReadTextFile(std::filesystem::path(KVCODEC_TEST_MODEL).parent_path() / "eval.txt").value().substr(0, 20000);
  for (size_t len : {size_t{1}, size_t{7}, size_t{100}, size_t{5000}, text.size()}) {
    const auto tokens = (*model)->Tokenize(text.substr(0, len), false);
    ASSERT_TRUE(tokens.ok());
    EXPECT_GE(tokens->size() * longest, len);
  }
}

// A non-streaming client that leaves before its answer frees its sequence as a streaming one
// does: the generation stops long before its budget and the disconnect is counted.
TEST_F(ServerTest, NonStreamingClientThatLeavesFreesItsSequence) {
  const double tokens_before = Metric("kvcodec_completion_tokens_total");
  const double disconnects_before = Metric("kvcodec_client_disconnects_total");
  httplib::Client c("127.0.0.1", server_->port());
  c.set_read_timeout(0, 500000);  // gives up after half a second of silence, closing the connection
  auto res =
      c.Post("/v1/completions", Json{{"prompt", "And God said"}, {"max_tokens", 1900}}.dump(), "application/json");
  EXPECT_FALSE(res);
  c.stop();
  EXPECT_EQ(MetricAfterChange("kvcodec_client_disconnects_total", disconnects_before), disconnects_before + 1);
  EXPECT_LT(Metric("kvcodec_completion_tokens_total") - tokens_before, 1900);
  EXPECT_EQ(Metric("kvcodec_queue_length{queue=\"running\"}"), 0);
  EXPECT_GE(Metric("kvcodec_requests_total{endpoint=\"completions\",status=\"499\"}"), 1);
  EXPECT_EQ(Post("/v1/completions", {{"prompt", "And God saw"}, {"max_tokens", 2}})["usage"]["completion_tokens"], 2);
}

// 150 clients that send a request line a byte a second hold a connection each, but not the
// server: /health and a completion are answered meanwhile (with a fixed pool of 64 connection
// threads they waited behind the slow clients, and failed).
TEST_F(ServerTest, SlowClientsDoNotStarveOthers) {
  struct Slow {
    int sock;
    size_t sent;
  };
  const std::string line = "POST /v1/completions HTTP/1.1\r\n";
  std::mutex mu;
  std::vector<Slow> slow;
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop) {
      for (int k = 0; k < 10 && !stop; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard lock(mu);
      for (Slow& s : slow) {
        if (s.sent < line.size() && SendAll(s.sock, line.substr(s.sent, 1))) ++s.sent;
      }
    }
  });
  struct Cleanup {
    std::function<void()> fn;
    ~Cleanup() { fn(); }
  } cleanup{[&] {
    stop = true;
    trickle.join();
    for (const Slow& s : slow) ::close(s.sock);
  }};
  const auto t_start = SteadyClock::now();
  for (int i = 0; i < 150; ++i) {
    const int sock = Connect(server_->port());
    ASSERT_GE(sock, 0);
    ASSERT_TRUE(SendAll(sock, line.substr(0, 1)));
    std::lock_guard lock(mu);
    slow.push_back({sock, 1});
  }
  // A burst of connections is taken in at once (with a listen backlog of 5, SYNs were dropped
  // and each retry came a second later: 14 s for these 150). Generous: it takes milliseconds.
  EXPECT_LT(SecondsSince(t_start), 8.0) << "150 connections took this long to be accepted";
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // every slow connection is being read
  for (int i = 0; i < 3; ++i) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_connection_timeout(10, 0);
    c.set_read_timeout(10, 0);  // generous: answered at once when nothing starves it
    auto health = c.Get("/health");
    ASSERT_TRUE(health) << "GET /health " << i << " failed with 150 slow clients connected";
    EXPECT_EQ(health->status, 200);
  }
  httplib::Client c("127.0.0.1", server_->port());
  c.set_read_timeout(30, 0);
  auto res =
      c.Post("/v1/completions", Json{{"prompt", "And it came to pass"}, {"max_tokens", 2}}.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

// One connection serves several requests in turn (keep-alive through the server's own
// connection loop).
TEST_F(ServerTest, KeepAliveConnectionServesSeveralRequests) {
  httplib::Client c("127.0.0.1", server_->port());
  c.set_keep_alive(true);
  c.set_read_timeout(60, 0);
  for (int i = 0; i < 3; ++i) {
    auto health = c.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    auto res =
        c.Post("/v1/completions", Json{{"prompt", "In the beginning"}, {"max_tokens", 2}}.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(Json::parse(res->body)["usage"]["completion_tokens"], 2);
  }
}

// Concurrent streaming and non-streaming clients all get well-formed answers.
TEST_F(ServerTest, ConcurrentRequestsAreAllServed) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      const bool stream = i % 2 == 1;
      auto res = Client().Post(
          "/v1/completions",
          Json{{"prompt", "And the LORD spake unto Moses " + std::to_string(i)}, {"max_tokens", 4}, {"stream", stream}}
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
      if (r.contains("usage") &&
          (r["usage"]["completion_tokens"] == 48 || r["choices"][0]["finish_reason"] == "stop")) {
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
  const double tokens_before = Metric("kvcodec_completion_tokens_total");
  const double disconnects_before = Metric("kvcodec_client_disconnects_total");
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
  EXPECT_EQ(MetricAfterChange("kvcodec_client_disconnects_total", disconnects_before), disconnects_before + 1);
  EXPECT_LT(Metric("kvcodec_completion_tokens_total") - tokens_before, 1900);
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

// A damaged chunk (here: a byte of every stored chunk object changed) is never restored: the
// request recomputes, answers the same, and /metrics counts it.
TEST_F(ServerTest, ADamagedChunkIsRecomputedAndCounted) {
  const std::string prompt =
      ReadTextFile(std::filesystem::path(KVCODEC_TEST_MODEL).parent_path() / "eval.txt").value().substr(9000, 2500);
  const Json first = Post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 6}});
  WaitForStores();
  const double before = Metric("kvcodec_damaged_chunks_total");
  ASSERT_GE(before, 0);
  size_t changed = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(store_ / "objects")) {
    if (!entry.is_regular_file() || entry.path().extension() == ".manifest") continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(120);
    const char c = static_cast<char>(f.get());
    f.seekp(120);
    f.put(static_cast<char>(c ^ 0x5a));
    ++changed;
  }
  ASSERT_GE(changed, 2u);
  const Json second = Post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 6}});
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
  EXPECT_EQ(Metric("kvcodec_damaged_chunks_total"), before + 1);
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
  o.hot_tier = false;  // the repeat must come over the link
  o.cache_ram_mib = 0;
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
                         [](const auto& info) {
                           return std::string(info.param == ServerOptions::Scheduler::kFifo ? "Fifo" : "KvAware");
                         });

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

ServerOptions TestServerOptions(const std::filesystem::path& store) {
  ServerOptions o;
  o.model_path = KVCODEC_TEST_MODEL;
  o.store_url = "dir://" + store.string();
  o.codec = "raw";
  o.port = 0;
  o.n_ctx = 512;
  o.cache_ram_mib = 0;  // reuse goes through the store (the memory tier: ReuseTiers)
  return o;
}

// --api-key: every endpoint but /health and /metrics needs the bearer key (a 401 JSON error
// otherwise); --metrics-key guards /metrics too.
TEST(ServerAuth, ApiKeyAndMetricsKey) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvc-server-auth-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ServerOptions o = TestServerOptions(dir / "store");
  o.api_key = "sk-test";
  auto server = CompletionServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE((*server)->Start().ok());
  httplib::Client c("127.0.0.1", (*server)->port());
  c.set_read_timeout(60, 0);
  const std::string body = Json{{"prompt", "In the beginning"}, {"max_tokens", 2}}.dump();
  for (const char* header : {"", "Bearer wrong", "Bearer sk-tes", "Bearer sk-test2", "sk-test"}) {
    httplib::Headers headers;
    if (*header) headers.emplace("Authorization", header);
    auto res = c.Post("/v1/completions", headers, body, "application/json");
    ASSERT_TRUE(res) << header;
    EXPECT_EQ(res->status, 401) << header;
    EXPECT_EQ(Json::parse(res->body)["error"]["code"], "invalid_api_key");
    auto models = c.Get("/v1/models", headers);
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 401);
  }
  const httplib::Headers key = {{"Authorization", "Bearer sk-test"}};
  auto ok = c.Post("/v1/completions", key, body, "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(c.Get("/health")->status, 200);
  auto metrics = c.Get("/metrics");
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(Series(metrics->body, "kvcodec_requests_total{endpoint=\"completions\",status=\"401\"}"), 5)
      << metrics->body;
  EXPECT_EQ(Series(metrics->body, "kvcodec_requests_total{endpoint=\"models\",status=\"401\"}"), 5) << metrics->body;
  // llama-server's X-Api-Key header carries the key too.
  EXPECT_EQ(c.Post("/v1/completions", {{"X-Api-Key", "sk-test"}}, body, "application/json")->status, 200);
  (*server)->Stop();

  o.metrics_key = "metrics-secret";
  auto guarded = CompletionServer::Create(o);
  ASSERT_TRUE(guarded.ok());
  ASSERT_TRUE((*guarded)->Start().ok());
  httplib::Client g("127.0.0.1", (*guarded)->port());
  EXPECT_EQ(g.Get("/metrics")->status, 401);
  EXPECT_EQ(g.Get("/metrics", key)->status, 401);  // the API key is not the metrics key
  EXPECT_EQ(g.Get("/metrics", {{"Authorization", "Bearer metrics-secret"}})->status, 200);
  EXPECT_EQ(g.Get("/health")->status, 200);
  (*guarded)->Stop();
  std::filesystem::remove_all(dir);
}

// A user's own model, with neither a calibration nor a quality profile beside it: serve starts
// with the default codec (kvtc, which needs a calibration), and stores and reuses only the
// lossless rungs (raw fp16 and planes): no lossy rung was measured on this model.
TEST(ServerUnprofiledModel, ServesAndStoresOnlyTheLosslessRungs) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvc-server-unprofiled-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "model");
  std::filesystem::copy_file(KVCODEC_TEST_MODEL, dir / "model" / "m.gguf");
  ServerOptions o = TestServerOptions(dir / "store");
  o.model_path = (dir / "model" / "m.gguf").string();
  o.codec = "kvtc";
  o.n_ctx = 2048;
  auto server = CompletionServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE((*server)->Start().ok());
  const std::string url = "http://127.0.0.1:" + std::to_string((*server)->port());
  httplib::Client c("127.0.0.1", (*server)->port());
  c.set_read_timeout(60, 0);
  const std::string prompt =
      ReadTextFile(std::filesystem::path(KVCODEC_TEST_MODEL).parent_path() / "eval.txt").value().substr(0, 2500);
  auto complete = [&] {
    auto res = c.Post("/v1/completions", Json{{"prompt", prompt}, {"max_tokens", 6}}.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
    return res ? Json::parse(res->body, nullptr, false) : Json();
  };
  const Json first = complete();
  const Status drained = WaitForServerStores(url, 30);
  ASSERT_TRUE(drained.ok()) << drained.ToString();
  std::vector<std::string> objects;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir / "store" / "objects")) {
    if (e.is_regular_file()) objects.push_back(e.path().filename().string());
  }
  ASSERT_FALSE(objects.empty());
  for (const std::string& name : objects) {
    EXPECT_TRUE(name.ends_with(".raw.fp16") || name.ends_with(".planes.lossless") || name.ends_with(".manifest") ||
                name.ends_with(".tails"))
        << name;
  }
  const Json second = complete();
  EXPECT_GE(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 512);
  EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
  (*server)->Stop();
  std::filesystem::remove_all(dir);
}

// Chat through a chat template (here llama.cpp's built-in chatml, as --chat-template names it):
// the prompt evaluated is the template's text; a template llama.cpp cannot apply is refused when
// the server starts.
TEST(ServerChatTemplate, ChatUsesTheTemplate) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvc-server-template-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ServerOptions o = TestServerOptions(dir / "store");
  o.chat_template = "chatml";
  auto server = CompletionServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE((*server)->Start().ok());
  httplib::Client c("127.0.0.1", (*server)->port());
  c.set_read_timeout(60, 0);
  auto post = [&](const char* path, const Json& body) {
    auto res = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
    return res ? Json::parse(res->body, nullptr, false) : Json();
  };
  const Json chat =
      post("/v1/chat/completions",
           {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Who?"}}}},
            {"max_tokens", 3}});
  const std::string templated =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWho?<|im_end|>\n<|im_start|>assistant\n";
  const Json tokens = post("/tokenize", {{"content", templated}, {"add_special", true}});
  EXPECT_EQ(chat["usage"]["prompt_tokens"], tokens["tokens"].size());
  // The same prompt as a completion gives the same answer.
  EXPECT_EQ(post("/v1/completions", {{"prompt", tokens["tokens"]}, {"max_tokens", 3}})["choices"][0]["text"],
            chat["choices"][0]["message"]["content"]);
  (*server)->Stop();
  o.chat_template = "no such template {{ at all";
  auto refused = CompletionServer::Create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("chat template"), std::string::npos) << refused.status().ToString();
  std::filesystem::remove_all(dir);
}

// --alias names the model for clients: /v1/models and every response carry it.
TEST(ServerAlias, TheAliasIsTheModelId) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvc-server-alias-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ServerOptions o = TestServerOptions(dir / "store");
  o.alias = "bible-small";
  auto server = CompletionServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE((*server)->Start().ok());
  httplib::Client c("127.0.0.1", (*server)->port());
  c.set_read_timeout(60, 0);
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(Json::parse(models->body)["data"][0]["id"], "bible-small");
  auto chat =
      c.Post("/v1/chat/completions",
             Json{{"messages", Json::array({{{"role", "user"}, {"content", "Who?"}}})}, {"max_tokens", 1}}.dump(),
             "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(Json::parse(chat->body)["model"], "bible-small");
  (*server)->Stop();
  std::filesystem::remove_all(dir);
}

// A byte-fallback model spells a character outside its vocabulary over several tokens, each a
// lone byte that is not UTF-8 on its own. Such a copy of the test model (the same weights, so
// the same tokens, some now spelling "中" and "😀" and others stray bytes) must stream and
// answer valid UTF-8 without taking the server down (it ended the process at the first such
// token, with every request in flight).
TEST(ServerByteFallback, StreamsCjkAndEmojiAsValidUtf8) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvc-server-bytes-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string prompt = "And it came to pass";
  constexpr uint32_t kTokens = 48;
  std::vector<int32_t> generated;
  std::string expected;
  {
    auto original = LlamaModel::Load(KVCODEC_TEST_MODEL);
    ASSERT_TRUE(original.ok());
    auto plan = PlanByteFallback(**original, prompt, kTokens);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    generated = plan->generated;
    auto made = MakeByteFallbackModel(KVCODEC_TEST_MODEL, (dir / "bytes.gguf").string(), plan->bytes);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    auto modified = LlamaModel::Load(*made);
    ASSERT_TRUE(modified.ok()) << modified.status().ToString();
    EXPECT_EQ((*modified)->Tokenize(prompt, true).value(), plan->prompt_tokens);
    const std::string bytes = TokenBytes(**modified, generated);
    ASSERT_FALSE(IsValidUtf8(bytes));  // stray bytes too, not only the two characters
    expected = ToValidUtf8(bytes);
    ASSERT_NE(expected.find(kByteFallbackCjk), std::string::npos);
    ASSERT_NE(expected.find(kByteFallbackEmoji), std::string::npos);
  }
  ServerOptions o = TestServerOptions(dir / "store");
  o.model_path = (dir / "bytes.gguf").string();
  auto server = CompletionServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE((*server)->Start().ok());
  const int port = (*server)->port();
  auto post = [&](bool stream) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    Json body = {{"prompt", prompt}, {"max_tokens", generated.size()}, {"stream", stream}};
    if (stream) body["stream_options"] = {{"include_usage", true}};
    return c.Post("/v1/completions", body.dump(), "application/json");
  };
  // Two streams at once (both died before), then a plain answer.
  std::vector<std::optional<httplib::Result>> streamed(2);
  {
    std::vector<std::thread> clients;
    for (auto& r : streamed) clients.emplace_back([&] { r.emplace(post(true)); });
    for (auto& t : clients) t.join();
  }
  for (const auto& result : streamed) {
    ASSERT_TRUE(result && *result) << "the server died";
    const httplib::Response& r = result->value();
    EXPECT_EQ(r.status, 200);
    const Events e = ParseEvents(r.body);
    EXPECT_TRUE(e.done);
    EXPECT_TRUE(IsValidUtf8(e.text));
    EXPECT_EQ(e.text, expected) << PrintableOneLine(e.text) << " vs " << PrintableOneLine(expected);
    ASSERT_TRUE(e.usage.has_value());
    EXPECT_EQ((*e.usage)["completion_tokens"], generated.size());
  }
  auto plain = post(false);
  ASSERT_TRUE(plain) << "the server died";
  ASSERT_EQ(plain->status, 200) << plain->body;
  const Json answer = Json::parse(plain->body, nullptr, false);
  ASSERT_FALSE(answer.is_discarded());
  EXPECT_EQ(answer["choices"][0]["text"], expected);
  httplib::Client c("127.0.0.1", port);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(Series(metrics->body, "kvcodec_requests_total{endpoint=\"completions\",status=\"200\"}"), 3)
      << metrics->body;
  EXPECT_EQ(metrics->body.find("status=\"500\""), std::string::npos) << metrics->body;
  (*server)->Stop();
  std::filesystem::remove_all(dir);
}

class ServerLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::filesystem::temp_directory_path() / ("kvc-server-limits-" + std::to_string(::getpid()));
    std::filesystem::remove_all(store_);
  }
  void TearDown() override { std::filesystem::remove_all(store_); }
  std::filesystem::path store_;
};

// A request must arrive whole within the request timeout: a client that trickles its headers
// or its body a byte at a time (each within the 5 s read timeout, which alone never cut it off)
// gets a 408 and its connection closed.
TEST_F(ServerLimits, RequestThatDoesNotArriveInTimeIs408) {
  ServerOptions o = TestServerOptions(store_);
  o.request_timeout_s = 2;
  auto server = CompletionServer::Create(o).value();
  ASSERT_TRUE(server->Start().ok());
  const std::string headers =
      "Host: 127.0.0.1\r\nContent-Type: application/json\r\nX-Padding: " + std::string(80, 'a') + "\r\n";
  const std::string body = R"({"prompt": "In the beginning", "max_tokens": 2})" + std::string(60, ' ');
  struct Case {
    std::string sent_at_once, trickled;
  };
  const Case cases[] = {
      {"POST /v1/completions HTTP/1.1\r\n", headers},
      {"POST /v1/completions HTTP/1.1\r\n" + headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n",
       body},
  };
  for (const Case& c : cases) {
    const int sock = Connect(server->port());
    ASSERT_GE(sock, 0);
    ASSERT_TRUE(SendAll(sock, c.sent_at_once));
    std::atomic<bool> stop{false};
    std::thread trickle([&] {
      for (size_t i = 0; !stop && i < c.trickled.size(); ++i) {
        if (!SendAll(sock, c.trickled.substr(i, 1))) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    });
    const auto [got, closed] = ReadUntilClosed(sock, 25);
    stop = true;
    trickle.join();
    ::close(sock);
    EXPECT_TRUE(closed) << "the connection was still open after 25 s";
    EXPECT_NE(got.find("HTTP/1.1 408"), std::string::npos) << got;
    EXPECT_NE(got.find("\"error\""), std::string::npos) << got;
  }
  httplib::Client client("127.0.0.1", server->port());
  EXPECT_EQ(client.Get("/health")->status, 200);
  const std::string metrics = client.Get("/metrics")->body;
  EXPECT_EQ(Series(metrics, "kvcodec_requests_total{endpoint=\"completions\",status=\"408\"}"), 2) << metrics;
  server->Stop();
}

// A second server on a port one already listens on fails to start, saying why (with
// SO_REUSEPORT it started, and the two shared the port's connections).
TEST_F(ServerLimits, ASecondServerOnABusyPortFails) {
  ServerOptions o = TestServerOptions(store_);
  auto first = CompletionServer::Create(o).value();
  ASSERT_TRUE(first->Start().ok());
  o.port = first->port();
  auto second = CompletionServer::Create(o).value();
  const Status started = second->Start();
  EXPECT_FALSE(started.ok());
  EXPECT_NE(started.message().find("in use"), std::string::npos) << started.ToString();
  second->Stop();
  httplib::Client c("127.0.0.1", first->port());
  EXPECT_EQ(c.Get("/health")->status, 200);
  first->Stop();
}

// Sends `request` on a new connection and reads until the server closes it (or `timeout_s`
// passes): what the server answered, and whether it closed the connection.
std::pair<std::string, bool> Exchange(int port, const std::string& request, double timeout_s = 20) {
  const int sock = Connect(port);
  if (sock < 0) return {"", false};
  (void)SendAll(sock, request);  // the server may stop reading before the end
  auto got = ReadUntilClosed(sock, timeout_s);
  ::close(sock);
  return got;
}

// The statuses of the HTTP answers in `bytes`, in order.
std::vector<int> Statuses(const std::string& bytes) {
  std::vector<int> out;
  for (size_t at = bytes.find("HTTP/1.1 "); at != std::string::npos; at = bytes.find("HTTP/1.1 ", at + 1)) {
    out.push_back(std::atoi(bytes.c_str() + at + 9));
  }
  return out;
}

// The JSON error message of a single answer ("" when its body is not one).
std::string ErrorMessage(const std::string& answer) {
  const size_t body = answer.find("\r\n\r\n");
  if (body == std::string::npos) return "";
  const Json j = Json::parse(answer.substr(body + 4), nullptr, false);
  if (j.is_discarded() || !j.contains("error") || !j["error"]["message"].is_string()) return "";
  return j["error"]["message"];
}

// A request whose head leaves where its body ends open to two readings (RFC 9112 §6.3: several
// or malformed Content-Length values, Transfer-Encoding beside Content-Length or with another
// coding, a body on a GET, a header a proxy and httplib read apart) is refused with one JSON
// error, and its connection closed: the request in its body is never answered (behind a proxy
// that read the head the other way, it would be another client's request, smuggled).
TEST_F(ServerTest, AmbiguousRequestFramingIsRefusedAndTheConnectionClosed) {
  const std::string smuggled = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string post = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  struct Case {
    std::string name, request;
    int status;
  };
  const Case cases[] = {
      {"two lengths", post + "Content-Length: 2\r\nContent-Length: 60\r\n\r\n{}" + smuggled, 400},
      {"one length twice", post + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}" + smuggled, 400},
      {"a negative length", post + "Content-Length: -5\r\n\r\n{}" + smuggled, 400},
      {"a list of lengths", post + "Content-Length: 2, 2\r\n\r\n{}" + smuggled, 400},
      {"a signed length", post + "Content-Length: +2\r\n\r\n{}" + smuggled, 400},
      {"chunked and a length", post + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n" + smuggled,
       400},
      {"a length and chunked", post + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
       400},
      {"chunked twice", post + "Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n" + smuggled, 400},
      {"another coding", post + "Transfer-Encoding: gzip\r\n\r\n" + smuggled, 501},
      {"a space before the colon", post + "Content-Length : 60\r\nContent-Length: 2\r\n\r\n{}" + smuggled, 400},
      {"a folded line", post + "X-A: b\r\n Content-Length: 60\r\nContent-Length: 2\r\n\r\n{}" + smuggled, 400},
      {"a bare LF", post + "Content-Length: 60\nContent-Length: 2\r\n\r\n{}" + smuggled, 400},
      {"a GET with a body",
       "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(smuggled.size()) + "\r\n\r\n" + smuggled,
       400},
      {"a POST without a length", post + "\r\n" + smuggled, 411},
  };
  for (const Case& c : cases) {
    const auto [got, closed] = Exchange(server_->port(), c.request);
    EXPECT_TRUE(closed) << c.name;
    EXPECT_EQ(Statuses(got), std::vector<int>{c.status}) << c.name << ": " << PrintableOneLine(got);
    EXPECT_NE(ErrorMessage(got), "") << c.name << ": " << PrintableOneLine(got);
  }
  EXPECT_EQ(Client().Get("/health")->status, 200);
}

// A request line too long is a 414 and headers too large a 431, each with a JSON error (a 70 KB
// URL got an empty reply, a long header line a bare 400).
TEST_F(ServerTest, LongRequestLinesAre414AndLargeHeaders431) {
  std::string many = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 1000; ++i) many += "X-Header-" + std::to_string(i) + ": " + std::string(80, 'c') + "\r\n";
  many += "\r\n";
  struct Case {
    std::string name, request;
    int status;
  };
  const Case cases[] = {
      {"a 70 KB URL", "GET /v1/" + std::string(70000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n", 414},
      {"a 9 KB URL", "GET /v1/" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n", 414},
      {"a 10 KB header", "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(10000, 'b') + "\r\n\r\n", 431},
      {"90 KB of headers", many, 431},
  };
  for (const Case& c : cases) {
    const auto [got, closed] = Exchange(server_->port(), c.request);
    EXPECT_TRUE(closed) << c.name;
    EXPECT_EQ(Statuses(got), std::vector<int>{c.status}) << c.name << ": " << PrintableOneLine(got.substr(0, 300));
    EXPECT_NE(ErrorMessage(got), "") << c.name << ": " << PrintableOneLine(got.substr(0, 300));
  }
  EXPECT_EQ(Client().Get("/health")->status, 200);
}

// /tokenize and /detokenize read their bodies as the completions do: up to the body limit
// (1 MiB here; they got a bare 400 past 64 KiB), and a 413 with a JSON error past it.
TEST_F(ServerTest, TokenizeAndDetokenizeTakeBodiesUpToTheLimit) {
  std::string text;
  while (text.size() < 300000) text += "And it came to pass, that the LORD spake. ";
  const Json tokens = Post("/tokenize", {{"content", text}});
  ASSERT_TRUE(tokens.contains("tokens") && tokens["tokens"].is_array()) << tokens.dump().substr(0, 200);
  EXPECT_GT(tokens["tokens"].size(), 10000u);
  const Json back = Post("/detokenize", {{"tokens", tokens["tokens"]}});
  EXPECT_EQ(back["content"], text);
  const Json over = Post("/tokenize", {{"content", std::string(2 << 20, 'a')}}, 413);
  EXPECT_NE(over["error"]["message"].get<std::string>().find("1048576 bytes"), std::string::npos) << over.dump();
}

// A chunked body over the limit is a 413, on every POST endpoint, whether its chunks are large
// or so small that their framing outgrows the bytes allowed for it (it was a 400).
TEST_F(ServerTest, ChunkedBodyOverTheLimitIs413) {
  auto chunked = [](const std::string& path, const std::string& start, size_t chunk, size_t chunks) {
    std::string out = "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                      "Transfer-Encoding: chunked\r\n\r\n" + FormatMessage("%zx\r\n", start.size()) + start + "\r\n";
    const std::string piece = FormatMessage("%zx\r\n", chunk) + std::string(chunk, 'x') + "\r\n";
    for (size_t i = 0; i < chunks; ++i) out += piece;
    return out + "0\r\n\r\n";
  };
  struct Case {
    std::string name, request;
  };
  const Case cases[] = {
      {"tokenize, 64 KiB chunks", chunked("/tokenize", R"({"content": ")", 64 << 10, 20)},
      {"completions, 64 KiB chunks", chunked("/v1/completions", R"({"prompt": ")", 64 << 10, 20)},
      {"completions, 1-byte chunks", chunked("/v1/completions", R"({"prompt": ")", 1, 400000)},
  };
  for (const Case& c : cases) {
    const auto [got, closed] = Exchange(server_->port(), c.request);
    EXPECT_TRUE(closed) << c.name;
    EXPECT_EQ(Statuses(got), std::vector<int>{413}) << c.name << ": " << PrintableOneLine(got.substr(0, 300));
    EXPECT_NE(ErrorMessage(got).find("1048576 bytes"), std::string::npos) << c.name << ": " << PrintableOneLine(got);
  }
}

// More clients than --max-connections, each holding a connection thread with a body it sends a
// byte a second (under every timeout), and more sending their heads as slowly: /health and
// /metrics are still answered, on the threads kept for them, while every slow client is still
// connected (they waited for a thread, until the slow requests' 30 s deadline).
TEST_F(ServerLimits, HealthIsAnsweredWhileSlowClientsHoldEveryConnectionThread) {
  ServerOptions o = TestServerOptions(store_);
  o.max_connections = 2;
  auto server = CompletionServer::Create(o).value();
  ASSERT_TRUE(server->Start().ok());
  const std::string body_head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{";
  const std::string head_only = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  std::vector<int> slow;
  std::mutex mu;
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop) {
      for (int k = 0; k < 10 && !stop; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard lock(mu);
      for (const int sock : slow) (void)SendAll(sock, " ");
    }
  });
  struct Cleanup {
    std::function<void()> fn;
    ~Cleanup() { fn(); }
  } cleanup{[&] {
    stop = true;
    trickle.join();
    for (const int sock : slow) ::close(sock);
  }};
  for (int i = 0; i < 8; ++i) {
    const int sock = Connect(server->port());
    ASSERT_GE(sock, 0);
    ASSERT_TRUE(SendAll(sock, i < 4 ? body_head : head_only));
    std::lock_guard lock(mu);
    slow.push_back(sock);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // both threads are taken
  for (const char* path : {"/health", "/metrics", "/health"}) {
    httplib::Client c("127.0.0.1", server->port());
    c.set_connection_timeout(10, 0);
    c.set_read_timeout(10, 0);  // generous: answered at once when nothing starves it
    auto res = c.Get(path);
    ASSERT_TRUE(res) << "GET " << path << " failed with every connection thread held by a slow client";
    EXPECT_EQ(res->status, 200) << path;
  }
  // The slow clients were not cut off to make room.
  std::lock_guard lock(mu);
  for (const int sock : slow) {
    pollfd p{sock, static_cast<short>(POLLIN | POLLRDHUP), 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0) << "a slow client's connection was closed or answered";
  }
}

// ---- Models without a tokenizer, a BOS or a KV cache: llama.cpp's random-weight fixtures ------

// A model with no tokenizer and no BOS (serve once measured its prefill speed on 64 copies of
// the BOS id and would not start): it starts, answers prompts of token ids as given (no BOS
// added), reuses their stored chunks, and refuses text with a 400 that says why.
TEST(ServerWithoutTokenizer, ServesTokenIdsAndRefusesText) {
  KVC_SKIP_WITHOUT_FIXTURE("llama-dense");
  const std::filesystem::path model = archs::Path("llama-dense");
  const auto dir = std::filesystem::temp_directory_path() / ("kvc-server-no-vocab-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ServerOptions o = TestServerOptions(dir / "store");
  o.model_path = model.string();
  o.n_ctx = 128;  // the fixture's training context is 256
  o.parallel = 2;
  o.chunk_tokens = 16;
  auto server = CompletionServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE((*server)->Start().ok());
  httplib::Client c("127.0.0.1", (*server)->port());
  c.set_read_timeout(60, 0);
  auto post = [&](const char* path, const Json& body, int status) {
    auto res = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res && res->status == status) << path << ": " << (res ? res->body : "no answer");
    EXPECT_TRUE(res && IsValidUtf8(res->body)) << path;
    return res ? Json::parse(res->body, nullptr, false) : Json();
  };
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 5) % 128);
  const Json first = post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 4}}, 200);
  EXPECT_EQ(first["usage"]["prompt_tokens"], prompt.size()) << first.dump();  // no BOS added
  EXPECT_EQ(first["usage"]["completion_tokens"], 4) << first.dump();
  EXPECT_EQ(first["choices"][0]["text"], "") << "its tokens spell no text";
  const Status drained = WaitForServerStores("http://127.0.0.1:" + std::to_string((*server)->port()), 30);
  ASSERT_TRUE(drained.ok()) << drained.ToString();

  const std::string why = "model llama-dense has no tokenizer";
  for (const auto& [path, body] : std::vector<std::pair<const char*, Json>>{
           {"/v1/completions", {{"prompt", "In the beginning"}, {"max_tokens", 2}}},
           {"/v1/chat/completions",
            {{"messages", Json::array({{{"role", "user"}, {"content", "Who?"}}})}, {"max_tokens", 2}}},
           {"/tokenize", {{"content", "In the beginning"}}},
           {"/detokenize", {{"tokens", {1, 2, 3}}}}}) {
    const Json refused = post(path, body, 400);
    EXPECT_NE(refused["error"]["message"].get<std::string>().find(why), std::string::npos) << refused.dump();
    EXPECT_EQ(refused.dump().find(model.string()), std::string::npos) << "names the server's file: " << refused;
  }
  (*server)->Stop();

  // The prompt's whole chunks and its tail were stored: a server that always fetches (this
  // model's prefill is too fast for a planner to prefer a fetch) reuses all but the last token.
  o.plan_recompute = false;
  auto fetching = CompletionServer::Create(o);
  ASSERT_TRUE(fetching.ok()) << fetching.status().ToString();
  ASSERT_TRUE((*fetching)->Start().ok());
  httplib::Client f("127.0.0.1", (*fetching)->port());
  f.set_read_timeout(60, 0);
  auto res = f.Post("/v1/completions", Json{{"prompt", prompt}, {"max_tokens", 4}}.dump(), "application/json");
  ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
  const Json reused = Json::parse(res->body);
  EXPECT_EQ(reused["usage"]["prompt_tokens_details"]["cached_tokens"], reused["usage"]["prompt_tokens"].get<int>() - 1)
      << res->body;
  (*fetching)->Stop();
  std::filesystem::remove_all(dir);
}

// One model of each memory kind (llama.cpp's fixtures): a server stores a prompt's chunks (state
// chunks where the memory is not one KV cache; sliding-window and recurrent snapshots taken as the
// prefill passes each chunk's end), and a second server reuses all of them, generating what the
// first computed (log-probabilities equal to 1e-4: the two prefill in differently sized batches).
class ServerMemoryKinds : public ::testing::TestWithParam<std::string> {};

TEST_P(ServerMemoryKinds, ASecondServerReusesEveryStoredChunk) {
  KVC_SKIP_WITHOUT_FIXTURE(GetParam());
  const std::filesystem::path model = archs::Path(GetParam());
  const auto dir =
      std::filesystem::temp_directory_path() / ("kvc-server-kinds-" + GetParam() + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ServerOptions o = TestServerOptions(dir / "store");
  o.model_path = model.string();
  o.n_ctx = 128;
  o.parallel = 2;
  o.chunk_tokens = 8;
  o.plan_recompute = false;
  std::vector<int32_t> prompt(45);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 5) % 128);
  const Json body = {{"prompt", prompt}, {"max_tokens", 6}, {"logprobs", 1}};
  auto serve_once = [&]() {
    auto server = CompletionServer::Create(o);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    if (!server.ok()) return Json();
    EXPECT_TRUE((*server)->Start().ok());
    httplib::Client c("127.0.0.1", (*server)->port());
    c.set_read_timeout(60, 0);
    auto res = c.Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
    const Status drained = WaitForServerStores("http://127.0.0.1:" + std::to_string((*server)->port()), 30);
    EXPECT_TRUE(drained.ok()) << drained.ToString();
    (*server)->Stop();
    return res ? Json::parse(res->body, nullptr, false) : Json();
  };
  const Json first = serve_once();
  const Json second = serve_once();
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << first.dump();
  // A memory that is one KV cache stores the prompt's tail too (all of it but its last token), and
  // codec rungs; state chunks are whole chunks only.
  bool codec_rungs = false;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir / "store" / "objects")) {
    codec_rungs = codec_rungs || e.path().filename().string().ends_with(".raw.fp16");
  }
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], codec_rungs ? 44 : 40) << second.dump();
  const Json& a = first["choices"][0]["logprobs"]["token_logprobs"];
  const Json& b = second["choices"][0]["logprobs"]["token_logprobs"];
  ASSERT_EQ(a.size(), 6u) << first.dump();
  ASSERT_EQ(b.size(), a.size()) << second.dump();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i].get<double>(), b[i].get<double>(), 1e-4) << i;
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ServerMemoryKinds, ::testing::ValuesIn(archs::OneOfEachMemoryKind()),
                         archs::TestName());

// A diffusion model keeps no KV: serve refuses to start, saying so (not that its state is corrupt).
TEST(ServerWithoutKv, RefusesToStartSayingTheModelKeepsNoKv) {
  KVC_SKIP_WITHOUT_FIXTURE("dream-dense");
  const std::filesystem::path model = archs::Path("dream-dense");
  const auto dir = std::filesystem::temp_directory_path() / ("kvc-server-no-kv-" + std::to_string(::getpid()));
  ServerOptions o = TestServerOptions(dir / "store");
  o.model_path = model.string();
  o.n_ctx = 128;
  auto server = CompletionServer::Create(o);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(server.status().message().find("model " + model.string() + " keeps no KV cache"), std::string::npos)
      << server.status().ToString();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

// Where a request's reused tokens come from: the hot tier (a finished request's sequence kept in
// llama.cpp's memory), the store (whole chunks and a tail), or nowhere. cached_tokens counts what
// was not prefilled; a prompt's last token is always prefilled (its logits give the first token).
class ReuseTiers : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::filesystem::temp_directory_path() /
             ("kvc-tiers-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
              std::to_string(::getpid()));
    std::filesystem::remove_all(store_);
  }
  void TearDown() override { std::filesystem::remove_all(store_); }

  // No host-memory tier: these reuse through the hot tier or the store (the memory tier: below).
  std::unique_ptr<CompletionServer> Start(bool hot_tier, uint32_t parallel = 1) {
    ServerOptions o = TestServerOptions(store_);
    o.n_ctx = 2048;
    o.parallel = static_cast<int>(parallel);
    o.hot_tier = hot_tier;
    o.cache_ram_mib = 0;
    o.plan_recompute = false;  // every stored token is fetched, however fast this machine prefills
    return StartWith(o);
  }
  // A started server (null, and the test failed, when it cannot start).
  static std::unique_ptr<CompletionServer> StartWith(const ServerOptions& o) {
    auto server = CompletionServer::Create(o);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    if (!server.ok()) return nullptr;
    EXPECT_TRUE((*server)->Start().ok());
    return std::move(*server);
  }
  static Json Post(const CompletionServer& server, const std::string& path, const Json& body) {
    httplib::Client c("127.0.0.1", server.port());
    c.set_read_timeout(120, 0);
    auto res = c.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 200) << path << ": " << (res ? res->body : "no answer");
    return res ? Json::parse(res->body, nullptr, false) : Json();
  }
  static double Metric(const CompletionServer& server, const std::string& series) {
    httplib::Client c("127.0.0.1", server.port());
    auto res = c.Get("/metrics");
    return res ? Series(res->body, series) : -1;
  }
  static void WaitForStores(const CompletionServer& server) {
    const Status drained = WaitForServerStores("http://127.0.0.1:" + std::to_string(server.port()), 60);
    ASSERT_TRUE(drained.ok()) << drained.ToString();
  }
  static std::string Text(size_t at, size_t bytes) {
    return ReadTextFile(std::filesystem::path(KVCODEC_TEST_MODEL).parent_path() / "eval.txt").value().substr(at, bytes);
  }
  static int Cached(const Json& response) { return response["usage"]["prompt_tokens_details"]["cached_tokens"]; }
  // The `n` tokens greedy decoding generates after `prompt`, from a session of the test model.
  static std::vector<int32_t> GreedyTokens(const std::vector<int32_t>& prompt, int n) {
    auto model = LlamaModel::Load(KVCODEC_TEST_MODEL).value();
    SessionOptions so;
    so.n_ctx = 2048;
    so.n_threads = 1;
    auto session = LlamaSession::Create(*model, so).value();
    std::vector<int32_t> out;
    EXPECT_TRUE(session->Eval(prompt, false).ok());
    for (int i = 0; i < n; ++i) {
      const auto logits = session->Logits(-1);
      out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      if (i + 1 < n) {
        EXPECT_TRUE(session->Eval(std::span(&out.back(), 1), false).ok());
      }
    }
    return out;
  }

  std::filesystem::path store_;
};

// A repeated prompt (here ~700 tokens: two whole chunks and a tail) prefills only its last token:
// from the hot tier on the same server, from the store (chunks and tail) after a restart; the
// same text each time (raw is lossless).
TEST_F(ReuseTiers, ARepeatedPromptPrefillsOnlyItsLastToken) {
  const Json body = {{"prompt", Text(0, 2800)}, {"max_tokens", 6}};
  std::string text;
  int prompt_tokens = 0;
  {
    auto server = Start(true);
    ASSERT_NE(server, nullptr);
    const Json first = Post(*server, "/v1/completions", body);
    prompt_tokens = first["usage"]["prompt_tokens"];
    ASSERT_GT(prompt_tokens, 512 + 16) << "the prompt must have whole chunks and a tail";
    ASSERT_NE(prompt_tokens % 256, 1) << "the prompt must have a tail";
    EXPECT_EQ(Cached(first), 0);
    text = first["choices"][0]["text"];
    const Json again = Post(*server, "/v1/completions", body);
    EXPECT_EQ(Cached(again), prompt_tokens - 1);
    EXPECT_EQ(again["choices"][0]["text"], text);
    EXPECT_EQ(Metric(*server, "kvcodec_reuse_hits_total{tier=\"hot\"}"), 1);
    EXPECT_EQ(Metric(*server, "kvcodec_reused_tokens_total{tier=\"hot\"}"), prompt_tokens - 1);
    EXPECT_EQ(Metric(*server, "kvcodec_reuse_hits_total{tier=\"store\"}"), 0);
    WaitForStores(*server);
    // Stored once: the prompt and the answer but its last token (raw fp16 only, a local store),
    // at about raw fp16's own bytes per token.
    const double stored_tokens = Metric(*server, "kvcodec_stored_tokens_total");
    EXPECT_EQ(stored_tokens, prompt_tokens + first["usage"]["completion_tokens"].get<int>() - 1);
    const double per_token = Metric(*server, "kvcodec_stored_bytes_total") / stored_tokens;
    EXPECT_GT(per_token, 2.0 * 2 * 6 * 2 * 64);  // kvtiny: K and V, 6 layers, 2 KV heads of 64, fp16
    EXPECT_LT(per_token, 1.05 * 2.0 * 2 * 6 * 2 * 64);
  }
  auto restarted = Start(true);
  ASSERT_NE(restarted, nullptr);
  const Json after = Post(*restarted, "/v1/completions", body);
  EXPECT_EQ(Cached(after), prompt_tokens - 1);
  EXPECT_EQ(after["choices"][0]["text"], text);
  EXPECT_EQ(Metric(*restarted, "kvcodec_reuse_hits_total{tier=\"store\"}"), 1);
  EXPECT_EQ(Metric(*restarted, "kvcodec_reused_tokens_total{tier=\"store\"}"), prompt_tokens - 1);
}

// A conversation's second turn (the first turn's prompt, its answer, then new tokens) prefills
// only the new turn and the answer's last token (generated, never evaluated): from the hot tier,
// and with the hot tier off from the store, where the first turn's answer was stored as part of
// its tail. Token ids make the turns exact.
TEST_F(ReuseTiers, AConversationsSecondTurnPrefillsOnlyTheNewTurn) {
  for (const bool hot_tier : {true, false}) {
    SCOPED_TRACE(hot_tier ? "hot tier" : "store");
    std::filesystem::remove_all(store_);
    auto server = Start(hot_tier);
    ASSERT_NE(server, nullptr);
    const Json prompt = Post(*server, "/tokenize", {{"content", Text(5000, 1500)}, {"add_special", true}})["tokens"];
    const Json first = Post(*server, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 12}});
    // The answer's token ids (its text need not tokenize back to them): greedy, as the server.
    const Json answer_ids = GreedyTokens(prompt.get<std::vector<int32_t>>(), 12);
    ASSERT_EQ(Post(*server, "/detokenize", {{"tokens", answer_ids}})["content"], first["choices"][0]["text"]);
    const Json turn = Post(*server, "/tokenize", {{"content", Text(9000, 300)}})["tokens"];
    Json second_prompt = prompt;
    for (const Json& t : answer_ids) second_prompt.push_back(t);
    for (const Json& t : turn) second_prompt.push_back(t);
    WaitForStores(*server);
    const Json second = Post(*server, "/v1/completions", {{"prompt", second_prompt}, {"max_tokens", 4}});
    const int prefilled = second["usage"]["prompt_tokens"].get<int>() - Cached(second);
    EXPECT_EQ(prefilled, static_cast<int>(turn.size()) + 1);
    EXPECT_EQ(Metric(*server,
                     hot_tier ? "kvcodec_reuse_hits_total{tier=\"hot\"}" : "kvcodec_reuse_hits_total{tier=\"store\"}"),
              1);
  }
}

// Behind the hot tier, the host-memory tier: with one sequence, prompt B takes the sequence that
// held A, and A again finds its chunks and tail decoded in host memory, not in the store; the
// same text. With no memory tier (--cache-ram 0) the store gives them.
TEST_F(ReuseTiers, TheMemoryTierServesWhatTheHotTierLetGo) {
  for (const uint64_t cache_ram_mib : {uint64_t{64}, uint64_t{0}}) {
    SCOPED_TRACE(cache_ram_mib);
    std::filesystem::remove_all(store_);
    ServerOptions o = TestServerOptions(store_);
    o.n_ctx = 2048;
    o.parallel = 1;
    o.cache_ram_mib = cache_ram_mib;
    o.plan_recompute = false;
    auto server = StartWith(o);
    ASSERT_NE(server, nullptr);
    const Json a = {{"prompt", Text(30000, 2000)}, {"max_tokens", 5}};
    const Json first = Post(*server, "/v1/completions", a);
    const int prompt_tokens = first["usage"]["prompt_tokens"];
    Post(*server, "/v1/completions", {{"prompt", Text(40000, 600)}, {"max_tokens", 3}});
    WaitForStores(*server);
    const double hot_hits = Metric(*server, "kvcodec_reuse_hits_total{tier=\"hot\"}");  // B may share A's BOS
    const Json again = Post(*server, "/v1/completions", a);
    EXPECT_EQ(again["choices"][0]["text"], first["choices"][0]["text"]);
    EXPECT_EQ(Cached(again), prompt_tokens - 1);
    const char* tier = cache_ram_mib > 0 ? "memory" : "store";
    const char* other = cache_ram_mib > 0 ? "store" : "memory";
    EXPECT_EQ(Metric(*server, FormatMessage("kvcodec_reuse_hits_total{tier=\"%s\"}", tier)), 1);
    EXPECT_EQ(Metric(*server, FormatMessage("kvcodec_reused_tokens_total{tier=\"%s\"}", tier)), prompt_tokens - 1);
    EXPECT_EQ(Metric(*server, FormatMessage("kvcodec_reuse_hits_total{tier=\"%s\"}", other)), 0);
    EXPECT_EQ(Metric(*server, "kvcodec_reuse_hits_total{tier=\"hot\"}"), hot_hits);
    EXPECT_EQ(Metric(*server, "kvcodec_memory_tier_bytes") > 0, cache_ram_mib > 0);
  }
}

// With flash attention llama.cpp keeps V untransposed: what a server stores from such a cache,
// another restores into one, with the same text as the first answer and only the last token
// prefilled.
TEST_F(ReuseTiers, AFlashAttentionServerRestoresWhatItStored) {
  auto start = [&] {
    ServerOptions o = TestServerOptions(store_);
    o.n_ctx = 2048;
    o.parallel = 1;
    o.flash_attn = true;
    o.plan_recompute = false;
    return StartWith(o);
  };
  const Json body = {{"prompt", Text(50000, 2200)}, {"max_tokens", 6}};
  std::string text;
  int prompt_tokens = 0;
  {
    auto server = start();
    ASSERT_NE(server, nullptr);
    const Json first = Post(*server, "/v1/completions", body);
    prompt_tokens = first["usage"]["prompt_tokens"];
    text = first["choices"][0]["text"];
    WaitForStores(*server);
  }
  auto restarted = start();
  ASSERT_NE(restarted, nullptr);
  const Json after = Post(*restarted, "/v1/completions", body);
  EXPECT_EQ(Cached(after), prompt_tokens - 1);
  EXPECT_EQ(after["choices"][0]["text"], text);
}

// Over a slow link the stored prefix is split: its first chunks are prefilled while the later
// ones arrive, and the two join in the request's sequence. The prefilled tokens are whole
// chunks, every later one is reused, and the text is the same (raw: lossless; the prefilled KV
// is what the first request computed). The plan is fixed, whatever the machine's load: a chunk's
// prefill priced at 30 ms, the link such that a raw chunk (192 KB) crosses it in 10 ms, so
// prefilling 3 of the 12 chunks while the rest arrive (max(90, 97) ms) beats fetching all 12
// (127 ms) and any other split.
TEST_F(ReuseTiers, ASlowLinkPrefillsTheFirstChunksWhileTheRestArrive) {
  constexpr uint32_t kChunk = 64;
  constexpr double kRawChunkBits = 8.0 * kChunk * 2 * 6 * 2 * 64 * 2;  // kvtiny: K and V, 6 layers, 2 heads of 64
  auto start = [&](double link_gbps) {
    ServerOptions o = TestServerOptions(store_);
    o.n_ctx = 2048;
    o.parallel = 1;
    o.hot_tier = false;
    o.chunk_tokens = kChunk;
    o.link_gbps = link_gbps;
    o.plan_recompute = true;
    o.chunk_prefill_s = 0.030;
    return StartWith(o);
  };
  const Json body = {{"prompt", Text(20000, 3000)}, {"max_tokens", 6}};
  std::string text;
  int prompt_tokens = 0;
  {
    auto server = start(0);
    ASSERT_NE(server, nullptr);
    const Json first = Post(*server, "/v1/completions", body);
    prompt_tokens = first["usage"]["prompt_tokens"];
    ASSERT_GE(prompt_tokens, 12 * static_cast<int>(kChunk) + 2);
    ASSERT_LT(prompt_tokens, 13 * static_cast<int>(kChunk));
    text = first["choices"][0]["text"];
    WaitForStores(*server);
  }
  auto restarted = start(kRawChunkBits / 0.010 / 1e9);
  ASSERT_NE(restarted, nullptr);
  const Json after = Post(*restarted, "/v1/completions", body);
  EXPECT_EQ(after["choices"][0]["text"], text);
  EXPECT_EQ(Metric(*restarted, "kvcodec_split_reuses_total"), 1);
  // 3 chunks and the last token prefilled; the chunks fetched after them reused (all 9 and the
  // tail, unless this machine's reads fell so far behind the link that the fetcher chose to
  // recompute the last ones).
  const int prefilled = prompt_tokens - Cached(after);
  EXPECT_GT(Cached(after), 0);
  EXPECT_EQ((prefilled - 1) % static_cast<int>(kChunk), 0) << prefilled;
  EXPECT_GE(prefilled, 3 * static_cast<int>(kChunk) + 1);
  EXPECT_EQ(Metric(*restarted, "kvcodec_reuse_hits_total{tier=\"store\"}"), 1);
  EXPECT_EQ(Metric(*restarted, "kvcodec_reused_tokens_total{tier=\"store\"}"), Cached(after));
}

// Requests that share prefixes, more at once than there are sequences: each takes a free
// sequence only, so every answer is what the same request alone on a server without reuse
// answers (greedy, raw: lossless). Run under ThreadSanitizer by scripts/test.sh.
TEST_F(ReuseTiers, ConcurrentRequestsNeverContinueASequenceInUse) {
  const std::string base = Text(12000, 900);
  const std::vector<std::string> prompts = {base, base + " And", base.substr(0, 500), Text(15000, 600)};
  std::vector<std::string> expected;
  {
    ServerOptions o = TestServerOptions(store_);
    o.reuse = false;
    auto plain = CompletionServer::Create(o);
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    ASSERT_TRUE((*plain)->Start().ok());
    for (const std::string& p : prompts) {
      expected.push_back(Post(**plain, "/v1/completions", {{"prompt", p}, {"max_tokens", 4}})["choices"][0]["text"]);
    }
  }
  auto server = Start(true, 2);
  ASSERT_NE(server, nullptr);
  constexpr int kClients = 4, kRounds = 3;
  std::vector<std::thread> clients;
  std::mutex mu;
  std::vector<std::string> wrong;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int round = 0; round < kRounds; ++round) {
        const size_t which = static_cast<size_t>(c + round) % prompts.size();
        const Json r = Post(*server, "/v1/completions", {{"prompt", prompts[which]}, {"max_tokens", 4}});
        if (!r.is_object() || r["choices"][0]["text"] != expected[which]) {
          std::lock_guard lock(mu);
          wrong.push_back(FormatMessage("client %d round %d prompt %zu: %s", c, round, which, r.dump().c_str()));
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " wrong answers, the first: " << wrong.front();
  EXPECT_GT(Metric(*server, "kvcodec_reuse_hits_total{tier=\"hot\"}"), 0);
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

// OpenAI's contract: errors name the field and the reason, unknown fields and other models are
// refused, every response has an id of its own and the server's system_fingerprint.
TEST(ServerContract, ErrorsIdsAndFingerprintAsOpenAiHasThem) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvc-server-contract-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ServerOptions o = TestServerOptions(dir / "store");
  auto server = CompletionServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE((*server)->Start().ok());
  httplib::Client c("127.0.0.1", (*server)->port());
  c.set_read_timeout(60, 0);
  auto post = [&](const char* path, const Json& body) {
    auto res = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res);
    return std::make_pair(res->status, Json::parse(res->body, nullptr, false));
  };
  auto [unknown_status, unknown] = post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}, {"foo", 1}});
  EXPECT_EQ(unknown_status, 400);
  EXPECT_EQ(unknown["error"]["param"], "foo");
  EXPECT_EQ(unknown["error"]["code"], "unknown_parameter");
  auto [model_status, model] =
      post("/v1/chat/completions", {{"model", "gpt-4o"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}});
  EXPECT_EQ(model_status, 404);
  EXPECT_EQ(model["error"]["code"], "model_not_found");
  auto [long_status, too_long] = post("/v1/completions", {{"prompt", "In the beginning"}, {"max_tokens", o.n_ctx}});
  EXPECT_EQ(long_status, 400);
  EXPECT_EQ(too_long["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(too_long["error"]["param"], "prompt");
  auto [ok1_status, ok1] = post("/v1/completions", {{"prompt", "In the beginning"}, {"max_tokens", 2}});
  auto [ok2_status, ok2] = post("/v1/completions", {{"prompt", "In the beginning"}, {"max_tokens", 2}});
  ASSERT_EQ(ok1_status, 200);
  ASSERT_EQ(ok2_status, 200);
  EXPECT_NE(ok1["id"], ok2["id"]);
  EXPECT_GE(ok1["id"].get<std::string>().size(), 20u);
  EXPECT_EQ(ok1["system_fingerprint"], ok2["system_fingerprint"]);
  EXPECT_TRUE(ok1["system_fingerprint"].get<std::string>().starts_with("fp_"));
  EXPECT_EQ(ok1["timings"]["predicted_n"], 2);
  auto retrieved = c.Get("/v1/models/" + ok1["model"].get<std::string>());
  ASSERT_TRUE(retrieved);
  EXPECT_EQ(retrieved->status, 200);
  EXPECT_EQ(Json::parse(retrieved->body)["id"], ok1["model"]);
  EXPECT_EQ(c.Get("/v1/models/gpt-4o")->status, 404);
  (*server)->Stop();
  std::filesystem::remove_all(dir);
}

// llama-server's /completion, and its slots: a saved slot is restored after a restart from the
// store, and the next request with its prompt continues the restored sequence.
TEST(ServerLlamaApi, CompletionAndSlotsSurviveARestart) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvc-server-slots-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ServerOptions o = TestServerOptions(dir / "store");
  o.slot_save_path = (dir / "slots").string();
  o.parallel = 2;
  o.chunk_tokens = 8;        // the saved tokens span whole chunks and a tail
  o.plan_recompute = false;  // and are fetched, however cheap their prefill here
  const Json ask = {{"prompt", "And God said, Let there be light: and there was light. And God saw the light"},
                    {"n_predict", 4},
                    {"temperature", 0},
                    {"return_tokens", true}};
  std::string first_text;
  {
    auto server = CompletionServer::Create(o);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    ASSERT_TRUE((*server)->Start().ok());
    httplib::Client c("127.0.0.1", (*server)->port());
    c.set_read_timeout(60, 0);
    auto res = c.Post("/completion", ask.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const Json j = Json::parse(res->body);
    first_text = j["content"];
    EXPECT_EQ(j["stop"], true);
    EXPECT_EQ(j["stop_type"], "limit");
    EXPECT_EQ(j["tokens"].size(), 4u);
    EXPECT_EQ(j["tokens_predicted"], 4);
    EXPECT_EQ(j["timings"]["predicted_n"], 4);
    const Json slots = Json::parse(c.Get("/slots")->body);
    ASSERT_EQ(slots.size(), 2u);
    int held = -1;
    for (const Json& s : slots) {
      if (s["n_cached_tokens"].get<int>() > 0) held = s["id"];
    }
    ASSERT_GE(held, 0) << slots.dump();
    auto saved =
        c.Post("/slots/" + std::to_string(held) + "?action=save", R"({"filename": "a.bin"})", "application/json");
    ASSERT_EQ(saved->status, 200) << saved->body;
    EXPECT_GT(Json::parse(saved->body)["n_saved"].get<int>(), 10);
    EXPECT_EQ(c.Post("/slots/0?action=save", R"({"filename": "../a"})", "application/json")->status, 400);
    EXPECT_EQ(c.Post("/slots/9?action=save", R"({"filename": "a"})", "application/json")->status, 400);
    (*server)->Stop();
  }
  auto server = CompletionServer::Create(o);
  ASSERT_TRUE(server.ok());
  ASSERT_TRUE((*server)->Start().ok());
  httplib::Client c("127.0.0.1", (*server)->port());
  c.set_read_timeout(60, 0);
  EXPECT_EQ(c.Post("/slots/0?action=restore", R"({"filename": "missing.bin"})", "application/json")->status, 404);
  auto restored = c.Post("/slots/1?action=restore", R"({"filename": "a.bin"})", "application/json");
  ASSERT_EQ(restored->status, 200) << restored->body;
  const Json r = Json::parse(restored->body);
  EXPECT_GT(r["n_restored"].get<int>(), 10);
  EXPECT_GT(r["n_read"].get<int>(), 1000);  // the KV came from the store
  // The same prompt now prefills only its last token, and says what it said before the restart.
  auto again = c.Post("/completion", ask.dump(), "application/json");
  ASSERT_EQ(again->status, 200);
  const Json a = Json::parse(again->body);
  EXPECT_EQ(a["content"], first_text);
  EXPECT_EQ(a["timings"]["cache_n"].get<int>(), a["tokens_evaluated"].get<int>() - 1);
  auto erased = c.Post("/slots/0?action=erase", "", "application/json");
  EXPECT_EQ(erased->status, 200);
  (*server)->Stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvc
