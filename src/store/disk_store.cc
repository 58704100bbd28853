#include "store/disk_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "base/file_io.h"
#include "base/hash.h"

namespace kvc {
namespace {

namespace fs = std::filesystem;

// Every so many puts a process rescans the folder even below its own estimate, so that the
// bytes other processes added count against the bound too.
constexpr uint32_t kRescanEveryPuts = 64;
// Eviction frees down to this fraction of the capacity, so that a full store does not rescan
// on every put.
constexpr double kEvictTo = 0.9;
// Temp files older than this are left over from a crashed writer.
constexpr auto kStaleTemp = std::chrono::minutes(10);

Status Errno(const std::string& what) { return IoError(what + ": " + std::strerror(errno)); }

const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a file of another kind";
}

class DiskStore final : public Store {
 public:
  DiskStore(fs::path root, uint64_t capacity) : root_(std::move(root)), capacity_(capacity) {}

  Status Init() {
    std::error_code ec;
    fs::create_directories(root_ / "objects", ec);
    if (!ec) fs::create_directories(root_ / "tmp", ec);
    if (ec) return IoError("cannot create store folder " + root_.string() + ": " + ec.message());
    // O_NONBLOCK here and for eviction: whatever someone left under the lock's name (a FIFO)
    // must not block the open; flock blocks only where it should.
    const int fd = ::open((root_ / "lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd < 0) return Errno("cannot open " + (root_ / "lock").string());
    ::close(fd);
    // Temp files a crashed writer left behind; recent ones may belong to a live writer.
    const auto now = fs::file_time_type::clock::now();
    for (const auto& e : fs::directory_iterator(root_ / "tmp", ec)) {
      std::error_code ignored;
      if (now - e.last_write_time(ignored) > kStaleTemp) fs::remove(e.path(), ignored);
    }
    ASSIGN_OR_RETURN(const Scan scan, ScanObjects());
    estimate_ = scan.bytes;
    return Status::Ok();
  }

  std::string url() const override { return "dir://" + root_.string(); }

  Status Put(std::string_view name, std::span<const uint8_t> bytes) override {
    try {
      return Write(name, bytes);
    } catch (...) {
      return StatusOfCurrentException("storing '" + std::string(name) + "' in " + url());
    }
  }

  Result<std::vector<uint8_t>> Get(std::string_view name, uint64_t max_bytes) override {
    try {
      std::vector<uint8_t> bytes;
      RETURN_IF_ERROR(Read(name, max_bytes, bytes));
      return bytes;
    } catch (...) {
      return StatusOfCurrentException("reading '" + std::string(name) + "' from " + url());
    }
  }

  Result<std::span<const uint8_t>> GetInto(std::string_view name, uint64_t max_bytes,
                                           std::vector<uint8_t>& buffer) override {
    try {
      RETURN_IF_ERROR(Read(name, max_bytes, buffer));
      return std::span<const uint8_t>(buffer);
    } catch (...) {
      return StatusOfCurrentException("reading '" + std::string(name) + "' from " + url());
    }
  }

  Result<bool> Exists(std::string_view name) override {
    try {
      RETURN_IF_ERROR(CheckObjectName(name));
      // stat opens nothing, so whatever is under the name (a FIFO) cannot block it.
      struct stat st {};
      if (::stat(ObjectPath(name).c_str(), &st) == 0) return true;
      if (errno == ENOENT) return false;
      return Errno("stat " + ObjectPath(name).string());
    } catch (...) {
      return StatusOfCurrentException("looking up '" + std::string(name) + "' in " + url());
    }
  }

  Status Delete(std::string_view name) override {
    try {
      RETURN_IF_ERROR(CheckObjectName(name));
      if (::unlink(ObjectPath(name).c_str()) != 0 && errno != ENOENT) {
        return Errno("unlink " + ObjectPath(name).string());
      }
      return Status::Ok();
    } catch (...) {
      return StatusOfCurrentException("deleting '" + std::string(name) + "' from " + url());
    }
  }

  Result<StoreStats> Stats() override {
    try {
      ASSIGN_OR_RETURN(const Scan scan, ScanObjects());
      return StoreStats{.objects = scan.files.size(),
                        .bytes = scan.bytes,
                        .capacity_bytes = capacity_,
                        .evictions = evictions_.load()};
    } catch (...) {
      return StatusOfCurrentException("reading the statistics of " + url());
    }
  }

 private:
  Status Write(std::string_view name, std::span<const uint8_t> bytes) {
    RETURN_IF_ERROR(CheckObjectName(name));
    if (bytes.size() > capacity_) {
      return InvalidArgument(FormatMessage("object of %zu bytes exceeds the store's capacity of %llu", bytes.size(),
                                           static_cast<unsigned long long>(capacity_)));
    }
    const fs::path final_path = ObjectPath(name);
    std::error_code ec;
    fs::create_directories(final_path.parent_path(), ec);
    if (ec) return IoError("cannot create " + final_path.parent_path().string() + ": " + ec.message());
    const fs::path temp = root_ / "tmp" / TempName(name);
    {
      const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0) return Errno("cannot create " + temp.string());
      ScopedFd closer(fd);
      Status s = WriteAllToFd(fd, bytes, temp.string());
      if (s.ok() && ::fsync(fd) != 0) s = Errno("fsync " + temp.string());
      if (!s.ok()) {
        ::unlink(temp.c_str());
        return s;
      }
    }
    if (::rename(temp.c_str(), final_path.c_str()) != 0) {
      const Status s = Errno("rename into " + final_path.string());
      ::unlink(temp.c_str());
      return s;
    }
    RETURN_IF_ERROR(SyncDirectory(final_path.parent_path().string()));
    const uint64_t estimate = estimate_.fetch_add(bytes.size()) + bytes.size();
    if (estimate > capacity_ || ++puts_ % kRescanEveryPuts == 0) RETURN_IF_ERROR(Evict());
    return Status::Ok();
  }

  // Into `bytes`, whose storage is reused where it is large enough (resize zero-fills only growth).
  Status Read(std::string_view name, uint64_t max_bytes, std::vector<uint8_t>& bytes) {
    RETURN_IF_ERROR(CheckObjectName(name));
    const fs::path path = ObjectPath(name);
    // O_NONBLOCK: the open of a FIFO or device under an object's name returns at once (a FIFO
    // would block until a writer came); O_NOCTTY: a terminal there is not adopted. Anything but
    // a regular file is refused below, before a byte is read. Reads of a regular file ignore
    // O_NONBLOCK.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
      if (errno == ENOENT) return NotFound("no object '" + std::string(name) + "'");
      return Errno("cannot open " + path.string());
    }
    ScopedFd closer(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Errno("stat " + path.string());
    if (!S_ISREG(st.st_mode)) {
      return Corrupt(FormatMessage("object '%s' (%s) is %s, not a regular file", std::string(name).c_str(),
                                   path.c_str(), FileKind(st.st_mode)));
    }
    const auto size = static_cast<uint64_t>(st.st_size);
    // Checked before anything is allocated: the file's size is whatever its writer made it.
    if (size > max_bytes) return ObjectTooLarge(name, size, max_bytes);
    bytes.resize(static_cast<size_t>(size));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno("read " + path.string());
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    // Files are replaced by rename, never rewritten: a short read means a broken file system.
    if (done != bytes.size()) {
      return IoError(FormatMessage("%s: read %zu of %zu bytes", path.c_str(), done, bytes.size()));
    }
    // Marks the object used for LRU eviction; a failure only makes it look older.
    (void)::futimens(fd, nullptr);
    return Status::Ok();
  }

  struct File {
    fs::path path;
    uint64_t bytes;
    fs::file_time_type used;
  };
  struct Scan {
    std::vector<File> files;
    uint64_t bytes = 0;
  };

  // Objects are spread over 256 folders by a hash of their name, so no folder grows huge.
  fs::path ObjectPath(std::string_view name) const {
    const Hash128 h = Xxh3_128(name.data(), name.size());
    static constexpr char kHex[] = "0123456789abcdef";
    const char dir[3] = {kHex[(h[0] >> 4) & 15], kHex[h[0] & 15], 0};
    return root_ / "objects" / dir / std::string(name);
  }

  std::string TempName(std::string_view name) {
    static std::atomic<uint64_t> counter{0};
    return std::string(name) + "." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) + ".tmp";
  }

  Result<Scan> ScanObjects() const {
    Scan scan;
    std::error_code ec;
    for (const auto& d : fs::directory_iterator(root_ / "objects", ec)) {
      std::error_code ignored;
      for (const auto& f : fs::directory_iterator(d.path(), ignored)) {
        std::error_code e2;
        const uint64_t size = f.file_size(e2);
        const auto used = f.last_write_time(e2);
        if (e2) continue;  // removed by another process meanwhile
        scan.files.push_back({f.path(), size, used});
        scan.bytes += size;
      }
    }
    if (ec) return IoError("cannot list " + (root_ / "objects").string() + ": " + ec.message());
    return scan;
  }

  // Rescans under the folder's lock and removes least recently used objects down to kEvictTo of
  // the capacity when the folder holds more than the capacity.
  Status Evict() {
    std::lock_guard lock(evict_mu_);
    const int fd = ::open((root_ / "lock").c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return Errno("open " + (root_ / "lock").string());
    ScopedFd closer(fd);
    if (::flock(fd, LOCK_EX) != 0) return Errno("flock " + (root_ / "lock").string());
    ASSIGN_OR_RETURN(Scan scan, ScanObjects());
    if (scan.bytes > capacity_) {
      std::sort(scan.files.begin(), scan.files.end(),
                [](const File& a, const File& b) { return a.used != b.used ? a.used < b.used : a.path < b.path; });
      const auto target = static_cast<uint64_t>(static_cast<double>(capacity_) * kEvictTo);
      for (const File& f : scan.files) {
        if (scan.bytes <= target) break;
        std::error_code ignored;
        if (fs::remove(f.path, ignored)) {
          scan.bytes -= f.bytes;
          evictions_.fetch_add(1);
        }
      }
    }
    estimate_.store(scan.bytes);
    (void)::flock(fd, LOCK_UN);
    return Status::Ok();
  }

  const fs::path root_;
  const uint64_t capacity_;
  std::atomic<uint64_t> estimate_{0};
  std::atomic<uint64_t> puts_{0};
  std::atomic<uint64_t> evictions_{0};
  std::mutex evict_mu_;
};

}  // namespace

Result<std::unique_ptr<Store>> OpenDiskStore(const std::string& root, const StoreOptions& options) {
  try {
    auto store =
        std::make_unique<DiskStore>(fs::path(root).lexically_normal(),
                                    options.capacity_bytes != 0 ? options.capacity_bytes : kDefaultDiskStoreBytes);
    RETURN_IF_ERROR(store->Init());
    return std::unique_ptr<Store>(std::move(store));
  } catch (...) {
    return StatusOfCurrentException("opening the store in " + root);
  }
}

}  // namespace kvc
