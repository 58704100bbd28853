// The command line's file reads and writes. Paths come from users and scripts: a directory, a
// device, a FIFO or a symlink where a file was expected must get a clear error or the right
// behaviour, never an abort, an unbounded read or a clobbered device node.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvcodec_cli {

// Reads a regular file, or a pipe/FIFO (such as /dev/stdin under a shell pipe), of at most
// `max_bytes`. Directories and devices are refused. Returns the error message, empty on success.
std::string ReadInputFile(const std::string& path, uint64_t max_bytes, std::vector<uint8_t>* out);

// Writes `bytes` to `path`:
// - a regular file or a new name: written to a temporary file beside it, flushed and renamed over
//   it, so readers see the old or the new bytes, never a part; the old file's permissions are
//   kept; the temporary file is removed on any failure;
// - a symlink: the file it points to is replaced that way (the link stays a link);
// - a FIFO or a character device (/dev/stdout, /dev/null): written in place;
// - a directory or anything else: refused.
// Returns the error message, empty on success.
std::string WriteOutputFile(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace kvcodec_cli
