#include "serve/http_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "base/log.h"
#include "base/status.h"
#include "base/utf8.h"

namespace kvc {
namespace {

// A request line and headers beyond this are not a request we serve: it bounds what a client
// can make the server read and hold before a handler has looked at the request (the handlers
// allow the body its own limit).
constexpr uint64_t kMaxHeaderBytes = 64 << 10;
// httplib's own limits on one line (CRLF included), which it enforces with a 414 it sends after
// reading on, and a bare 400: refused here first, with their own statuses.
constexpr size_t kMaxRequestLineBytes = CPPHTTPLIB_REQUEST_URI_MAX_LENGTH;
constexpr size_t kMaxHeaderLineBytes = CPPHTTPLIB_HEADER_MAX_LENGTH;
// How often a thread waiting for a client's bytes looks at whether the server is stopping.
constexpr int kPollSliceMs = 100;
// Threads for the reserved paths when every connection thread is busy: their answers are
// generated at once, so a few keep them answered.
constexpr size_t kReserveThreads = 4;
// A connection closed with bytes unread is read (and the bytes dropped) this long after its
// answer, so that the client reads the answer rather than a reset that discards it.
constexpr auto kLinger = std::chrono::seconds(2);
// A connection thread idle this long ends.
constexpr auto kIdleThreadEnd = std::chrono::seconds(60);

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

const char* Reason(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

// A request's head as read before httplib parses it again: enough to route it to a thread and
// to know where its body ends.
struct RequestHead {
  size_t size = 0;                         // bytes through the blank line
  std::string method, path;                // path: the target without its query
  std::optional<uint64_t> content_length;  // the maximum when it has more digits than that
  bool chunked = false;
};

enum class HeadState { kIncomplete, kComplete, kRefused };

// RFC 9110 §5.6.2: a header name (and a method) is a token.
bool IsTokenChar(unsigned char c) { return c > 0x20 && c < 0x7f && std::strchr("\"(),/:;<=>?@[\\]{}", c) == nullptr; }

bool IsToken(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return IsTokenChar(static_cast<unsigned char>(c)); });
}

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view TrimSpaceAndTab(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A client's text quoted in a message: printable, and short.
std::string Quoted(std::string_view s) {
  constexpr size_t kMax = 40;
  return "'" + PrintableOneLine(s.substr(0, kMax)) + (s.size() > kMax ? "...'" : "'");
}

// Checks the head at the front of `bytes` (the request line and headers, RFC 9112), stricter
// than httplib: what it would skip or misread (a bare LF, a folded line, a space before a
// colon, a second Content-Length, Transfer-Encoding beside Content-Length) is where a proxy in
// front may read the request differently, so it is refused, never guessed at. `head` gets the
// method and path as soon as the request line is whole.
HeadState ParseHead(std::string_view bytes, RequestHead* head, HttpRefusal* refusal) {
  auto refuse = [&](int status, std::string message) {
    refusal->status = status;
    refusal->method = head->method;
    refusal->path = head->path;
    refusal->message = std::move(message);
    return HeadState::kRefused;
  };
  const size_t nl = bytes.find('\n');
  if (nl == std::string_view::npos || nl + 1 > kMaxRequestLineBytes) {
    if (nl != std::string_view::npos || bytes.size() > kMaxRequestLineBytes) {
      return refuse(414, FormatMessage("the request line is longer than %zu bytes", kMaxRequestLineBytes));
    }
    return HeadState::kIncomplete;
  }
  if (nl == 0 || bytes[nl - 1] != '\r') return refuse(400, "the request line does not end with CRLF");
  const std::string_view line = bytes.substr(0, nl - 1);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return refuse(400, "the request line is not \"METHOD target HTTP/1.1\"");
  }
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = line.substr(sp2 + 1);
  const bool target_ok = !target.empty() && std::all_of(target.begin(), target.end(), [](char c) {
    return static_cast<unsigned char>(c) > 0x20 && c != 0x7f;
  });
  if (!IsToken(method) || !target_ok) return refuse(400, "the request line is not \"METHOD target HTTP/1.1\"");
  head->method = method;
  head->path = target.substr(0, target.find_first_of("?#"));
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return refuse(505, "HTTP version " + Quoted(version) + " is not served (HTTP/1.1 or HTTP/1.0)");
  }

  std::vector<std::string_view> lengths, codings;
  size_t at = nl + 1;
  for (;;) {
    const size_t end = bytes.find('\n', at);
    if (end == std::string_view::npos || end + 1 - at > kMaxHeaderLineBytes) {
      if (end != std::string_view::npos || bytes.size() - at > kMaxHeaderLineBytes) {
        return refuse(431, FormatMessage("a header line is longer than %zu bytes", kMaxHeaderLineBytes));
      }
      return HeadState::kIncomplete;
    }
    if (end == at || bytes[end - 1] != '\r') return refuse(400, "a header line does not end with CRLF");
    const std::string_view header = bytes.substr(at, end - 1 - at);
    at = end + 1;
    if (header.empty()) break;  // the blank line: the head is whole
    if (header[0] == ' ' || header[0] == '\t') return refuse(400, "a header line is folded (obsolete line folding)");
    const size_t colon = header.find(':');
    const std::string_view name = header.substr(0, colon);
    if (colon == std::string_view::npos || !IsToken(name)) {
      return refuse(400, "header line " + Quoted(header) + " is not \"Name: value\"");
    }
    const std::string_view value = TrimSpaceAndTab(header.substr(colon + 1));
    if (std::any_of(value.begin(), value.end(),
                    [](char c) { return (c >= 0 && c < 0x20 && c != '\t') || c == 0x7f; })) {
      return refuse(400, "header " + Quoted(name) + " holds a control character");
    }
    if (EqualsIgnoringCase(name, "Content-Length")) lengths.push_back(value);
    if (EqualsIgnoringCase(name, "Transfer-Encoding")) codings.push_back(value);
  }
  head->size = at;
  if (at > kMaxHeaderBytes) {
    return refuse(431, FormatMessage("the request's headers are larger than %llu bytes",
                                     static_cast<unsigned long long>(kMaxHeaderBytes)));
  }

  // Where the body ends (RFC 9112 §6.3), stated once and unambiguously.
  if (lengths.size() > 1) return refuse(400, "the request has more than one Content-Length header");
  if (!codings.empty()) {
    if (!lengths.empty()) return refuse(400, "the request has both Transfer-Encoding and Content-Length");
    if (version == "HTTP/1.0") return refuse(400, "an HTTP/1.0 request cannot have Transfer-Encoding");
    size_t n = 0;
    for (std::string_view list : codings) {
      while (!list.empty()) {
        const size_t comma = list.find(',');
        const std::string_view coding = TrimSpaceAndTab(list.substr(0, comma));
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
        if (coding.empty()) continue;
        if (!EqualsIgnoringCase(coding, "chunked")) {
          return refuse(501, "transfer coding " + Quoted(coding) + " is not supported (only chunked)");
        }
        ++n;
      }
    }
    if (n != 1) return refuse(400, "Transfer-Encoding must be chunked, once");
    head->chunked = true;
  } else if (!lengths.empty()) {
    const std::string_view v = lengths[0];
    if (v.empty() || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return refuse(400, "Content-Length " + Quoted(v) + " is not a number of bytes");
    }
    uint64_t length = std::numeric_limits<uint64_t>::max();
    if (v.size() <= 19) std::from_chars(v.data(), v.data() + v.size(), length);
    head->content_length = length;
  }
  // httplib reads a body for these methods only: another's would be read as the next request.
  const bool takes_body = method == "POST" || method == "PUT" || method == "PATCH";
  const bool has_body = head->chunked || head->content_length.value_or(0) > 0;
  if (has_body && !takes_body) return refuse(400, "a " + std::string(method) + " request cannot have a body");
  // Without either, httplib would read the body until the client closes its connection.
  if (takes_body && !head->chunked && !head->content_length) {
    return refuse(411, "a " + std::string(method) + " request needs a Content-Length (or a chunked body)");
  }
  return HeadState::kComplete;
}

// httplib's socket stream, with limits it lacks: reads stop at the request's deadline and byte
// budget (a client trickling body bytes every few seconds, or sending a body without end, is
// cut off) and when the server stops; it starts with the bytes read before (the head, perhaps
// more), and what it has read beyond the request is kept for the next one (pipelining).
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(HttpConnection& c, const std::atomic<socket_t>& server_socket, int read_timeout_ms,
                   int write_timeout_ms, std::string bytes)
      : c_(c),
        server_socket_(server_socket),
        read_timeout_ms_(read_timeout_ms),
        write_timeout_ms_(write_timeout_ms),
        buf_(std::move(bytes)) {}

  bool buffered() const { return off_ < buf_.size(); }
  // The bytes read but not consumed.
  std::string TakeBuffered() {
    std::string rest = buf_.substr(off_);
    buf_.clear();
    off_ = 0;
    return rest;
  }

  bool is_readable() const override { return buffered() || WaitReadable(); }
  bool is_writable() const override { return Wait(POLLOUT, write_timeout_ms_) && ClientConnected(c_.sock); }

  ssize_t read(char* ptr, size_t size) override {
    if (c_.read >= c_.budget) {
      c_.budget_spent = true;
      return -1;
    }
    size = static_cast<size_t>(std::min<uint64_t>(size, c_.budget - c_.read));
    if (!buffered()) {
      if (!WaitReadable()) return -1;
      buf_.resize(kReadBytes);
      ssize_t n;
      do {
        n = ::recv(c_.sock, buf_.data(), buf_.size(), 0);
      } while (n < 0 && errno == EINTR);
      buf_.resize(static_cast<size_t>(std::max<ssize_t>(n, 0)));
      off_ = 0;
      if (n <= 0) return n;
    }
    const size_t n = std::min(size, buf_.size() - off_);
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
  static constexpr size_t kReadBytes = 16 << 10;

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
  std::string buf_;
  size_t off_ = 0;
};

}  // namespace

// Every connection not being served sits in the lobby, where one thread polls them all: it
// reads each one's next head, refuses the bad and the late, lets connections idle between
// requests, and drains the ones being closed. A whole head goes to a connection thread (or, for
// a reserved path while they are all busy, to a reserve thread); after the answer the
// connection comes back to the lobby for its next request.
struct HttpServer::Connections {
  explicit Connections(HttpServer& server) : server_(server) {}
  ~Connections() {
    Shutdown();
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  // A connection waiting in the lobby or for a thread.
  struct Pending {
    int sock = -1;
    std::string bytes;  // read and not yet consumed: the head so far (and perhaps more)
    size_t scanned = 0, line_start = 0;
    size_t served = 0;                  // requests answered on it
    SteadyClock::time_point since;      // the request's first byte, or when it fell idle
    SteadyClock::time_point last_byte;  // while its head arrives
    SteadyClock::duration head_took{};  // from the first byte to the whole head
    RequestHead head;                   // once whole
    bool gone = false;                  // the client closed its end (or it failed)
    bool lingering = false;             // answered and being closed: its bytes are dropped
    SteadyClock::time_point linger_until;
  };

  struct Pool {
    Pool(size_t max_threads, bool reserve) : max(max_threads), reserve(reserve) {}
    const size_t max;
    const bool reserve;
    size_t threads = 0, idle = 0;
    std::deque<Pending> ready;
    std::condition_variable cv;
  };

  // Starts the lobby (httplib's accept loop is starting).
  void Start() {
    std::lock_guard lock(mu_);
    if (lobby_.joinable() || stop_) return;
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) {
      KVC_LOG_ERROR("cannot create the server's eventfd: %s", std::strerror(errno));
      return;
    }
    try {
      lobby_ = std::thread([this] { LobbyLoop(); });
    } catch (const std::system_error& e) {
      KVC_LOG_ERROR("cannot start the server's connection thread: %s", e.what());
    }
  }

  // A new connection, from the accept loop: never blocks it.
  void Admit(int sock) {
    Pending p;
    p.sock = sock;
    p.since = p.last_byte = SteadyClock::now();
    ToLobby(std::move(p));
  }

  // Stops reading new requests; the requests being served finish (their threads are joined);
  // every other connection is closed.
  void Shutdown() {
    std::vector<Pending> dropped;
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      stop_ = true;
      for (Pool* pool : {&regular_, &reserve_}) {
        for (Pending& p : pool->ready) dropped.push_back(std::move(p));
        pool->ready.clear();
        pool->cv.notify_all();
      }
      for (Pending& p : incoming_) dropped.push_back(std::move(p));
      incoming_.clear();
    }
    for (const Pending& p : dropped) Close(p.sock);
    Wake();
    if (lobby_.joinable()) lobby_.join();
    for (;;) {
      std::map<std::thread::id, std::thread> threads;
      {
        std::lock_guard lock(mu_);
        if (threads_.empty()) break;
        threads.swap(threads_);
        ended_.clear();
      }
      for (auto& [id, t] : threads) t.join();
    }
  }

 private:
  enum class Outcome { kKeep, kLinger, kClose };

  static void Close(int sock) {
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }

  void Wake() {
    if (wake_fd_ < 0) return;
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }

  void ToLobby(Pending p) {
    {
      std::lock_guard lock(mu_);
      if (!stop_ && lobby_.joinable()) {
        incoming_.push_back(std::move(p));
        p.sock = -1;
      }
    }
    if (p.sock >= 0) {
      Close(p.sock);
      return;
    }
    Wake();
  }

  const HttpServerOptions& options() const { return server_.options_; }
  SteadyClock::duration RequestTimeout() const {
    return std::chrono::duration_cast<SteadyClock::duration>(
        std::chrono::duration<double>(options().request_timeout_s));
  }

  SteadyClock::time_point Deadline(const Pending& p) const {
    if (p.lingering) return p.linger_until;
    if (p.bytes.empty()) return p.since + std::chrono::seconds(server_.keep_alive_timeout_sec_);
    return std::min(
        p.since + RequestTimeout(),
        p.last_byte + std::chrono::milliseconds(ToMs(server_.read_timeout_sec_, server_.read_timeout_usec_)));
  }

  void LobbyLoop() {
    std::vector<Pending> conns;
    std::vector<pollfd> fds;
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (stop_) break;
        for (Pending& p : incoming_) conns.push_back(std::move(p));
        incoming_.clear();
      }
      const auto now = SteadyClock::now();
      size_t kept = 0;
      for (size_t i = 0; i < conns.size(); ++i) {
        if (!Advance(conns[i], now)) continue;
        if (kept != i) conns[kept] = std::move(conns[i]);
        ++kept;
      }
      conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(kept), conns.end());

      fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
      auto next = now + std::chrono::seconds(1);
      for (const Pending& p : conns) {
        fds.push_back(pollfd{p.sock, POLLIN, 0});
        next = std::min(next, Deadline(p));
      }
      const int timeout_ms = static_cast<int>(
          std::clamp<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1, 0, 1000));
      const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
      if (rc < 0) {
        if (errno != EINTR) {
          KVC_LOG_ERROR("polling the server's connections: %s", std::strerror(errno));
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        continue;
      }
      if (fds[0].revents != 0) {
        uint64_t count;
        (void)!::read(wake_fd_, &count, sizeof count);
      }
      for (size_t i = 0; i < conns.size(); ++i) {
        if (fds[i + 1].revents != 0) Receive(conns[i]);
      }
    }
    for (const Pending& p : conns) Close(p.sock);
  }

  // Reads what the client has sent, without waiting: a head up to the limit, or bytes to drop.
  void Receive(Pending& p) {
    // Read here and appended, so that a connection holds only the bytes it sent (there may be
    // thousands waiting).
    char buf[16 << 10];
    for (int reads = 0; reads < 8; ++reads) {
      if (!p.lingering && p.bytes.size() >= kMaxHeaderBytes) return;
      const ssize_t n = ::recv(p.sock, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0 && !p.lingering) {
        const auto now = SteadyClock::now();
        if (p.bytes.empty()) p.since = now;
        p.last_byte = now;
        p.bytes.append(buf, static_cast<size_t>(n));
      }
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) p.gone = true;
      return;
    }
  }

  // Moves the connection on: to a thread with a whole head, refused, or closed. False: it has
  // left the lobby.
  bool Advance(Pending& p, SteadyClock::time_point now) {
    if (p.lingering) {
      if (!p.gone && now < p.linger_until) return true;
      Close(p.sock);
      return false;
    }
    // Empty lines before a request are ignored (RFC 9112 §2.2: some clients send a CRLF after a
    // body).
    size_t skip = 0;
    while (skip + 1 < p.bytes.size() && p.bytes[skip] == '\r' && p.bytes[skip + 1] == '\n') skip += 2;
    if (skip > 0) {
      p.bytes.erase(0, skip);
      p.scanned = p.line_start = 0;
    }
    // Only the bytes not seen before are scanned for the end of a line: a head trickled a byte
    // at a time costs its length, not its square. The whole head is parsed once it may be
    // complete, wrong or too long.
    bool parse = false;
    for (; p.scanned < p.bytes.size() && !parse; ++p.scanned) {
      if (p.bytes[p.scanned] != '\n') continue;
      parse = p.scanned == 0 || p.bytes[p.scanned - 1] != '\r' || p.scanned - p.line_start == 1;
      p.line_start = p.scanned + 1;
    }
    parse = parse || p.bytes.size() - p.line_start > kMaxHeaderLineBytes || p.bytes.size() >= kMaxHeaderBytes;
    if (parse) {
      RequestHead head;
      HttpRefusal refusal;
      switch (ParseHead(p.bytes, &head, &refusal)) {
        case HeadState::kComplete:
          p.head = std::move(head);
          p.head_took = now - p.since;
          Dispatch(std::move(p));
          return false;
        case HeadState::kRefused:
          Refuse(p, std::move(refusal), now);
          return true;
        case HeadState::kIncomplete:
          if (p.bytes.size() >= kMaxHeaderBytes) {
            Refuse(p,
                   HttpRefusal{431, head.method, head.path,
                               FormatMessage("the request's headers are larger than %llu bytes",
                                             static_cast<unsigned long long>(kMaxHeaderBytes))},
                   now);
            return true;
          }
          break;
      }
    }
    if (p.gone) {
      Close(p.sock);
      return false;
    }
    if (p.bytes.empty()) {
      if (now < Deadline(p)) return true;
      Close(p.sock);  // idle past the keep-alive timeout (or never sent a byte)
      return false;
    }
    if (now >= Deadline(p)) {
      RequestHead head;
      HttpRefusal refusal;
      (void)ParseHead(p.bytes, &head, &refusal);  // for the method and path, if they came
      const bool whole_time = now >= p.since + RequestTimeout();
      Refuse(
          p,
          HttpRefusal{408, head.method, head.path,
                      whole_time ? FormatMessage("the request did not arrive within %g s", options().request_timeout_s)
                                 : FormatMessage("the client sent nothing for %d s in the middle of a request",
                                                 ToMs(server_.read_timeout_sec_, server_.read_timeout_usec_) / 1000)},
          now);
      return true;
    }
    return true;
  }

  // Answers the request with an error and starts closing its connection. The answer is small
  // and the connection's send buffer empty, so it is sent whole without waiting.
  void Refuse(Pending& p, HttpRefusal refusal, SteadyClock::time_point now) {
    std::string body;
    try {
      if (options().refusal_body) body = options().refusal_body(refusal);
    } catch (...) {
      KVC_LOG_ERROR("writing a refusal: %s", ExceptionText(std::current_exception()).c_str());
    }
    if (body.empty()) {
      // A message quotes the client's text through PrintableOneLine, which JSON can carry as is.
      std::string escaped;
      for (const char c : refusal.message) {
        if (c == '"' || c == '\\') escaped += '\\';
        escaped += c;
      }
      body = R"({"error":{"message":")" + escaped + R"(","type":"invalid_request_error"}})";
    }
    const std::string answer = FormatMessage(
                                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                                   "Connection: close\r\n\r\n",
                                   refusal.status, Reason(refusal.status), body.size()) +
                               body;
    (void)::send(p.sock, answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    StartLinger(p, now);
  }

  static void StartLinger(Pending& p, SteadyClock::time_point now) {
    ::shutdown(p.sock, SHUT_WR);
    p.lingering = true;
    p.linger_until = now + kLinger;
    p.bytes = std::string();
  }

  bool Reserved(const RequestHead& head) const {
    if (head.method != "GET" && head.method != "HEAD") return false;
    const auto& paths = options().reserved_paths;
    return std::find(paths.begin(), paths.end(), head.path) != paths.end();
  }

  // A whole head to a thread: a connection thread, or a reserve thread for a reserved path
  // when no connection thread is free.
  void Dispatch(Pending p) {
    std::vector<std::thread> ended;
    {
      std::lock_guard lock(mu_);
      if (stop_) {
        Close(p.sock);
        return;
      }
      const bool regular_free = regular_.idle > regular_.ready.size() || regular_.threads < regular_.max;
      Pool& pool = Reserved(p.head) && !regular_free ? reserve_ : regular_;
      pool.ready.push_back(std::move(p));
      ended = TakeEnded();
      if (pool.idle < pool.ready.size() && pool.threads < pool.max) {
        try {
          std::thread t([this, &pool] { Work(pool); });
          ++pool.threads;
          threads_.emplace(t.get_id(), std::move(t));
        } catch (const std::system_error& e) {
          // The threads there are take the connection in turn.
          KVC_LOG_WARN("cannot start a connection thread (%zu running): %s", pool.threads, e.what());
        }
      }
      pool.cv.notify_one();
    }
    for (std::thread& t : ended) t.join();
  }

  void Work(Pool& pool) {
    std::unique_lock lock(mu_);
    for (;;) {
      ++pool.idle;
      const bool woken = pool.cv.wait_for(lock, kIdleThreadEnd, [&] { return stop_ || !pool.ready.empty(); });
      --pool.idle;
      if (stop_ || !woken) {
        // Idle for a minute, or stopping: end (Dispatch or Shutdown joins us).
        --pool.threads;
        if (!stop_) ended_.push_back(std::this_thread::get_id());
        return;
      }
      Pending p = std::move(pool.ready.front());
      pool.ready.pop_front();
      lock.unlock();
      Outcome outcome = Outcome::kClose;
      try {
        outcome = Serve(p, pool.reserve);
      } catch (...) {
        KVC_LOG_ERROR("serving a connection: %s", ExceptionText(std::current_exception()).c_str());
      }
      const auto now = SteadyClock::now();
      switch (outcome) {
        case Outcome::kKeep:
          p.since = p.last_byte = now;
          p.scanned = p.line_start = 0;
          p.head = RequestHead();
          ToLobby(std::move(p));
          break;
        case Outcome::kLinger:
          StartLinger(p, now);
          ToLobby(std::move(p));
          break;
        case Outcome::kClose:
          Close(p.sock);
          break;
      }
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

  // One request, whose head is in p.bytes, through httplib (which parses it again and calls the
  // handlers). What then becomes of the connection.
  Outcome Serve(Pending& p, bool reserve) {
    HttpServer& s = server_;
    HttpConnection c;
    c.sock = p.sock;
    current_connection = &c;
    ConnectionStream stream(c, s.svr_sock_, ToMs(s.read_timeout_sec_, s.read_timeout_usec_),
                            ToMs(s.write_timeout_sec_, s.write_timeout_usec_), std::move(p.bytes));
    // The time the head took counts against the request's deadline; the wait for a thread does not.
    c.deadline = SteadyClock::now() + std::max(RequestTimeout() - p.head_took, SteadyClock::duration::zero());
    c.budget = p.head.size + kMaxHeaderBytes;
    const bool last = reserve || p.served + 1 >= s.keep_alive_max_count_;
    bool closed = false, answered = false;
    try {
      answered = s.process_request(stream, last, closed, nullptr);
    } catch (...) {
      KVC_LOG_ERROR("serving a request: %s", ExceptionText(std::current_exception()).c_str());
    }
    current_connection = nullptr;
    ++p.served;
    p.bytes = stream.TakeBuffered();
    // A body left unread would be read as the next request: the connection cannot go on.
    const uint64_t body_read = c.read > p.head.size ? c.read - p.head.size : 0;
    const bool body_unread =
        (p.head.content_length && body_read < *p.head.content_length) || (p.head.chunked && body_read == 0);
    if (!answered) return Outcome::kClose;
    if (c.close || body_unread) return Outcome::kLinger;
    if (closed || last || s.svr_sock_ == INVALID_SOCKET) return p.bytes.empty() ? Outcome::kClose : Outcome::kLinger;
    return Outcome::kKeep;
  }

  HttpServer& server_;
  int wake_fd_ = -1;
  std::mutex mu_;
  bool stop_ = false;
  std::vector<Pending> incoming_;  // new and returning connections, for the lobby
  Pool regular_{server_.options_.max_connections, false};
  Pool reserve_{kReserveThreads, true};
  std::map<std::thread::id, std::thread> threads_;  // connection and reserve threads
  std::vector<std::thread::id> ended_;
  std::thread lobby_;
};

namespace {

// httplib's task queue, given each accepted connection: handed to the lobby on the accept
// thread (process_and_close_socket returns at once), which schedules the connection threads.
class AdmitToLobby final : public httplib::TaskQueue {
 public:
  explicit AdmitToLobby(HttpServer::Connections& connections) : connections_(connections) {}
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override { connections_.Shutdown(); }

 private:
  HttpServer::Connections& connections_;
};

}  // namespace

HttpConnection* CurrentHttpConnection() { return current_connection; }

bool ClientConnected() {
  const HttpConnection* c = current_connection;
  return c == nullptr || ClientConnected(c->sock);
}

HttpServer::HttpServer(HttpServerOptions options)
    : options_(std::move(options)), connections_(std::make_unique<Connections>(*this)) {
  new_task_queue = [this] {
    connections_->Start();
    return new AdmitToLobby(*connections_);
  };
}

HttpServer::~HttpServer() { connections_->Shutdown(); }

// Listening again on a listening socket only changes its backlog.
void HttpServer::RaiseBacklog() { ::listen(svr_sock_, SOMAXCONN); }

bool HttpServer::process_and_close_socket(socket_t sock) {
  connections_->Admit(sock);
  return true;
}

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
