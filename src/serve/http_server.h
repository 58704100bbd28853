// The completion server's HTTP layer: httplib's server with the limits a server on a network
// needs and httplib 0.11 lacks. Each request must arrive whole within a deadline and a byte
// budget (a client trickling a byte every few seconds, or sending headers without end, is cut
// off); each connection has its own thread, started as needed up to a limit, so slow clients
// hold only their own; the listen backlog is raised from 5; and a handler can see its
// connection, to notice a client that has gone while its answer is being generated.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <string>

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
  bool close = false;            // answer this request, then close: its bytes were not all read
};
// The connection the calling thread serves (null outside HttpServer's connection threads).
HttpConnection* CurrentHttpConnection();
// False once the client of the calling thread's connection has closed or reset its end (true
// outside a connection thread). Data waiting to be read (a pipelined request) is a client still
// there; one that only shuts down its sending side counts as gone, as in httplib's own check.
bool ClientConnected();

// httplib's server with our connection loop (process_and_close_socket is its one hook for it):
// the same keep-alive handling, over a stream that enforces each request's deadline and budget
// (the header budget here; a handler raises it for the body it accepts), the connection visible
// to the handlers, and the connection closed after a request whose bytes were not all read.
class HttpServer final : public httplib::Server {
 public:
  explicit HttpServer(double request_timeout_s);

  // Call after binding: httplib listens with a backlog of 5, so a burst of clients (more than
  // five connecting while the accept loop starts a thread) had SYNs dropped and waited a second
  // each for the retry.
  void RaiseBacklog();

 private:
  bool process_and_close_socket(socket_t sock) override;
  // The next request's first byte within the keep-alive timeout (false: the client is idle or
  // gone, or the server is stopping).
  bool WaitForRequest(int sock) const;

  const SteadyClock::duration request_timeout_;
};

// The task queue for HttpServer::new_task_queue: a thread per connection being served, started
// when one is needed, up to `max_threads`; past it, connections wait for a thread; threads idle
// for a minute end. (A fixed pool of 64 threads was filled by 64 slow clients.)
httplib::TaskQueue* NewConnectionThreads(size_t max_threads);

// Why binding host:port failed, in words ("Address already in use"): httplib only says that it
// did.
std::string BindError(const std::string& host, int port);

}  // namespace kvc
