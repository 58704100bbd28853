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
    RETURN_IF_ERROR(CheckObjectName(name));
    if (bytes.size() > capacity_) {
      return InvalidArgument(FormatMessage("object of %zu bytes exceeds the store's capacity of %llu", bytes.size(),
                                           static_cast<unsigned long long>(capacity_)));
    }
    std::lock_guard lock(mu_);
    EraseLocked(std::string(name));
    lru_.push_front(Entry{std::string(name), {bytes.begin(), bytes.end()}});
    index_[lru_.front().name] = lru_.begin();
    bytes_ += bytes.size();
    while (bytes_ > capacity_) {
      EraseLocked(lru_.back().name);
      ++evictions_;
    }
    return Status::Ok();
  }

  Result<std::vector<uint8_t>> Get(std::string_view name) override {
    RETURN_IF_ERROR(CheckObjectName(name));
    std::lock_guard lock(mu_);
    auto it = index_.find(std::string(name));
    if (it == index_.end()) return NotFound("no object '" + std::string(name) + "'");
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->bytes;
  }

  Result<bool> Exists(std::string_view name) override {
    RETURN_IF_ERROR(CheckObjectName(name));
    std::lock_guard lock(mu_);
    return index_.count(std::string(name)) > 0;
  }

  Status Delete(std::string_view name) override {
    RETURN_IF_ERROR(CheckObjectName(name));
    std::lock_guard lock(mu_);
    EraseLocked(std::string(name));
    return Status::Ok();
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
