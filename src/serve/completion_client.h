// A client of the completion server (or any OpenAI-compatible one), over HTTP: what the serving
// benchmark replays a trace with and the server tests wait on. It lives here so that the HTTP
// library stays in this folder.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace kvc {

// What one streamed completion saw; times in seconds after the caller's t0.
struct CompletionOutcome {
  bool ok = false;
  std::string error;  // why not ok: the transport, an HTTP status, or a malformed event stream
  double send_s = 0, first_token_s = 0, finish_s = 0;
  bool got_token = false;
  uint32_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
};

// One streaming POST /v1/completions to `url` (http://host:port), asking for usage, timed from the
// send to the first token event and to the end; the event stream is checked as it arrives.
CompletionOutcome StreamCompletion(const std::string& url, const std::string& prompt, uint32_t max_tokens,
                                   std::chrono::steady_clock::time_point t0);

// One completion of one token, not streamed, waited for: e.g. the warm-up that stores a prompt's
// chunks.
[[nodiscard]] Status CompleteOnce(const std::string& url, const std::string& prompt);

// Waits until the server at `url` has written its background chunk stores (its /metrics store
// queue reads 0), so later requests find every prefix sent before. A server without that series
// is not waited for.
[[nodiscard]] Status WaitForServerStores(const std::string& url, double timeout_s);

}  // namespace kvc
