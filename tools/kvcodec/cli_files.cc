#include "cli_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

namespace kvcodec_cli {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Closes on every path out of a function.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string WriteAll(int fd, std::span<const uint8_t> bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("cannot write " + path);
    done += static_cast<size_t>(n);
  }
  return {};
}

std::string Describe(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// `target` is a regular file or a name that does not exist yet; its directory must be writable.
std::string ReplaceAtomically(const std::string& target, std::span<const uint8_t> bytes, const struct stat* old) {
  std::random_device rd;
  std::string tmp;
  Fd out;
  for (int attempt = 0; attempt < 16 && out.fd < 0; ++attempt) {
    tmp = target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd() % 1000000);
    // 0666 under the umask, as a plain open would create it.
    out.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (out.fd < 0 && errno != EEXIST) return Errno("cannot create " + tmp);
  }
  if (out.fd < 0) return "cannot create a temporary file beside " + target;
  auto fail = [&](std::string message) {
    ::close(out.fd);
    out.fd = -1;
    ::unlink(tmp.c_str());
    return message;
  };
  if (old != nullptr && ::fchmod(out.fd, old->st_mode & 07777) != 0)
    return fail(Errno("cannot set the mode of " + tmp));
  if (std::string e = WriteAll(out.fd, bytes, target); !e.empty()) return fail(e);
  if (::fsync(out.fd) != 0) return fail(Errno("cannot flush " + target));
  if (::close(out.fd) != 0) {
    out.fd = -1;
    return fail(Errno("cannot write " + target));
  }
  out.fd = -1;
  if (::rename(tmp.c_str(), target.c_str()) != 0) return fail(Errno("cannot replace " + target));
  return {};
}

}  // namespace

std::string ReadInputFile(const std::string& path, uint64_t max_bytes, std::vector<uint8_t>* out) {
  Fd in;
  in.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in.fd < 0) return Errno("cannot open " + path);
  struct stat st;
  if (::fstat(in.fd, &st) != 0) return Errno("cannot stat " + path);
  const bool regular = S_ISREG(st.st_mode);
  if (!regular && !S_ISFIFO(st.st_mode)) return path + " is " + Describe(st.st_mode) + ", not a file";
  if (regular && static_cast<uint64_t>(st.st_size) > max_bytes) {
    return path + " is " + std::to_string(st.st_size) + " bytes, over the limit of " + std::to_string(max_bytes);
  }
  out->clear();
  if (regular) out->reserve(static_cast<size_t>(st.st_size));
  uint8_t buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(in.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("cannot read " + path);
    if (n == 0) break;
    if (out->size() + static_cast<uint64_t>(n) > max_bytes) {
      return path + " holds more than the limit of " + std::to_string(max_bytes) + " bytes";
    }
    out->insert(out->end(), buf, buf + n);
  }
  return {};
}

std::string WriteOutputFile(const std::string& path, std::span<const uint8_t> bytes) {
  if (path.empty()) return "no output path";
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return Errno("cannot stat " + path);
    return ReplaceAtomically(path, bytes, nullptr);
  }
  std::string target = path;
  if (S_ISLNK(st.st_mode)) {
    // Replace what the link points to, keeping the link.
    char* resolved = ::realpath(path.c_str(), nullptr);
    if (resolved == nullptr) {
      if (errno != ENOENT) return Errno("cannot resolve " + path);
      // A dangling link: create its target through it.
      Fd out;
      out.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
      if (out.fd < 0) return Errno("cannot create " + path);
      if (std::string e = WriteAll(out.fd, bytes, path); !e.empty()) return e;
      return ::close(std::exchange(out.fd, -1)) == 0 ? std::string() : Errno("cannot write " + path);
    }
    target = resolved;
    std::free(resolved);
    if (::stat(target.c_str(), &st) != 0) return Errno("cannot stat " + target);
  }
  if (S_ISREG(st.st_mode)) return ReplaceAtomically(target, bytes, &st);
  if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    // A stream or a device: written in place, never replaced by a regular file.
    Fd out;
    out.fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
    if (out.fd < 0) return Errno("cannot open " + path);
    if (std::string e = WriteAll(out.fd, bytes, path); !e.empty()) return e;
    return ::close(std::exchange(out.fd, -1)) == 0 ? std::string() : Errno("cannot write " + path);
  }
  return "cannot write " + path + ": it is " + Describe(st.st_mode);
}

}  // namespace kvcodec_cli
