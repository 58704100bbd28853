#include "kvtc/code_stream.h"

#include <algorithm>
#include <array>
#include <optional>

#include "base/byte_io.h"
#include "entropy/block.h"
#include "entropy/deflate.h"
#include "entropy/rans.h"
#include "entropy/varint.h"
#include "kvtc/quantizer.h"

namespace kvc {
namespace {

// Checks the runs against the codes: InvalidArgument unless they cover exactly codes_size codes,
// each of 1..8 bits; their total width on success.
Result<uint64_t> TotalBits(std::span<const KvtcCodeRun> runs, size_t codes_size) {
  uint64_t count = 0;
  for (const KvtcCodeRun& run : runs) {
    if (run.bits < 1 || run.bits > kMaxQuantBits) {
      return InvalidArgument(FormatMessage("kvtc codes: a run of %u-bit codes", run.bits));
    }
    count += run.count;
  }
  if (count != codes_size) {
    return InvalidArgument(FormatMessage("kvtc codes: runs of %llu codes for %zu codes",
                                         static_cast<unsigned long long>(count), codes_size));
  }
  return TotalCodeBits(runs);
}

void PackBits(std::span<const uint8_t> codes, std::span<const KvtcCodeRun> runs, std::vector<uint8_t>* out) {
  uint64_t acc = 0;
  uint32_t n_acc = 0;
  const uint8_t* code = codes.data();
  for (const KvtcCodeRun& run : runs) {
    for (size_t i = 0; i < run.count; ++i) {
      acc |= uint64_t{*code++} << n_acc;
      n_acc += run.bits;
      while (n_acc >= 8) {
        out->push_back(static_cast<uint8_t>(acc));
        acc >>= 8;
        n_acc -= 8;
      }
    }
  }
  if (n_acc > 0) out->push_back(static_cast<uint8_t>(acc));
}

Status UnpackBits(std::span<const uint8_t> packed, std::span<const KvtcCodeRun> runs, uint64_t total_bits,
                  std::span<uint8_t> codes) {
  KVC_CHECK_CORRUPT(packed.size() == (total_bits + 7) / 8, "packed codes are %zu bytes, expected %llu", packed.size(),
                    static_cast<unsigned long long>((total_bits + 7) / 8));
  // A code of at most 8 bits at any bit offset lies within two bytes, so each code is one
  // branch-free two-byte read, shift and mask (a bit accumulator refilled a byte at a time
  // branches unpredictably per code). The last code may start in the last byte: it alone reads
  // one byte, whose padding the check below requires to be zero.
  const uint8_t* const in = packed.data();
  const size_t n_bytes = packed.size();
  uint64_t bit = 0;
  uint8_t* code = codes.data();
  for (const KvtcCodeRun& run : runs) {
    const uint32_t w = run.bits;
    const uint32_t mask = (1u << w) - 1;
    size_t i = 0;
    for (; i < run.count && (bit >> 3) + 2 <= n_bytes; ++i, bit += w) {
      const size_t at = static_cast<size_t>(bit >> 3);
      const uint32_t two = in[at] | (static_cast<uint32_t>(in[at + 1]) << 8);
      *code++ = static_cast<uint8_t>((two >> (bit & 7)) & mask);
    }
    for (; i < run.count; ++i, bit += w) *code++ = static_cast<uint8_t>((in[bit >> 3] >> (bit & 7)) & mask);
  }
  KVC_CHECK_CORRUPT((total_bits & 7) == 0 || (in[n_bytes - 1] >> (total_bits & 7)) == 0,
                    "packed codes have non-zero padding bits");
  return Status::Ok();
}

// DEFLATE's densest code spends at least 2 bits on a 258-byte match (RFC 1951), so n bytes of
// stream decode to at most about 1032 n bytes: what a DEFLATE payload may claim to hold is
// checked against that before its output is allocated.
constexpr uint64_t kDeflateMaxRatio = 1032;
bool DeflateCanHold(uint64_t payload_bytes, uint64_t raw_bytes) {
  return raw_bytes / kDeflateMaxRatio <= payload_bytes + 2;
}

}  // namespace

uint64_t TotalCodeBits(std::span<const KvtcCodeRun> runs) {
  uint64_t bits = 0;
  for (const KvtcCodeRun& run : runs) bits += uint64_t{run.bits} * run.count;
  return bits;
}

Result<std::vector<uint8_t>> EncodeKvtcCodes(std::span<const uint8_t> codes, std::span<const KvtcCodeRun> runs,
                                             KvtcCodesMethod method) {
  ASSIGN_OR_RETURN(const uint64_t total_bits, TotalBits(runs, codes.size()));
  {
    const uint8_t* code = codes.data();
    for (const KvtcCodeRun& run : runs) {
      uint8_t all = 0;
      for (size_t i = 0; i < run.count; ++i) all |= code[i];
      if ((all >> run.bits) != 0) {
        return InvalidArgument(FormatMessage("kvtc codes: a code does not fit in %u bits", run.bits));
      }
      code += run.count;
    }
  }
  auto packed_section = [&] {
    std::vector<uint8_t> out;
    out.reserve(1 + (total_bits + 7) / 8);
    out.push_back(static_cast<uint8_t>(KvtcCodesMethod::kPacked));
    PackBits(codes, runs, &out);
    return out;
  };
  const uint64_t packed_section_size = 1 + (total_bits + 7) / 8;
  if (method == KvtcCodesMethod::kDeflate) {
    std::vector<uint8_t> packed = packed_section();
    ASSIGN_OR_RETURN(std::vector<uint8_t> deflated, DeflateCompress(std::span<const uint8_t>(packed).subspan(1), 6));
    if (deflated.size() + 1 >= packed.size()) return packed;
    deflated.insert(deflated.begin(), static_cast<uint8_t>(KvtcCodesMethod::kDeflate));
    return deflated;
  }
  if (method == KvtcCodesMethod::kRans && !codes.empty()) {
    // One table per code width: codes of equal width come from the same kind of quantiser and
    // share a shape of distribution.
    std::array<std::vector<uint64_t>, kMaxQuantBits + 1> counts;
    for (uint32_t w = 1; w <= kMaxQuantBits; ++w) counts[w].assign(size_t{1} << w, 0);
    const uint8_t* code = codes.data();
    for (const KvtcCodeRun& run : runs) {
      std::vector<uint64_t>& histogram = counts[run.bits];
      for (size_t i = 0; i < run.count; ++i) ++histogram[*code++];
    }
    ByteWriter w;
    w.U8(static_cast<uint8_t>(KvtcCodesMethod::kRans));
    uint8_t mask = 0;
    std::array<std::optional<FrequencyTable>, kMaxQuantBits + 1> tables;
    for (uint32_t b = 1; b <= kMaxQuantBits; ++b) {
      if (std::all_of(counts[b].begin(), counts[b].end(), [](uint64_t c) { return c == 0; })) continue;
      mask |= static_cast<uint8_t>(1u << (b - 1));
      // Small scales: a decoder looks a slot up per code, and a 10-bit table (6 KiB) stays in L1
      // where a 14-bit one (96 KiB) did not. On the test models the coarser frequencies cost
      // less than the smaller tables save, so the files also shrink (kvtiny 16: ratio 16.03 ->
      // 16.06; 4: 4.006 -> 4.008).
      ASSIGN_OR_RETURN(FrequencyTable t, FrequencyTable::FromCounts(counts[b], b <= 5 ? 10 : 12));
      tables[b].emplace(std::move(t));
    }
    w.U8(mask);
    for (uint32_t b = 1; b <= kMaxQuantBits; ++b)
      if (tables[b]) tables[b]->AppendTo(&w);
    RansEncoder enc;
    enc.Reserve(codes.size());
    code = codes.data();
    for (const KvtcCodeRun& run : runs) {
      const FrequencyTable& table = *tables[run.bits];
      for (size_t i = 0; i < run.count; ++i) enc.Put(table, *code++);
    }
    ASSIGN_OR_RETURN(std::vector<uint8_t> stream, enc.Finish());
    w.Bytes(stream);
    if (w.size() < packed_section_size) return w.Take();
  }
  return packed_section();
}

// The S section is an entropy block (docs/format.md, "Entropy block": u8 method, varint raw
// size, payload) that must declare exactly `expected` bytes. Checked before anything is
// allocated for it: a stored block holds exactly its payload and a DEFLATE one at most
// kDeflateMaxRatio times it. (A rANS block can code a run of one value in no bytes: for it
// only DecodeKvc's expansion bound applies.)
Status CheckKvtcScaleBlock(std::span<const uint8_t> block, uint64_t expected) {
  ASSIGN_OR_RETURN(const EntropyMethod method, BlockMethod(block));
  ByteReader r(block.subspan(1));
  uint64_t declared = 0;
  RETURN_IF_ERROR(ReadVarint(&r, UINT64_MAX, &declared, "entropy block raw size"));
  KVC_CHECK_CORRUPT(declared == expected, "entropy block declares %llu bytes, expected %llu",
                    static_cast<unsigned long long>(declared), static_cast<unsigned long long>(expected));
  if (method == EntropyMethod::kStored) {
    KVC_CHECK_CORRUPT(r.remaining() == expected, "stored block holds %zu bytes but declares %llu", r.remaining(),
                      static_cast<unsigned long long>(expected));
  } else if (method == EntropyMethod::kDeflate) {
    KVC_CHECK_CORRUPT(DeflateCanHold(r.remaining(), expected), "a %zu-byte DEFLATE block cannot hold %llu bytes",
                      r.remaining(), static_cast<unsigned long long>(expected));
  }
  return Status::Ok();
}

// The same for the C section, from its method byte and the codes' total width.
Status CheckKvtcCodesSection(std::span<const uint8_t> section, uint64_t total_bits) {
  KVC_CHECK_CORRUPT(!section.empty(), "codes section is empty");
  const uint64_t packed = (total_bits + 7) / 8;
  const uint64_t payload = section.size() - 1;
  KVC_CHECK_CORRUPT(section[0] <= static_cast<uint8_t>(KvtcCodesMethod::kRans), "unknown codes method %u", section[0]);
  if (section[0] == static_cast<uint8_t>(KvtcCodesMethod::kPacked)) {
    KVC_CHECK_CORRUPT(payload == packed, "packed codes are %llu bytes, expected %llu",
                      static_cast<unsigned long long>(payload), static_cast<unsigned long long>(packed));
  } else if (section[0] == static_cast<uint8_t>(KvtcCodesMethod::kDeflate)) {
    KVC_CHECK_CORRUPT(DeflateCanHold(payload, packed), "%llu bytes of DEFLATE cannot hold %llu bytes of codes",
                      static_cast<unsigned long long>(payload), static_cast<unsigned long long>(packed));
  }
  return Status::Ok();
}

Status DecodeKvtcCodes(std::span<const uint8_t> section, std::span<const KvtcCodeRun> runs, std::span<uint8_t> codes) {
  ASSIGN_OR_RETURN(const uint64_t total_bits, TotalBits(runs, codes.size()));
  ByteReader r(section);
  uint8_t method;
  RETURN_IF_ERROR(r.U8(&method, "codes method"));
  std::span<const uint8_t> rest;
  RETURN_IF_ERROR(r.Bytes(r.remaining(), &rest, "codes"));
  switch (static_cast<KvtcCodesMethod>(method)) {
    case KvtcCodesMethod::kPacked: return UnpackBits(rest, runs, total_bits, codes);
    case KvtcCodesMethod::kDeflate: {
      std::vector<uint8_t> packed((total_bits + 7) / 8);
      RETURN_IF_ERROR(DeflateDecompress(rest, packed));
      return UnpackBits(packed, runs, total_bits, codes);
    }
    case KvtcCodesMethod::kRans: {
      ByteReader tr(rest);
      uint8_t mask;
      RETURN_IF_ERROR(tr.U8(&mask, "code table mask"));
      std::array<std::optional<FrequencyTable>, kMaxQuantBits + 1> tables;
      for (uint32_t b = 1; b <= kMaxQuantBits; ++b) {
        if ((mask & (1u << (b - 1))) == 0) continue;
        ASSIGN_OR_RETURN(FrequencyTable t, FrequencyTable::Parse(&tr, 1u << b));
        tables[b].emplace(std::move(t));
      }
      for (const KvtcCodeRun& run : runs) {
        KVC_CHECK_CORRUPT(run.count == 0 || tables[run.bits].has_value(), "no code table for %u-bit codes", run.bits);
      }
      std::span<const uint8_t> stream;
      RETURN_IF_ERROR(tr.Bytes(tr.remaining(), &stream, "code stream"));
      ASSIGN_OR_RETURN(RansDecoder dec, RansDecoder::Open(stream));
      size_t at = 0;
      for (const KvtcCodeRun& run : runs) {
        if (run.count == 0) continue;
        RETURN_IF_ERROR(dec.GetBytes(*tables[run.bits], codes.subspan(at, run.count)));
        at += run.count;
      }
      return dec.Finish();
    }
  }
  return Corrupt(FormatMessage("unknown codes method %u", method));
}

}  // namespace kvc
