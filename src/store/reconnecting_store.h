// A store that may be down: what `kvcodec serve` keeps its chunks in. A store is a cache, so a
// server must neither refuse to start nor make every request wait for a connect timeout because
// Redis is down or refuses the password. While the backend cannot be opened or answers reads
// with I/O errors, every call fails at once with kIoError ("store ... is down, retrying in N s")
// and a background thread tries again with exponential back-off (0.5 s doubling to 30 s by
// default); once it answers, calls go through again. The caller recomputes what it cannot
// fetch and skips what it cannot store, so requests are answered throughout.
//
// Only reads take the store down (Get, GetMany, Exists, ExistsMany, Stats failing with
// kIoError): they are on every request's path, and they fail whenever the backend is gone. A
// write that fails alone (a full disk, a Redis at maxmemory refusing writes) is that write's
// error, and reads keep working. Other codes (kNotFound, kCorrupt) are about one object.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/clock.h"
#include "store/store.h"

namespace kvc {

struct ReconnectOptions {
  // The wait before the first retry; each failed retry doubles it, up to `max_retry`. A store
  // that goes down again within `stable_after` of coming back resumes the longer waits (a
  // flapping backend is not hammered every half second).
  SteadyClock::duration first_retry = std::chrono::milliseconds(500);
  SteadyClock::duration max_retry = std::chrono::seconds(30);
  SteadyClock::duration stable_after = std::chrono::seconds(60);
  // Opens the backend (tests substitute their own); empty: OpenStore(url, options).
  std::function<Result<std::unique_ptr<Store>>()> open;
};

// The store's state, for /health and /metrics.
struct StoreHealth {
  std::string url;  // redacted: no password
  bool up = false;
  uint64_t consecutive_failures = 0;  // failed reads and reconnect attempts since it last worked
  uint64_t errors = 0;                // I/O errors of the backend (calls and attempts), ever
  uint64_t reconnects = 0;            // times it came back after being down
  std::string last_error;             // one printable line, no password; empty before any error
  double down_s = 0;                  // while down: how long it has been down
  double retry_in_s = 0;              // while down: until the next attempt
};

class ReconnectingStore final : public Store {
 public:
  // Opens `url` once, here. kInvalidArgument (a malformed URL) is returned: it is the caller's
  // mistake, and no retry can mend it. Any other failure leaves the store down and retrying.
  static Result<std::unique_ptr<ReconnectingStore>> Open(const std::string& url, const StoreOptions& options,
                                                         ReconnectOptions reconnect = {});
  ~ReconnectingStore() override;
  ReconnectingStore(const ReconnectingStore&) = delete;
  ReconnectingStore& operator=(const ReconnectingStore&) = delete;

  StoreHealth health() const;

  std::string url() const override;
  Status Put(std::string_view name, std::span<const uint8_t> bytes) override;
  using Store::Get;
  Result<std::vector<uint8_t>> Get(std::string_view name, uint64_t max_bytes) override;
  Result<std::span<const uint8_t>> GetInto(std::string_view name, uint64_t max_bytes,
                                           std::vector<uint8_t>& buffer) override;
  Result<bool> Exists(std::string_view name) override;
  Status Delete(std::string_view name) override;
  using Store::GetMany;
  std::vector<Result<std::vector<uint8_t>>> GetMany(std::span<const std::string> names, uint64_t max_bytes) override;
  Result<std::vector<bool>> ExistsMany(std::span<const std::string> names) override;
  Result<StoreStats> Stats() override;

 private:
  ReconnectingStore(std::string shown_url, ReconnectOptions reconnect);

  // The backend while the store is up; otherwise null and `*down` says why.
  std::shared_ptr<Store> Backend(Status* down) const;
  // A call's outcome: an I/O error of a read takes the store down; any I/O error is counted.
  void Saw(const Status& status, bool read);
  // `call` on the backend while the store is up, its outcome seen (Saw); while down, the
  // down error at once. R: Status or a Result.
  template <typename R, typename Call>
  R Through(bool read, Call&& call);
  // Under mu_: marks the store down (if it is up) after `error`.
  void GoDown(const Status& error, SteadyClock::time_point now);
  // The background thread: waits out each back-off, then opens or probes the backend.
  void RetryLoop();

  const std::string shown_url_;
  const ReconnectOptions reconnect_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Store> backend_;  // set once opened, kept while down (its own reconnects are probed)
  bool up_ = false;
  bool stopping_ = false;
  uint64_t consecutive_failures_ = 0, errors_ = 0, reconnects_ = 0;
  std::string last_error_;
  SteadyClock::duration backoff_{};
  SteadyClock::time_point next_attempt_{}, down_since_{}, up_since_{};
  std::thread retry_thread_;
};

}  // namespace kvc
