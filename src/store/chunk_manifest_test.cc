#include "store/chunk_manifest.h"

#include <gtest/gtest.h>

namespace kvc {
namespace {

ChunkManifest Sample() {
  return {.chunk_tokens = 256,
          .chunk_index = 3,
          .variants = {{"kvtc", "16", 12345}, {"kvtc", "32", 6000}, {"video", "8", 70000}}};
}

TEST(ChunkManifest, RoundTrips) {
  const auto bytes = WriteChunkManifest(Sample());
  EXPECT_EQ(ReadChunkManifest(bytes).value(), Sample());
  const ChunkManifest empty{.chunk_tokens = 1, .chunk_index = 0, .variants = {}};
  EXPECT_EQ(ReadChunkManifest(WriteChunkManifest(empty)).value(), empty);
}

TEST(ChunkManifest, EveryDamageIsCorrupt) {
  const auto good = WriteChunkManifest(Sample());
  for (size_t i = 0; i < good.size(); ++i) {
    auto bad = good;
    bad[i] ^= 0x40;
    EXPECT_EQ(ReadChunkManifest(bad).status().code(), StatusCode::kCorrupt) << "byte " << i;
  }
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(ReadChunkManifest(std::span(good).first(n)).ok()) << "truncated to " << n;
  }
}

// A manifest with a valid CRC whose names are outside the .kvc name charset (they become parts
// of object names and of messages) is corrupt, with one escaped line.
// kMaxChunkManifestBytes is the largest manifest ReadChunkManifest reads.
TEST(ChunkManifest, TheManifestBoundIsTheLargestManifest) {
  ChunkManifest largest{.chunk_tokens = 256, .chunk_index = 0, .variants = {}};
  for (size_t i = 0; i < kMaxManifestVariants; ++i) {
    largest.variants.push_back({std::string(kMaxLevelNameBytes, 'c'), std::string(kMaxLevelNameBytes, 'l'), ~0ull});
  }
  const std::vector<uint8_t> bytes = WriteChunkManifest(largest);
  EXPECT_EQ(bytes.size(), kMaxChunkManifestBytes);
  EXPECT_TRUE(ReadChunkManifest(bytes).ok());
  largest.variants[0].codec += "c";
  EXPECT_FALSE(ReadChunkManifest(WriteChunkManifest(largest)).ok()) << "a longer name is read: raise the bound";
}

TEST(ChunkManifest, NamesOutsideTheCharsetAreCorrupt) {
  for (const std::string& level :
       {std::string("8\nkvcodec: error: forged"), std::string("\xFF"), std::string("../x")}) {
    const ChunkManifest m{.chunk_tokens = 256, .chunk_index = 0, .variants = {{"quant", level, 100}}};
    const auto read = ReadChunkManifest(WriteChunkManifest(m));
    ASSERT_EQ(read.status().code(), StatusCode::kCorrupt) << level;
    EXPECT_NE(read.status().message().find("variant level"), std::string::npos) << read.status().ToString();
    EXPECT_EQ(read.status().ToString().find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace kvc

#include <filesystem>
#include <fstream>

namespace kvc {
namespace {

TEST(ChunkManifestFuzzCorpus, DISABLED_Regenerate) {
  const auto dir = std::filesystem::path(KVCODEC_SOURCE_DIR) / "fuzz" / "corpus" / "chunk_manifest";
  std::filesystem::create_directories(dir);
  const auto bytes = WriteChunkManifest(Sample());
  std::ofstream(dir / "three_variants", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace
}  // namespace kvc
