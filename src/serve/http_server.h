// The completion server's HTTP layer: httplib's server with the limits a server on a network
// needs and httplib 0.11 lacks.
//
// Each request's head (request line and headers) is read before any thread is given to it, by
// one thread that watches every connection waiting for one: a client that sends its head
// slowly, or never finishes it, holds no thread, and is answered 408 at the request's deadline.
// The head is checked there, and a request is refused (JSON error, connection closed) before a
// handler sees it when the head is malformed, too large (414 for a long request line, 431 for
// the headers) or ambiguous about where its body ends: several or non-numeric Content-Length
// values, Transfer-Encoding with Content-Length or with a coding other than chunked, a body on
// a GET, a POST with neither (RFC 9112 §6: a front proxy and this server must agree on where
// each request ends, or a request can be smuggled inside another's body).
//
// A whole head gets a connection thread (started as needed, up to `max_connections`; each
// request must also arrive whole within the deadline and byte budget its handler allows). When
// all are busy, GET /health and /metrics (the reserved paths) are answered on a few threads
// kept for them, so monitoring sees the server whatever its clients do. The listen backlog is
// raised from 5, a handler can see its connection (to notice a client that has gone while its
// answer is being generated), and a connection closed with bytes unread is drained for a while
// before it is closed, so the client reads its answer instead of a reset.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"

namespace kvc {

// What the thread serving a connection knows about it, for the handlers it calls (httplib
// hands them the request, not the connection).
struct HttpConnection {
  int sock = -1;
  // The request being read must have arrived by `deadline`, in at most `budget` bytes.
  SteadyClock::time_point deadline;
  uint64_t budget = 0, read = 0;
  bool deadline_passed = false;  // a read failed because of the deadline
  bool budget_spent = false;     // a read failed because the budget was spent
  bool close = false;            // answer this request, then close: its bytes were not all read
};
// The connection the calling thread serves (null outside HttpServer's connection threads).
HttpConnection* CurrentHttpConnection();
// False once the client of the calling thread's connection has closed or reset its end (true
// outside a connection thread). Data waiting to be read (a pipelined request) is a client still
// there; one that only shuts down its sending side counts as gone, as in httplib's own check.
bool ClientConnected();

// A request the server answers itself, before any handler sees it.
struct HttpRefusal {
  int status = 400;          // 400, 408, 411, 414, 431 or 501
  std::string method, path;  // from the request line, when it arrived whole (else empty)
  std::string message;       // why, for the client
};

struct HttpServerOptions {
  // A request (line, headers and body) must arrive within this many seconds of its first byte.
  double request_timeout_s = 30;
  // Connection threads, each serving one connection at a time; more connections wait for one
  // (without a thread while their head arrives).
  size_t max_connections = 512;
  // Paths answered (GET or HEAD) on threads of their own when every connection thread is busy.
  std::vector<std::string> reserved_paths;
  // The JSON body of a refusal (and where it is counted); empty: {"error": {"message", "type"}}.
  std::function<std::string(const HttpRefusal&)> refusal_body;
};

// httplib's server with our connection handling (process_and_close_socket is its one hook for
// it): httplib parses each request and calls the handlers, over a stream that enforces the
// request's deadline and budget (a handler raises the budget for the body it accepts).
class HttpServer final : public httplib::Server {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer() override;
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Call after binding: httplib listens with a backlog of 5, so a burst of clients (more than
  // five connecting while the accept loop starts a thread) had SYNs dropped and waited a second
  // each for the retry.
  void RaiseBacklog();

  struct Connections;  // the connections waiting for a head or a thread, and the threads

 private:
  // Called by httplib's accept loop for each new connection: hands it to the lobby at once.
  bool process_and_close_socket(socket_t sock) override;

  const HttpServerOptions options_;
  std::unique_ptr<Connections> connections_;
};

// Why binding host:port failed, in words ("Address already in use"): httplib only says that it
// did.
std::string BindError(const std::string& host, int port);

}  // namespace kvc
