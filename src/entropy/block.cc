#include "entropy/block.h"

#include <algorithm>
#include <array>
#include <bit>

#include "base/byte_io.h"
#include "entropy/rans.h"
#include "entropy/varint.h"

namespace kvc {
namespace {

// Scale bits for a block's byte table. More bits code skewed data closer to its entropy but
// cost a larger decode lookup table (2 bytes a slot) to build and keep in cache; a block of n
// bytes gains little from resolving probabilities much finer than 1/n.
uint32_t RansScaleBits(size_t n) {
  constexpr uint32_t kMaxBlockScaleBits = 14;
  const auto want = static_cast<uint32_t>(std::bit_width(n));
  return std::clamp(want, FrequencyTable::kMinScaleBits, kMaxBlockScaleBits);
}

std::array<uint64_t, 256> ByteHistogram(std::span<const uint8_t> data) {
  // Four interleaved histograms, so runs of one byte do not serialise on a single counter.
  std::array<std::array<uint64_t, 256>, 4> h{};
  size_t i = 0;
  for (; i + 4 <= data.size(); i += 4) {
    ++h[0][data[i]];
    ++h[1][data[i + 1]];
    ++h[2][data[i + 2]];
    ++h[3][data[i + 3]];
  }
  for (; i < data.size(); ++i) ++h[0][data[i]];
  for (int b = 0; b < 256; ++b) h[0][b] += h[1][b] + h[2][b] + h[3][b];
  return h[0];
}

void PutHeader(ByteWriter* w, EntropyMethod method, size_t raw_size) {
  w->U8(static_cast<uint8_t>(method));
  PutVarint(w, raw_size);
}

std::vector<uint8_t> StoredBlock(std::span<const uint8_t> data) {
  ByteWriter w;
  PutHeader(&w, EntropyMethod::kStored, data.size());
  w.Bytes(data);
  return w.Take();
}

Result<std::vector<uint8_t>> RansBlock(std::span<const uint8_t> data) {
  const std::array<uint64_t, 256> counts = ByteHistogram(data);
  ASSIGN_OR_RETURN(FrequencyTable table, FrequencyTable::FromCounts(counts, RansScaleBits(data.size())));
  ASSIGN_OR_RETURN(std::vector<uint8_t> stream, RansEncodeBytes(table, data));
  ByteWriter w;
  PutHeader(&w, EntropyMethod::kRans, data.size());
  table.AppendTo(&w);
  w.Bytes(stream);
  return w.Take();
}

Result<std::vector<uint8_t>> DeflateBlock(std::span<const uint8_t> data, int level) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> payload, DeflateCompress(data, level));
  ByteWriter w;
  PutHeader(&w, EntropyMethod::kDeflate, data.size());
  w.Bytes(payload);
  return w.Take();
}

struct ParsedBlock {
  EntropyMethod method = EntropyMethod::kStored;
  uint64_t raw_size = 0;
  std::span<const uint8_t> payload;
};

Status ParseMethod(uint8_t byte, EntropyMethod* out) {
  if (byte > static_cast<uint8_t>(EntropyMethod::kRans)) {
    return Unsupported(FormatMessage("entropy block: unknown method %u", byte));
  }
  *out = static_cast<EntropyMethod>(byte);
  return Status::Ok();
}

Status ParseBlock(std::span<const uint8_t> block, uint64_t max_raw_size, ParsedBlock* out) {
  ByteReader r(block);
  uint8_t method = 0;
  RETURN_IF_ERROR(r.U8(&method, "entropy block method"));
  RETURN_IF_ERROR(ParseMethod(method, &out->method));
  RETURN_IF_ERROR(ReadVarint(&r, max_raw_size, &out->raw_size, "entropy block raw size"));
  RETURN_IF_ERROR(r.Bytes(r.remaining(), &out->payload, "entropy block payload"));
  return Status::Ok();
}

Status DecodePayload(const ParsedBlock& b, std::span<uint8_t> out) {
  switch (b.method) {
    case EntropyMethod::kStored:
      KVC_CHECK_CORRUPT(b.payload.size() == out.size(), "stored block holds %zu bytes but declares %zu",
                        b.payload.size(), out.size());
      std::copy(b.payload.begin(), b.payload.end(), out.begin());
      return Status::Ok();
    case EntropyMethod::kDeflate:
      return DeflateDecompress(b.payload, out).WithContext("entropy block");
    case EntropyMethod::kRans: {
      ByteReader r(b.payload);
      ASSIGN_OR_RETURN(FrequencyTable table, FrequencyTable::Parse(&r, 256));
      std::span<const uint8_t> stream;
      RETURN_IF_ERROR(r.Bytes(r.remaining(), &stream, "rANS stream"));
      return RansDecodeBytes(table, stream, out).WithContext("entropy block");
    }
  }
  return Internal("entropy block: unhandled method");
}

}  // namespace

Result<std::vector<uint8_t>> EncodeBlock(std::span<const uint8_t> data, EntropyMethod preferred, int deflate_level) {
  if (deflate_level < kMinDeflateLevel || deflate_level > kMaxDeflateLevel) {
    return InvalidArgument(
        FormatMessage("DEFLATE level %d outside %d..%d", deflate_level, kMinDeflateLevel, kMaxDeflateLevel));
  }
  std::vector<uint8_t> coded;
  switch (preferred) {
    case EntropyMethod::kStored:
      return StoredBlock(data);
    case EntropyMethod::kDeflate: {
      if (data.empty()) return StoredBlock(data);
      ASSIGN_OR_RETURN(coded, DeflateBlock(data, deflate_level));
      break;
    }
    case EntropyMethod::kRans: {
      if (data.empty()) return StoredBlock(data);
      ASSIGN_OR_RETURN(coded, RansBlock(data));
      break;
    }
    default:
      return InvalidArgument(FormatMessage("unknown entropy method %u", static_cast<unsigned>(preferred)));
  }
  const size_t stored_size = 1 + VarintSize(data.size()) + data.size();
  if (coded.size() >= stored_size) return StoredBlock(data);
  return coded;
}

Result<std::vector<uint8_t>> DecodeBlock(std::span<const uint8_t> block, size_t max_output_bytes) {
  ParsedBlock b;
  RETURN_IF_ERROR(ParseBlock(block, max_output_bytes, &b));
  std::vector<uint8_t> out(b.raw_size);
  RETURN_IF_ERROR(DecodePayload(b, out));
  return out;
}

Status DecodeBlockInto(std::span<const uint8_t> block, std::span<uint8_t> out) {
  ParsedBlock b;
  RETURN_IF_ERROR(ParseBlock(block, UINT64_MAX, &b));
  KVC_CHECK_CORRUPT(b.raw_size == out.size(), "entropy block declares %llu bytes, expected %zu",
                    static_cast<unsigned long long>(b.raw_size), out.size());
  return DecodePayload(b, out);
}

Result<EntropyMethod> BlockMethod(std::span<const uint8_t> block) {
  KVC_CHECK_CORRUPT(!block.empty(), "entropy block is empty");
  EntropyMethod m = EntropyMethod::kStored;
  RETURN_IF_ERROR(ParseMethod(block[0], &m));
  return m;
}

}  // namespace kvc
