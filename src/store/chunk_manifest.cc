#include "store/chunk_manifest.h"

#include "base/byte_io.h"
#include "base/crc32c.h"
#include "format/container.h"

namespace kvc {
namespace {

constexpr uint8_t kMagic[4] = {'K', 'V', 'C', 'M'};
constexpr uint32_t kVersion = 1;
constexpr size_t kMaxNameBytes = 64;

}  // namespace

void WriteChunkVariants(ByteWriter& w, const std::vector<ChunkVariant>& variants) {
  w.U32(static_cast<uint32_t>(variants.size()));
  for (const ChunkVariant& v : variants) {
    w.String(v.codec);
    w.String(v.level);
    w.U64(v.bytes);
  }
}

Status ReadChunkVariants(ByteReader& r, const char* what, std::vector<ChunkVariant>* variants) {
  uint32_t n;
  RETURN_IF_ERROR(r.U32(&n, "variant count"));
  KVC_CHECK_CORRUPT(n <= kMaxManifestVariants, "%s: %u variants (at most %zu)", what, n, kMaxManifestVariants);
  variants->resize(n);
  for (ChunkVariant& v : *variants) {
    RETURN_IF_ERROR(r.String(&v.codec, kMaxNameBytes, "variant codec"));
    RETURN_IF_ERROR(r.String(&v.level, kMaxNameBytes, "variant level"));
    RETURN_IF_ERROR(r.U64(&v.bytes, "variant bytes"));
    KVC_CHECK_CORRUPT(!v.codec.empty() && !v.level.empty(), "%s: a variant without codec or level", what);
    // The names become parts of object names and of messages: the .kvc header's charset.
    for (const auto& [name, field] : {std::pair{&v.codec, "variant codec"}, std::pair{&v.level, "variant level"}}) {
      if (Status s = CheckName(*name, field); !s.ok()) return Corrupt(std::string(what) + ": " + s.message());
    }
  }
  return Status::Ok();
}

std::vector<uint8_t> WriteChunkManifest(const ChunkManifest& m) {
  ByteWriter w;
  w.Bytes(kMagic, sizeof(kMagic));
  w.U32(kVersion);
  w.U32(m.chunk_tokens);
  w.U32(m.chunk_index);
  WriteChunkVariants(w, m.variants);
  w.U32(Crc32c(w.bytes().data(), w.size()));
  return w.Take();
}

Result<std::span<const uint8_t>> BodyBeforeCrc32c(std::span<const uint8_t> bytes, const char* what) {
  KVC_CHECK_CORRUPT(bytes.size() >= 4, "%s of %zu bytes", what, bytes.size());
  const std::span<const uint8_t> body = bytes.first(bytes.size() - 4);
  ByteReader crc_reader(bytes.last(4));
  uint32_t crc;
  RETURN_IF_ERROR(crc_reader.U32(&crc, "crc"));
  KVC_CHECK_CORRUPT(crc == Crc32c(body.data(), body.size()), "%s CRC32C mismatch", what);
  return body;
}

Result<ChunkManifest> ReadChunkManifest(std::span<const uint8_t> bytes) {
  ASSIGN_OR_RETURN(const std::span<const uint8_t> body, BodyBeforeCrc32c(bytes, "manifest"));
  ByteReader r(body);
  RETURN_IF_ERROR(ExpectMagicAndVersion(r, kMagic, kVersion, "chunk manifest"));
  ChunkManifest m;
  RETURN_IF_ERROR(r.U32(&m.chunk_tokens, "chunk_tokens"));
  RETURN_IF_ERROR(r.U32(&m.chunk_index, "chunk_index"));
  KVC_CHECK_CORRUPT(m.chunk_tokens > 0, "manifest: chunk_tokens 0");
  RETURN_IF_ERROR(ReadChunkVariants(r, "manifest", &m.variants));
  KVC_CHECK_CORRUPT(r.empty(), "manifest: %zu bytes after the variants", r.remaining());
  return m;
}

}  // namespace kvc
