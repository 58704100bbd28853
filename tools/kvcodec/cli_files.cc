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

// A stream, a device or a dangling link's target: written where it is, never replaced.
std::string WriteInPlace(const std::string& open_path, int flags, const std::string& path,
                         std::span<const uint8_t> bytes, const char* open_failure) {
  kvc::ScopedFd out(::open(open_path.c_str(), flags | O_WRONLY | O_CLOEXEC, 0666));
  if (out.get() < 0) return Errno(open_failure + (" " + path));
  if (kvc::Status s = kvc::WriteAllToFd(out.get(), bytes, path); !s.ok()) return s.message();
  return out.Close() ? std::string() : Errno("cannot write " + path);
}

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
      return WriteInPlace(path, O_CREAT | O_TRUNC, path, bytes, "cannot create");
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
    return WriteInPlace(target, 0, path, bytes, "cannot open");
  }
  return "cannot write " + path + ": it is " + kvc::DescribeFileKind(st.st_mode);
}

}  // namespace kvcodec_cli
