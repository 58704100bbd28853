// Keeps the fuzz seed corpora valid: every seed must decode, so a format change that breaks
// them fails here and says how to regenerate them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "base/byte_io.h"
#include "entropy/block.h"
#include "entropy/entropy_test_data.h"
#include "entropy/rans.h"

namespace kvc {
namespace {

const std::filesystem::path kCorpusRoot = std::filesystem::path(KVCODEC_SOURCE_DIR) / "fuzz" / "corpus";
const char kRegenerate[] =
    " (regenerate: entropy_test --gtest_also_run_disabled_tests --gtest_filter=EntropyFuzzCorpus.DISABLED_Regenerate)";

std::vector<uint8_t> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteFile(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint64_t> ByteCounts(std::span<const uint8_t> data) {
  std::vector<uint64_t> counts(256);
  for (uint8_t b : data) ++counts[b];
  return counts;
}

// An entropy_rans input (layout: rans_fuzz.cc) with serialised tables; symbol i of `symbols`
// uses tables[i % tables.size()]; a wide stream if states is kRansWideStates.
std::vector<uint8_t> RansParsedInput(const std::vector<FrequencyTable>& tables, std::span<const uint32_t> symbols,
                                     uint32_t states = kRansStates) {
  ByteWriter w;
  w.U8(static_cast<uint8_t>((states == kRansWideStates ? 0x20 : 0) | (tables.size() - 1)));
  w.U16(static_cast<uint16_t>(symbols.size()));
  for (const FrequencyTable& t : tables) t.AppendTo(&w);
  RansEncoder enc;
  for (size_t i = 0; i < symbols.size(); ++i) enc.Put(tables[i % tables.size()], symbols[i]);
  w.Bytes(enc.Finish(states).value());
  return w.Take();
}

// The same with tables given as u8 counts (config bit 4).
std::vector<uint8_t> RansCountsInput(const std::vector<std::vector<uint8_t>>& counts, std::span<const uint8_t> scales,
                                     std::span<const uint32_t> symbols) {
  ByteWriter w;
  w.U8(static_cast<uint8_t>(0x10 | (counts.size() - 1)));
  w.U16(static_cast<uint16_t>(symbols.size()));
  std::vector<FrequencyTable> tables;
  for (size_t k = 0; k < counts.size(); ++k) {
    w.U8(static_cast<uint8_t>(scales[k] - 10));
    w.U8(static_cast<uint8_t>(counts[k].size() - 1));
    w.Bytes(counts[k]);
    tables.push_back(
        FrequencyTable::FromCounts(std::vector<uint64_t>(counts[k].begin(), counts[k].end()), scales[k]).value());
  }
  RansEncoder enc;
  for (size_t i = 0; i < symbols.size(); ++i) enc.Put(tables[i % tables.size()], symbols[i]);
  w.Bytes(enc.Finish().value());
  return w.Take();
}

TEST(EntropyFuzzCorpus, BlockSeedsDecode) {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kCorpusRoot / "entropy_block")) {
    auto r = DecodeBlock(ReadFile(entry.path()), size_t{1} << 20);
    EXPECT_TRUE(r.ok()) << entry.path() << ": " << r.status().ToString() << kRegenerate;
    ++n;
  }
  EXPECT_GE(n, 5u);
}

TEST(EntropyFuzzCorpus, RansSeedsDecode) {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kCorpusRoot / "entropy_rans")) {
    const std::vector<uint8_t> bytes = ReadFile(entry.path());
    ByteReader r(bytes);
    uint8_t config = 0;
    uint16_t n_symbols = 0;
    ASSERT_TRUE(r.U8(&config, "config").ok() && r.U16(&n_symbols, "symbols").ok()) << entry.path();
    std::vector<FrequencyTable> tables;
    for (size_t k = 0; k <= (config & 0x0fu); ++k) {
      if (config & 0x10) {
        uint8_t scale_sel = 0;
        uint8_t alphabet_m1 = 0;
        std::span<const uint8_t> raw;
        ASSERT_TRUE(r.U8(&scale_sel, "s").ok() && r.U8(&alphabet_m1, "a").ok() &&
                    r.Bytes(alphabet_m1 + 1u, &raw, "c").ok());
        tables.push_back(
            FrequencyTable::FromCounts(std::vector<uint64_t>(raw.begin(), raw.end()), 10 + scale_sel % 6).value());
      } else {
        auto t = FrequencyTable::Parse(&r);
        ASSERT_TRUE(t.ok()) << entry.path() << ": " << t.status().ToString() << kRegenerate;
        tables.push_back(std::move(t).value());
      }
    }
    std::span<const uint8_t> stream;
    ASSERT_TRUE(r.Bytes(r.remaining(), &stream, "stream").ok());
    auto d = RansDecoder::Open(stream, (config & 0x20) != 0 ? kRansWideStates : kRansStates);
    ASSERT_TRUE(d.ok()) << entry.path() << kRegenerate;
    for (size_t i = 0; i < n_symbols; ++i) d->Get(tables[i % tables.size()]);
    EXPECT_TRUE(d->Finish().ok()) << entry.path() << kRegenerate;
    ++n;
  }
  EXPECT_GE(n, 5u);
}

// Rewrites fuzz/corpus/entropy_block/ and fuzz/corpus/entropy_rans/ in the source tree. Seeds
// stay small (a few KiB at most) so the fuzzer spends its time mutating, not decoding.
TEST(EntropyFuzzCorpus, DISABLED_Regenerate) {
  const auto block_dir = kCorpusRoot / "entropy_block";
  const auto rans_dir = kCorpusRoot / "entropy_rans";
  std::filesystem::create_directories(block_dir);
  std::filesystem::create_directories(rans_dir);

  const std::vector<uint8_t> laplacian = testing::LaplacianBytes(3000, 1.5, 1);
  const std::vector<uint8_t> nibbles = testing::PackedNibbles(2000, 1.0, 2);
  const std::vector<uint8_t> text = [] {
    const std::string s = "the quick brown fox jumps over the lazy dog; the lazy dog sleeps. ";
    std::string t;
    for (int i = 0; i < 20; ++i) t += s;
    return std::vector<uint8_t>(t.begin(), t.end());
  }();
  struct BlockSeed {
    const char* name;
    std::vector<uint8_t> data;
    EntropyMethod method;
  };
  const BlockSeed block_seeds[] = {
      {"stored_empty", {}, EntropyMethod::kStored},
      {"stored_small", {1, 2, 3, 250, 251}, EntropyMethod::kStored},
      {"stored_random", testing::UniformBytes(300, 3), EntropyMethod::kRans},
      {"deflate_laplacian", laplacian, EntropyMethod::kDeflate},
      {"deflate_text", text, EntropyMethod::kDeflate},
      {"rans_laplacian", laplacian, EntropyMethod::kRans},
      {"rans_nibbles", nibbles, EntropyMethod::kRans},
      {"rans_text", text, EntropyMethod::kRans},
      {"rans_all_equal", std::vector<uint8_t>(5000, 9), EntropyMethod::kRans},
      {"rans_two_symbols",
       [] {
         std::vector<uint8_t> v(200);
         for (size_t i = 0; i < v.size(); i += 7) v[i] = 255;
         return v;
       }(),
       EntropyMethod::kRans},
  };
  for (const BlockSeed& seed : block_seeds) {
    const std::vector<uint8_t> block = EncodeBlock(seed.data, seed.method).value();
    if (std::string(seed.name).starts_with("stored_")) {
      ASSERT_EQ(BlockMethod(block).value(), EntropyMethod::kStored) << seed.name;
    } else {
      ASSERT_EQ(BlockMethod(block).value(), seed.method) << seed.name;
    }
    WriteFile(block_dir / (std::string(seed.name) + ".bin"), block);
  }

  std::mt19937_64 rng(5);
  {
    // One byte table, Laplacian symbols.
    const std::vector<uint8_t> data = testing::LaplacianBytes(1500, 1.5, 6);
    std::vector<FrequencyTable> t = {FrequencyTable::FromCounts(ByteCounts(data), 12).value()};
    WriteFile(rans_dir / "parsed_one_byte_table.bin",
              RansParsedInput(t, std::vector<uint32_t>(data.begin(), data.end())));
    WriteFile(rans_dir / "parsed_no_symbols.bin", RansParsedInput(t, {}));
    // The same symbols in a wide stream: enough for whole vector rounds and a tail.
    WriteFile(rans_dir / "parsed_one_byte_table_wide.bin",
              RansParsedInput(t, std::vector<uint32_t>(data.begin(), data.end()), kRansWideStates));
  }
  {
    // Four tables of different alphabets (up to 4096) and scales.
    std::vector<FrequencyTable> tables;
    const uint32_t alphabets[] = {4096, 17, 300, 2};
    const uint32_t scales[] = {15, 10, 13, 11};
    std::vector<std::discrete_distribution<uint32_t>> dists;
    for (int k = 0; k < 4; ++k) {
      std::vector<uint64_t> counts(alphabets[k]);
      for (uint32_t s = 0; s < alphabets[k]; ++s) counts[s] = (s % 5 == 3) ? 0 : 1 + 100000 / (1 + s * s);
      counts.back() = 1;
      tables.push_back(FrequencyTable::FromCounts(counts, scales[k]).value());
      dists.emplace_back(counts.begin(), counts.end());
    }
    std::vector<uint32_t> symbols(1200);
    for (size_t i = 0; i < symbols.size(); ++i) symbols[i] = dists[i % 4](rng);
    symbols[0] = 4095;
    WriteFile(rans_dir / "parsed_four_tables.bin", RansParsedInput(tables, symbols));
  }
  {
    const std::vector<std::vector<uint8_t>> counts = {{10, 0, 200, 3, 1, 1, 0, 0, 50}};
    const uint8_t scales[] = {12};
    std::vector<uint32_t> symbols(700);
    std::discrete_distribution<uint32_t> dist(counts[0].begin(), counts[0].end());
    for (auto& s : symbols) s = dist(rng);
    WriteFile(rans_dir / "counts_one_table.bin", RansCountsInput(counts, scales, symbols));
  }
  {
    std::vector<std::vector<uint8_t>> counts;
    const uint8_t scales[] = {10, 11, 14, 15, 12, 13};
    std::vector<std::discrete_distribution<uint32_t>> dists;
    for (int k = 0; k < 6; ++k) {
      std::vector<uint8_t> c(1 + rng() % 256);
      for (auto& v : c) v = static_cast<uint8_t>(rng() % 3 == 0 ? 0 : rng() % 256);
      c[0] = 1;
      counts.push_back(c);
      dists.emplace_back(c.begin(), c.end());
    }
    std::vector<uint32_t> symbols(900);
    for (size_t i = 0; i < symbols.size(); ++i) symbols[i] = dists[i % 6](rng);
    WriteFile(rans_dir / "counts_six_tables.bin", RansCountsInput(counts, scales, symbols));
  }
}

}  // namespace
}  // namespace kvc
