#include "serve/completion_client.h"

#include <httplib.h>

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

namespace kvc {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

constexpr int kReadTimeoutS = 300;  // one request, start to [DONE]
constexpr const char* kStoreQueueSeries = "kvcodec_queue_length{queue=\"store\"} ";

// A non-negative integer member of a JSON object, if there is one.
std::optional<uint64_t> UintMember(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_unsigned()) return std::nullopt;
  return j[key].get<uint64_t>();
}

// Reads a completion's server-sent events as they arrive: `data: <json>` events separated by a
// blank line, token events (finish_reason null), a closing event with the finish reason, usage
// (asked for with stream_options.include_usage: OpenAI's last chunk, with empty choices; some
// servers put it on the closing event instead), then `data: [DONE]`. Anything else makes the
// response malformed.
class EventStream {
 public:
  EventStream(CompletionOutcome* out, Clock::time_point t0) : out_(out), t0_(t0) {}

  void Feed(const char* data, size_t n) {
    buffer_.append(data, n);
    size_t end;
    while ((end = buffer_.find("\n\n")) != std::string::npos) {
      Event(buffer_.substr(0, end));
      buffer_.erase(0, end + 2);
    }
  }

  // After the response: every event was well formed, usage came, and [DONE] ended it.
  void Finish() {
    if (!error_.empty()) {
      out_->error = error_;
    } else if (!buffer_.empty()) {
      out_->error = "the stream ended inside an event";
    } else if (!usage_) {
      out_->error = "no usage before [DONE] (the request asks for it with stream_options.include_usage)";
    } else if (!done_) {
      out_->error = "the stream did not end with [DONE]";
    } else {
      out_->ok = true;
    }
  }

 private:
  void Event(const std::string& event) {
    if (!error_.empty()) return;
    if (done_) return Fail("an event after [DONE]");
    if (event.rfind("data: ", 0) != 0) return Fail("an event that is not 'data: ...'");
    const std::string data = event.substr(6);
    if (data == "[DONE]") {
      done_ = true;
      return;
    }
    const Json j = Json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Fail("an event that is not a JSON object");
    if (j.contains("error")) return Fail("the server reported an error: " + data);
    const bool has_usage = j.contains("usage") && !j["usage"].is_null();
    if (!j.contains("choices") || !j["choices"].is_array() || (j["choices"].empty() && !has_usage)) {
      return Fail("an event without choices");
    }
    if (!j["choices"].empty()) {
      const Json& choice = j["choices"][0];
      if (!choice.is_object()) return Fail("an event whose choice is not an object");
      if (!choice.contains("finish_reason") || choice["finish_reason"].is_null()) {
        if (!out_->got_token) {
          out_->got_token = true;
          out_->first_token_s = Seconds(Clock::now() - t0_);
        }
        return;
      }
    }
    if (!has_usage) return;  // the closing event; usage follows
    const Json& usage = j["usage"];
    const auto prompt = UintMember(usage, "prompt_tokens");
    const auto completion = UintMember(usage, "completion_tokens");
    if (!prompt || !completion) return Fail("usage without prompt and completion token counts");
    out_->prompt_tokens = static_cast<uint32_t>(*prompt);
    out_->completion_tokens = static_cast<uint32_t>(*completion);
    // Servers that do not reuse KV (an external one) may leave the cached count out: none cached.
    if (usage.contains("prompt_tokens_details")) {
      out_->cached_tokens =
          static_cast<uint32_t>(UintMember(usage["prompt_tokens_details"], "cached_tokens").value_or(0));
    }
    usage_ = true;
  }

  void Fail(std::string why) { error_ = std::move(why); }

  CompletionOutcome* out_;
  Clock::time_point t0_;
  std::string buffer_;
  std::string error_;
  bool usage_ = false, done_ = false;
};

httplib::Client MakeClient(const std::string& url) {
  httplib::Client c(url);
  c.set_connection_timeout(10, 0);
  c.set_read_timeout(kReadTimeoutS, 0);
  return c;
}

}  // namespace

CompletionOutcome StreamCompletion(const std::string& url, const std::string& prompt, uint32_t max_tokens,
                                   Clock::time_point t0) {
  CompletionOutcome out;
  EventStream events(&out, t0);
  int status = 0;
  std::string error_body;  // a non-200 answer's body, for its message
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = Json{{"prompt", prompt},
                  {"max_tokens", max_tokens},
                  {"stream", true},
                  {"stream_options", {{"include_usage", true}}}}
                 .dump();
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status == 200) {
      events.Feed(data, n);
    } else if (error_body.size() < 1000) {
      error_body.append(data, n);
    }
    return true;
  };
  auto client = MakeClient(url);
  out.send_s = Seconds(Clock::now() - t0);
  const auto res = client.send(req);
  out.finish_s = Seconds(Clock::now() - t0);
  if (!res) {
    out.error = "HTTP: " + httplib::to_string(res.error());
  } else if (status != 200) {
    out.error = FormatMessage("HTTP %d: %s", status, error_body.c_str());
  } else {
    events.Finish();
  }
  return out;
}

Status CompleteOnce(const std::string& url, const std::string& prompt) {
  auto res =
      MakeClient(url).Post("/v1/completions", Json{{"prompt", prompt}, {"max_tokens", 1}}.dump(), "application/json");
  if (!res) return IoError("completion request: " + httplib::to_string(res.error()));
  if (res->status != 200)
    return IoError(FormatMessage("completion request: HTTP %d: %s", res->status, res->body.c_str()));
  return Status::Ok();
}

Status WaitForServerStores(const std::string& url, double timeout_s) {
  const auto start = Clock::now();
  while (Seconds(Clock::now() - start) < timeout_s) {
    auto res = MakeClient(url).Get("/metrics");
    if (!res || res->status != 200) return IoError("GET /metrics failed");
    const size_t at = res->body.find(kStoreQueueSeries);
    if (at == std::string::npos) return Status::Ok();
    if (std::strtoull(res->body.c_str() + at + std::strlen(kStoreQueueSeries), nullptr, 10) == 0) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Internal(FormatMessage("the server's chunk stores did not drain in %.0f s", timeout_s));
}

}  // namespace kvc
