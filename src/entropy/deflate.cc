#include "entropy/deflate.h"

#include <libdeflate.h>

#include <array>
#include <memory>

namespace kvc {
namespace {

struct CompressorDeleter {
  void operator()(libdeflate_compressor* c) const { libdeflate_free_compressor(c); }
};
struct DecompressorDeleter {
  void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
};

// Null only when out of memory.
libdeflate_compressor* ThreadCompressor(int level) {
  thread_local std::array<std::unique_ptr<libdeflate_compressor, CompressorDeleter>, kMaxDeflateLevel + 1> cache;
  auto& slot = cache[static_cast<size_t>(level)];
  if (!slot) slot.reset(libdeflate_alloc_compressor(level));
  return slot.get();
}

libdeflate_decompressor* ThreadDecompressor() {
  thread_local std::unique_ptr<libdeflate_decompressor, DecompressorDeleter> cache;
  if (!cache) cache.reset(libdeflate_alloc_decompressor());
  return cache.get();
}

}  // namespace

Result<std::vector<uint8_t>> DeflateCompress(std::span<const uint8_t> in, int level) {
  if (level < kMinDeflateLevel || level > kMaxDeflateLevel) {
    return InvalidArgument(FormatMessage("DEFLATE level %d outside %d..%d", level, kMinDeflateLevel, kMaxDeflateLevel));
  }
  libdeflate_compressor* c = ThreadCompressor(level);
  if (c == nullptr) return Internal("cannot allocate a DEFLATE compressor");
  std::vector<uint8_t> out(libdeflate_deflate_compress_bound(c, in.size()));
  const size_t n = libdeflate_deflate_compress(c, in.data(), in.size(), out.data(), out.size());
  if (n == 0) return Internal("DEFLATE output exceeded libdeflate's own bound");
  out.resize(n);
  return out;
}

Status DeflateDecompress(std::span<const uint8_t> in, std::span<uint8_t> out) {
  libdeflate_decompressor* d = ThreadDecompressor();
  if (d == nullptr) return Internal("cannot allocate a DEFLATE decompressor");
  size_t consumed = 0;
  const libdeflate_result r =
      libdeflate_deflate_decompress_ex(d, in.data(), in.size(), out.data(), out.size(), &consumed, nullptr);
  switch (r) {
    case LIBDEFLATE_SUCCESS:
      break;
    case LIBDEFLATE_SHORT_OUTPUT:
      return Corrupt(FormatMessage("DEFLATE stream decodes to fewer than the expected %zu bytes", out.size()));
    case LIBDEFLATE_INSUFFICIENT_SPACE:
      return Corrupt(FormatMessage("DEFLATE stream decodes to more than the expected %zu bytes", out.size()));
    default:
      return Corrupt("DEFLATE stream is malformed");
  }
  KVC_CHECK_CORRUPT(consumed == in.size(), "DEFLATE stream ends %zu bytes before its payload does",
                    in.size() - consumed);
  return Status::Ok();
}

}  // namespace kvc
