// Fuzz target for FrequencyTable::Parse and RansDecoder. Input layout:
//   u8  config: bits 0-3 = table count - 1 (1..16);
//               bit 4 = 0: the tables follow serialised (FrequencyTable::Parse);
//               bit 4 = 1: each table follows as u8 scale selector (scale 10 + v % 6),
//                          u8 alphabet size - 1, then one u8 count per symbol
//                          (FrequencyTable::FromCounts), so mutations reach the decoder with
//                          valid tables;
//               bit 5 = 1: the stream is a wide one (kRansWideStates states);
//   u16 symbol count (little-endian);
//   the tables;
//   the rest: a rANS stream whose symbol i uses table i % table count.
// Checks: a parsed table re-serialises to the bytes it came from; a stream that decodes
// cleanly re-encodes to exactly the same bytes (each decode step inverts one encode step);
// with a single byte table, the bulk byte decoder (GetBytes: the vector path for a wide
// stream) agrees with the general one symbol for symbol and in its verdict.
// Seeds: fuzz/corpus/entropy_rans/ (see block_fuzz.cc for how to regenerate).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "base/byte_io.h"
#include "entropy/rans.h"

namespace {

using kvc::ByteReader;
using kvc::FrequencyTable;

void Check(bool ok, const char* what) {
  if (ok) return;
  (void)std::fprintf(stderr, "entropy_rans_fuzz: %s\n", what);
  std::abort();
}

bool ReadTables(ByteReader* r, std::span<const uint8_t> input, size_t count, bool from_counts,
                std::vector<FrequencyTable>* tables) {
  for (size_t k = 0; k < count; ++k) {
    if (from_counts) {
      uint8_t scale_sel;
      uint8_t alphabet_m1;
      if (!r->U8(&scale_sel, "scale").ok() || !r->U8(&alphabet_m1, "alphabet").ok()) return false;
      std::span<const uint8_t> raw;
      if (!r->Bytes(size_t{alphabet_m1} + 1, &raw, "counts").ok()) return false;
      std::vector<uint64_t> counts(raw.begin(), raw.end());
      bool any = false;
      for (uint64_t c : counts) any = any || c != 0;
      if (!any) counts[0] = 1;
      auto t = FrequencyTable::FromCounts(counts, 10 + scale_sel % 6);
      Check(t.ok(), "FromCounts rejected counts it must accept");
      tables->push_back(std::move(t).value());
      continue;
    }
    const size_t begin = r->offset();
    auto t = FrequencyTable::Parse(r);
    if (!t.ok()) {
      Check(t.status().code() == kvc::StatusCode::kCorrupt, "Parse failed with a code other than corrupt");
      return false;
    }
    kvc::ByteWriter w;
    t->AppendTo(&w);
    const std::span<const uint8_t> consumed = input.subspan(begin, r->offset() - begin);
    Check(std::equal(consumed.begin(), consumed.end(), w.bytes().begin(), w.bytes().end()),
          "a parsed table does not re-serialise to its bytes");
    tables->push_back(std::move(t).value());
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  ByteReader r(input);
  uint8_t config;
  uint16_t n_symbols;
  if (!r.U8(&config, "config").ok() || !r.U16(&n_symbols, "symbols").ok()) return 0;
  const size_t n_tables = 1 + (config & 0x0f);
  std::vector<FrequencyTable> tables;
  if (!ReadTables(&r, input, n_tables, (config & 0x10) != 0, &tables)) return 0;
  std::span<const uint8_t> stream;
  Check(r.Bytes(r.remaining(), &stream, "stream").ok(), "cannot take the rest");

  const uint32_t states = (config & 0x20) != 0 ? kvc::kRansWideStates : kvc::kRansStates;
  auto d = kvc::RansDecoder::Open(stream, states);
  if (!d.ok()) {
    Check(d.status().code() == kvc::StatusCode::kCorrupt, "Open failed with a code other than corrupt");
    return 0;
  }
  std::vector<uint32_t> symbols(n_symbols);
  for (size_t i = 0; i < n_symbols; ++i) {
    const FrequencyTable& t = tables[i % n_tables];
    symbols[i] = d->Get(t);
    Check(t.frequency(symbols[i]) != 0, "decoded a symbol of frequency 0");
  }
  const kvc::Status verdict = d->Finish();
  Check(verdict.ok() || verdict.code() == kvc::StatusCode::kCorrupt, "Finish failed with a code other than corrupt");

  if (n_tables == 1 && tables[0].alphabet_size() <= 256) {
    std::vector<uint8_t> bytes(n_symbols);
    auto bulk_decoder = kvc::RansDecoder::Open(stream, states);
    Check(bulk_decoder.ok(), "a stream opened once does not open again");
    Check(bulk_decoder->GetBytes(tables[0], bytes).ok(), "GetBytes refused a byte table");
    const kvc::Status bulk = bulk_decoder->Finish();
    Check(bulk.code() == verdict.code(), "bulk and general byte decoding disagree on the verdict");
    for (size_t i = 0; i < n_symbols; ++i) Check(bytes[i] == symbols[i], "bulk and general decoding disagree");
  }

  if (verdict.ok()) {
    kvc::RansEncoder enc;
    for (size_t i = 0; i < n_symbols; ++i) enc.Put(tables[i % n_tables], symbols[i]);
    auto again = enc.Finish(states);
    Check(again.ok(), "re-encoding decoded symbols failed");
    Check(std::equal(again->begin(), again->end(), stream.begin(), stream.end()),
          "re-encoding a cleanly decoded stream gives other bytes");
  }
  return 0;
}
