#include "store/memory_store.h"

#include <list>
#include <mutex>
#include <unordered_map>

namespace kvc {
namespace {

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(uint64_t capacity) : capacity_(capacity) {}
  std::string url() const override { return "mem://"; }

  Status Put(std::string_view name, std::span<const uint8_t> bytes) override {
    try {
      return PutUnguarded(name, bytes);
    } catch (...) {
      return StatusOfCurrentException("storing '" + std::string(name) + "'");
    }
  }

  Result<std::vector<uint8_t>> Get(std::string_view name, uint64_t max_bytes) override {
    try {
      RETURN_IF_ERROR(CheckObjectName(name));
      std::lock_guard lock(mu_);
      auto it = index_.find(std::string(name));
      if (it == index_.end()) return NotFound("no object '" + std::string(name) + "'");
      const std::vector<uint8_t>& bytes = it->second->bytes;
      if (bytes.size() > max_bytes) return ObjectTooLarge(name, bytes.size(), max_bytes);
      lru_.splice(lru_.begin(), lru_, it->second);
      return bytes;
    } catch (...) {
      return StatusOfCurrentException("reading '" + std::string(name) + "'");
    }
  }

  Result<bool> Exists(std::string_view name) override {
    try {
      RETURN_IF_ERROR(CheckObjectName(name));
      std::lock_guard lock(mu_);
      return index_.count(std::string(name)) > 0;
    } catch (...) {
      return StatusOfCurrentException("looking up '" + std::string(name) + "'");
    }
  }

  Status Delete(std::string_view name) override {
    try {
      RETURN_IF_ERROR(CheckObjectName(name));
      std::lock_guard lock(mu_);
      EraseLocked(std::string(name));
      return Status::Ok();
    } catch (...) {
      return StatusOfCurrentException("deleting '" + std::string(name) + "'");
    }
  }

  Result<StoreStats> Stats() override {
    std::lock_guard lock(mu_);
    return StoreStats{.objects = index_.size(), .bytes = bytes_, .capacity_bytes = capacity_, .evictions = evictions_};
  }

 private:
  struct Entry {
    std::string name;
    std::vector<uint8_t> bytes;
  };

  Status PutUnguarded(std::string_view name, std::span<const uint8_t> bytes) {
    RETURN_IF_ERROR(CheckObjectName(name));
    if (bytes.size() > capacity_) {
      return InvalidArgument(FormatMessage("object of %zu bytes exceeds the store's capacity of %llu", bytes.size(),
                                           static_cast<unsigned long long>(capacity_)));
    }
    // The copy first, and the list and index changed so that a failed allocation (an exception
    // Put turns into a Status) leaves them consistent.
    Entry entry{std::string(name), {bytes.begin(), bytes.end()}};
    std::lock_guard lock(mu_);
    EraseLocked(entry.name);
    lru_.push_front(std::move(entry));
    try {
      index_[lru_.front().name] = lru_.begin();
    } catch (...) {
      lru_.pop_front();
      throw;
    }
    bytes_ += bytes.size();
    while (bytes_ > capacity_) {
      EraseLocked(lru_.back().name);
      ++evictions_;
    }
    return Status::Ok();
  }

  void EraseLocked(const std::string& name) {
    auto it = index_.find(name);
    if (it == index_.end()) return;
    bytes_ -= it->second->bytes.size();
    lru_.erase(it->second);
    index_.erase(it);
  }

  const uint64_t capacity_;
  std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  uint64_t bytes_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace

std::unique_ptr<Store> MakeMemoryStore(const StoreOptions& options) {
  return std::make_unique<MemoryStore>(options.capacity_bytes != 0 ? options.capacity_bytes : kDefaultMemoryStoreBytes);
}

}  // namespace kvc
