#include "codecs/planes/planes_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "codecs/test_kv.h"
#include "entropy/varint.h"

namespace kvc {
namespace {

constexpr ModelFingerprint kFp{7, 7, 7};
const KvShape kShape{.n_layers = 3, .n_kv_heads = 2, .head_dim = 16, .n_tokens = 40};
constexpr DType kDTypes[] = {DType::kF16, DType::kBF16, DType::kF32};

Result<std::vector<uint8_t>> Encode(const KvView& kv, const EncodeOptions& options = {}) {
  return EncodeKvc(*FindCodec("planes"), kv, options, kFp, 0);
}

// The file decodes to exactly `cache`: shape, dtype, position and every byte.
void ExpectRoundTrip(const KvCache& cache) {
  auto bytes = Encode(cache.View());
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto decoded = DecodeKvc(*bytes, &kFp);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->dtype(), cache.dtype());
  EXPECT_TRUE(*decoded == cache) << DTypeName(cache.dtype()) << " " << cache.shape().n_tokens << " tokens";
}

// Overwrites value `index` of `kind` with the low DTypeSize bytes of `bits`.
void PutBits(KvCache& cache, KvKind kind, size_t index, uint32_t bits) {
  const size_t width = DTypeSize(cache.dtype());
  std::memcpy(cache.Bytes(kind).data() + index * width, &bits, width);
}

// Bit patterns no conversion through another type would keep: NaN payloads (quiet, signalling,
// negative), infinities, both zeros, the smallest and largest subnormals, the largest finite.
std::vector<uint32_t> SpecialBits(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return {0x7e01, 0x7c01, 0xfe00, 0xfd55, 0x7c00, 0xfc00, 0x8000, 0x0000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x7bff};
    case DType::kBF16:
      return {0x7fc1, 0x7f81, 0xffc0, 0xffaa, 0x7f80, 0xff80, 0x8000, 0x0000, 0x0001, 0x8001, 0x007f, 0x807f, 0x7f7f};
    case DType::kF32:
      // And finite values past the fp16 range, which raw refuses.
      return {0x7fc00001, 0x7f800001, 0xffc00000, 0xffaaaaaa, 0x7f800000, 0xff800000, 0x80000000, 0x00000000,
              0x00000001, 0x80000001, 0x007fffff, 0x807fffff, 0x7f7fffff, 0x47800000, 0xd01502f9};
  }
  return {};
}

TEST(PlanesCodec, Info) {
  const CodecInfo& info = PlanesCodec().info();
  EXPECT_EQ(info.name, "planes");
  EXPECT_EQ(info.id, 7);
  EXPECT_EQ(info.levels, std::vector<std::string>{"lossless"});
  EXPECT_EQ(info.default_level, "lossless");
  EXPECT_TRUE(info.lossless);
  EXPECT_TRUE(info.keeps_non_finite);
  EXPECT_FALSE(info.needs_calibration);
  EXPECT_EQ(FindCodecById(7), FindCodec("planes"));
}

TEST(PlanesCodec, EveryDtypeRoundTripsBitExactWithSpecialValues) {
  for (DType dtype : kDTypes) {
    KvCache cache = MakeCache(kShape, 1, true, dtype);
    cache.set_pos_begin(42);
    const std::vector<uint32_t> specials = SpecialBits(dtype);
    for (size_t i = 0; i < specials.size(); ++i) {
      PutBits(cache, KvKind::kKey, 37 * i + 3, specials[i]);
      PutBits(cache, KvKind::kValue, kShape.elems() - 1 - 53 * i, specials[i]);
    }
    ExpectRoundTrip(cache);
  }
}

// Every 16-bit pattern, once in K (shuffled) and once in V (in order): whatever a model writes.
TEST(PlanesCodec, EverySixteenBitPatternRoundTrips) {
  const KvShape shape{.n_layers = 2, .n_kv_heads = 4, .head_dim = 64, .n_tokens = 128};
  ASSERT_EQ(shape.elems(), 65536u);
  std::vector<uint32_t> patterns(65536);
  std::iota(patterns.begin(), patterns.end(), 0u);
  std::vector<uint32_t> shuffled = patterns;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(5));
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    KvCache cache = KvCache::Create(shape, dtype).value();
    for (size_t i = 0; i < patterns.size(); ++i) {
      PutBits(cache, KvKind::kKey, i, shuffled[i]);
      PutBits(cache, KvKind::kValue, i, patterns[i]);
    }
    ExpectRoundTrip(cache);
  }
}

// Random bits do not compress: every plane is stored, and the file is the input plus headers.
TEST(PlanesCodec, RandomBitsRoundTripAndDoNotExpand) {
  const KvShape shape{.n_layers = 2, .n_kv_heads = 3, .head_dim = 24, .n_tokens = 33};
  std::mt19937 rng(9);
  for (DType dtype : kDTypes) {
    KvCache cache = KvCache::Create(shape, dtype).value();
    for (KvKind kind : kKvKinds) std::generate(cache.Bytes(kind).begin(), cache.Bytes(kind).end(), rng);
    ExpectRoundTrip(cache);
    const size_t input = 2 * shape.elems() * DTypeSize(dtype);
    const size_t blocks = size_t{2} * shape.n_layers * DTypeSize(dtype);
    EXPECT_LE(Encode(cache.View()).value().size(), input + blocks * 8 + 256) << DTypeName(dtype);
  }
}

TEST(PlanesCodec, OddShapesOneTokenAndNoTokens) {
  const KvShape shapes[] = {
      {.n_layers = 1, .n_kv_heads = 1, .head_dim = 1, .n_tokens = 1},
      {.n_layers = 1, .n_kv_heads = 3, .head_dim = 5, .n_tokens = 7},
      {.n_layers = 3, .n_kv_heads = 2, .head_dim = 16, .n_tokens = 1},
      {.n_layers = 2, .n_kv_heads = 1, .head_dim = 576, .n_tokens = 9},
      {.n_layers = 2, .n_kv_heads = 2, .head_dim = 8, .n_tokens = 0},
  };
  for (const KvShape& shape : shapes) {
    for (DType dtype : kDTypes) ExpectRoundTrip(MakeCache(shape, 2, true, dtype));
  }
}

// Keys-only caches (MLA's latent, an indexer's keys): one 'K' section, byte for byte the K section
// of the same keys with V.
TEST(PlanesCodec, KeysOnlyWritesKAlone) {
  const KvShape shapes[] = {
      {.n_layers = 3, .n_kv_heads = 2, .head_dim = 8, .n_tokens = 21, .keys_only = true},
      {.n_layers = 2, .n_kv_heads = 1, .head_dim = 576, .n_tokens = 37, .keys_only = true},
  };
  for (const KvShape& shape : shapes) {
    for (DType dtype : kDTypes) {
      SCOPED_TRACE(testing::Message() << "head_dim " << shape.head_dim << " " << DTypeName(dtype));
      const KvCache keys = MakeCache(shape, 3, true, dtype);
      ExpectRoundTrip(keys);
      const auto bytes = Encode(keys.View()).value();
      const KvcFile file = ReadKvc(bytes).value();
      ASSERT_EQ(file.sections.size(), 1u);
      EXPECT_EQ(file.sections[0].tag, KvSectionTag(KvKind::kKey));

      KvShape with_values = shape;
      with_values.keys_only = false;
      KvCache full = MakeCache(with_values, 4, true, dtype);
      std::ranges::copy(keys.Bytes(KvKind::kKey), full.Bytes(KvKind::kKey).begin());
      const auto full_bytes = Encode(full.View()).value();
      EXPECT_TRUE(std::ranges::equal(ReadKvc(full_bytes)->sections[0].bytes, file.sections[0].bytes));
    }
  }
}

TEST(PlanesCodec, KeysOnlyKindMismatchesAreCorrupt) {
  KvShape keys_shape = kShape;
  keys_shape.keys_only = true;
  const auto keys = Encode(MakeCache(keys_shape, 5).View()).value();
  const auto both = Encode(MakeCache(kShape, 5).View()).value();
  ExpectKindMismatchesAreCorrupt(keys, both);
}

// KV with per-channel offsets and magnitudes and tokens correlated in time (test_kv.h): the sign
// and exponent plane compresses, so the file is smaller than the cache in its own dtype.
TEST(PlanesCodec, CompressesRealisticKv) {
  const KvShape shape{.n_layers = 4, .n_kv_heads = 2, .head_dim = 64, .n_tokens = 256};
  for (DType dtype : kDTypes) {
    const KvCache cache = MakeCache(shape, 6, true, dtype);
    const auto bytes = Encode(cache.View()).value();
    const double ratio = static_cast<double>(2 * shape.elems() * DTypeSize(dtype)) / static_cast<double>(bytes.size());
    std::printf("planes %s: %.3fx of its own size\n", DTypeName(dtype), ratio);
    EXPECT_GT(ratio, 1.1) << DTypeName(dtype);
    ExpectRoundTrip(cache);
  }
}

// A layer whose token rows repeat (layer 0's V repeats a row for every repeated token) codes in a
// fraction of the bytes of one whose rows do not; a constant cache in almost none.
TEST(PlanesCodec, RepeatedRowsAndConstantsCodeSmall) {
  const KvShape shape{.n_layers = 1, .n_kv_heads = 2, .head_dim = 64, .n_tokens = 256};
  for (DType dtype : kDTypes) {
    const KvCache distinct = MakeCache(shape, 7, false, dtype);
    KvCache repeated = distinct;
    const size_t row_bytes = shape.row_elems() * DTypeSize(dtype);
    for (KvKind kind : kKvKinds) {
      auto bytes = repeated.Bytes(kind);
      for (uint32_t t = 16; t < shape.n_tokens; ++t) {
        std::memcpy(bytes.data() + t * row_bytes, bytes.data() + (t % 16) * row_bytes, row_bytes);
      }
    }
    ExpectRoundTrip(repeated);
    const size_t distinct_size = Encode(distinct.View()).value().size();
    const size_t repeated_size = Encode(repeated.View()).value().size();
    EXPECT_LT(repeated_size * 4, distinct_size) << DTypeName(dtype);

    const KvCache constant = FillKv(shape, dtype, 0, [](KvKind, uint32_t, uint32_t, size_t) { return 0.25f; });
    ExpectRoundTrip(constant);
    EXPECT_LT(Encode(constant.View()).value().size(), 1024u) << DTypeName(dtype);
  }
}

TEST(PlanesCodec, BadOptionsAreClearErrors) {
  const KvCache cache = MakeCache(kShape, 8);
  auto bad_level = Encode(cache.View(), {.level = "fp16"});
  ASSERT_FALSE(bad_level.ok());
  EXPECT_EQ(bad_level.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_level.status().message().find("unknown level 'fp16'"), std::string::npos);
  auto bad_param = Encode(cache.View(), {.params = {{"level", "9"}}});
  ASSERT_FALSE(bad_param.ok());
  EXPECT_EQ(bad_param.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_param.status().message().find("unknown parameter 'level'"), std::string::npos);
}

// The first plane block of section `s`: where its length varint and its bytes start.
struct FirstBlock {
  size_t block_begin = 0;
  size_t block_size = 0;
};
FirstBlock FirstBlockOf(const std::vector<uint8_t>& section) {
  ByteReader r(section);
  uint64_t size = 0;
  EXPECT_TRUE(ReadVarint(&r, section.size(), &size, "length").ok());
  return {section.size() - r.remaining(), static_cast<size_t>(size)};
}

TEST(PlanesCodec, DamagedFilesAreCorrupt) {
  for (DType dtype : kDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const auto good = Encode(MakeCache(kShape, 9, true, dtype).View()).value();
    using Edit = std::function<void(KvcHeader&, std::vector<KvcSection>&)>;
    const std::pair<const char*, Edit> edits[] = {
        {"short K", [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes.pop_back(); }},
        {"long V", [](KvcHeader&, std::vector<KvcSection>& s) { s[1].bytes.push_back(0); }},
        {"empty K", [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes.clear(); }},
        {"missing V", [](KvcHeader&, std::vector<KvcSection>& s) { s.pop_back(); }},
        {"extra section", [](KvcHeader&, std::vector<KvcSection>& s) { s.push_back({0x4B, {}}); }},
        {"swapped", [](KvcHeader&, std::vector<KvcSection>& s) { std::swap(s[0].tag, s[1].tag); }},
        {"params", [](KvcHeader& h, std::vector<KvcSection>&) { h.codec_params = {1}; }},
        {"level", [](KvcHeader& h, std::vector<KvcSection>&) { h.level = "fp16"; }},
        {"more tokens", [](KvcHeader& h, std::vector<KvcSection>&) { ++h.shape.n_tokens; }},
        {"fewer tokens", [](KvcHeader& h, std::vector<KvcSection>&) { --h.shape.n_tokens; }},
        {"more layers", [](KvcHeader& h, std::vector<KvcSection>&) { ++h.shape.n_layers; }},
        {"wider dtype",
         [&](KvcHeader& h, std::vector<KvcSection>&) { h.dtype = dtype == DType::kF32 ? DType::kF16 : DType::kF32; }},
        {"first block one byte longer",
         [](KvcHeader&, std::vector<KvcSection>& s) {
           // The length says one more byte, which the next block's first byte supplies: the block
           // then ends in a byte it does not expect, or declares the wrong size.
           ++s[0].bytes[0];
         }},
        {"length not in its shortest form",
         [](KvcHeader&, std::vector<KvcSection>& s) {
           const FirstBlock b = FirstBlockOf(s[0].bytes);
           std::vector<uint8_t> longer;
           ByteWriter w;
           PutVarint(&w, b.block_size);
           std::vector<uint8_t> length = w.Take();
           length.back() |= 0x80;
           length.push_back(0);
           longer.insert(longer.end(), length.begin(), length.end());
           longer.insert(longer.end(), s[0].bytes.begin() + static_cast<std::ptrdiff_t>(b.block_begin),
                         s[0].bytes.end());
           s[0].bytes = std::move(longer);
         }},
        {"block declares one byte more",
         [](KvcHeader&, std::vector<KvcSection>& s) {
           // The block's raw size varint follows its method byte; every plane here is over 127
           // bytes, so the varint's first byte carries its low 7 bits.
           const FirstBlock b = FirstBlockOf(s[0].bytes);
           uint8_t& low = s[0].bytes[b.block_begin + 1];
           low = static_cast<uint8_t>((low & 0x80) | ((low + 1) & 0x7f));
         }},
    };
    for (const auto& [name, edit] : edits) ExpectEditIsCorrupt(good, name, edit);

    // An entropy method this build does not know is kUnsupported, as for every block reader.
    const auto unknown_method = Rewrite(
        good, [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes[FirstBlockOf(s[0].bytes).block_begin] = 9; });
    EXPECT_EQ(DecodeKvc(unknown_method).status().code(), StatusCode::kUnsupported);
  }
}

// A section cut anywhere, under a fresh CRC, is kCorrupt: a block length runs past the end, or
// a plane is missing.
TEST(PlanesCodec, EveryTruncatedSectionIsCorrupt) {
  const KvShape shape{.n_layers = 2, .n_kv_heads = 2, .head_dim = 8, .n_tokens = 12};
  for (DType dtype : kDTypes) {
    const auto good = Encode(MakeCache(shape, 10, true, dtype).View()).value();
    const KvcFile file = ReadKvc(good).value();
    for (size_t s = 0; s < file.sections.size(); ++s) {
      for (size_t n = 0; n < file.sections[s].bytes.size(); ++n) {
        const auto cut =
            Rewrite(good, [&](KvcHeader&, std::vector<KvcSection>& sections) { sections[s].bytes.resize(n); });
        const auto r = DecodeKvc(cut);
        ASSERT_FALSE(r.ok()) << DTypeName(dtype) << " section " << s << " cut to " << n;
        ASSERT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().ToString();
      }
    }
  }
}

// Every byte of the sections flipped under a fresh CRC: a clean error, or a cache of the header's
// shape (a flipped byte of a stored plane is another valid value). Never a crash (ASan builds).
TEST(PlanesCodec, SectionByteFlipsFailCleanlyOrDecodeTheShape) {
  const KvShape shape{.n_layers = 2, .n_kv_heads = 2, .head_dim = 8, .n_tokens = 12};
  for (DType dtype : kDTypes) {
    const auto good = Encode(MakeCache(shape, 11, true, dtype).View()).value();
    const KvcFile file = ReadKvc(good).value();
    for (size_t s = 0; s < file.sections.size(); ++s) {
      for (size_t i = 0; i < file.sections[s].bytes.size(); ++i) {
        const auto bad =
            Rewrite(good, [&](KvcHeader&, std::vector<KvcSection>& sections) { sections[s].bytes[i] ^= 0xFF; });
        const auto r = DecodeKvc(bad);
        if (r.ok()) {
          ASSERT_EQ(r->shape(), shape);
          continue;
        }
        ASSERT_TRUE(r.status().code() == StatusCode::kCorrupt || r.status().code() == StatusCode::kUnsupported)
            << r.status().ToString();
      }
    }
  }
}

// The planes are written straight into the output's bytes: an output of another dtype (another
// width) or shape is refused, never overrun.
TEST(PlanesCodec, DecodingIntoAnotherDtypeIsRefused) {
  const KvCache cache = MakeCache(kShape, 12, true, DType::kF16);
  const auto bytes = Encode(cache.View()).value();
  const KvcFile file = ReadKvc(bytes).value();
  KvCache wider = KvCache::Create(kShape, DType::kF32).value();
  const Status s = FindCodec("planes")->DecodeInto(file, {}, wider.Slice());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  KvShape longer_shape = kShape;
  ++longer_shape.n_tokens;
  KvCache longer = KvCache::Create(longer_shape, DType::kF16).value();
  EXPECT_EQ(FindCodec("planes")->DecodeInto(file, {}, longer.Slice()).code(), StatusCode::kInvalidArgument);
  // Through DecodeKvcInto the file is decoded aside and converted, as for every codec.
  ASSERT_TRUE(DecodeKvcInto(bytes, wider.Slice()).ok());
  EXPECT_TRUE(wider == cache.ConvertTo(DType::kF32).value());
}

}  // namespace
}  // namespace kvc
