#include "entropy/rans.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "entropy/entropy_test_data.h"

namespace kvc {
namespace {

using testing::LaplacianBytes;
using testing::Order0EntropyBytes;

std::vector<uint64_t> HistogramOf(std::span<const uint8_t> data, size_t alphabet = 256) {
  std::vector<uint64_t> counts(alphabet);
  for (uint8_t b : data) ++counts[b];
  return counts;
}

// A stream holding no symbols: every state at its initial value.
std::vector<uint8_t> EmptyStream() {
  std::vector<uint8_t> s;
  for (uint32_t k = 0; k < kRansStates; ++k) s.insert(s.end(), {0, 0, 1, 0});
  return s;
}

std::vector<uint8_t> Serialise(const FrequencyTable& t) {
  ByteWriter w;
  t.AppendTo(&w);
  return w.Take();
}

Result<FrequencyTable> ParseAll(std::span<const uint8_t> bytes, uint32_t max_alphabet = 4096) {
  ByteReader r(bytes);
  ASSIGN_OR_RETURN(FrequencyTable t, FrequencyTable::Parse(&r, max_alphabet));
  KVC_CHECK_CORRUPT(r.empty(), "%zu bytes after the table", r.remaining());
  return t;
}

void ExpectSameTable(const FrequencyTable& a, const FrequencyTable& b) {
  ASSERT_EQ(a.alphabet_size(), b.alphabet_size());
  ASSERT_EQ(a.scale_bits(), b.scale_bits());
  for (uint32_t s = 0; s < a.alphabet_size(); ++s) ASSERT_EQ(a.frequency(s), b.frequency(s)) << "symbol " << s;
}

// ------------------------------------------------------------------------------------------
// FrequencyTable

TEST(FrequencyTable, NormalisationKeepsEveryPresentSymbol) {
  std::mt19937_64 rng(3);
  for (uint32_t scale = FrequencyTable::kMinScaleBits; scale <= FrequencyTable::kMaxScaleBits; ++scale) {
    for (int trial = 0; trial < 20; ++trial) {
      const size_t alphabet = 1 + rng() % FrequencyTable::kMaxAlphabetSize;
      std::vector<uint64_t> counts(alphabet);
      size_t present = 0;
      for (auto& c : counts) {
        // Mostly absent or rare symbols, a few huge: the case where rounding drops symbols.
        const uint64_t r = rng() % 100;
        c = r < 50 ? 0 : r < 95 ? 1 + rng() % 3 : rng() % (uint64_t{1} << 40);
        if (present >= (1u << scale)) c = 0;
        present += c != 0;
      }
      if (present == 0) counts[0] = 1;
      auto t = FrequencyTable::FromCounts(counts, scale);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      uint64_t sum = 0;
      for (uint32_t s = 0; s < alphabet; ++s) {
        sum += t->frequency(s);
        ASSERT_EQ(counts[s] != 0, t->frequency(s) != 0) << "scale " << scale << " symbol " << s;
      }
      ASSERT_EQ(sum, uint64_t{1} << scale);
    }
  }
}

TEST(FrequencyTable, FullAlphabetAtEveryPresentLimit) {
  // Exactly as many present symbols as slots: every symbol must end at frequency 1.
  std::vector<uint64_t> counts(1024, 1);
  counts[7] = uint64_t{1} << 50;
  auto t = FrequencyTable::FromCounts(counts, 10);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (uint32_t s = 0; s < 1024; ++s) EXPECT_EQ(t->frequency(s), 1u);
}

TEST(FrequencyTable, SingleSymbolTakesEverySlot) {
  std::vector<uint64_t> counts(300);
  counts[299] = 5;
  auto t = FrequencyTable::FromCounts(counts, 12);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->frequency(299), 4096u);
  EXPECT_EQ(t->frequency(0), 0u);
  EXPECT_EQ(t->frequency(5000), 0u);
}

TEST(FrequencyTable, RoundingIsCloseToProportional) {
  const std::vector<uint64_t> counts = {1000, 3000, 0, 4000, 1, 1};
  auto t = FrequencyTable::FromCounts(counts, 13);
  ASSERT_TRUE(t.ok());
  const double total = 8002;
  for (uint32_t s = 0; s < counts.size(); ++s) {
    if (counts[s] == 0) continue;
    EXPECT_NEAR(t->frequency(s), std::max(1.0, counts[s] / total * 8192), 2.0) << s;
  }
}

TEST(FrequencyTable, FromCountsRejectsBadArguments) {
  const std::vector<uint64_t> ok = {1, 2, 3};
  EXPECT_EQ(FrequencyTable::FromCounts(ok, 9).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FrequencyTable::FromCounts(ok, 16).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FrequencyTable::FromCounts({}, 12).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FrequencyTable::FromCounts(std::vector<uint64_t>(4097, 1), 15).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(FrequencyTable::FromCounts(std::vector<uint64_t>(10, 0), 12).status().code(), StatusCode::kInvalidArgument);
  // 1025 present symbols cannot each keep a slot out of 1024.
  EXPECT_EQ(FrequencyTable::FromCounts(std::vector<uint64_t>(1025, 1), 10).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(FrequencyTable::FromCounts(std::vector<uint64_t>{UINT64_MAX, 1}, 12).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(FrequencyTable, FromFrequenciesChecksTheSum) {
  std::vector<uint32_t> f(16, 64);
  EXPECT_TRUE(FrequencyTable::FromFrequencies(f, 10).ok());
  f[3] = 63;
  EXPECT_EQ(FrequencyTable::FromFrequencies(f, 10).status().code(), StatusCode::kInvalidArgument);
  f[3] = 65;
  EXPECT_EQ(FrequencyTable::FromFrequencies(f, 10).status().code(), StatusCode::kInvalidArgument);
}

TEST(FrequencyTable, SerialisationRoundTripsAndIsCompact) {
  const std::vector<uint8_t> data = LaplacianBytes(100000, 1.5, 1);
  auto t = FrequencyTable::FromCounts(HistogramOf(data), 14);
  ASSERT_TRUE(t.ok());
  const std::vector<uint8_t> bytes = Serialise(*t);
  // ~30 present byte values, two runs of zeros around them.
  EXPECT_LT(bytes.size(), 80u);
  auto back = ParseAll(bytes, 256);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameTable(*t, *back);
  EXPECT_EQ(Serialise(*back), bytes);

  // A table over the largest alphabet, every frequency a different varint length.
  std::vector<uint32_t> freqs(4096);
  for (size_t s = 1; s < 4096; s += 13) freqs[s] = 1;
  for (size_t s = 2; s < 2 + 300 * 13; s += 13) freqs[s] = 50;
  freqs[0] = 32768 - std::accumulate(freqs.begin() + 1, freqs.end(), 0u);
  auto big = FrequencyTable::FromFrequencies(freqs, 15);
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  auto big_back = ParseAll(Serialise(*big));
  ASSERT_TRUE(big_back.ok()) << big_back.status().ToString();
  ExpectSameTable(*big, *big_back);
}

TEST(FrequencyTable, MatchesTheDocumentedExample) {
  // docs/format.md, "Frequency table".
  const std::vector<uint8_t> bytes = {0x04, 0x0a, 0x80, 0x06, 0x00, 0x01, 0x80, 0x02};
  auto t = FrequencyTable::FromFrequencies(std::vector<uint32_t>{768, 0, 0, 256}, 10);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(Serialise(*t), bytes);
  auto parsed = ParseAll(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ExpectSameTable(*t, *parsed);
}

TEST(FrequencyTable, ParseRejectsHostileTables) {
  auto expect_corrupt = [](std::vector<uint8_t> bytes, const char* why, uint32_t max_alphabet = 4096) {
    auto t = ParseAll(bytes, max_alphabet);
    EXPECT_EQ(t.status().code(), StatusCode::kCorrupt) << why;
  };
  // alphabet 2, scale 10, frequencies 512 + 512 is valid.
  const std::vector<uint8_t> valid = {0x02, 10, 0x80, 0x04, 0x80, 0x04};
  ASSERT_TRUE(ParseAll(valid).ok());
  expect_corrupt({0x02, 10, 0x80, 0x04, 0xff, 0x03}, "sum below the total");
  expect_corrupt({0x02, 10, 0x80, 0x04, 0x81, 0x04}, "sum above the total");
  expect_corrupt({0x01, 10, 0x80, 0x10}, "a frequency above the total");
  expect_corrupt({0x00, 10}, "empty alphabet");
  expect_corrupt({0x81, 0x20, 12, 0x00, 0x00}, "alphabet above 4096");
  expect_corrupt({0x81, 0x02, 12, 0x00, 0x00}, "alphabet above the caller's limit", 256);
  expect_corrupt({0x02, 9, 0x80, 0x02, 0x80, 0x02}, "scale below 10");
  expect_corrupt({0x02, 16, 0x80, 0x80, 0x01, 0x00}, "scale above 15");
  expect_corrupt({0x82, 0x00, 10, 0x80, 0x04, 0x80, 0x04}, "non-canonical varint");
  expect_corrupt({0x03, 10, 0x00, 0x00, 0x80, 0x08}, "a frequency missing at the end");
  // alphabet 4: zero run of 1, zero run of 1, 1024: two runs that should have been one.
  expect_corrupt({0x04, 10, 0x00, 0x00, 0x00, 0x00, 0x80, 0x08}, "adjacent zero runs");
  // alphabet 2: zero run of 3 overruns it.
  expect_corrupt({0x02, 10, 0x00, 0x02, 0x80, 0x08}, "zero run past the alphabet");
  expect_corrupt({0x02, 10, 0x00, 0x01}, "all zero");
  for (size_t n = 0; n < valid.size(); ++n) {
    expect_corrupt(std::vector<uint8_t>(valid.begin(), valid.begin() + n), "truncated");
  }
}

// ------------------------------------------------------------------------------------------
// Coding

std::vector<uint8_t> DecodeAllBytes(const FrequencyTable& t, std::span<const uint8_t> stream, size_t n,
                                    Status* status) {
  std::vector<uint8_t> out(n);
  *status = RansDecodeBytes(t, stream, out);
  return out;
}

void ExpectBytesRoundTrip(std::span<const uint8_t> data, uint32_t scale) {
  std::vector<uint64_t> counts = HistogramOf(data);
  if (data.empty()) counts[0] = 1;
  auto t = FrequencyTable::FromCounts(counts, scale);
  ASSERT_TRUE(t.ok());
  auto stream = RansEncodeBytes(*t, data);
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  Status st;
  const auto back = DecodeAllBytes(*t, *stream, data.size(), &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(std::equal(back.begin(), back.end(), data.begin(), data.end()));

  // The general decoder reads the same stream.
  auto d = RansDecoder::Open(*stream);
  ASSERT_TRUE(d.ok());
  for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(d->Get(*t), data[i]) << i;
  EXPECT_TRUE(d->Finish().ok());
}

TEST(Rans, BytesRoundTrip) {
  ExpectBytesRoundTrip({}, 12);
  const uint8_t one[] = {42};
  ExpectBytesRoundTrip(one, 10);
  const uint8_t two[] = {1, 200};
  ExpectBytesRoundTrip(two, 15);
  ExpectBytesRoundTrip(std::vector<uint8_t>(100000, 7), 12);
  for (size_t n : {3, 4, 5, 17, 1000, 65537}) {
    for (uint32_t scale : {10u, 12u, 15u}) {
      ExpectBytesRoundTrip(LaplacianBytes(n, 1.5, n), scale);
      ExpectBytesRoundTrip(testing::UniformBytes(n, n), scale);
    }
  }
}

TEST(Rans, EmptyStreamIsJustTheStates) {
  auto t = FrequencyTable::FromCounts(std::vector<uint64_t>{1, 1}, 10);
  ASSERT_TRUE(t.ok());
  auto stream = RansEncodeBytes(*t, {});
  ASSERT_TRUE(stream.ok());
  EXPECT_EQ(*stream, EmptyStream());
}

TEST(Rans, AllEqualBytesCostNothing) {
  auto t = FrequencyTable::FromCounts(std::vector<uint64_t>{0, 10}, 12);
  ASSERT_TRUE(t.ok());
  auto stream = RansEncodeBytes(*t, std::vector<uint8_t>(1 << 20, 1));
  ASSERT_TRUE(stream.ok());
  EXPECT_EQ(stream->size(), kRansStreamHeaderBytes);
}

TEST(Rans, ComesWithinOnePercentOfOrderZeroEntropy) {
  for (double b : {0.7, 1.5, 4.0}) {
    const std::vector<uint8_t> data = LaplacianBytes(1 << 20, b, 11);
    const double entropy = Order0EntropyBytes(data);
    for (uint32_t scale : {12u, 14u}) {
      auto t = FrequencyTable::FromCounts(HistogramOf(data), scale);
      ASSERT_TRUE(t.ok());
      auto stream = RansEncodeBytes(*t, data);
      ASSERT_TRUE(stream.ok());
      const double total = static_cast<double>(stream->size() + Serialise(*t).size());
      const double overhead = total / entropy - 1;
      std::printf("laplacian b=%.1f scale=%u: entropy %.0f B (%.3f bits/byte), rANS %.0f B incl. table: %+.3f%%\n", b,
                  scale, entropy, entropy * 8 / data.size(), total, 100 * overhead);
      EXPECT_LT(overhead, 0.01);
      Status st;
      EXPECT_EQ(DecodeAllBytes(*t, *stream, data.size(), &st), data);
      EXPECT_TRUE(st.ok());
    }
  }
}

TEST(Rans, EncoderRejectsUncodableSymbols) {
  auto t = FrequencyTable::FromCounts(std::vector<uint64_t>{5, 0, 5}, 10);
  ASSERT_TRUE(t.ok());
  const uint8_t absent[] = {0, 2, 1, 0};
  EXPECT_EQ(RansEncodeBytes(*t, absent).status().code(), StatusCode::kInvalidArgument);
  const uint8_t outside[] = {0, 3};
  EXPECT_EQ(RansEncodeBytes(*t, outside).status().code(), StatusCode::kInvalidArgument);

  RansEncoder enc;
  enc.Put(*t, 0);
  enc.Put(*t, 1);
  enc.Put(*t, 2);
  auto r = enc.Finish();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("position 1"), std::string::npos) << r.status().message();
  // Finish leaves the encoder empty and usable.
  enc.Put(*t, 2);
  auto again = enc.Finish();
  ASSERT_TRUE(again.ok());
  auto d = RansDecoder::Open(*again);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->Get(*t), 2u);
  EXPECT_TRUE(d->Finish().ok());
}

TEST(Rans, ByteDecoderNeedsAByteAlphabet) {
  auto t = FrequencyTable::FromCounts(std::vector<uint64_t>(300, 1), 10);
  ASSERT_TRUE(t.ok());
  std::vector<uint8_t> out(1);
  const std::vector<uint8_t> stream = EmptyStream();
  EXPECT_EQ(RansDecodeBytes(*t, stream, out).code(), StatusCode::kInvalidArgument);
}

// 64 contexts, as CacheGen uses one table per (layer, channel): alphabets up to 4096, every
// scale, symbols drawn from each context's own distribution.
struct MultiContextCase {
  std::vector<FrequencyTable> tables;
  std::vector<uint32_t> contexts;
  std::vector<uint32_t> symbols;
};

MultiContextCase MakeMultiContext(size_t n_symbols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  MultiContextCase c;
  std::vector<std::discrete_distribution<uint32_t>> dists;
  for (int k = 0; k < 64; ++k) {
    const uint32_t alphabet = k == 0 ? 4096 : 2 + static_cast<uint32_t>(rng() % 4095);
    const uint32_t scale = k == 0 ? 15 : 10 + static_cast<uint32_t>(k % 6);
    std::vector<uint64_t> counts(alphabet);
    const double decay = 0.5 + (rng() % 1000) / 1000.0 * alphabet / 8;
    for (uint32_t s = 0; s < alphabet; ++s) {
      counts[s] = static_cast<uint64_t>(1e6 * std::exp(-static_cast<double>(s) / decay));
      if (rng() % 4 == 0) counts[s] = 0;
    }
    counts[alphabet - 1] = 1;  // the largest symbol is always present
    if (static_cast<uint32_t>(std::count_if(counts.begin(), counts.end(), [](uint64_t v) { return v != 0; })) >
        (1u << scale)) {
      for (uint32_t s = 1u << (scale - 1); s + 1 < alphabet; ++s) counts[s] = 0;
    }
    c.tables.push_back(FrequencyTable::FromCounts(counts, scale).value());
    std::vector<double> w(counts.begin(), counts.end());
    dists.emplace_back(w.begin(), w.end());
  }
  for (size_t i = 0; i < n_symbols; ++i) {
    const uint32_t ctx = (i % 3 == 0) ? static_cast<uint32_t>(rng() % 64) : static_cast<uint32_t>(i % 64);
    c.contexts.push_back(ctx);
    c.symbols.push_back(dists[ctx](rng));
  }
  return c;
}

Result<std::vector<uint8_t>> EncodeMulti(const MultiContextCase& c) {
  RansEncoder enc;
  enc.Reserve(c.symbols.size());
  for (size_t i = 0; i < c.symbols.size(); ++i) enc.Put(c.tables[c.contexts[i]], c.symbols[i]);
  return enc.Finish();
}

// Decodes as many symbols as `c` holds; returns the Finish status.
Status DecodeMulti(const MultiContextCase& c, std::span<const uint8_t> stream, std::vector<uint32_t>* out) {
  ASSIGN_OR_RETURN(RansDecoder d, RansDecoder::Open(stream));
  out->clear();
  for (uint32_t ctx : c.contexts) out->push_back(d.Get(c.tables[ctx]));
  return d.Finish();
}

TEST(Rans, MultiContextRoundTrip) {
  for (size_t n : {0, 1, 2, 3, 1000, 200001}) {
    const MultiContextCase c = MakeMultiContext(n, n + 5);
    ASSERT_EQ(c.tables[0].alphabet_size(), 4096u);
    auto stream = EncodeMulti(c);
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    std::vector<uint32_t> back;
    Status st = DecodeMulti(c, *stream, &back);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(back, c.symbols);
  }
  // Symbol 4095 itself, through the largest table.
  const MultiContextCase c = MakeMultiContext(0, 1);
  RansEncoder enc;
  for (int i = 0; i < 10; ++i) enc.Put(c.tables[0], 4095);
  auto stream = enc.Finish();
  ASSERT_TRUE(stream.ok());
  auto d = RansDecoder::Open(*stream);
  ASSERT_TRUE(d.ok());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(d->Get(c.tables[0]), 4095u);
  EXPECT_TRUE(d->Finish().ok());
}

// GetBytes is a faster spelling of Get: runs of any length and any starting state, mixed with
// single Gets and table changes, decode the same symbols, and the stream still finishes; in
// streams of 4 states and wide ones (32 states), on every vector path this CPU runs.
TEST(Rans, GetBytesRunsMatchGet) {
  RecordProperty("widest_path", VectorIsaName(BestVectorIsa()));
  std::mt19937_64 rng(17);
  std::vector<FrequencyTable> tables;
  for (uint32_t bits : {1u, 3u, 8u, 4u}) {
    std::vector<uint64_t> counts(size_t{1} << bits);
    for (size_t s = 0; s < counts.size(); ++s) counts[s] = 1 + (rng() % 100) * (s % 3 == 0 ? 20 : 1);
    tables.push_back(FrequencyTable::FromCounts(counts, bits == 8 ? 14 : bits == 4 ? 10 : 12).value());
  }
  // Runs of lengths 0..69 (every remainder of a 32-symbol round) and a few long ones, each with one table.
  std::vector<std::pair<uint32_t, size_t>> runs;
  for (size_t len = 0; len < 70; ++len) runs.push_back({static_cast<uint32_t>(len % tables.size()), len});
  for (size_t len : {1000, 4097, 3, 333}) runs.push_back({static_cast<uint32_t>(len % tables.size()), len});
  std::vector<uint8_t> symbols;
  RansEncoder enc;
  std::vector<std::pair<const FrequencyTable*, uint8_t>> puts;
  for (auto [t, len] : runs) {
    for (size_t i = 0; i < len; ++i) {
      uint8_t s;
      do {
        s = static_cast<uint8_t>(rng() % tables[t].alphabet_size());
      } while (tables[t].frequency(s) == 0);
      symbols.push_back(s);
      puts.push_back({&tables[t], s});
    }
  }
  for (uint32_t states : {kRansStates, kRansWideStates}) {
    for (auto [table, s] : puts) enc.Put(*table, s);
    auto stream = enc.Finish(states);
    ASSERT_TRUE(stream.ok());
    for (const VectorIsa isa : SupportedVectorIsas()) {
      for (bool odd_gets : {false, true}) {
        auto d = RansDecoder::Open(*stream, states);
        ASSERT_TRUE(d.ok());
        std::vector<uint8_t> back(symbols.size());
        size_t at = 0;
        for (auto [t, len] : runs) {
          size_t done = 0;
          if (odd_gets && len > 0) back[at + done++] = static_cast<uint8_t>(d->Get(tables[t]));  // shifts the state
          ASSERT_TRUE(d->GetBytes(tables[t], std::span(back).subspan(at + done, len - done), isa).ok());
          at += len;
        }
        EXPECT_EQ(back, symbols) << states << " states, " << VectorIsaName(isa);
        EXPECT_TRUE(d->Finish().ok()) << d->Finish().ToString();
      }
    }
    // Over-long reads are remembered, as with Get.
    auto d = RansDecoder::Open(*stream, states);
    ASSERT_TRUE(d.ok());
    std::vector<uint8_t> too_many(symbols.size() + 64);
    ASSERT_TRUE(d->GetBytes(tables[0], too_many).ok());
    EXPECT_EQ(d->Finish().code(), StatusCode::kCorrupt) << states << " states";
  }
}

// On arbitrary bytes (any normalised header, any words) the wide stream's vector path and Get
// agree symbol for symbol and on how the stream ends: hostile input takes no other path.
TEST(Rans, WideGetBytesMatchesGetOnArbitraryBytes) {
  std::mt19937_64 rng(99);
  std::vector<uint64_t> counts(256);
  for (size_t s = 0; s < counts.size(); ++s) counts[s] = 1 + rng() % 50;
  const FrequencyTable table = FrequencyTable::FromCounts(counts, 12).value();
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<uint8_t> bytes(RansStreamHeaderBytes(kRansWideStates) + rng() % 600);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    for (size_t k = 0; k < kRansWideStates; ++k) bytes[4 * k + 3] |= 0x01;  // every state >= 2^24: normalised
    const size_t n = rng() % 700;
    auto slow = RansDecoder::Open(bytes, kRansWideStates);
    ASSERT_TRUE(slow.ok());
    std::vector<uint8_t> b(n);
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(slow->Get(table));
    for (const VectorIsa isa : SupportedVectorIsas()) {
      auto fast = RansDecoder::Open(bytes, kRansWideStates);
      ASSERT_TRUE(fast.ok());
      std::vector<uint8_t> a(n);
      ASSERT_TRUE(fast->GetBytes(table, a, isa).ok());
      ASSERT_EQ(a, b) << "trial " << trial << ", " << VectorIsaName(isa);
      EXPECT_EQ(fast->Finish().ToString(), slow->Finish().ToString())
          << "trial " << trial << ", " << VectorIsaName(isa);
    }
  }
}

TEST(Rans, OnlyFourOrThirtyTwoStates) {
  RansEncoder enc;
  EXPECT_EQ(enc.Finish(8).status().code(), StatusCode::kInvalidArgument);
  const std::vector<uint8_t> header(RansStreamHeaderBytes(kRansWideStates), 0x01);
  EXPECT_EQ(RansDecoder::Open(header, 8).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(RansDecoder::Open(header, kRansWideStates).ok());
  // A wide stream's header is 128 bytes: the 16 bytes of a narrow one are too short for it.
  EXPECT_EQ(RansDecoder::Open(std::span(header).first(kRansStreamHeaderBytes), kRansWideStates).status().code(),
            StatusCode::kCorrupt);
}

TEST(Rans, MultiContextCostMatchesTheModel) {
  // Coded size against the ideal cost under the tables actually used: rANS itself adds ~0.
  const MultiContextCase c = MakeMultiContext(300000, 9);
  auto stream = EncodeMulti(c);
  ASSERT_TRUE(stream.ok());
  double ideal_bits = 0;
  for (size_t i = 0; i < c.symbols.size(); ++i) {
    const FrequencyTable& t = c.tables[c.contexts[i]];
    ideal_bits += t.scale_bits() - std::log2(t.frequency(c.symbols[i]));
  }
  const double ideal = ideal_bits / 8;
  std::printf("multi-context: %zu symbols, ideal %.0f B, coded %zu B (%+.3f%%)\n", c.symbols.size(), ideal,
              stream->size(), 100 * (stream->size() / ideal - 1));
  EXPECT_LT(static_cast<double>(stream->size()), ideal * 1.002 + 16);
}

TEST(Rans, Deterministic) {
  const MultiContextCase c = MakeMultiContext(5000, 77);
  EXPECT_EQ(EncodeMulti(c).value(), EncodeMulti(c).value());
  const auto data = LaplacianBytes(50000, 1.5, 2);
  auto t1 = FrequencyTable::FromCounts(HistogramOf(data), 13).value();
  auto t2 = FrequencyTable::FromCounts(HistogramOf(data), 13).value();
  EXPECT_EQ(Serialise(t1), Serialise(t2));
  EXPECT_EQ(RansEncodeBytes(t1, data).value(), RansEncodeBytes(t2, data).value());
}

TEST(Rans, OpenRejectsShortOrDenormalStreams) {
  EXPECT_EQ(RansDecoder::Open({}).status().code(), StatusCode::kCorrupt);
  const std::vector<uint8_t> short_header(kRansStreamHeaderBytes - 1, 0xff);
  EXPECT_EQ(RansDecoder::Open(short_header).status().code(), StatusCode::kCorrupt);
  const std::vector<uint8_t> ok = EmptyStream();
  EXPECT_TRUE(RansDecoder::Open(ok).ok());
  for (size_t k = 0; k < kRansStates; ++k) {
    std::vector<uint8_t> low = ok;
    low[4 * k] = 0xff;
    low[4 * k + 1] = 0xff;
    low[4 * k + 2] = 0;  // 0x0000ffff < 2^16
    EXPECT_EQ(RansDecoder::Open(low).status().code(), StatusCode::kCorrupt) << k;
  }
}

TEST(Rans, EveryTruncationFails) {
  const MultiContextCase c = MakeMultiContext(400, 21);
  const std::vector<uint8_t> stream = EncodeMulti(c).value();
  std::vector<uint32_t> back;
  for (size_t n = 0; n < stream.size(); ++n) {
    // An exact-size heap copy, so ASan sees any read past the end.
    const std::vector<uint8_t> cut(stream.begin(), stream.begin() + n);
    EXPECT_EQ(DecodeMulti(c, cut, &back).code(), StatusCode::kCorrupt) << "length " << n;
  }
  const auto data = LaplacianBytes(300, 1.5, 4);
  auto t = FrequencyTable::FromCounts(HistogramOf(data), 12).value();
  const std::vector<uint8_t> bytes_stream = RansEncodeBytes(t, data).value();
  for (size_t n = 0; n < bytes_stream.size(); ++n) {
    const std::vector<uint8_t> cut(bytes_stream.begin(), bytes_stream.begin() + n);
    Status st;
    DecodeAllBytes(t, cut, data.size(), &st);
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << "length " << n;
  }
}

TEST(Rans, ExtraBytesOrSymbolsFail) {
  const auto data = LaplacianBytes(1000, 1.5, 5);
  auto t = FrequencyTable::FromCounts(HistogramOf(data), 12).value();
  std::vector<uint8_t> stream = RansEncodeBytes(t, data).value();
  Status st;
  DecodeAllBytes(t, stream, data.size() - 1, &st);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  DecodeAllBytes(t, stream, data.size() + 1, &st);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  stream.push_back(0);
  stream.push_back(0);
  DecodeAllBytes(t, stream, data.size(), &st);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
}

TEST(Rans, ByteFlipsNeverReadOutOfBounds) {
  // rANS has no checksum: a flip may decode to other symbols, but must stay in bounds and
  // almost always fails the final-state check.
  const MultiContextCase c = MakeMultiContext(300, 8);
  const std::vector<uint8_t> stream = EncodeMulti(c).value();
  const auto data = LaplacianBytes(300, 1.5, 6);
  auto t = FrequencyTable::FromCounts(HistogramOf(data), 11).value();
  const std::vector<uint8_t> bytes_stream = RansEncodeBytes(t, data).value();
  size_t failed = 0;
  size_t total = 0;
  std::vector<uint32_t> back;
  for (size_t i = 0; i < stream.size(); ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      std::vector<uint8_t> bad = stream;
      bad[i] ^= mask;
      failed += !DecodeMulti(c, bad, &back).ok();
      ++total;
    }
  }
  for (size_t i = 0; i < bytes_stream.size(); ++i) {
    std::vector<uint8_t> bad = bytes_stream;
    bad[i] ^= 0x10;
    Status st;
    DecodeAllBytes(t, bad, data.size(), &st);
    failed += !st.ok();
    ++total;
  }
  std::printf("byte flips: %zu of %zu detected by the final-state check\n", failed, total);
  EXPECT_GT(failed, total * 9 / 10);
}

TEST(Rans, WrongTableSequenceIsUsuallyDetected) {
  const MultiContextCase c = MakeMultiContext(2000, 12);
  const std::vector<uint8_t> stream = EncodeMulti(c).value();
  MultiContextCase shifted = c;
  for (auto& ctx : shifted.contexts) ctx = (ctx + 1) % 64;
  std::vector<uint32_t> back;
  EXPECT_FALSE(DecodeMulti(shifted, stream, &back).ok());
}

}  // namespace
}  // namespace kvc
