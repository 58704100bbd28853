#include "store/bound_store.h"

#include <cstring>
#include <limits>
#include <utility>

#include "store/stored_object.h"

namespace kvc {
namespace {

class BoundStore final : public Store {
 public:
  BoundStore(std::unique_ptr<Store> backend, std::string secret)
      : backend_(std::move(backend)), secret_(std::move(secret)) {}

  std::string url() const override { return backend_->url(); }

  Status Put(std::string_view name, std::span<const uint8_t> bytes) override {
    try {
      ASSIGN_OR_RETURN(const std::vector<uint8_t> object, SealStoredObject(name, bytes, secret_));
      return backend_->Put(name, object);
    } catch (...) {
      return StatusOfCurrentException("writing '" + std::string(name) + "'");
    }
  }

  Result<std::vector<uint8_t>> Get(std::string_view name, uint64_t max_bytes) override {
    try {
      ASSIGN_OR_RETURN(std::vector<uint8_t> object, backend_->Get(name, ObjectBound(name, max_bytes)));
      RETURN_IF_ERROR(Open(name, object, max_bytes));
      return object;
    } catch (...) {
      return StatusOfCurrentException("reading '" + std::string(name) + "'");
    }
  }

  Result<std::span<const uint8_t>> GetInto(std::string_view name, uint64_t max_bytes,
                                           std::vector<uint8_t>& buffer) override {
    try {
      ASSIGN_OR_RETURN(const std::span<const uint8_t> object,
                       backend_->GetInto(name, ObjectBound(name, max_bytes), buffer));
      return Payload(name, object, max_bytes);
    } catch (...) {
      return StatusOfCurrentException("reading '" + std::string(name) + "'");
    }
  }

  Result<bool> Exists(std::string_view name) override { return backend_->Exists(name); }
  Status Delete(std::string_view name) override { return backend_->Delete(name); }

  std::vector<Result<std::vector<uint8_t>>> GetMany(std::span<const std::string> names, uint64_t max_bytes) override {
    try {
      // One bound for the batch: the envelope of the longest name, so no object gets less room
      // than Get would give it (the payload's own length is checked when each one is opened).
      std::string_view longest;
      for (const std::string& n : names) longest = n.size() > longest.size() ? std::string_view(n) : longest;
      std::vector<Result<std::vector<uint8_t>>> got = backend_->GetMany(names, ObjectBound(longest, max_bytes));
      if (got.size() != names.size()) {
        return std::vector<Result<std::vector<uint8_t>>>(names.size(), Internal("store gave a result per name"));
      }
      for (size_t i = 0; i < names.size(); ++i) {
        if (!got[i].ok()) continue;
        if (Status opened = Open(names[i], *got[i], max_bytes); !opened.ok()) got[i] = std::move(opened);
      }
      return got;
    } catch (...) {
      return std::vector<Result<std::vector<uint8_t>>>(names.size(),
                                                       StatusOfCurrentException("reading a batch of objects"));
    }
  }

  Result<std::vector<bool>> ExistsMany(std::span<const std::string> names) override {
    return backend_->ExistsMany(names);
  }

  Result<StoreStats> Stats() override { return backend_->Stats(); }

 private:
  // The bound on the object as stored: `max_bytes` of payload in this store's envelope.
  uint64_t ObjectBound(std::string_view name, uint64_t max_bytes) const {
    const uint64_t overhead =
        StoredObjectOverhead(name, secret_.empty() ? ObjectSeal::kCrc32c : ObjectSeal::kHmacSha256);
    return max_bytes > std::numeric_limits<uint64_t>::max() - overhead ? std::numeric_limits<uint64_t>::max()
                                                                       : max_bytes + overhead;
  }

  // The object's payload, checked: a view into it.
  Result<std::span<const uint8_t>> Payload(std::string_view name, std::span<const uint8_t> object,
                                           uint64_t max_bytes) const {
    ASSIGN_OR_RETURN(const std::span<const uint8_t> payload, OpenStoredObject(name, object, secret_));
    // Only a batch's objects get here past their bound (theirs was the longest name's).
    if (payload.size() > max_bytes) return ObjectTooLarge(name, payload.size(), max_bytes);
    return payload;
  }

  // The payload moved to the front of the object's own buffer: no second copy of a chunk.
  Status Open(std::string_view name, std::vector<uint8_t>& bytes, uint64_t max_bytes) const {
    ASSIGN_OR_RETURN(const std::span<const uint8_t> payload, Payload(name, bytes, max_bytes));
    const size_t offset = static_cast<size_t>(payload.data() - bytes.data());
    const size_t size = payload.size();
    if (size > 0) std::memmove(bytes.data(), bytes.data() + offset, size);
    bytes.resize(size);
    return Status::Ok();
  }

  const std::unique_ptr<Store> backend_;
  const std::string secret_;
};

}  // namespace

std::unique_ptr<Store> MakeBoundStore(std::unique_ptr<Store> backend, std::string secret) {
  return std::make_unique<BoundStore>(std::move(backend), std::move(secret));
}

}  // namespace kvc
