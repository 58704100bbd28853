#include "store/bound_store.h"

#include <cstring>
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
    ASSIGN_OR_RETURN(const std::vector<uint8_t> object, SealStoredObject(name, bytes, secret_));
    return backend_->Put(name, object);
  }

  Result<std::vector<uint8_t>> Get(std::string_view name) override { return Open(name, backend_->Get(name)); }

  Result<bool> Exists(std::string_view name) override { return backend_->Exists(name); }
  Status Delete(std::string_view name) override { return backend_->Delete(name); }

  std::vector<Result<std::vector<uint8_t>>> GetMany(std::span<const std::string> names) override {
    std::vector<Result<std::vector<uint8_t>>> got = backend_->GetMany(names);
    if (got.size() != names.size()) {
      return std::vector<Result<std::vector<uint8_t>>>(names.size(), Internal("store gave a result per name"));
    }
    for (size_t i = 0; i < names.size(); ++i) got[i] = Open(names[i], std::move(got[i]));
    return got;
  }

  Result<std::vector<bool>> ExistsMany(std::span<const std::string> names) override {
    return backend_->ExistsMany(names);
  }

  Result<StoreStats> Stats() override { return backend_->Stats(); }

 private:
  // The payload moved to the front of the object's own buffer: no second copy of a chunk.
  Result<std::vector<uint8_t>> Open(std::string_view name, Result<std::vector<uint8_t>> object) const {
    if (!object.ok()) return object;
    std::vector<uint8_t>& bytes = *object;
    ASSIGN_OR_RETURN(const std::span<const uint8_t> payload, OpenStoredObject(name, bytes, secret_));
    const size_t offset = static_cast<size_t>(payload.data() - bytes.data());
    const size_t size = payload.size();
    if (size > 0) std::memmove(bytes.data(), bytes.data() + offset, size);
    bytes.resize(size);
    return object;
  }

  const std::unique_ptr<Store> backend_;
  const std::string secret_;
};

}  // namespace

std::unique_ptr<Store> MakeBoundStore(std::unique_ptr<Store> backend, std::string secret) {
  return std::make_unique<BoundStore>(std::move(backend), std::move(secret));
}

}  // namespace kvc
