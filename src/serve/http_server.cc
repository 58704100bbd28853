#include "serve/http_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "base/log.h"
#include "base/status.h"

namespace kvc {
namespace {

// A request line and headers beyond this are not a request we serve: it bounds what a client
// can make the server read and hold before a handler has looked at the request (the handlers
// allow the body its own limit).
constexpr uint64_t kMaxHeaderBytes = 64 << 10;
// How often a thread waiting for a client's bytes looks at whether the server is stopping.
constexpr int kPollSliceMs = 100;

int ToMs(time_t sec, time_t usec) { return static_cast<int>(std::min<time_t>(sec * 1000 + usec / 1000, 1 << 30)); }

thread_local HttpConnection* current_connection = nullptr;

// False once the client has closed (or reset) its end. Data waiting to be read (a pipelined
// request) is a client still there. A client that only shuts down its sending side counts as
// gone too (as in httplib's own check): HTTP clients keep both sides open for the answer.
bool ClientConnected(int sock) {
  pollfd p{sock, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (::poll(&p, 1, 0) <= 0) return true;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0;
}

void AddressOf(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int rc = peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len)
                      : ::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

// httplib's socket stream, with limits it lacks: reads stop at the request's deadline and byte
// budget (a client trickling a header byte every few seconds, or sending headers without end,
// is cut off) and when the server stops; the read buffer outlives a request, so pipelined
// requests are not lost.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(HttpConnection& c, const std::atomic<socket_t>& server_socket, int read_timeout_ms,
                   int write_timeout_ms)
      : c_(c), server_socket_(server_socket), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms) {}

  bool buffered() const { return off_ < end_; }

  bool is_readable() const override { return buffered() || WaitReadable(); }
  bool is_writable() const override { return Wait(POLLOUT, write_timeout_ms_) && ClientConnected(c_.sock); }

  ssize_t read(char* ptr, size_t size) override {
    if (c_.read >= c_.budget) return -1;
    size = static_cast<size_t>(std::min<uint64_t>(size, c_.budget - c_.read));
    if (!buffered()) {
      if (!WaitReadable()) return -1;
      ssize_t n;
      do {
        n = ::recv(c_.sock, buf_.data(), buf_.size(), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      off_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, end_ - off_);
    std::memcpy(ptr, buf_.data() + off_, n);
    off_ += n;
    c_.read += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!Wait(POLLOUT, write_timeout_ms_)) return -1;
    ssize_t n;
    do {
      n = ::send(c_.sock, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { AddressOf(c_.sock, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { AddressOf(c_.sock, false, ip, port); }
  socket_t socket() const override { return c_.sock; }

 private:
  // Data to read within the read timeout, the deadline and the server's life.
  bool WaitReadable() const {
    const auto idle_end = SteadyClock::now() + std::chrono::milliseconds(read_timeout_ms_);
    for (;;) {
      const auto now = SteadyClock::now();
      if (now >= c_.deadline) {
        c_.deadline_passed = true;
        return false;
      }
      if (now >= idle_end || server_socket_ == INVALID_SOCKET) return false;
      const auto left = std::min(c_.deadline, idle_end) - now;
      const int slice = static_cast<int>(std::clamp<int64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1, 1, kPollSliceMs));
      pollfd p{c_.sock, POLLIN, 0};
      const int rc = ::poll(&p, 1, slice);
      if (rc > 0) return true;
      if (rc < 0 && errno != EINTR) return false;
    }
  }

  bool Wait(short events, int timeout_ms) const {
    pollfd p{c_.sock, events, 0};
    int rc;
    do {
      rc = ::poll(&p, 1, timeout_ms);
    } while (rc < 0 && errno == EINTR);
    return rc > 0 && (p.revents & (POLLERR | POLLNVAL)) == 0;
  }

  HttpConnection& c_;
  const std::atomic<socket_t>& server_socket_;
  const int read_timeout_ms_, write_timeout_ms_;
  std::vector<char> buf_ = std::vector<char>(16 << 10);
  size_t off_ = 0, end_ = 0;
};

class ConnectionThreads final : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(size_t max_threads) : max_threads_(max_threads) {}
  ~ConnectionThreads() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::vector<std::thread> ended;
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(fn));
      ended = TakeEnded();
      if (idle_ < jobs_.size() && threads_.size() < max_threads_) {
        try {
          std::thread t([this] { Work(); });
          const std::thread::id id = t.get_id();
          threads_.emplace(id, std::move(t));
        } catch (const std::system_error& e) {
          // The threads there are take the job in turn.
          KVC_LOG_WARN("cannot start a connection thread (%zu running): %s", threads_.size(), e.what());
        }
      }
      cv_.notify_one();
    }
    for (std::thread& t : ended) t.join();
  }

  void shutdown() override {
    std::map<std::thread::id, std::thread> threads;
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    // Threads may still end themselves (and be listed in ended_) until they see stop_.
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (threads_.empty()) break;
        threads.swap(threads_);
        ended_.clear();
      }
      for (auto& [id, t] : threads) t.join();
      threads.clear();
    }
  }

 private:
  void Work() {
    std::unique_lock lock(mu_);
    for (;;) {
      ++idle_;
      const bool woken = cv_.wait_for(lock, std::chrono::seconds(60), [&] { return stop_ || !jobs_.empty(); });
      --idle_;
      if (!woken || jobs_.empty()) {
        // Idle for a minute, or stopping with nothing left: end (enqueue or shutdown joins us).
        if (!stop_) ended_.push_back(std::this_thread::get_id());
        return;
      }
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      try {
        job();
      } catch (...) {
        KVC_LOG_ERROR("a connection thread's job failed: %s", ExceptionText(std::current_exception()).c_str());
      }
      job = nullptr;
      lock.lock();
    }
  }

  // Threads that ended on their own, to be joined outside the lock. Under mu_.
  std::vector<std::thread> TakeEnded() {
    std::vector<std::thread> out;
    for (const std::thread::id id : ended_) {
      auto it = threads_.find(id);
      if (it == threads_.end()) continue;
      out.push_back(std::move(it->second));
      threads_.erase(it);
    }
    ended_.clear();
    return out;
  }

  const size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::map<std::thread::id, std::thread> threads_;
  std::vector<std::thread::id> ended_;
  size_t idle_ = 0;
  bool stop_ = false;
};

}  // namespace

HttpConnection* CurrentHttpConnection() { return current_connection; }

bool ClientConnected() {
  const HttpConnection* c = current_connection;
  return c == nullptr || ClientConnected(c->sock);
}

HttpServer::HttpServer(double request_timeout_s)
    : request_timeout_(
          std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(request_timeout_s))) {}

// Listening again on a listening socket only changes its backlog.
void HttpServer::RaiseBacklog() { ::listen(svr_sock_, SOMAXCONN); }

bool HttpServer::process_and_close_socket(socket_t sock) {
  bool ret = false;
  try {
    HttpConnection c;
    c.sock = sock;
    current_connection = &c;
    ConnectionStream stream(c, svr_sock_, ToMs(read_timeout_sec_, read_timeout_usec_),
                            ToMs(write_timeout_sec_, write_timeout_usec_));
    for (size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
      if (!stream.buffered() && !WaitForRequest(sock)) break;
      c.deadline = SteadyClock::now() + request_timeout_;
      c.budget = kMaxHeaderBytes;
      c.read = 0;
      c.deadline_passed = c.close = false;
      bool closed = false;
      ret = process_request(stream, left == 1, closed, nullptr);
      if (!ret || closed || c.close) break;
    }
  } catch (...) {
    KVC_LOG_ERROR("serving a connection: %s", ExceptionText(std::current_exception()).c_str());
  }
  current_connection = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

bool HttpServer::WaitForRequest(int sock) const {
  const auto end = SteadyClock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
  while (svr_sock_ != INVALID_SOCKET && SteadyClock::now() < end) {
    pollfd p{sock, POLLIN, 0};
    const int rc = ::poll(&p, 1, kPollSliceMs);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
  return false;
}

httplib::TaskQueue* NewConnectionThreads(size_t max_threads) { return new ConnectionThreads(max_threads); }

std::string BindError(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* list = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list); rc != 0) {
    return ::gai_strerror(rc);
  }
  std::string why = "no address to bind";
  for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
    const int sock = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (sock < 0) {
      why = std::strerror(errno);
      break;
    }
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    const bool bound = ::bind(sock, a->ai_addr, a->ai_addrlen) == 0 && ::listen(sock, 1) == 0;
    why = bound ? "the address was busy a moment ago" : std::strerror(errno);
    ::close(sock);
    if (!bound) break;
  }
  ::freeaddrinfo(list);
  return why;
}

}  // namespace kvc
