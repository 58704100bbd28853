#include "cli_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "base/file_io.h"

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

// The library's messages, as the command line reports them.
std::string Message(const kvc::Status& status) { return status.ok() ? std::string() : status.message(); }

}  // namespace

std::string ReadInputFile(const std::string& path, uint64_t max_bytes, std::vector<uint8_t>* out) {
  auto bytes = kvc::ReadFileBytes(path, max_bytes);
  if (!bytes.ok()) return Message(bytes.status());
  *out = std::move(bytes).value();
  return {};
}

std::string WriteOutputFile(const std::string& path, std::span<const uint8_t> bytes) {
  if (path.empty()) return "no output path";
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return Errno("cannot stat " + path);
    return Message(kvc::ReplaceFileAtomically(path, bytes));
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
      if (std::string e = Message(kvc::WriteAllToFd(out.fd, bytes, path)); !e.empty()) return e;
      return ::close(std::exchange(out.fd, -1)) == 0 ? std::string() : Errno("cannot write " + path);
    }
    target = resolved;
    std::free(resolved);
    if (::stat(target.c_str(), &st) != 0) return Errno("cannot stat " + target);
  }
  // The old file's permissions are kept.
  if (S_ISREG(st.st_mode))
    return Message(kvc::ReplaceFileAtomically(target, bytes, static_cast<int>(st.st_mode & 07777)));
  if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    // A stream or a device: written in place, never replaced by a regular file.
    Fd out;
    out.fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
    if (out.fd < 0) return Errno("cannot open " + path);
    if (std::string e = Message(kvc::WriteAllToFd(out.fd, bytes, path)); !e.empty()) return e;
    return ::close(std::exchange(out.fd, -1)) == 0 ? std::string() : Errno("cannot write " + path);
  }
  return "cannot write " + path + ": it is " + kvc::DescribeFileKind(st.st_mode);
}

}  // namespace kvcodec_cli
