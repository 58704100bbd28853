#include "store/reconnecting_store.h"

#include <algorithm>
#include <exception>
#include <system_error>
#include <type_traits>
#include <utility>

#include "base/log.h"
#include "base/utf8.h"

namespace kvc {
namespace {

// What a retry reads to learn whether an opened backend answers again (an absent object: the
// read is as cheap as one gets, and it goes through the backend's own reconnect).
constexpr std::string_view kProbeName = "kvcodec-store-probe";

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Result<std::unique_ptr<ReconnectingStore>> ReconnectingStore::Open(const std::string& url, const StoreOptions& options,
                                                                   ReconnectOptions reconnect) {
  if (!reconnect.open) reconnect.open = [url, options] { return OpenStore(url, options); };
  if (reconnect.first_retry <= SteadyClock::duration::zero() || reconnect.max_retry < reconnect.first_retry) {
    return InvalidArgument("store retry back-off must be positive and its maximum at least its first wait");
  }
  Result<std::unique_ptr<Store>> opened = reconnect.open();
  if (!opened.ok() && opened.status().code() == StatusCode::kInvalidArgument) return opened.status();
  std::unique_ptr<ReconnectingStore> store(new ReconnectingStore(RedactedUrl(url), std::move(reconnect)));
  {
    std::lock_guard lock(store->mu_);
    const auto now = SteadyClock::now();
    if (opened.ok()) {
      store->backend_ = std::move(opened).value();
      store->up_ = true;
      store->up_since_ = now;
    } else {
      ++store->errors_;
      store->up_ = true;  // so that GoDown counts this as the start of an outage
      store->up_since_ = now;
      store->GoDown(opened.status(), now);
    }
  }
  try {
    store->retry_thread_ = std::thread([s = store.get()] { s->RetryLoop(); });
  } catch (const std::system_error& e) {
    return IoError(std::string("cannot start the store's retry thread: ") + e.what());
  }
  return store;
}

ReconnectingStore::ReconnectingStore(std::string shown_url, ReconnectOptions reconnect)
    : shown_url_(std::move(shown_url)), reconnect_(std::move(reconnect)), backoff_(reconnect_.first_retry) {}

ReconnectingStore::~ReconnectingStore() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (retry_thread_.joinable()) retry_thread_.join();
}

StoreHealth ReconnectingStore::health() const {
  std::lock_guard lock(mu_);
  StoreHealth h;
  h.url = backend_ != nullptr ? backend_->url() : shown_url_;
  h.up = up_;
  h.consecutive_failures = consecutive_failures_;
  h.errors = errors_;
  h.reconnects = reconnects_;
  h.last_error = last_error_;
  if (!up_) {
    const auto now = SteadyClock::now();
    h.down_s = Seconds(now - down_since_);
    h.retry_in_s = std::max(0.0, Seconds(next_attempt_ - now));
  }
  return h;
}

std::string ReconnectingStore::url() const {
  std::lock_guard lock(mu_);
  return backend_ != nullptr ? backend_->url() : shown_url_;
}

std::shared_ptr<Store> ReconnectingStore::Backend(Status* down) const {
  std::lock_guard lock(mu_);
  if (up_ && backend_ != nullptr) return backend_;
  const double retry_in = std::max(0.0, Seconds(next_attempt_ - SteadyClock::now()));
  *down = IoError(
      FormatMessage("store %s is down, retrying in %.1f s (%s)", shown_url_.c_str(), retry_in, last_error_.c_str()));
  return nullptr;
}

void ReconnectingStore::Saw(const Status& status, bool read) {
  if (status.code() != StatusCode::kIoError) {
    if (status.ok() && read) {
      std::lock_guard lock(mu_);
      if (up_) consecutive_failures_ = 0;
    }
    return;
  }
  std::lock_guard lock(mu_);
  ++errors_;
  if (!read) {
    last_error_ = PrintableOneLine(status.ToString());
    return;
  }
  GoDown(status, SteadyClock::now());
}

void ReconnectingStore::GoDown(const Status& error, SteadyClock::time_point now) {
  ++consecutive_failures_;
  last_error_ = PrintableOneLine(error.ToString());
  if (!up_) return;  // a call that was in flight when the store went down: the back-off stands
  up_ = false;
  // A backend that failed again soon after coming back waits longer than the first time.
  backoff_ = now - up_since_ < reconnect_.stable_after && reconnects_ > 0 ? std::min(backoff_ * 2, reconnect_.max_retry)
                                                                          : reconnect_.first_retry;
  down_since_ = now;
  next_attempt_ = now + backoff_;
  KVC_LOG_WARN("store %s is down (%s); serving by recomputing, retrying in %g s", shown_url_.c_str(),
               last_error_.c_str(), Seconds(backoff_));
  cv_.notify_all();
}

void ReconnectingStore::RetryLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (up_) {
      cv_.wait(lock, [&] { return stopping_ || !up_; });
      continue;
    }
    if (cv_.wait_until(lock, next_attempt_, [&] { return stopping_; })) break;
    if (up_ || SteadyClock::now() < next_attempt_) continue;
    std::shared_ptr<Store> backend = backend_;
    lock.unlock();
    // Outside the lock: an attempt may take the backend's whole timeout, and calls meanwhile
    // must still fail at once.
    Status attempt;
    std::unique_ptr<Store> opened;
    try {
      if (backend == nullptr) {
        Result<std::unique_ptr<Store>> o = reconnect_.open();
        if (o.ok()) {
          opened = std::move(o).value();
        } else {
          attempt = o.status();
        }
      } else {
        Result<bool> probed = backend->Exists(kProbeName);
        if (!probed.ok()) attempt = probed.status();
      }
    } catch (...) {
      attempt = Internal(ExceptionText(std::current_exception()));
    }
    lock.lock();
    const auto now = SteadyClock::now();
    if (attempt.ok()) {
      if (opened != nullptr) backend_ = std::move(opened);
      up_ = true;
      up_since_ = now;
      consecutive_failures_ = 0;
      ++reconnects_;
      KVC_LOG_INFO("store %s is back after %.1f s", shown_url_.c_str(), Seconds(now - down_since_));
      continue;
    }
    ++errors_;
    ++consecutive_failures_;
    last_error_ = PrintableOneLine(attempt.ToString());
    backoff_ = std::min(backoff_ * 2, reconnect_.max_retry);
    next_attempt_ = now + backoff_;
  }
}

template <typename R, typename Call>
R ReconnectingStore::Through(bool read, Call&& call) {
  Status down;
  const std::shared_ptr<Store> backend = Backend(&down);
  if (backend == nullptr) return down;
  R result = call(*backend);
  if constexpr (std::is_same_v<R, Status>) {
    Saw(result, read);
  } else {
    Saw(result.status(), read);
  }
  return result;
}

Status ReconnectingStore::Put(std::string_view name, std::span<const uint8_t> bytes) {
  return Through<Status>(false, [&](Store& s) { return s.Put(name, bytes); });
}

Result<std::vector<uint8_t>> ReconnectingStore::Get(std::string_view name, uint64_t max_bytes) {
  return Through<Result<std::vector<uint8_t>>>(true, [&](Store& s) { return s.Get(name, max_bytes); });
}

Result<std::span<const uint8_t>> ReconnectingStore::GetInto(std::string_view name, uint64_t max_bytes,
                                                            std::vector<uint8_t>& buffer) {
  return Through<Result<std::span<const uint8_t>>>(true, [&](Store& s) { return s.GetInto(name, max_bytes, buffer); });
}

Result<bool> ReconnectingStore::Exists(std::string_view name) {
  return Through<Result<bool>>(true, [&](Store& s) { return s.Exists(name); });
}

Status ReconnectingStore::Delete(std::string_view name) {
  return Through<Status>(false, [&](Store& s) { return s.Delete(name); });
}

std::vector<Result<std::vector<uint8_t>>> ReconnectingStore::GetMany(std::span<const std::string> names,
                                                                     uint64_t max_bytes) {
  Status down;
  const std::shared_ptr<Store> backend = Backend(&down);
  if (backend == nullptr) return std::vector<Result<std::vector<uint8_t>>>(names.size(), down);
  std::vector<Result<std::vector<uint8_t>>> got = backend->GetMany(names, max_bytes);
  // One I/O error in the batch is enough: a node (or the connection) failed.
  Status seen;
  for (const auto& r : got) {
    if (r.status().code() == StatusCode::kIoError) {
      seen = r.status();
      break;
    }
  }
  Saw(seen, true);
  return got;
}

Result<std::vector<bool>> ReconnectingStore::ExistsMany(std::span<const std::string> names) {
  return Through<Result<std::vector<bool>>>(true, [&](Store& s) { return s.ExistsMany(names); });
}

Result<StoreStats> ReconnectingStore::Stats() {
  return Through<Result<StoreStats>>(true, [&](Store& s) { return s.Stats(); });
}

}  // namespace kvc
