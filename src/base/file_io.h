// Reading and writing whole files, with one policy for everything kvcodec writes: every byte
// written (short writes and interruptions retried), the data synced before the rename that
// publishes it, and the folder synced after the rename, so after a crash a reader finds the old
// file or the whole new one. Paths come from users: a directory or a device where a file was
// expected is a clear error, and a read never holds more than its limit.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace kvc {

// A file descriptor closed on every path out of a scope.
class ScopedFd {
 public:
  explicit ScopedFd(int fd = -1) : fd_(fd) {}
  ~ScopedFd();
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  // Closes now and says whether close(2) succeeded (a delayed write error surfaces there).
  bool Close();

 private:
  int fd_;
};

// "a directory", "a character device", ...: what a path that is not a regular file is (st_mode).
std::string DescribeFileKind(uint32_t st_mode);

// write(2) until all of `bytes` is written; kIoError "cannot write <what>: <reason>".
[[nodiscard]] Status WriteAllToFd(int fd, std::span<const uint8_t> bytes, const std::string& what);

// fsync(2) of a folder: what makes a rename in it survive a crash.
[[nodiscard]] Status SyncDirectory(const std::string& dir);

// Writes `bytes` to a temporary file beside `path` (PATH.tmp.PID.N, created exclusively), syncs
// it, renames it over `path` and syncs the folder. `mode`: the new file's permissions (-1: 0666
// under the umask). kIoError naming the step and the file on any failure, after which the
// temporary file is gone and `path` is as it was.
[[nodiscard]] Status ReplaceFileAtomically(const std::string& path, std::span<const uint8_t> bytes, int mode = -1);

// A regular file, or a pipe/FIFO (such as /dev/stdin under a shell pipe), of at most
// `max_bytes`. kNotFound when it does not exist, kInvalidArgument for a directory, a device or
// too many bytes, kIoError when reading fails.
[[nodiscard]] Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path, uint64_t max_bytes);
// The same into a string (texts), without a second copy.
[[nodiscard]] Result<std::string> ReadFileText(const std::string& path, uint64_t max_bytes);

}  // namespace kvc
