#include "base/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <system_error>

namespace kvc {
namespace {

std::string ErrnoMessage(int err) { return std::error_code(err, std::generic_category()).message(); }

// write(2) until done: it may write less than asked, or be interrupted.
bool WriteAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

}  // namespace

Status ReplaceFileAtomically(const std::string& path, std::span<const uint8_t> bytes) {
  // A name no other writer uses (pid + counter, created with O_EXCL), beside the target so
  // the rename stays within one file system and is atomic.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      FormatMessage("%s.tmp.%ld.%" PRIu64, path.c_str(), static_cast<long>(::getpid()), counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return IoError("cannot create " + tmp + ": " + ErrnoMessage(errno));
  std::string failure;
  if (!WriteAll(fd, bytes.data(), bytes.size())) {
    failure = "cannot write " + tmp + ": " + ErrnoMessage(errno);
  } else if (::fsync(fd) != 0) {
    // Without it a crash after the rename could leave the new name pointing at missing data.
    failure = "cannot sync " + tmp + ": " + ErrnoMessage(errno);
  }
  if (::close(fd) != 0 && failure.empty()) failure = "cannot close " + tmp + ": " + ErrnoMessage(errno);
  if (failure.empty() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    failure = "cannot rename " + tmp + " to " + path + ": " + ErrnoMessage(errno);
  }
  if (!failure.empty()) {
    ::unlink(tmp.c_str());
    return IoError(failure);
  }
  return Status::Ok();
}

}  // namespace kvc
