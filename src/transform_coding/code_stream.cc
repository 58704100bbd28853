#include "transform_coding/code_stream.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "base/byte_io.h"
#include "entropy/block.h"
#include "entropy/deflate.h"
#include "entropy/rans.h"
#include "entropy/varint.h"
#include "transform_coding/quantizer.h"

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

// Codes per rANS symbol for codes of width w: kRansTuples joins neighbours into 16-symbol
// alphabets. Measured on kvtiny and kvgqa8 at levels 16 and 24 against pairs of 3- and 4-bit
// codes and 64-symbol tuples of 1-3-bit codes: those decode no faster and their larger tables
// (stored in every file) cost 0.2-1.3% of the ratio; these cost none.
uint32_t TupleSize(KvtcCodesMethod method, uint32_t w) {
  if (method != KvtcCodesMethod::kRansTuples && method != KvtcCodesMethod::kRansTuplesWide) return 1;
  return w == 1 ? 4 : w == 2 ? 2 : 1;
}

bool IsRans(KvtcCodesMethod method) {
  return method == KvtcCodesMethod::kRans || method == KvtcCodesMethod::kRansTuples ||
         method == KvtcCodesMethod::kRansTuplesWide;
}

uint32_t RansStatesOf(KvtcCodesMethod method) {
  return method == KvtcCodesMethod::kRansTuplesWide ? kRansWideStates : kRansStates;
}

// A decoder looks a slot up per symbol: a 10-bit table (6 KiB) stays in L1 where a 14-bit one
// (96 KiB) did not, and on the test models the coarser frequencies cost less than the smaller
// tables save (every measured file shrank when the scales went from 12/14 to 10/12).
uint32_t ScaleBitsFor(uint32_t alphabet) { return alphabet <= 64 ? 10 : 12; }

// Calls emit(symbol) for each symbol of a run of `count` codes of width w, k codes a symbol with
// the first in the low bits; a last incomplete tuple is padded with zero codes.
template <typename Emit>
void ForEachSymbol(const uint8_t* codes, size_t count, uint32_t w, uint32_t k, Emit&& emit) {
  for (size_t i = 0; i < count; i += k) {
    const size_t m = std::min<size_t>(k, count - i);
    uint32_t symbol = 0;
    for (size_t j = 0; j < m; ++j) symbol |= uint32_t{codes[i + j]} << (j * w);
    emit(symbol);
  }
}

Result<std::vector<uint8_t>> EncodeRans(std::span<const uint8_t> codes, std::span<const KvtcCodeRun> runs,
                                        KvtcCodesMethod method) {
  // One table per code width: codes of equal width come from the same kind of quantiser and
  // share a shape of distribution.
  std::array<std::vector<uint64_t>, kMaxQuantBits + 1> counts;
  for (uint32_t w = 1; w <= kMaxQuantBits; ++w) counts[w].assign(size_t{1} << (w * TupleSize(method, w)), 0);
  size_t symbols = 0;
  const uint8_t* code = codes.data();
  for (const KvtcCodeRun& run : runs) {
    std::vector<uint64_t>& histogram = counts[run.bits];
    ForEachSymbol(code, run.count, run.bits, TupleSize(method, run.bits), [&](uint32_t symbol) {
      ++histogram[symbol];
      ++symbols;
    });
    code += run.count;
  }
  ByteWriter w;
  w.U8(static_cast<uint8_t>(method));
  uint8_t mask = 0;
  std::array<std::optional<FrequencyTable>, kMaxQuantBits + 1> tables;
  for (uint32_t b = 1; b <= kMaxQuantBits; ++b) {
    if (std::all_of(counts[b].begin(), counts[b].end(), [](uint64_t c) { return c == 0; })) continue;
    mask |= static_cast<uint8_t>(1u << (b - 1));
    ASSIGN_OR_RETURN(FrequencyTable t,
                     FrequencyTable::FromCounts(counts[b], ScaleBitsFor(static_cast<uint32_t>(counts[b].size()))));
    tables[b].emplace(std::move(t));
  }
  w.U8(mask);
  for (uint32_t b = 1; b <= kMaxQuantBits; ++b)
    if (tables[b]) tables[b]->AppendTo(&w);
  RansEncoder enc;
  enc.Reserve(symbols);
  code = codes.data();
  for (const KvtcCodeRun& run : runs) {
    const FrequencyTable& table = *tables[run.bits];
    ForEachSymbol(code, run.count, run.bits, TupleSize(method, run.bits), [&](uint32_t s) { enc.Put(table, s); });
    code += run.count;
  }
  ASSIGN_OR_RETURN(std::vector<uint8_t> stream, enc.Finish(RansStatesOf(method)));
  w.Bytes(stream);
  return w.Take();
}

Status DecodeRans(std::span<const uint8_t> rest, std::span<const KvtcCodeRun> runs, KvtcCodesMethod method,
                  std::span<uint8_t> codes) {
  ByteReader tr(rest);
  uint8_t mask;
  RETURN_IF_ERROR(tr.U8(&mask, "code table mask"));
  std::array<std::optional<FrequencyTable>, kMaxQuantBits + 1> tables;
  for (uint32_t b = 1; b <= kMaxQuantBits; ++b) {
    if ((mask & (1u << (b - 1))) == 0) continue;
    // The alphabet bound keeps every decoded symbol a valid tuple of b-bit codes.
    ASSIGN_OR_RETURN(FrequencyTable t, FrequencyTable::Parse(&tr, 1u << (b * TupleSize(method, b))));
    tables[b].emplace(std::move(t));
  }
  for (const KvtcCodeRun& run : runs) {
    KVC_CHECK_CORRUPT(run.count == 0 || tables[run.bits].has_value(), "no code table for %u-bit codes", run.bits);
  }
  // Neighbouring runs of one width decode as one when every one before the last fills whole
  // tuples: the symbols are the same, and each GetBytes call's start and end cost a few slow
  // symbols, which on 64-symbol runs was a tenth of the work.
  std::vector<KvtcCodeRun> merged;
  for (const KvtcCodeRun& run : runs) {
    if (run.count == 0) continue;
    if (!merged.empty() && merged.back().bits == run.bits && merged.back().count % TupleSize(method, run.bits) == 0) {
      merged.back().count += run.count;
    } else {
      merged.push_back(run);
    }
  }
  size_t most_tuples = 0;
  for (const KvtcCodeRun& run : merged) {
    const uint32_t k = TupleSize(method, run.bits);
    if (k > 1) most_tuples = std::max(most_tuples, (run.count + k - 1) / k);
  }
  std::span<const uint8_t> stream;
  RETURN_IF_ERROR(tr.Bytes(tr.remaining(), &stream, "code stream"));
  ASSIGN_OR_RETURN(RansDecoder dec, RansDecoder::Open(stream, RansStatesOf(method)));
  std::vector<uint8_t> tuples(most_tuples);
  size_t at = 0;
  for (const KvtcCodeRun& run : merged) {
    const FrequencyTable& table = *tables[run.bits];
    const std::span<uint8_t> out = codes.subspan(at, run.count);
    at += run.count;
    const uint32_t w = run.bits, k = TupleSize(method, w);
    if (k == 1) {
      RETURN_IF_ERROR(dec.GetBytes(table, out));
      continue;
    }
    const size_t n_tuples = (run.count + k - 1) / k;
    RETURN_IF_ERROR(dec.GetBytes(table, std::span(tuples).first(n_tuples)));
    // A tuple's codes, one byte each, looked up by symbol (tuple alphabets have 16 symbols).
    if (k * w > 4 || (k != 2 && k != 4)) return Internal("kvtc codes: tuples other than 2 or 4 codes in 4 bits");
    std::array<std::array<uint8_t, 4>, 16> spread{};
    for (uint32_t t = 0; t < spread.size(); ++t) {
      for (uint32_t j = 0; j < k; ++j) spread[t][j] = static_cast<uint8_t>((t >> (j * w)) & ((1u << w) - 1));
    }
    const size_t whole = run.count / k;
    uint8_t* dst = out.data();
    // A copy of constant size per tuple (k is 4 or 2), which compiles to one store.
    if (k == 4) {
      for (size_t i = 0; i < whole; ++i, dst += 4) std::memcpy(dst, spread[tuples[i]].data(), 4);
    } else {
      for (size_t i = 0; i < whole; ++i, dst += 2) std::memcpy(dst, spread[tuples[i]].data(), 2);
    }
    if (whole < n_tuples) {
      const uint32_t t = tuples[whole], left = static_cast<uint32_t>(run.count - whole * k);
      KVC_CHECK_CORRUPT((t >> (left * w)) == 0, "a run's last code tuple has non-zero padding");
      std::memcpy(dst, spread[t].data(), left);
    }
  }
  return dec.Finish();
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
  if (IsRans(method) && !codes.empty()) {
    ASSIGN_OR_RETURN(std::vector<uint8_t> section, EncodeRans(codes, runs, method));
    if (section.size() < packed_section_size) return section;
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
  KVC_CHECK_CORRUPT(section[0] <= static_cast<uint8_t>(kLastKvtcCodesMethod), "unknown codes method %u", section[0]);
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
    case KvtcCodesMethod::kPacked:
      return UnpackBits(rest, runs, total_bits, codes);
    case KvtcCodesMethod::kDeflate: {
      std::vector<uint8_t> packed((total_bits + 7) / 8);
      RETURN_IF_ERROR(DeflateDecompress(rest, packed));
      return UnpackBits(packed, runs, total_bits, codes);
    }
    case KvtcCodesMethod::kRans:
    case KvtcCodesMethod::kRansTuples:
    case KvtcCodesMethod::kRansTuplesWide:
      return DecodeRans(rest, runs, static_cast<KvtcCodesMethod>(method), codes);
  }
  return Corrupt(FormatMessage("unknown codes method %u", method));
}

}  // namespace kvc
