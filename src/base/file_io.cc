#include "base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <filesystem>
#include <system_error>

namespace kvc {
namespace {

std::string ErrnoMessage(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string Folder(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// The bounded read ReadFileBytes and ReadFileText share, into either container.
template <typename Bytes>
Result<Bytes> ReadFileInto(const std::string& path, uint64_t max_bytes) {
  ScopedFd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) {
    const int err = errno;
    std::string message = "cannot open " + path + ": " + ErrnoMessage(err);
    return err == ENOENT ? NotFound(std::move(message)) : IoError(std::move(message));
  }
  struct stat st;
  if (::fstat(in.get(), &st) != 0) return IoError("cannot stat " + path + ": " + ErrnoMessage(errno));
  const bool regular = S_ISREG(st.st_mode);
  if (!regular && !S_ISFIFO(st.st_mode))
    return InvalidArgument(path + " is " + DescribeFileKind(st.st_mode) + ", not a file");
  if (regular && static_cast<uint64_t>(st.st_size) > max_bytes) {
    return InvalidArgument(FormatMessage("%s is %lld bytes, over the limit of %llu", path.c_str(),
                                         static_cast<long long>(st.st_size),
                                         static_cast<unsigned long long>(max_bytes)));
  }
  Bytes out;
  if (regular) out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(in.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("cannot read " + path + ": " + ErrnoMessage(errno));
    if (n == 0) break;
    if (out.size() + static_cast<uint64_t>(n) > max_bytes) {
      return InvalidArgument(FormatMessage("%s holds more than the limit of %llu bytes", path.c_str(),
                                           static_cast<unsigned long long>(max_bytes)));
    }
    out.insert(out.end(), buf, buf + n);
  }
  return out;
}

}  // namespace

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) ::close(fd_);
}

bool ScopedFd::Close() {
  const int fd = fd_;
  fd_ = -1;
  return ::close(fd) == 0;
}

std::string DescribeFileKind(uint32_t st_mode) {
  const auto mode = static_cast<mode_t>(st_mode);
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

Status WriteAllToFd(int fd, std::span<const uint8_t> bytes, const std::string& what) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return IoError("cannot write " + what + ": " + ErrnoMessage(n < 0 ? errno : EIO));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status SyncDirectory(const std::string& dir) {
  ScopedFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return IoError("cannot open " + dir + ": " + ErrnoMessage(errno));
  if (::fsync(fd.get()) != 0) return IoError("cannot sync " + dir + ": " + ErrnoMessage(errno));
  return Status::Ok();
}

Status ReplaceFileAtomically(const std::string& path, std::span<const uint8_t> bytes, int mode) {
  // A name no other writer uses (pid + counter, created with O_EXCL), beside the target so the
  // rename stays within one file system and is atomic; a leftover of a crashed process with the
  // same pid is skipped.
  static std::atomic<uint64_t> counter{0};
  std::string tmp;
  int raw_fd = -1;
  for (int attempt = 0; attempt < 16 && raw_fd < 0; ++attempt) {
    tmp = FormatMessage("%s.tmp.%ld.%" PRIu64, path.c_str(), static_cast<long>(::getpid()), counter.fetch_add(1));
    raw_fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    // The message names the path asked for: the temporary name is ours, and a missing or
    // read-only folder is the same error for both.
    if (raw_fd < 0 && errno != EEXIST) return IoError("cannot create " + path + ": " + ErrnoMessage(errno));
  }
  if (raw_fd < 0) return IoError("cannot create " + path + ": no free temporary name beside it");
  ScopedFd fd(raw_fd);
  Status status = Status::Ok();
  if (mode >= 0 && ::fchmod(fd.get(), static_cast<mode_t>(mode)) != 0) {
    status = IoError("cannot set the mode of " + path + ": " + ErrnoMessage(errno));
  }
  if (status.ok()) status = WriteAllToFd(fd.get(), bytes, path);
  // Without it a crash after the rename could leave the new name pointing at missing data.
  if (status.ok() && ::fsync(fd.get()) != 0) status = IoError("cannot sync " + path + ": " + ErrnoMessage(errno));
  if (!fd.Close() && status.ok()) status = IoError("cannot write " + path + ": " + ErrnoMessage(errno));
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = IoError("cannot rename " + tmp + " to " + path + ": " + ErrnoMessage(errno));
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  return SyncDirectory(Folder(path));
}

Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path, uint64_t max_bytes) {
  return ReadFileInto<std::vector<uint8_t>>(path, max_bytes);
}

Result<std::string> ReadFileText(const std::string& path, uint64_t max_bytes) {
  return ReadFileInto<std::string>(path, max_bytes);
}

}  // namespace kvc
